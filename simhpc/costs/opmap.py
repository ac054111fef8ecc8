"""Framework ops (PyTorch ATen names with recorded input shapes) -> kernel descriptors.

:func:`~simhpc.costs.opnames.classify` names an op's kind from its name (the kinds and the name
tables: :mod:`simhpc.costs.opnames`); :func:`kernel_for` builds the kernel
descriptor of one op from its ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (what
``torch.profiler`` records with ``record_shapes=True``; read by :mod:`simhpc.costs.op_arguments`).
The descriptor is what the op computes itself: composite ops (``aten::linear``,
``aten::conv2d``, ``aten::layer_norm``, ...) do their work in child ops, so they carry a kernel
only when the trace shows no children. Products, convolutions and recurrent layers are
:mod:`simhpc.costs.product_ops`; the other kinds are here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from simhpc.costs.kernels import Copy, Elementwise, FrameworkOp, Gemm, Reduction, dtype_bytes
from simhpc.costs.op_arguments import (
    CHANNELS_LAST,
    MAX_DIM,
    NOT_TENSORS,
    NOTHING,
    SCALAR_TYPES,
    OpKernel,
    bad_shape,
    channels_last,
    contiguous_run,
    data_dtype,
    dtype_of,
    floats,
    int_list,
    is_shape,
    number,
    numel,
    per_axis,
    tensors_of,
    transposed_block,
)
from simhpc.costs.opnames import (
    COMPOSITE,
    DTYPES,
    HELPERS,
    INTEGER_TYPES,
    TRANSCENDENTAL,
    UNCOVERED,
    base_name,
    classify,
    in_place,
    names,
)
from simhpc.costs.product_ops import conv_kernel, gemm_kernel, product_layout, recurrent_kernel


def _reduction(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any]) -> OpKernel:
    shape, kind = tensors[0]
    n = sum(numel(s) for s, _ in tensors) if op.startswith("_foreach") else numel(shape)
    dims = int_list(concrete[1] if len(concrete) > 1 else "", [])
    outputs = 1
    if op == "adaptive_max_pool2d":  # (input, output_size): a max over each window of the last two dimensions
        return OpKernel(Reduction(dtype=dtype_of(kind), n=n, outputs=max(1, numel(shape[:-2]) * numel(dims)),
                                  op="amax"))
    inner = 0
    if dims and shape:
        axes = {d % len(shape) for d in dims if -len(shape) <= d < len(shape)}
        outputs = max(1, n // max(1, math.prod(shape[d] for d in axes)))
        if op in OUTER_REDUCTIONS and axes and len(shape) - 1 not in axes:
            inner = math.prod(shape[max(axes) + 1:])
    return OpKernel(Reduction(dtype=dtype_of(kind), n=n, outputs=outputs, op=op, inner=inner))


OUTER_REDUCTIONS = names("sum mean")
"""Reductions whose kernel over leading dimensions only is ATen's vectorised outer reduction (a
bias gradient), timed from the calibration's ``sum@outer`` points where it has them."""


INDEXED_OPS = names("index_select gather scatter scatter_add index_put _index_put_impl index_add")
"""Ops that move only the indexed elements, not the whole source tensor (an embedding lookup reads
its batch's rows, not the table)."""


def _indexed(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any]) -> OpKernel:
    """Elements an indexed op moves: ``index_select`` the rows it selects (source size over the
    selected dimension's extent, times the index count), ``gather`` / ``scatter`` / ``index_add`` one
    element per index entry or source element, ``index_put`` its values; each read from the source,
    its index read, the result written."""
    dtype = data_dtype(tensors)
    shapes = [s for s, _ in tensors]
    if op == "index_select" and len(shapes) >= 2:
        source, index = shapes[0], shapes[1]
        dim = int_list(concrete[1] if len(concrete) > 1 else "", [0])[0]
        within = bool(source) and -len(source) <= dim < len(source)
        extent = source[dim] if within else 1
        if within and any(d > 1 for d in source[:dim % len(source)]):
            # ATen gathers such a selection element by element, unthreaded: [64, 512, 512] along
            # dim 2 took 47 ms, the same bytes along dim 0 2.9 ms (Zen 4); the calibration
            # times whole-row selections only
            return OpKernel(None, f"index_select along dim {dim} of {list(source)} (an inner dimension: "
                                  "the calibration times whole-row selections only)")
        n = numel(source) // max(1, extent) * numel(index)
    elif op in ("index_put", "_index_put_impl"):
        n = numel(shapes[-1])
    else:  # gather: the index's shape; scatter / scatter_add / index_add: the source's (the last tensor)
        n = numel(shapes[1] if op == "gather" and len(shapes) > 1 else shapes[-1])
    return OpKernel(Elementwise(dtype=dtype, n=max(1, n), op=op, inputs=2, outputs=1))


def _arange(dtypes: Sequence[str], concrete: Sequence[Any]) -> OpKernel:
    """``arange``'s writes: one element per step of its range, read from its concrete arguments in
    each overload's order (``end``; ``start, end``; ``start, end, step``; the ``out`` forms' tensor
    last), in its output's dtype (the ``out`` tensor's, else the ``dtype`` code, else int64 for
    integer bounds and fp32 otherwise)."""
    out = next((i for i, kind in enumerate(dtypes) if kind not in NOT_TENSORS), None)
    if out is not None:  # arange.out(end, out) or arange.start_out(start, end, step, out)
        bounds, dtype = list(concrete[:out]), dtype_of(dtypes[out])
    else:  # arange(end, ...), arange.start(start, end, ...), arange.start_step(start, end, step, ...): 4 options
        bounds = list(concrete[: max(1, len(concrete) - 4)])
        code = number(concrete[len(bounds)]) if len(concrete) > len(bounds) else None
        integral = all("." not in str(b) and "e" not in str(b).lower() for b in bounds)
        dtype = SCALAR_TYPES.get(int(code), "fp32") if code is not None else ("fp64" if integral else "fp32")
    values = [number(b) for b in bounds]
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
    dtype = dtype_of(type_name)
    stable_first = len(concrete) > 2 and str(concrete[1]) in ("True", "False", "", "None")
    dim = int_list(concrete[2] if stable_first else concrete[1] if len(concrete) > 1 else "", [-1])
    length = shape[dim[0]] if shape and -len(shape) <= dim[0] < len(shape) else numel(shape)
    n = numel(shape)
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
    dtype = dtype_of(type_name)
    if op.startswith("grid_sampler"):
        return _grid_sampler(op, tensors, concrete, dtype)
    if op.endswith("_backward"):
        if op.startswith("upsample"):  # (grad_output, output_size, input_size, ...)
            produced = numel(int_list(concrete[2] if len(concrete) > 2 else "", []))
        else:  # (grad_output, input, padding)
            produced = numel(tensors[1][0]) if len(tensors) > 1 else 0
        if not produced:
            return OpKernel(None, f"{op} without its input's size")
    elif op.startswith("upsample"):  # (input, output_size, ...) or (input, None, [align_corners,] scale_factors)
        size = int_list(concrete[1] if len(concrete) > 1 else "", [])
        if len(size) != 2:
            scales = floats(concrete[-1] if concrete else "")
            if len(scales) != 2 or len(source) < 3:
                return OpKernel(None, f"{op} without its output size or scale factors")
            size = [math.floor(side * scale) for side, scale in zip(source[-2:], scales)]
        produced = numel(source[:-2]) * size[0] * size[1]
    elif op == "flip":
        produced = numel(source)
    else:  # reflection / replication padding: (input, [left, right, top, bottom])
        pad = int_list(concrete[1] if len(concrete) > 1 else "", [])
        if len(pad) != 4 or len(source) < 2:
            return OpKernel(None, f"{op} without its padding")
        produced = numel(source[:-2]) * (source[-2] + pad[2] + pad[3]) * (source[-1] + pad[0] + pad[1])
    return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=(numel(source) + produced) * dtype_bytes(dtype)))


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
    dtype = dtype_of(tensors[0][1])
    size = dtype_bytes(dtype)
    width, indices = shapes[0][1], numel(shapes[1])
    if backward:  # one thread at any thread count (779 us at 2 threads, 616 at 1, in a step here)
        return OpKernel(FrameworkOp(dtype=dtype, op="index_add", nbytes=3 * indices * width * size, serial=True))
    bags = numel(shapes[2]) - (1 if len(concrete) > 7 and str(concrete[7]) == "True" else 0)  # include_last_offset
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
        grid_gradient = numel(shapes[2]) if "True]" in mask.replace(" ", "") else 0
        elements = numel(shapes[0]) + 2 * numel(shapes[1]) + numel(shapes[2]) + grid_gradient
    else:
        if len(shapes) < 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
            return OpKernel(None, f"{op} without a 4-D input and grid")
        outputs = shapes[0][0] * shapes[0][1] * shapes[1][1] * shapes[1][2]
        elements = numel(shapes[0]) + numel(shapes[1]) + outputs
    return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=elements * dtype_bytes(dtype)))


NLL_LOSS_OPS = names("nll_loss_forward nll_loss2d_forward nll_loss_backward nll_loss2d_backward")
"""Negative log-likelihood: one value per target, not the whole ``[N, C]`` of log-probabilities."""


def _nll_loss(op: str, tensors: list[tuple[list[int], str]], zeroed_by_child: bool) -> OpKernel:
    """``nll_loss_forward(self, target, ...)`` gathers one log-probability per target;
    ``nll_loss_backward(grad_output, self, target, ...)`` writes one gradient per target into a
    zeroed ``self``-shaped gradient (the zeroing is its own traced ``fill_`` / ``zero_``, else it is
    counted here)."""
    dtype = data_dtype(tensors)
    shapes = [s for s, _ in tensors]
    backward = op.endswith("_backward")
    target = shapes[2 if backward else 1] if len(shapes) > (2 if backward else 1) else []
    n = max(1, numel(target))
    if backward and not zeroed_by_child and len(shapes) > 1:
        n += numel(shapes[1])
    return OpKernel(Elementwise(dtype=dtype, n=n, op=op, inputs=2, outputs=1))


def _elementwise(op: str, tensors: list[tuple[list[int], str]], concrete: Sequence[Any] = (),
                 zeroed_by_child: bool = False) -> OpKernel:
    dtype = data_dtype(tensors)
    if op in INDEXED_OPS:
        return _indexed(op, tensors, list(concrete))
    if op in NLL_LOSS_OPS:
        return _nll_loss(op, tensors, zeroed_by_child)
    if op.startswith("_foreach") or op.startswith("_fused"):
        lists = [s for s, _ in tensors]
        n = sum(numel(s) for s in lists)
        per_list = max(1, len(lists))
        inputs = max(1, round(len(lists) / max(1, per_list)))
        return OpKernel(Elementwise(dtype=dtype, n=n, op=op, inputs=inputs, outputs=1))
    n = max(numel(s) for s, _ in tensors)
    # operands in units of the largest: a broadcast bias or per-channel statistics add little
    inputs = max(1, round(sum(numel(s) for s, _ in tensors) / n))
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
        n = sum(numel(s) for s, _ in tensors)
        inputs = 1
    elif op == "glu":  # (input, dim): two halves read, one written
        n, inputs = n // 2, 2
    elif op == "glu_backward":  # (grad, input, dim): the gradient and both halves read, both halves written
        n, inputs, outputs = numel(tensors[0][0]), 3, 2
    elif op == "adaptive_max_pool2d_backward":  # (grad, input, indices): each gradient scattered to its maximum
        n, inputs = numel(tensors[0][0]), 2
    elif op == "embedding_dense_backward":
        # (grad, indices, num_weights, ...): the whole weight gradient, num_weights x width, is
        # zeroed and written besides the gradient rows read (unless a traced child zeroes it)
        grad = tensors[0][0]
        rows = int_list(concrete[2] if len(concrete) > 2 else "", [0])[0]
        n = numel(grad) + (0 if zeroed_by_child else max(0, rows) * (grad[-1] if grad else 1))
        inputs = 0
    flops = 10.0 if op in TRANSCENDENTAL else 1.0
    return OpKernel(Elementwise(dtype=dtype, n=n, op=op, flops_per_element=flops, inputs=inputs, outputs=outputs))


def _pool(op: str, tensors: list[tuple[list[int], str]], concrete: list[Any], strides: list[Any] | None) -> OpKernel:
    """Bytes a 2-D pooling op reads and writes (int64 indices for max pooling), as the
    calibration's ``framework`` points count them; a channels-last image's op is its own op."""
    dtype = dtype_of(tensors[0][1])
    size = dtype_bytes(dtype)
    backward = op.endswith("_backward")
    if channels_last(tensors[0][0], strides[0] if strides else None):
        op += CHANNELS_LAST
    if backward:  # (grad_output, self, ..., [indices]): grad_output and indices in, grad_input out
        grad_out, source = tensors[0][0], tensors[1][0] if len(tensors) > 1 else []
        indices = 8 * numel(grad_out) if op.startswith("max") else 0
        return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=(numel(grad_out) + numel(source)) * size + indices))
    source = tensors[0][0]
    if len(source) < 3:
        return OpKernel(None, f"{op} without an image-shaped input")
    kernel = int_list(concrete[1] if len(concrete) > 1 else "", [1, 1])
    stride = int_list(concrete[2] if len(concrete) > 2 else "", []) or kernel
    padding = int_list(concrete[3] if len(concrete) > 3 else "", [0])
    dilation = int_list(concrete[4] if len(concrete) > 4 and op.startswith("max") else "", [1])
    sides = []
    for axis, side in enumerate(source[-2:]):
        window, step, pad, spread = (per_axis(v, axis) for v in (kernel, stride, padding, dilation))
        sides.append(max(0, (side + 2 * pad - spread * (window - 1) - 1) // step + 1))
    outputs = numel(source[:-2]) * sides[0] * sides[1]
    indices = 8 * outputs if op.startswith("max") else 0
    area = per_axis(kernel, 0) * per_axis(kernel, 1)
    return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=(numel(source) + outputs) * size + indices,
                                window=area, outputs=outputs, inputs=numel(source)))


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
    bad = bad_shape(shapes)
    if bad is not None:
        return OpKernel(None, f"invalid input shape {bad} (dimensions and element counts must be integers "
                              "from 0 to 2^40)")
    tensors = tensors_of(shapes, dtypes)
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
    if max(numel(shape) for shape, _ in tensors) == 0:
        return NOTHING  # empty tensors: dispatch only
    if kind in ("gemm", "conv") and tensors[0][1] in INTEGER_TYPES:
        return OpKernel(None, f"{tensors[0][1]} {kind}: torch runs integer products without a BLAS "
                              "(not calibrated)")
    found = _understood(_own_work, op, kind, shapes, dtypes, concrete, strides, child_names, tensors)
    if in_place(name) and isinstance(found.kernel, Elementwise) and found.kernel.inputs > 0 \
            and op not in OVERWRITTEN and not op.startswith(("_foreach", "_fused")):
        return OpKernel(dataclasses.replace(found.kernel, in_place=True))
    return found


OVERWRITTEN = names("copy fill zero") | INDEXED_OPS
"""In-place ops that write their destination without reading it first (or only at the indices
they scatter to): as their out-of-place forms, each written line is fetched before it is written."""


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
        found = gemm_kernel(op, tensors)
        layout, interleaved = product_layout(op, shapes, dtypes, strides)
        if isinstance(found.kernel, Gemm) and (layout, interleaved) != ("nn", ""):
            return OpKernel(dataclasses.replace(found.kernel, layout=layout, interleaved=interleaved))
        return found
    if kind == "conv":
        return conv_kernel(op, tensors, concrete)
    if kind == "recurrent":
        return recurrent_kernel(op, tensors)
    if kind == "reduction":
        return _reduction(op, tensors, concrete)
    if kind == "pool":
        return _pool(op, tensors, concrete, strides)
    if kind == "random":
        shape, type_name = tensors[0]
        dtype = dtype_of(type_name)
        return OpKernel(FrameworkOp(dtype=dtype, op=op, nbytes=numel(shape) * dtype_bytes(dtype)))
    if kind == "sort":
        return _sort(tensors[0], concrete)
    if kind == "resample":
        return _resample(op, tensors, concrete)
    if kind == "embedding":
        return _embedding_bag(op, tensors, concrete)
    if op in ("pixel_shuffle", "pixel_unshuffle"):  # a layout change: neighbouring outputs from other channels
        shape, type_name = tensors[0]
        return OpKernel(Copy(nbytes=numel(shape) * dtype_bytes(dtype_of(type_name)), dtype=dtype_of(type_name), run=1))
    if op == "copy" and strides and len(shapes) > 1 and is_shape(shapes[1]):
        source = shapes[1]
        run = contiguous_run(source, strides[1] if len(strides) > 1 else None)
        if run < numel(source):  # the source is not read in order: a transpose or permute
            size = dtype_bytes(dtype_of(tensors[-1][1]))
            rows, length = transposed_block(source, strides[1]) if run == 1 else (0, 0)
            return OpKernel(Copy(nbytes=numel(source) * size, dtype=dtype_of(tensors[0][1]), run=run,
                                 rows=rows, length=length))
    zeroed = any(base_name(child) in ("zero", "fill") for child in child_names)
    return _elementwise(op, tensors, concrete, zeroed_by_child=zeroed)
