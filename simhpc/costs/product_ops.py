"""Products, convolutions and recurrent layers from their recorded arguments: the GEMM (or
implicit GEMM) each computes, its operand layout, and a convolution's pass."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simhpc.costs.kernels import Attention, Gemm, Recurrent
from simhpc.costs.op_arguments import (
    NOT_TENSORS,
    OpKernel,
    dtype_of,
    int_list,
    is_interleaved,
    is_shape,
    is_transposed,
    numel,
)
from simhpc.costs.opnames import ADDED_TERM_FIRST, ATTENTION_OPS, RECURRENT_OPS


def gemm_kernel(op: str, tensors: list[tuple[list[int], str]]) -> OpKernel:
    shapes = [s for s, _ in tensors]
    dtype = dtype_of(tensors[0][1]) if tensors else "fp32"
    if op in (*ADDED_TERM_FIRST, "addmv"):
        shapes = shapes[1:]  # the added term first
    if op in ATTENTION_OPS:
        if len(shapes) < 3 or len(shapes[0]) != 4:
            return OpKernel(None, "attention without 4-D q, k, v shapes")
        (b, h, lq, e), (_, _, lk, _) = shapes[0], shapes[1]
        if op.endswith("_backward"):  # (grad_out, q, k, v, ...): the first operand is the output gradient
            (b, h, lq, e), (_, _, lk, _) = shapes[1], shapes[2]
        return OpKernel(Attention(dtype=dtype, batch=b * h, lq=lq, lk=lk, e=e, backward=ATTENTION_OPS[op]))
    if len(shapes) < 2:
        return OpKernel(None, f"{op} without two operand shapes")
    a, b = shapes[0], shapes[1]
    if op == "linear":
        if not a or len(b) != 2:
            return OpKernel(None, "linear with unexpected shapes")
        if a[-1] != b[1]:
            return _mismatch(op, a, b)
        return OpKernel(Gemm(dtype=dtype, m=numel(a[:-1]), n=b[0], k=a[-1]))
    if op in ("mv", "addmv") and len(a) == 2:
        return OpKernel(Gemm(dtype=dtype, m=a[0], n=1, k=a[1]))
    if op in ("dot", "vdot") and len(a) == 1:
        return OpKernel(Gemm(dtype=dtype, m=1, n=1, k=a[0]))
    if len(a) < 1 or len(b) < 1:
        return OpKernel(None, f"{op} with scalar operands")
    if a[-1] != (b[0] if len(b) == 1 else b[-2]):  # the contracted dimension
        return _mismatch(op, a, b)
    if len(b) == 1:  # matrix @ vector
        return OpKernel(Gemm(dtype=dtype, m=numel(a[:-1]), n=1, k=a[-1]))
    if len(a) == 1:
        return OpKernel(Gemm(dtype=dtype, m=1, n=b[-1], k=a[0], batch=numel(b[:-2])))
    if len(b) == 2:  # (..., m, k) @ (k, n): one GEMM over the folded rows
        return OpKernel(Gemm(dtype=dtype, m=numel(a[:-1]), n=b[1], k=a[-1]))
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + list(batch_a)
    batch_b = [1] * (width - len(batch_b)) + list(batch_b)
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return OpKernel(Gemm(dtype=dtype, m=a[-2], n=b[-1], k=a[-1], batch=max(1, batch)))


def _mismatch(op: str, a: list[int], b: list[int]) -> OpKernel:
    return OpKernel(None, f"{op} operands {a} and {b} do not share their contracted dimension")


@dataclass(frozen=True)
class _ConvArgs:
    """Where a convolution op's arguments are (``Concrete Inputs`` indices; None: not an argument).

    ``transposed``: True, False, or the index of its ``transposed`` flag."""

    stride: int
    padding: int
    dilation: int | None
    groups: int | None
    transposed: bool | int = False


_KERNEL_SIZE_FIRST = _ConvArgs(stride=4, padding=5, dilation=None, groups=None)
"""``(input, weight, kernel_size, bias, stride, padding)``: the slow (im2col) paths."""
CONV_ARGS = {
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    "convolution": _ConvArgs(3, 4, 5, 8, transposed=6),
    "_convolution": _ConvArgs(3, 4, 5, 8, transposed=6),
    # (input, weight, bias, stride, padding, dilation, groups)
    **dict.fromkeys(("conv1d", "conv2d", "conv3d", "_convolution_mode"), _ConvArgs(3, 4, 5, 6)),
    "mkldnn_convolution": _ConvArgs(4, 3, 5, 6),  # (input, weight, bias, padding, stride, dilation, groups)
    "_nnpack_spatial_convolution": _ConvArgs(4, 3, None, None),  # (input, weight, bias, padding, stride)
    # (input, weight, bias, stride, padding, output_padding, groups, dilation)
    **dict.fromkeys(("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"), _ConvArgs(3, 4, 7, 6, True)),
    **dict.fromkeys(("_slow_conv2d_forward", "thnn_conv2d", "slow_conv3d", "slow_conv3d_forward"),
                    _KERNEL_SIZE_FIRST),
    # (input, weight, kernel_size, bias, stride, padding, dilation)
    **dict.fromkeys(("slow_conv_dilated2d", "slow_conv_dilated3d"), _ConvArgs(4, 5, 6, None)),
    # (input, weight, kernel_size, bias, stride, padding, output_padding, dilation)
    **dict.fromkeys(("slow_conv_transpose2d", "slow_conv_transpose3d"), _ConvArgs(4, 5, 7, None, True)),
}
BACKWARD_CONV_ARGS = {
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    #  groups, output_mask)
    "convolution_backward": (_ConvArgs(4, 5, 6, 9, transposed=7), 10),
    # (grad_output, input, weight, kernel_size, stride, padding, output_mask)
    "_slow_conv2d_backward": (_ConvArgs(4, 5, None, None), 6),
}
"""Backward convolutions: their arguments and the index of their ``output_mask``."""
NATIVE_CONVOLUTIONS = frozenset((
    "_slow_conv2d_forward", "thnn_conv2d", "_slow_conv2d_backward", "slow_conv3d", "slow_conv3d_forward",
    "slow_conv_dilated2d", "slow_conv_dilated3d", "slow_conv_transpose2d", "slow_conv_transpose3d"))
"""Convolutions torch runs through its own kernels rather than oneDNN's (:attr:`Gemm.native`)."""
TRANSPOSED_DIRECTION = {"forward": "backward_input", "backward_input": "forward",
                        "backward_weight": "backward_weight", "backward": "backward"}
"""A transposed convolution's pass as the pass of the ordinary convolution it is the adjoint of
(its forward scatters like that convolution's input gradient; its input gradient gathers like
that convolution's forward)."""


def conv_kernel(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any]) -> OpKernel:
    """A convolution pass as an implicit GEMM: m output pixels, n output channels per group, k
    input channels per group x kernel taps.

    A transposed convolution (``transposed=True``, ``conv_transpose*d``) with weight
    ``[C_in, C_out / g, *kernel]`` is priced as the ordinary convolution it is the adjoint of:
    the one from its output (C_out channels) to its input (C_in channels, whose pixels are then
    that convolution's output pixels), with the direction swapped (``TRANSPOSED_DIRECTION``).
    """
    shapes = [s for s, _ in tensors]

    def argument(i: int | None, default: str = "") -> str:
        return str(concrete[i]) if i is not None and len(concrete) > i else default

    if op in BACKWARD_CONV_ARGS:
        args, mask_index = BACKWARD_CONV_ARGS[op]
        if len(shapes) < 3:
            return OpKernel(None, f"{op} without grad, input and weight shapes")
        x, w = shapes[1], shapes[2]
        mask_text = argument(mask_index)
        mask = [m.strip() == "True" for m in mask_text.strip("[]").split(",")] if mask_text else [True, True]
        grad_input, grad_weight = [*mask, True, True][:2]
        if not (grad_input or grad_weight) and op == "convolution_backward" and mask[2:3] == [True]:
            # torch runs the weight-gradient pass for the bias's alone (oneDNN computes both in one):
            # [False, False, True] took as long as [False, True, True] here (1-D and 2-D, 1 and 2 threads, 0.8-5.6 ms)
            grad_weight = True
        if not (grad_input or grad_weight):
            return OpKernel(None, f"{op} computing no gradient it can be timed by")
        direction = "backward" if grad_input and grad_weight else "backward_input" if grad_input else "backward_weight"
    else:
        args = CONV_ARGS.get(op, CONV_ARGS["convolution"])
        if len(shapes) < 2:
            return OpKernel(None, f"{op} without input and weight shapes")
        x, w = shapes[0], shapes[1]
        direction = "forward"
    # an argument the op does not take (None) reads as empty: the default [1]
    stride, padding, dilation = (int_list(argument(i), [1]) for i in (args.stride, args.padding, args.dilation))
    transposed = (args.transposed if isinstance(args.transposed, bool)
                  else argument(args.transposed).strip() == "True")
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x):
        return OpKernel(None, f"{op} with unexpected input/weight ranks {len(x)}/{len(w)}")
    groups = max(1, int_list(argument(args.groups, "1"), [1])[0])

    def pick(values: list[int], i: int) -> int:
        return values[i] if i < len(values) else values[-1]

    if transposed:  # the adjoint convolution's output pixels are this one's input pixels
        out = list(x[2:])
        direction = TRANSPOSED_DIRECTION[direction]
    else:
        out = []
        for i in range(spatial):
            size, kernel = x[2 + i], w[2 + i]
            extent = pick(dilation, i) * (kernel - 1) + 1
            if size + 2 * pick(padding, i) < extent:
                return OpKernel(None, f"{op} with a kernel ({extent}) wider than its padded input "
                                      f"({size + 2 * pick(padding, i)})")
            out.append((size + 2 * pick(padding, i) - extent) // max(1, pick(stride, i)) + 1)
    m = x[0] * math.prod(out)
    n = w[0] // groups
    k = w[1] * math.prod(w[2:])
    passes = 2 if direction == "backward" else 1
    return OpKernel(Gemm(dtype=dtype_of(tensors[0][1]), m=m, n=max(1, n), k=k, batch=groups * passes, conv=direction,
                         stride=max(stride), groups=groups, line=is_line(x, w), pointwise=math.prod(w[2:]) == 1,
                         native=op in NATIVE_CONVOLUTIONS))


def is_line(image: Sequence[int], weight: Sequence[int] = ()) -> bool:
    """Whether a convolution over ``image`` (``[N, C, *spatial]``) is one-dimensional: one spatial
    extent, or an image one pixel high (under a kernel one tap high, when ``weight`` is given)."""
    if len(image) == 3:
        return True
    return len(image) == 4 and image[2] == 1 and (len(weight) != 4 or weight[2] == 1)


def recurrent_kernel(op: str, tensors: list[tuple[list[int], str]]) -> OpKernel:
    """``mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, ...)`` and its backward (same
    leading arguments): gates = rows of ``w_hh`` / hidden size, batch = rows of ``hx``, steps =
    input elements / (batch x input features)."""
    shapes = [s for s, _ in tensors]
    if len(shapes) < 6 or len(shapes[1]) != 2 or len(shapes[2]) != 2 or len(shapes[5]) < 2:
        return OpKernel(None, f"{op} without input, weight and hidden-state shapes")
    (rows, width), (_, hidden), batch = shapes[1], shapes[2], shapes[5][-2]
    if min(rows, width, hidden, batch) < 1:
        return OpKernel(None, f"{op} with empty weights or hidden state")
    steps = max(1, numel(shapes[0]) // (batch * width))
    return OpKernel(Recurrent(dtype=dtype_of(tensors[0][1]), steps=steps, batch=batch, width=width, hidden=hidden,
                              gates=max(1, rows // hidden), backward=RECURRENT_OPS[op]))


def product_layout(op: str, shapes: list[Any], dtypes: list[str], strides: list[Any] | None) -> tuple[str, str]:
    """A product's operand layout (``nn``, ``nt``, ``tn``, ``tt``) and its interleaved operands
    (``""``, ``a``, ``b``, ``ab``) from its recorded strides; a leaf ``linear`` multiplies by its
    transposed weight. ``nn`` and none when strides were not recorded."""
    if op == "linear":
        return "nt", ""
    if not strides or op not in ("mm", "bmm", *ADDED_TERM_FIRST):
        return "nn", ""
    operands = [
        (shape, strides[i] if i < len(strides) else None)
        for i, shape in enumerate(shapes)
        if (dtypes[i] if i < len(dtypes) else "") not in NOT_TENSORS and is_shape(shape)
    ]
    if op in ADDED_TERM_FIRST:
        operands = operands[1:]
    if len(operands) < 2:
        return "nn", ""
    layout = "".join("t" if is_transposed(shape, stride) else "n" for shape, stride in operands[:2])
    return layout, "".join(name for name, (shape, stride) in zip("ab", operands) if is_interleaved(shape, stride))
