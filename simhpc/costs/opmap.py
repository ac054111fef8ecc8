"""Framework ops (PyTorch ATen names with recorded input shapes) -> kernel descriptors.

:func:`~simhpc.costs.opnames.classify` names an op's kind from its name (the kinds and the name
tables: :mod:`simhpc.costs.opnames`); :func:`kernel_for` builds the kernel
descriptor of one op from its ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (what
``torch.profiler`` records with ``record_shapes=True``). The descriptor is what the op computes
itself: composite ops (``aten::linear``, ``aten::conv2d``, ``aten::layer_norm``, ...) do their
work in child ops, so they carry a kernel only when the trace shows no children.

Integer tensors use the float type of the same width for their bytes (``long`` as fp64).
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simhpc.costs.kernels import (
    Attention,
    Copy,
    Elementwise,
    FrameworkOp,
    Gemm,
    Kernel,
    Recurrent,
    Reduction,
    dtype_bytes,
)
from simhpc.costs.opnames import (
    ADDED_TERM_FIRST,
    ATTENTION_OPS,
    COMPOSITE,
    DTYPES,
    HELPERS,
    INTEGER_TYPES,
    RECURRENT_OPS,
    TRANSCENDENTAL,
    UNCOVERED,
    base_name,
    classify,
    names,
)


@dataclass(frozen=True)
class OpKernel:
    """What an op computes: a kernel, nothing (``kernel is None and reason == ''``), or why not modelled."""

    kernel: Kernel | None
    reason: str = ""


NOTHING = OpKernel(None)


MAX_DIM = 1 << 40
"""Largest tensor dimension or element count taken as real (4 TiB of fp32: a larger one is a
corrupt trace, not a workload)."""


def is_shape(value: Any) -> bool:
    """Whether a recorded ``Input Dims`` entry is a tensor's shape (a list of ints)."""
    return isinstance(value, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in value)


def _bad_shape(shapes: list[Any]) -> Any:
    """The first recorded shape whose dimensions are not integers in ``0..MAX_DIM`` or whose
    element count exceeds ``MAX_DIM``, or None."""
    for shape in shapes:
        nested = shape if isinstance(shape, list) and shape and all(isinstance(s, list) for s in shape) else [shape]
        for candidate in nested:
            if not isinstance(candidate, list) or not candidate:
                continue
            if (any(isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DIM for d in candidate)
                    or math.prod(candidate) > MAX_DIM):
                return candidate
    return None


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


NOT_TENSORS = ("Scalar", "ScalarList", "", "None", "GenericList")
"""``Input type`` entries of arguments that are not tensors."""


def _tensors(shapes: list[Any], dtypes: list[str]) -> list[tuple[list[int], str]]:
    """(shape, dtype) of each tensor argument; tensor lists are flattened; scalars dropped."""
    found = []
    for i, shape in enumerate(shapes):
        kind = dtypes[i] if i < len(dtypes) else ""
        if kind in NOT_TENSORS:
            continue
        if kind == "TensorList" and isinstance(shape, list):
            found.extend((s, "float") for s in shape if is_shape(s))
        elif is_shape(shape):
            found.append((shape, kind))
    return found


def _dtype(kind: str) -> str:
    return DTYPES.get(kind, "fp32")


FLOATING = frozenset({"float", "double", "c10::Half", "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e5m2"})
"""torch's names of floating-point tensor types (indices, masks and counts are the others)."""


def _data_dtype(tensors: list[tuple[list[int], str]]) -> str:
    """The dtype of the largest tensor, a floating-point one among equally large ones: a 0-dim
    operand (Adam's ``double`` step size in ``mul``) does not set the type the elementwise work
    runs in, nor does ``where``'s bool condition or ``gather``'s int64 index beside fp32 values."""
    return _dtype(max(tensors, key=lambda tensor: (_numel(tensor[0]), tensor[1] in FLOATING))[1])


def _int_list(text: Any, default: list[int]) -> list[int]:
    if not isinstance(text, str) or not text.strip():
        return default
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return list(value)
    return default


def _gemm(op: str, tensors: list[tuple[list[int], str]]) -> OpKernel:
    shapes = [s for s, _ in tensors]
    dtype = _dtype(tensors[0][1]) if tensors else "fp32"
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
        return OpKernel(Gemm(dtype=dtype, m=_numel(a[:-1]), n=b[0], k=a[-1]))
    if op in ("mv", "addmv") and len(a) == 2:
        return OpKernel(Gemm(dtype=dtype, m=a[0], n=1, k=a[1]))
    if op in ("dot", "vdot") and len(a) == 1:
        return OpKernel(Gemm(dtype=dtype, m=1, n=1, k=a[0]))
    if len(a) < 1 or len(b) < 1:
        return OpKernel(None, f"{op} with scalar operands")
    if a[-1] != (b[0] if len(b) == 1 else b[-2]):  # the contracted dimension
        return _mismatch(op, a, b)
    if len(b) == 1:  # matrix @ vector
        return OpKernel(Gemm(dtype=dtype, m=_numel(a[:-1]), n=1, k=a[-1]))
    if len(a) == 1:
        return OpKernel(Gemm(dtype=dtype, m=1, n=b[-1], k=a[0], batch=_numel(b[:-2])))
    if len(b) == 2:  # (..., m, k) @ (k, n): one GEMM over the folded rows
        return OpKernel(Gemm(dtype=dtype, m=_numel(a[:-1]), n=b[1], k=a[-1]))
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
TRANSPOSED_DIRECTION = {"forward": "backward_input", "backward_input": "forward",
                        "backward_weight": "backward_weight", "backward": "backward"}
"""A transposed convolution's pass as the pass of the ordinary convolution it is the adjoint of
(its forward scatters like that convolution's input gradient; its input gradient gathers like
that convolution's forward)."""


def _conv(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any]) -> OpKernel:
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
    stride, padding, dilation = (_int_list(argument(i), [1]) for i in (args.stride, args.padding, args.dilation))
    transposed = (args.transposed if isinstance(args.transposed, bool)
                  else argument(args.transposed).strip() == "True")
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x):
        return OpKernel(None, f"{op} with unexpected input/weight ranks {len(x)}/{len(w)}")
    groups = max(1, _int_list(argument(args.groups, "1"), [1])[0])

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
    return OpKernel(Gemm(dtype=_dtype(tensors[0][1]), m=m, n=max(1, n), k=k, batch=groups * passes, conv=direction,
                         stride=max(stride), groups=groups, line=is_line(x, w), pointwise=math.prod(w[2:]) == 1))


def is_line(image: Sequence[int], weight: Sequence[int] = ()) -> bool:
    """Whether a convolution over ``image`` (``[N, C, *spatial]``) is one-dimensional: one spatial
    extent, or an image one pixel high (under a kernel one tap high, when ``weight`` is given)."""
    if len(image) == 3:
        return True
    return len(image) == 4 and image[2] == 1 and (len(weight) != 4 or weight[2] == 1)


def _recurrent(op: str, tensors: list[tuple[list[int], str]]) -> OpKernel:
    """``mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, ...)`` and its backward (same
    leading arguments): gates = rows of ``w_hh`` / hidden size, batch = rows of ``hx``, steps =
    input elements / (batch x input features)."""
    shapes = [s for s, _ in tensors]
    if len(shapes) < 6 or len(shapes[1]) != 2 or len(shapes[2]) != 2 or len(shapes[5]) < 2:
        return OpKernel(None, f"{op} without input, weight and hidden-state shapes")
    (rows, width), (_, hidden), batch = shapes[1], shapes[2], shapes[5][-2]
    if min(rows, width, hidden, batch) < 1:
        return OpKernel(None, f"{op} with empty weights or hidden state")
    steps = max(1, _numel(shapes[0]) // (batch * width))
    return OpKernel(Recurrent(dtype=_dtype(tensors[0][1]), steps=steps, batch=batch, width=width, hidden=hidden,
                              gates=max(1, rows // hidden), backward=RECURRENT_OPS[op]))


def _reduction(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any]) -> OpKernel:
    shape, kind = tensors[0]
    n = sum(_numel(s) for s, _ in tensors) if op.startswith("_foreach") else _numel(shape)
    dims = _int_list(concrete[1] if len(concrete) > 1 else "", [])
    outputs = 1
    if op == "adaptive_max_pool2d":  # (input, output_size): a max over each window of the last two dimensions
        return OpKernel(Reduction(dtype=_dtype(kind), n=n, outputs=max(1, _numel(shape[:-2]) * _numel(dims)),
                                  op="amax"))
    if dims and shape:
        reduced = math.prod(shape[d] for d in dims if -len(shape) <= d < len(shape))
        outputs = max(1, n // max(1, reduced))
    return OpKernel(Reduction(dtype=_dtype(kind), n=n, outputs=outputs, op=op))


INDEXED_OPS = names("index_select gather scatter scatter_add index_put _index_put_impl index_add")
"""Ops that move only the indexed elements, not the whole source tensor (an embedding lookup reads
its batch's rows, not the table)."""


def _indexed(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any]) -> OpKernel:
    """Elements an indexed op moves: ``index_select`` the rows it selects (source size over the
    selected dimension's extent, times the index count), ``gather`` / ``scatter`` / ``index_add`` one
    element per index entry or source element, ``index_put`` its values; each read from the source,
    its index read, the result written."""
    dtype = _data_dtype(tensors)
    shapes = [s for s, _ in tensors]
    if op == "index_select" and len(shapes) >= 2:
        source, index = shapes[0], shapes[1]
        dim = _int_list(concrete[1] if len(concrete) > 1 else "", [0])[0]
        within = bool(source) and -len(source) <= dim < len(source)
        extent = source[dim] if within else 1
        if within and any(d > 1 for d in source[:dim % len(source)]):
            # ATen gathers such a selection element by element, unthreaded: [64, 512, 512] along
            # dim 2 took 47 ms, the same bytes along dim 0 2.9 ms (Zen 4); the calibration
            # times whole-row selections only
            return OpKernel(None, f"index_select along dim {dim} of {list(source)} (an inner dimension: "
                                  "the calibration times whole-row selections only)")
        n = _numel(source) // max(1, extent) * _numel(index)
    elif op in ("index_put", "_index_put_impl"):
        n = _numel(shapes[-1])
    else:  # gather: the index's shape; scatter / scatter_add / index_add: the source's (the last tensor)
        n = _numel(shapes[1] if op == "gather" and len(shapes) > 1 else shapes[-1])
    return OpKernel(Elementwise(dtype=dtype, n=max(1, n), op=op, inputs=2, outputs=1))


SCALAR_TYPES = {0: "int8", 1: "int8", 2: "fp16", 3: "fp32", 4: "fp64", 5: "fp16", 6: "fp32", 7: "fp64", 11: "int8",
                15: "bf16"}
"""torch's ``ScalarType`` codes (a ``dtype`` argument's concrete value) -> the dtype of their width."""


def _number(text: Any) -> float | None:
    """A concrete scalar argument's value (``'12800'``, ``'0.01'``), None if it is not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _arange(dtypes: Sequence[str], concrete: Sequence[Any]) -> OpKernel:
    """``arange``'s writes: one element per step of its range, read from its concrete arguments in
    each overload's order (``end``; ``start, end``; ``start, end, step``; the ``out`` forms' tensor
    last), in its output's dtype (the ``out`` tensor's, else the ``dtype`` code, else int64 for
    integer bounds and fp32 otherwise)."""
    out = next((i for i, kind in enumerate(dtypes) if kind not in NOT_TENSORS), None)
    if out is not None:  # arange.out(end, out) or arange.start_out(start, end, step, out)
        bounds, dtype = list(concrete[:out]), _dtype(dtypes[out])
    else:  # arange(end, ...), arange.start(start, end, ...), arange.start_step(start, end, step, ...): 4 options
        bounds = list(concrete[: max(1, len(concrete) - 4)])
        code = _number(concrete[len(bounds)]) if len(concrete) > len(bounds) else None
        integral = all("." not in str(b) and "e" not in str(b).lower() for b in bounds)
        dtype = SCALAR_TYPES.get(int(code), "fp32") if code is not None else ("fp64" if integral else "fp32")
    values = [_number(b) for b in bounds]
    if not 1 <= len(values) <= 3 or any(v is None for v in values):
        return OpKernel(None, f"arange's range not recorded ({', '.join(map(str, bounds)) or 'no bounds'}; "
                              "profile with record_shapes=True)")
    if len(values) == 1:
        start, end, step = 0.0, values[0], 1.0
    elif len(values) == 2:
        start, end, step = values[0], values[1], 1.0
    else:
        start, end, step = values
    if step == 0:
        return OpKernel(None, "arange with a zero step")
    n = max(0, math.ceil((end - start) / step))
    if n == 0:
        return NOTHING
    if n > MAX_DIM:
        return OpKernel(None, f"arange of {n:.3g} elements (more than 2^40: not a recorded range)")
    return OpKernel(Elementwise(dtype=dtype, n=n, op="arange", inputs=0, outputs=1))


MULTI_ROW_SORT = "sort@rows"
"""A sort of several rows, timed per row from its own points where the calibration has them: a row
of 1024 fp32 values in a ``[16, 1024]`` sort took 37 us here, a 1-D sort of 1024 values 18 us."""


def _sort(tensor: tuple[list[int], str], concrete: Sequence[Any]) -> OpKernel:
    """``sort(self, dim, descending)`` or ``sort(self, stable, dim, descending)`` (and their ``out``
    forms): every value read, and written with its int64 index, row by row along ``dim`` (the last
    by default)."""
    shape, type_name = tensor
    dtype = _dtype(type_name)
    stable_first = len(concrete) > 2 and str(concrete[1]) in ("True", "False", "", "None")
    dim = _int_list(concrete[2] if stable_first else concrete[1] if len(concrete) > 1 else "", [-1])
    length = shape[dim[0]] if shape and -len(shape) <= dim[0] < len(shape) else _numel(shape)
    n = _numel(shape)
    rows = max(1, n // max(1, length))
    return OpKernel(FrameworkOp(dtype=dtype, op="sort" if rows == 1 else MULTI_ROW_SORT, rows=rows,
                                nbytes=n * (2 * dtype_bytes(dtype) + 8)))


def _resample(op: str, tensors: list[tuple[list[int], str]], concrete: Sequence[Any]) -> OpKernel:
    """Bytes an upsampling, edge-padding or flip op reads and writes: its input (or output
    gradient) and its output (or input gradient), whose size the recorded arguments give: an
    upsampling's ``output_size`` (else its input scaled by its ``scale_factors``), a backward's
    ``input_size``, a padding's ``[left, right, top, bottom]``; a grid sampler's, by its grid
    (:func:`_grid_sampler`)."""
    source, type_name = tensors[0]
    dtype = _dtype(type_name)
    if op.startswith("grid_sampler"):
        return _grid_sampler(op, tensors, concrete, dtype)
    if op.endswith("_backward"):
        if op.startswith("upsample"):  # (grad_output, output_size, input_size, ...)
            produced = _numel(_int_list(concrete[2] if len(concrete) > 2 else "", []))
        else:  # (grad_output, input, padding)
            produced = _numel(tensors[1][0]) if len(tensors) > 1 else 0
        if not produced:
            return OpKernel(None, f"{op} without its input's size")
    elif op.startswith("upsample"):  # (input, output_size, ...) or (input, None, [align_corners,] scale_factors)
        size = _int_list(concrete[1] if len(concrete) > 1 else "", [])
        if len(size) != 2:
            scales = _floats(concrete[-1] if concrete else "")
            if len(scales) != 2 or len(source) < 3:
                return OpKernel(None, f"{op} without its output size or scale factors")
            size = [math.floor(side * scale) for side, scale in zip(source[-2:], scales)]
        produced = _numel(source[:-2]) * size[0] * size[1]
    elif op == "flip":
        produced = _numel(source)
    else:  # reflection / replication padding: (input, [left, right, top, bottom])
        pad = _int_list(concrete[1] if len(concrete) > 1 else "", [])
        if len(pad) != 4 or len(source) < 2:
            return OpKernel(None, f"{op} without its padding")
        produced = _numel(source[:-2]) * (source[-2] + pad[2] + pad[3]) * (source[-1] + pad[0] + pad[1])
    return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=(_numel(source) + produced) * dtype_bytes(dtype)))


def _embedding_bag(op: str, tensors: list[tuple[list[int], str]], concrete: Sequence[Any]) -> OpKernel:
    """An embedding bag's own work, in sum or mean mode, as the indexed op of the same accesses
    (the calibration's ``index_select`` and ``index_add`` points, by bytes): its forward
    ``(weight, indices, offsets, ...)`` gathers one row per index and writes one per bag; its dense
    backward ``(grad, indices, offset2bag, bag_size, ...)`` adds each index's bag gradient into its
    row of the weight's gradient (a read, a read and a write per element, as ``index_add``), on one
    thread. The sort of its indices, the zeroing of the gradient and the offsets are its child ops."""
    shapes = [shape for shape, _ in tensors]
    backward = op.endswith("_dense_backward")
    mode = str(concrete[7 if backward else 4]) if len(concrete) > (7 if backward else 4) else ""
    if mode not in ("0", "1"):
        return OpKernel(None, f"{op} in max mode (or an unrecorded mode): no cost model (sum and mean are modelled)")
    if len(shapes) < 3 or len(shapes[0]) != 2:
        return OpKernel(None, f"{op} without its table or gradient, indices and offsets")
    dtype = _dtype(tensors[0][1])
    size = dtype_bytes(dtype)
    width, indices = shapes[0][1], _numel(shapes[1])
    if backward:  # one thread at any thread count (779 us at 2 threads, 616 at 1, in a step here)
        return OpKernel(FrameworkOp(dtype=dtype, op="index_add", nbytes=3 * indices * width * size, serial=True))
    bags = _numel(shapes[2]) - (1 if len(concrete) > 7 and str(concrete[7]) == "True" else 0)  # include_last_offset
    nbytes = (indices + bags) * width * size + 8 * (indices + bags)  # rows gathered, bags written, int64 indices
    return OpKernel(FrameworkOp(dtype=dtype, op="index_select", nbytes=nbytes))


def _grid_sampler(op: str, tensors: list[tuple[list[int], str]], concrete: Sequence[Any], dtype: str) -> OpKernel:
    """``grid_sampler_2d(input, grid, ...)``: the grid read and one output per grid point and
    channel written, the input read (at most once); its backward ``(grad_output, input, grid, ...,
    output_mask)`` reads those three and writes the input's gradient and, if asked, the grid's."""
    shapes = [shape for shape, _ in tensors]
    if op.endswith("_backward"):
        if len(shapes) < 3:
            return OpKernel(None, f"{op} without its input and grid")
        mask = str(concrete[-1]) if concrete else ""
        grid_gradient = _numel(shapes[2]) if "True]" in mask.replace(" ", "") else 0
        elements = _numel(shapes[0]) + 2 * _numel(shapes[1]) + _numel(shapes[2]) + grid_gradient
    else:
        if len(shapes) < 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
            return OpKernel(None, f"{op} without a 4-D input and grid")
        outputs = shapes[0][0] * shapes[0][1] * shapes[1][1] * shapes[1][2]
        elements = _numel(shapes[0]) + _numel(shapes[1]) + outputs
    return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=elements * dtype_bytes(dtype)))


def _floats(text: Any) -> list[float]:
    """A recorded list of numbers (``'[2., 2.]'``), [] if it is not one."""
    try:
        value = ast.literal_eval(text.strip()) if isinstance(text, str) and text.strip() else None
    except (ValueError, SyntaxError):
        return []
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return []


NLL_LOSS_OPS = names("nll_loss_forward nll_loss2d_forward nll_loss_backward nll_loss2d_backward")
"""Negative log-likelihood: one value per target, not the whole ``[N, C]`` of log-probabilities."""


def _nll_loss(op: str, tensors: list[tuple[list[int], str]], zeroed_by_child: bool) -> OpKernel:
    """``nll_loss_forward(self, target, ...)`` gathers one log-probability per target;
    ``nll_loss_backward(grad_output, self, target, ...)`` writes one gradient per target into a
    zeroed ``self``-shaped gradient (the zeroing is its own traced ``fill_`` / ``zero_``, else it is
    counted here)."""
    dtype = _data_dtype(tensors)
    shapes = [s for s, _ in tensors]
    backward = op.endswith("_backward")
    target = shapes[2 if backward else 1] if len(shapes) > (2 if backward else 1) else []
    n = max(1, _numel(target))
    if backward and not zeroed_by_child and len(shapes) > 1:
        n += _numel(shapes[1])
    return OpKernel(Elementwise(dtype=dtype, n=n, op=op, inputs=2, outputs=1))


def _elementwise(op: str, tensors: list[tuple[list[int], str]], concrete: Sequence[Any] = (),
                 zeroed_by_child: bool = False) -> OpKernel:
    dtype = _data_dtype(tensors)
    if op in INDEXED_OPS:
        return _indexed(op, tensors, list(concrete))
    if op in NLL_LOSS_OPS:
        return _nll_loss(op, tensors, zeroed_by_child)
    if op.startswith("_foreach") or op.startswith("_fused"):
        lists = [s for s, _ in tensors]
        n = sum(_numel(s) for s in lists)
        per_list = max(1, len(lists))
        inputs = max(1, round(len(lists) / max(1, per_list)))
        return OpKernel(Elementwise(dtype=dtype, n=n, op=op, inputs=inputs, outputs=1))
    n = max(_numel(s) for s, _ in tensors)
    # operands in units of the largest: a broadcast bias or per-channel statistics add little
    inputs = max(1, round(sum(_numel(s) for s, _ in tensors) / n))
    outputs = 1
    if op in ("fill", "zero"):
        inputs, outputs = 0, 1
    elif op in ("copy", "_to_copy", "clone", "tril", "triu"):
        inputs = 1
    elif op in (
        "native_layer_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "native_group_norm",
        "_softmax",
        "_log_softmax",
    ):
        inputs = 2  # a statistics pass, then the normalising pass
    elif op in ("native_batch_norm_backward", "native_group_norm_backward"):
        inputs = 4  # gradient and input read twice: the per-channel sums over the batch, then the gradient
    elif op in ("cat", "stack"):
        n = sum(_numel(s) for s, _ in tensors)
        inputs = 1
    elif op == "glu":  # (input, dim): two halves read, one written
        n, inputs = n // 2, 2
    elif op == "glu_backward":  # (grad, input, dim): the gradient and both halves read, both halves written
        n, inputs, outputs = _numel(tensors[0][0]), 3, 2
    elif op == "adaptive_max_pool2d_backward":  # (grad, input, indices): each gradient scattered to its maximum
        n, inputs = _numel(tensors[0][0]), 2
    elif op == "embedding_dense_backward":
        # (grad, indices, num_weights, ...): the whole weight gradient, num_weights x width, is
        # zeroed and written besides the gradient rows read (unless a traced child zeroes it)
        grad = tensors[0][0]
        rows = _int_list(concrete[2] if len(concrete) > 2 else "", [0])[0]
        n = _numel(grad) + (0 if zeroed_by_child else max(0, rows) * (grad[-1] if grad else 1))
        inputs = 0
    flops = 10.0 if op in TRANSCENDENTAL else 1.0
    return OpKernel(Elementwise(dtype=dtype, n=n, op=op, flops_per_element=flops, inputs=inputs, outputs=outputs))


def _transposed(shape: list[int], strides: Any) -> bool:
    """Whether a matrix operand (its last two dims) is stored column-major."""
    if len(shape) < 2 or not isinstance(strides, list) or len(strides) != len(shape):
        return False
    return shape[-1] > 1 and shape[-2] > 1 and strides[-2] == 1 and strides[-1] != 1


def _interleaved(shape: list[int], strides: Any) -> bool:
    """Whether a batched operand's matrices interleave in memory: its batch stride is smaller than
    a matrix (heads sliced out of one projection's output)."""
    if len(shape) != 3 or shape[0] < 2 or not isinstance(strides, list) or len(strides) != 3:
        return False
    return 0 < strides[0] < shape[1] * shape[2]


def _layout(op: str, shapes: list[Any], dtypes: list[str], strides: list[Any] | None) -> tuple[str, str]:
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
    layout = "".join("t" if _transposed(shape, stride) else "n" for shape, stride in operands[:2])
    return layout, "".join(name for name, (shape, stride) in zip("ab", operands) if _interleaved(shape, stride))


def _per_axis(values: list[int], axis: int) -> int:
    """A pooling parameter for one axis (a single value applies to both)."""
    return values[axis] if axis < len(values) else values[-1]


CHANNELS_LAST = "@channels_last"
"""Suffix of a framework op's name for its channels-last (NHWC) variant, measured on its own:
ATen pools an NHWC image across its channels, vectorised (a 3x3 max pool 10x faster here)."""


def channels_last(shape: list[int], strides: Any) -> bool:
    """Whether an ``[N, C, H, W]`` tensor with these strides is stored channels-last (NHWC)."""
    if len(shape) != 4 or not isinstance(strides, list) or len(strides) != 4 or shape[1] < 2:
        return False
    return strides[1] == 1 and strides[3] == shape[1]


def _pool(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any], strides: list[Any] | None) -> OpKernel:
    """Bytes a 2-D pooling op reads and writes (int64 indices for max pooling), as the
    calibration's ``framework`` points count them; a channels-last image's op is its own op."""
    dtype = _dtype(tensors[0][1])
    size = dtype_bytes(dtype)
    backward = op.endswith("_backward")
    if channels_last(tensors[0][0], strides[0] if strides else None):
        op += CHANNELS_LAST
    if backward:  # (grad_output, self, ..., [indices]): grad_output and indices in, grad_input out
        grad_out, source = tensors[0][0], tensors[1][0] if len(tensors) > 1 else []
        indices = 8 * _numel(grad_out) if op.startswith("max") else 0
        return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=(_numel(grad_out) + _numel(source)) * size + indices))
    source = tensors[0][0]
    if len(source) < 3:
        return OpKernel(None, f"{op} without an image-shaped input")
    kernel = _int_list(concrete[1] if len(concrete) > 1 else "", [1, 1])
    stride = _int_list(concrete[2] if len(concrete) > 2 else "", []) or kernel
    padding = _int_list(concrete[3] if len(concrete) > 3 else "", [0])
    dilation = _int_list(concrete[4] if len(concrete) > 4 and op.startswith("max") else "", [1])
    sides = []
    for axis, side in enumerate(source[-2:]):
        window, step, pad, spread = (_per_axis(v, axis) for v in (kernel, stride, padding, dilation))
        sides.append(max(0, (side + 2 * pad - spread * (window - 1) - 1) // step + 1))
    outputs = _numel(source[:-2]) * sides[0] * sides[1]
    indices = 8 * outputs if op.startswith("max") else 0
    area = _per_axis(kernel, 0) * _per_axis(kernel, 1)
    return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=(_numel(source) + outputs) * size + indices,
                                window=area, outputs=outputs, inputs=_numel(source)))


def _contiguous_run(shape: list[int], strides: Any) -> int:
    """Elements the source holds contiguously in row-major (destination) order: the whole tensor
    when ``strides`` are row-major or broadcast (or unknown), 1 for a transpose, the head size
    for an attention head permute."""
    total = _numel(shape)
    if not isinstance(strides, list) or len(strides) != len(shape):
        return total
    if any(stride == 0 for size, stride in zip(shape, strides) if size > 1):
        return total  # a broadcast source: read from cache, streams like a copy
    run = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size > 1 and stride != run:
            return run
        run *= size
    return total


def _transposed_block(shape: list[int], strides: Any) -> tuple[int, int]:
    """(rows, length) of a copy that transposes blocks: the source, in the destination's order and
    with dimensions that stay contiguous merged, is ``[..., rows, length]`` with strides ``[...,
    1, rows]`` (a channels-last ``[N, C, H, W]``: C rows of H x W); (0, 0) for any other layout."""
    if not isinstance(strides, list) or len(strides) != len(shape):
        return 0, 0
    dims: list[tuple[int, int]] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    if len(dims) < 2 or dims[-2][1] != 1 or dims[-1][1] != dims[-2][0]:
        return 0, 0
    return dims[-2][0], dims[-1][0]


def _allocates(child: str) -> bool:
    """Whether a child op only allocates, reshapes or fills memory (does no computation)."""
    return base_name(child) in HELPERS or classify(child, "cpu_op") == "view"


def _delegates(op: str, kind: str, child: str) -> bool:
    """Whether a child op does the parent's work: a redispatch (its own name: ``div_`` in
    ``div_``), any child of a ``_foreach_`` op (its per-tensor ops), or an op of the same kind that
    is not a helper (``thnn_conv2d`` in ``_slow_conv2d_forward``, ``hardtanh`` in ``clamp``,
    ``index_add_`` in ``scatter_add_``). Otherwise the parent keeps its work (``addmm`` beside its
    bias ``copy_``, ``native_layer_norm_backward`` beside a ``zero_``)."""
    name = base_name(child)
    if name == op or op.startswith("_foreach_"):
        return True
    return name not in HELPERS and classify(child, "cpu_op") == kind


def kernel_for(
    name: str,
    kind: str,
    shapes: list[Any],
    dtypes: list[str],
    concrete: list[Any],
    has_children: bool,
    strides: list[Any] | None = None,
    child_names: Sequence[str] = (),
) -> OpKernel:
    """The kernel descriptor of one op's own work.

    Args:
        name: the op name (``aten::addmm``).
        kind: its :func:`~simhpc.costs.opnames.classify` kind.
        shapes: ``Input Dims``; dtypes: ``Input type``; concrete: ``Concrete Inputs``.
        has_children: whether the trace shows child ops (then composite ops carry no kernel).
        strides: ``Input Strides``, when recorded: a copy from a permuted layout (channels-last to
            contiguous, a transpose, an attention head split) is a :class:`Copy` with the source's
            contiguous ``run``, timed from the calibration's layout-changing copies.
        child_names: names of its child ops: one of its own name makes the op a redispatch
            that does no work itself.

    Returns:
        An :class:`OpKernel`: a kernel; :data:`NOTHING` for ops that do no work of their own; or
        ``kernel=None`` with the reason the op could not be modelled.
    """
    op = base_name(name)
    if kind in ("view", "group", "step"):
        return NOTHING
    if kind == "unknown":
        return OpKernel(None, "" if has_children else UNCOVERED.get(op, "no cost model for this op"))
    # A composite convolution whose children only allocate and reshape did the work itself (a
    # transposed one on the oneDNN path runs its kernel inside ``_convolution``).
    composite = has_children and op in COMPOSITE and not (kind == "conv" and all(map(_allocates, child_names)))
    if composite or any(_delegates(op, kind, child) for child in child_names):
        return NOTHING
    if op == "arange":  # its output is recorded empty ([0], resized by a child): the range gives its length
        return _understood(_arange, dtypes, concrete)
    bad = _bad_shape(shapes)
    if bad is not None:
        return OpKernel(None, f"invalid input shape {bad} (dimensions and element counts must be integers "
                              "from 0 to 2^40)")
    tensors = _tensors(shapes, dtypes)
    if not tensors:
        if "TensorList" in dtypes:
            return OpKernel(None, "a tensor list's shapes are not recorded by the profiler")
        if any(not isinstance(shape, list) for shape in shapes):  # [64, 64], not [[64, 64]]
            return OpKernel(None, f"invalid input shapes {str(shapes)[:60]} (Input Dims holds a list of "
                                  "dimensions per argument)")
        return OpKernel(None, "no input shapes recorded (profile with record_shapes=True)")
    unknown = next((type_name for _, type_name in tensors if type_name not in DTYPES), None)
    if unknown is not None:
        return OpKernel(None, f"tensor type {unknown!r} not modelled (known: {', '.join(DTYPES)})")
    if max(_numel(shape) for shape, _ in tensors) == 0:
        return NOTHING  # empty tensors: dispatch only
    if kind in ("gemm", "conv") and tensors[0][1] in INTEGER_TYPES:
        return OpKernel(None, f"{tensors[0][1]} {kind}: torch runs integer products without a BLAS "
                              "(not calibrated)")
    return _understood(_own_work, op, kind, shapes, dtypes, concrete, strides, child_names, tensors)


def _understood(describe: Any, *arguments: Any) -> OpKernel:
    """``describe(*arguments)``, or the reason it could not read arguments of an unexpected form."""
    try:
        return describe(*arguments)
    except (ValueError, IndexError, ZeroDivisionError, TypeError, OverflowError) as error:
        return OpKernel(None, f"arguments not understood ({type(error).__name__}: {error})")


def _own_work(op: str, kind: str, shapes: Sequence[Any], dtypes: Sequence[str], concrete: Sequence[Any],
              strides: Sequence[Any] | None, child_names: Sequence[str],
              tensors: list[tuple[list[int], str]]) -> OpKernel:
    """:func:`kernel_for`'s descriptor once the op's tensors are known to be well-formed."""
    if kind == "gemm":
        found = _gemm(op, tensors)
        layout, interleaved = _layout(op, shapes, dtypes, strides)
        if isinstance(found.kernel, Gemm) and (layout, interleaved) != ("nn", ""):
            return OpKernel(dataclasses.replace(found.kernel, layout=layout, interleaved=interleaved))
        return found
    if kind == "conv":
        return _conv(op, tensors, concrete)
    if kind == "recurrent":
        return _recurrent(op, tensors)
    if kind == "reduction":
        return _reduction(op, tensors, concrete)
    if kind == "pool":
        return _pool(op, tensors, concrete, strides)
    if kind == "random":
        shape, type_name = tensors[0]
        dtype = _dtype(type_name)
        return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=_numel(shape) * dtype_bytes(dtype)))
    if kind == "sort":
        return _sort(tensors[0], concrete)
    if kind == "resample":
        return _resample(op, tensors, concrete)
    if kind == "embedding":
        return _embedding_bag(op, tensors, concrete)
    if op in ("pixel_shuffle", "pixel_unshuffle"):  # a layout change: neighbouring outputs from other channels
        shape, type_name = tensors[0]
        return OpKernel(Copy(nbytes=_numel(shape) * dtype_bytes(_dtype(type_name)), dtype=_dtype(type_name), run=1))
    if op == "copy" and strides and len(shapes) > 1 and is_shape(shapes[1]):
        source = shapes[1]
        run = _contiguous_run(source, strides[1] if len(strides) > 1 else None)
        if run < _numel(source):  # the source is not read in order: a transpose or permute
            size = dtype_bytes(_dtype(tensors[-1][1]))
            rows, length = _transposed_block(source, strides[1]) if run == 1 else (0, 0)
            return OpKernel(Copy(nbytes=_numel(source) * size, dtype=_dtype(tensors[0][1]), run=run,
                                 rows=rows, length=length))
    zeroed = any(base_name(child) in ("zero", "fill") for child in child_names)
    return _elementwise(op, tensors, concrete, zeroed_by_child=zeroed)
