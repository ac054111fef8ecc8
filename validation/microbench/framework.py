"""Framework ops timed through torch: windowed pooling, random fills, ATen pointwise and logical
reductions, batch norm, indexed ops, resampling and flips, sorts.

- **Pooling**, the ATen ops a CNN's trace shows: ``max_pool2d_with_indices`` (3x3, stride 2,
  padding 1: the ResNet stem's) and its backward, ``avg_pool2d`` (2x2, stride 2) and its backward,
  on ``[64, 16, H, H]`` fp32 activations, H = 8 and 32 (256 KiB and 4 MiB; their rates were
  within 10 % of each other and of H = 64's, except the max-pool backward's), stored NCHW and
  channels-last (``<op>@channels_last``: ATen vectorises an NHWC pool across the channels, a
  channels-last trace's max pool ran 10x faster than the NCHW points said).
- **Random fills**, in place: ``bernoulli_`` (dropout's mask), ``uniform_`` and ``normal_`` on fp32
  tensors of 256 KiB and 4 MiB (0.3-0.9 GB/s here, flat up to 16 MiB). PyTorch's CPU generators
  are serial: they do not speed up with threads.

- **Pointwise ops**, ATen's own kernels of the activations and their gradients a trace shows
  (``gelu``, ``tanh``, ``sigmoid``, ``silu`` and their backwards, ``exp``, ``threshold_backward``,
  ``clamp_min``, ``_softmax`` over rows of 128), of Adam's denominator (``sqrt``, ``rsqrt``,
  ``log``, on positive inputs), of rotary position embeddings (``sin``, ``cos``) and PReLU
  (``_prelu_kernel`` and its backward, 0.9 GB/s here) on fp32 tensors of 16 KiB, 256 KiB and 4 MiB:
  ATen's vectorised transcendental functions run at other rates than the C kernels of
  ``streams.py`` (its ``gelu`` took twice as long here; its ``sqrt`` runs at about 1.5 G
  elements/s per core, a third of a ``mul``'s rate). ``bytes`` is what :func:`simhpc.costs.opmap.kernel_for`
  counts for the same traced op, so a trace's op is timed from the points of its own name.

- **Logical reductions**, ``all`` and ``any`` over a bool tensor (a mask's check) of 16 KiB,
  256 KiB and 4 MiB (``all`` of trues, ``any`` of falses, so neither can stop early): ATen runs them
  near 2 GB/s here, a tenth of the C kernels' ``sum`` over the same bytes (a transformer capture's
  ``all`` over a 1 MiB attention mask took 0.68 ms, predicted 0.06 ms from the ``sum`` curve).

- **Outer sums**, ``torch.sum(x, 0)`` of ``[rows, width]`` fp32 (a linear layer's bias gradient)
  for widths 64 to 4096 and 256 KiB to 8 MiB (``sum@outer<width>``): ATen's vectorised reduction
  over the rows runs 1.4x (width 64-256) to 3-3.7x (1024-4096) the time of a sum of the same bytes
  over its last dimension here, warm, and 1.6x cold (8 MiB, width 1024: 807 against 486-512 us).

- **Batch normalisation** in training mode, ``native_batch_norm`` (batch statistics, then the
  normalising pass) and ``native_batch_norm_backward`` (all three gradients), on ``[64, C, H, H]``
  fp32 activations of 256 KiB, 2 MiB and 16 MiB: ATen's CPU kernels run them at a flat 3-5 GB/s
  here, far below a streaming pass over the same bytes (a ResNet-like trace's batch-norm forward
  took 6x the C-kernel estimate).
- **Layer normalisation**, ``native_layer_norm`` and ``native_layer_norm_backward`` (input, weight
  and bias gradients) over rows of 256 fp32 values, 32 KiB, 2 MiB and 16 MiB of activations: a
  transformer trace's layer norms ran at 60 % of a streaming pass's rate.

- **Indexed ops**, the lookups and scatters of embeddings and of ``gather``-style code:
  ``index_select`` (an embedding's forward), ``embedding_dense_backward``, ``gather``,
  ``scatter_add_`` and ``index_add_``, on fp32 rows of 256 (an embedding table of 20000 rows,
  20 MB) with 512 and 8192 int64 indices. ATen runs ``gather``, the scatters and an embedding's
  backward (which sorts its indices and zeroes the whole weight gradient) as per-element loops
  with index loads, at 7-26 GB/s here, below a stream over the same bytes; ``index_select``
  copies whole rows, at 28-46 GB/s.

- **Sorts**, ``sort`` of 1-D fp32 and int64 tensors of 256 to 131072 elements (what an
  embedding bag's backward sorts its indices with, and ``argsort`` and ``msort`` run): ATen's
  CPU sort is a serial merge sort whose cost per element grows with the length (6 us for 512
  int64 values here, 311 us for 8192, 3.4 ms for 131072), far from any stream's rate. Sorts of
  16 rows of 256 to 16384 values (``sort@rows``, recorded per row): a row of 1024 fp32 values
  took 37 us there, a 1-D sort of 1024 18 us. A traced sort of several rows is timed from those
  points of its rows' length, its rows split among the threads (``[64, 1024]`` along its last
  dimension took 2.3 ms on 1 thread, 1.3 ms on 2).

- **Resampling, edge padding and flips**, ``upsample_nearest2d`` and ``upsample_bilinear2d`` (2x)
  and their backwards, ``reflection_pad2d`` and ``replication_pad2d`` (1 on each side) and their
  backwards, ``flip`` of the channels, and ``grid_sampler_2d`` (bilinear, a random grid of the
  image's size) and its backward, on the pools' ``[64, 16, H, H]`` fp32 activations. ATen
  upsamples an NCHW image in a channels-last kernel between two layout copies, which a trace shows
  as the op's child ``copy_`` ops (timed as layout-changing copies): the forwards are timed on a
  channels-last image, the kernel alone (76 us for H = 8 here, 360 us with the copies). A
  backward's zeroing of its input gradient, a child ``fill_`` in a trace, is in its time (a
  tenth of it or less).

``bytes`` counts what the op reads and writes, int64 indices included, as
:func:`simhpc.costs.opmap.kernel_for` counts a traced op of the same kind
(:class:`simhpc.costs.kernels.FrameworkOp`). Skipped without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

POOLS = {  # op: (kernel, stride, padding)
    "max_pool2d_with_indices": (3, 2, 1),
    "max_pool2d_with_indices_backward": (3, 2, 1),
    "avg_pool2d": (2, 2, 0),
    "avg_pool2d_backward": (2, 2, 0),
}
POOL_SIDES = (8, 32)
POOL_BATCH, POOL_CHANNELS = 64, 16
RANDOM = ("bernoulli", "uniform", "normal")
RANDOM_BYTES = (1 << 18, 1 << 22)
POINTWISE = {  # op: its tensor arguments (x; or grad and x)
    "gelu": 1, "gelu_backward": 2, "tanh": 1, "tanh_backward": 2, "sigmoid": 1, "sigmoid_backward": 2,
    "silu": 1, "silu_backward": 2, "exp": 1, "threshold_backward": 2, "clamp_min": 1, "_softmax": 1,
    "sqrt": 1, "rsqrt": 1, "log": 1, "sin": 1, "cos": 1, "_prelu_kernel": 1, "_prelu_kernel_backward": 2,
}
"""ATen pointwise ops measured, with their count of tensor arguments of the input's size (a PReLU's
weight besides: one slope)."""
POINTWISE_BYTES = (1 << 14, 1 << 18, 1 << 22)
"""Bytes of each input tensor: L1, L2 and L3-sized (a smaller op costs what the smallest did)."""
LOGICAL = ("all", "any")
"""ATen's logical reductions measured, over bool tensors of ``POINTWISE_BYTES``."""
OUTER_SUM_WIDTHS = (64, 256, 1024, 4096)
OUTER_SUM_BYTES = (1 << 18, 1 << 21, 1 << 23)
"""Sums of ``[rows, width]`` fp32 over its rows (``sum@outer<width>``): 256 KiB, 2 MiB and 8 MiB."""
SOFTMAX_ROW = 128
NORMS = ("native_batch_norm", "native_batch_norm_backward")
NORM_SHAPES = ((64, 16, 8, 8), (64, 32, 16, 16), (64, 64, 32, 32))
"""Activations batch-normalised: 256 KiB, 2 MiB and 16 MiB (distinct sizes: one curve by bytes)."""
LAYER_NORMS = ("native_layer_norm", "native_layer_norm_backward")
LAYER_NORM_SHAPES = ((32, 256), (2048, 256), (16384, 256))
"""Rows x width layer-normalised over the last dimension: 32 KiB, 2 MiB and 16 MiB."""
INDEXED = ("index_select", "embedding_dense_backward", "gather", "scatter_add", "index_add")
INDEXED_COUNTS = (512, 8192)
"""Indices per call (rows looked up or scattered into a 20000 x 256 table)."""
INDEXED_ROWS, INDEXED_WIDTH = 20000, 256
RESAMPLE = ("upsample_nearest2d", "upsample_nearest2d_backward", "upsample_bilinear2d", "upsample_bilinear2d_backward",
            "reflection_pad2d", "reflection_pad2d_backward", "replication_pad2d", "replication_pad2d_backward", "flip",
            "grid_sampler_2d", "grid_sampler_2d_backward")
"""Resampling, edge-padding and flip ops measured."""
SORT_LENGTHS = (1 << 8, 1 << 10, 1 << 12, 1 << 14, 1 << 17)
"""Elements of the 1-D tensors sorted: the cost per element grows with the length, unevenly."""
SORT_ROWS = 16
"""Rows of the ``sort@rows`` points (sorted along the last dimension), recorded per row."""
SORT_DTYPES = {"fp32": "float", "int64": "long int"}
"""The dtypes sorted (a name for the task's label -> the trace's ``Input type``)."""
QUICK_POOL_SIDES = (16,)
QUICK_RANDOM_BYTES = (1 << 20,)


def available() -> bool:
    """Whether these ops can be measured (torch importable)."""
    return torch_available()


def pooled_side(side: int, kernel: int, stride: int, padding: int) -> int:
    """Output side of a pooling window (dilation 1, floor mode)."""
    return (side + 2 * padding - kernel) // stride + 1


def _pool_call(op: str, side: int, nhwc: bool = False) -> tuple[Callable[[], object], int]:
    """The call (on a channels-last image if ``nhwc``) and the bytes it moves."""
    import torch

    kernel, stride, padding = POOLS[op]
    x = torch.randn(POOL_BATCH, POOL_CHANNELS, side, side)
    if nhwc:
        x = x.contiguous(memory_format=torch.channels_last)
    out_side = pooled_side(side, kernel, stride, padding)
    size_in, size_out = x.numel() * 4, x.numel() // (side * side) * out_side * out_side * 4
    k, s, p = [kernel] * 2, [stride] * 2, [padding] * 2
    aten = torch.ops.aten
    if op.startswith("max_pool2d"):
        out, indices = aten.max_pool2d_with_indices(x, k, s, p, [1, 1], False)
        if op.endswith("backward"):
            grad = torch.randn_like(out)
            return (lambda: aten.max_pool2d_with_indices_backward(grad, x, k, s, p, [1, 1], False, indices)), (
                size_out + 2 * size_out + size_in  # grad_output, int64 indices, grad_input
            )
        return (lambda: aten.max_pool2d_with_indices(x, k, s, p, [1, 1], False)), size_in + 3 * size_out
    out = aten.avg_pool2d(x, k, s, p, False, True, None)
    if op.endswith("backward"):
        grad = torch.randn_like(out)
        return (lambda: aten.avg_pool2d_backward(grad, x, k, s, p, False, True, None)), size_out + size_in
    return (lambda: aten.avg_pool2d(x, k, s, p, False, True, None)), size_in + size_out


def _random_call(op: str, nbytes: int) -> Callable[[], object]:
    import torch

    x = torch.empty(nbytes // 4)
    fill = {"bernoulli": lambda: x.bernoulli_(0.9), "uniform": x.uniform_, "normal": x.normal_}[op]
    return fill


def _record(op: str, call: Callable[[], object], moved: int, threads: int, budget: Budget, dtype: str = "fp32",
            **identity: Any) -> dict:
    """Time ``call`` on ``threads`` torch threads; its record (``identity``: the point's other fields)."""
    with torch_threads(threads):
        result = measure_python(call, budget)
    return {
        "library": "torch",
        "op": op,
        "dtype": dtype,
        "threads": threads,
        **identity,
        "bytes": moved,
        **result.row(),
        "bytes_per_s": moved / result.median_s,
    }


def measure_pool(op: str, side: int, threads: int, budget: Budget, nhwc: bool = False) -> dict:
    """Time one pooling op on ``[64, 16, side, side]`` fp32 (stored channels-last if ``nhwc``: the
    op ``<op>@channels_last``); a record."""
    call, moved = _pool_call(op, side, nhwc)
    from simhpc.costs.op_arguments import CHANNELS_LAST

    return _record(op + (CHANNELS_LAST if nhwc else ""), call, moved, threads, budget,
                   input=[POOL_BATCH, POOL_CHANNELS, side, side], window=list(POOLS[op]))


def measure_random(op: str, nbytes: int, threads: int, budget: Budget) -> dict:
    """Time one in-place random fill of an fp32 tensor of ``nbytes``; a record."""
    return _record(op, _random_call(op, nbytes), nbytes, threads, budget)


def _pointwise_call(op: str, nbytes: int) -> tuple[Callable[[], object], int]:
    """The ATen call on fp32 tensors of ``nbytes`` each, and the bytes ``kernel_for`` counts for it."""
    import torch

    from simhpc.costs.opmap import kernel_for
    from simhpc.costs.opnames import classify

    n = nbytes // 4
    x = torch.randn(n // SOFTMAX_ROW, SOFTMAX_ROW) if op == "_softmax" else torch.randn(n)
    grad = torch.randn_like(x)
    positive = x.abs() + 0.5
    slope = torch.full((1,), 0.25)
    aten = torch.ops.aten
    calls = {
        "gelu": lambda: aten.gelu(x),
        "gelu_backward": lambda: aten.gelu_backward(grad, x),
        "tanh": lambda: aten.tanh(x),
        "tanh_backward": lambda: aten.tanh_backward(grad, x),
        "sigmoid": lambda: aten.sigmoid(x),
        "sigmoid_backward": lambda: aten.sigmoid_backward(grad, x),
        "silu": lambda: aten.silu(x),
        "silu_backward": lambda: aten.silu_backward(grad, x),
        "exp": lambda: aten.exp(x),
        "threshold_backward": lambda: aten.threshold_backward(grad, x, 0),
        "clamp_min": lambda: aten.clamp_min(x, 0),
        "_softmax": lambda: aten._softmax(x, -1, False),
        "sqrt": lambda: aten.sqrt(positive),
        "rsqrt": lambda: aten.rsqrt(positive),
        "log": lambda: aten.log(positive),
        "sin": lambda: aten.sin(x),
        "cos": lambda: aten.cos(x),
        "_prelu_kernel": lambda: aten._prelu_kernel(x, slope),
        "_prelu_kernel_backward": lambda: aten._prelu_kernel_backward(grad, x, slope),
    }
    tensors = POINTWISE[op]
    shapes = [list(x.shape)] * tensors + ([[1]] if "prelu" in op else [[]])
    types = ["float"] * tensors + (["float"] if "prelu" in op else ["Scalar"])
    kernel = kernel_for(f"aten::{op}", classify(f"aten::{op}"), shapes, types, [], False).kernel
    return calls[op], int(kernel.bytes())


def measure_pointwise(op: str, nbytes: int, threads: int, budget: Budget) -> dict:
    """Time one ATen pointwise op on fp32 inputs of ``nbytes``; a record."""
    return _record(op, *_pointwise_call(op, nbytes), threads, budget)


def measure_logical(op: str, nbytes: int, threads: int, budget: Budget) -> dict:
    """Time ``all`` or ``any`` over a bool tensor of ``nbytes`` elements whose value decides only at
    its end; a record in the dtype and bytes :func:`simhpc.costs.opmap.kernel_for` gives the traced op."""
    import torch

    from simhpc.costs.opmap import kernel_for
    from simhpc.costs.opnames import classify

    mask = torch.full((nbytes,), op == "all", dtype=torch.bool)
    kernel = kernel_for(f"aten::{op}", classify(f"aten::{op}"), [[nbytes]], ["bool"], [], False).kernel
    call = (lambda: torch.all(mask)) if op == "all" else (lambda: torch.any(mask))
    return _record(op, call, int(kernel.bytes()), threads, budget, dtype=kernel.dtype)


def measure_outer_sum(width: int, nbytes: int, threads: int, budget: Budget) -> dict:
    """Time ``torch.sum(x, 0)`` of a ``[rows, width]`` fp32 ``x`` of ``nbytes``, a linear layer's
    bias gradient; a record (op ``sum@outer<width>``) in the bytes ``kernel_for`` gives the traced op."""
    import torch

    from simhpc.costs.opmap import kernel_for
    from simhpc.costs.stream_curves import OUTER_SUM

    rows = max(1, nbytes // 4 // width)
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(5))
    kernel = kernel_for("aten::sum", "reduction", [[rows, width], [], [], []], ["float", "ScalarList", "Scalar", ""],
                        ["", "[0]", "False", ""], False).kernel
    return _record(f"{OUTER_SUM}{width}", partial(torch.sum, x, 0), int(kernel.bytes()), threads, budget,
                   input=[rows, width])


def _norm_call(op: str, shape: tuple[int, ...]) -> tuple[Callable[[], object], int]:
    """A training-mode batch-norm call on ``shape`` and the bytes ``kernel_for`` counts for the traced op."""
    import torch

    aten = torch.ops.aten
    x = torch.randn(*shape)
    channels = shape[1]
    weight, bias, mean, var = torch.ones(channels), torch.zeros(channels), torch.zeros(channels), torch.ones(channels)
    _, saved_mean, saved_invstd = aten.native_batch_norm(x, weight, bias, mean, var, True, 0.1, 1e-5)
    grad = torch.randn_like(x)
    per_channel = [channels]
    if op == "native_batch_norm":
        call = partial(aten.native_batch_norm, x, weight, bias, mean, var, True, 0.1, 1e-5)
        shapes = [list(shape), *[per_channel] * 4, [], [], []]
        types = ["float"] * 5 + ["Scalar"] * 3
    else:
        call = partial(aten.native_batch_norm_backward, grad, x, weight, mean, var, saved_mean, saved_invstd, True,
                       1e-5, [True, True, True])
        shapes = [list(shape), list(shape), *[per_channel] * 5, [], [], []]
        types = ["float"] * 7 + ["Scalar", "Scalar", "GenericList"]
    return call, _traced_bytes(op, shapes, types)


def _layer_norm_call(op: str, shape: tuple[int, int]) -> tuple[Callable[[], object], int]:
    """A layer-norm call over the last dimension of ``shape`` and the bytes ``kernel_for`` counts for it."""
    import torch

    aten = torch.ops.aten
    rows, width = shape
    x = torch.randn(rows, width)
    weight, bias = torch.ones(width), torch.zeros(width)
    _, mean, rstd = aten.native_layer_norm(x, [width], weight, bias, 1e-5)
    grad = torch.randn_like(x)
    if op == "native_layer_norm":
        call = partial(aten.native_layer_norm, x, [width], weight, bias, 1e-5)
        shapes = [list(shape), [], [width], [width], []]
        types = ["float", "ScalarList", "float", "float", "Scalar"]
    else:
        call = partial(aten.native_layer_norm_backward, grad, x, [width], mean, rstd, weight, bias, [True, True, True])
        shapes = [list(shape), list(shape), [], [rows, 1], [rows, 1], [width], [width], []]
        types = ["float", "float", "ScalarList", "float", "float", "float", "float", "ScalarList"]
    return call, _traced_bytes(op, shapes, types)


def _traced_bytes(op: str, shapes: list[Any], types: list[str], concrete: list[Any] | None = None) -> int:
    """The bytes :func:`simhpc.costs.opmap.kernel_for` counts for ``aten::op`` traced with these inputs."""
    from simhpc.costs.opmap import kernel_for
    from simhpc.costs.opnames import classify

    kernel = kernel_for(f"aten::{op}", classify(f"aten::{op}"), shapes, types, concrete or [], False).kernel
    assert kernel is not None, op
    return int(kernel.bytes())


def measure_norm(op: str, shape: tuple[int, ...], threads: int, budget: Budget) -> dict:
    """Time one normalisation pass on fp32 ``shape``: training-mode batch norm (one of ``NORMS``, on
    ``[N, C, H, W]``) or layer norm (one of ``LAYER_NORMS``, on ``[rows, width]``); a record."""
    call = _layer_norm_call(op, shape) if op in LAYER_NORMS else _norm_call(op, shape)  # type: ignore[arg-type]
    return _record(op, *call, threads, budget, input=list(shape))


def _indexed_call(op: str, count: int) -> tuple[Callable[[], object], int]:
    """An indexed op over ``count`` int64 indices into a 20000 x 256 fp32 table, and its traced bytes."""
    import torch

    aten = torch.ops.aten
    rows, width = INDEXED_ROWS, INDEXED_WIDTH
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(rows, width, generator=generator)
    index = torch.randint(0, rows, (count,), generator=generator)
    values = torch.randn(count, width, generator=generator)
    square = torch.randint(0, width, (count, width), generator=generator)  # gather / scatter along dim 1
    long, scalar = "long int", "Scalar"
    if op == "index_select":
        return partial(aten.index_select, table, 0, index), _traced_bytes(
            op, [[rows, width], [], [count]], ["float", scalar, long])
    if op == "embedding_dense_backward":
        return partial(aten.embedding_dense_backward, values, index, rows, -1, False), _traced_bytes(
            op, [[count, width], [count], [], [], []], ["float", long, scalar, scalar, scalar],
            ["", "", str(rows), "-1", "False"])
    if op == "gather":
        return partial(aten.gather, values, 1, square), _traced_bytes(
            op, [[count, width], [], [count, width], []], ["float", scalar, long, scalar])
    if op == "scatter_add":
        target = torch.zeros(count, width)
        return partial(target.scatter_add_, 1, square, values), _traced_bytes(
            op, [[count, width], [], [count, width], [count, width]], ["float", scalar, long, "float"])
    target = table.clone()
    return partial(target.index_add_, 0, index, values), _traced_bytes(
        "index_add", [[rows, width], [], [count], [count, width], []], ["float", scalar, long, "float", scalar])


def measure_indexed(op: str, count: int, threads: int, budget: Budget) -> dict:
    """Time one indexed op (one of ``INDEXED``) over ``count`` indices; a record."""
    return _record(op, *_indexed_call(op, count), threads, budget, input=[INDEXED_ROWS, INDEXED_WIDTH, count])


def _sort_call(dtype: str, shape: list[int]) -> tuple[Callable[[], object], int]:
    """``sort`` along the last dimension of a tensor of ``shape`` of random values of ``dtype`` (a
    key of ``SORT_DTYPES``), and the bytes ``kernel_for`` counts for the traced op."""
    import torch

    generator = torch.Generator().manual_seed(0)
    values = torch.randint(0, 1 << 20, shape, generator=generator)
    values = values.float() if dtype == "fp32" else values
    type_name = SORT_DTYPES[dtype]
    return partial(torch.sort, values), _traced_bytes("sort", [shape, [], []], [type_name, "Scalar", "Scalar"],
                                                      ["", "-1", "False"])


def measure_sort(dtype: str, length: int, threads: int, budget: Budget, rows: int = 1) -> dict:
    """Time ``sort`` of ``rows`` rows of ``length`` values of ``dtype`` (``fp32`` or ``int64``)
    along the last dimension; a record in the dtype the traced op is timed in (an int64 sort in
    ``fp64``'s, its width). Several rows give a ``sort@rows`` record of one row's bytes and time."""
    from simhpc.costs.opmap import MULTI_ROW_SORT
    from simhpc.costs.opnames import DTYPES

    shape = [rows, length] if rows > 1 else [length]
    call, moved = _sort_call(dtype, shape)
    record = _record("sort", call, moved, threads, budget, dtype=DTYPES[SORT_DTYPES[dtype]], input=shape)
    if rows == 1:
        return record
    per_row = {key: record[key] / rows for key in ("time_s", "spread_s", "min_s")}
    return {**record, **per_row, "op": MULTI_ROW_SORT, "rows": rows, "bytes": moved // rows}


def _resample_call(op: str, side: int) -> tuple[Callable[[], object], int]:
    """The ATen call of a resampling, edge-padding or flip op on ``[64, 16, side, side]`` fp32 (an
    upsampling's forward on the image stored channels-last, its kernel's own layout; a backward on
    the forward's output gradient) and the bytes ``kernel_for`` counts for it."""
    import torch

    aten = torch.ops.aten
    x = torch.randn(POOL_BATCH, POOL_CHANNELS, side, side)
    shape = list(x.shape)
    if op == "flip":
        return partial(aten.flip, x, [1]), _traced_bytes(op, [shape, []], ["float", "ScalarList"], ["", "[1]"])
    if op.startswith("grid_sampler"):  # bilinear, zero padding, a random grid of the image's size
        grid = torch.rand(POOL_BATCH, side, side, 2) * 2 - 1
        settings, types = ["0", "0", "False"], ["float", "float", "Scalar", "Scalar", "Scalar"]
        if op == "grid_sampler_2d":
            return partial(aten.grid_sampler_2d, x, grid, 0, 0, False), _traced_bytes(
                op, [shape, list(grid.shape), [], [], []], types, ["", "", *settings])
        grad = torch.randn_like(x)
        return partial(aten.grid_sampler_2d_backward, grad, x, grid, 0, 0, False, [True, True]), _traced_bytes(
            op, [shape, shape, list(grid.shape), [], [], [], []], ["float", *types, "ScalarList"],
            ["", "", "", *settings, "[True, True]"])
    base = op.removesuffix("_backward")
    if base.startswith("upsample"):
        out = [2 * side, 2 * side]
        corners = [False] if base == "upsample_bilinear2d" else []  # align_corners: a bilinear's only
        flags = (["Scalar"] * len(corners), [[]] * len(corners), [str(c) for c in corners])
        if op == base:
            image = x.contiguous(memory_format=torch.channels_last)
            return partial(getattr(aten, op), image, out, *corners), _traced_bytes(
                op, [shape, [], *flags[1]], ["float", "ScalarList", *flags[0]], ["", str(out), *flags[2]])
        grad = torch.randn_like(getattr(aten, base)(x, out, *corners))
        return partial(getattr(aten, op), grad, out, shape, *corners), _traced_bytes(
            op, [list(grad.shape), [], [], *flags[1]], ["float", "ScalarList", "ScalarList", *flags[0]],
            ["", str(out), str(shape), *flags[2]])
    pad = [1, 1, 1, 1]
    forward = partial(getattr(aten, base), x, pad)
    if op == base:
        return forward, _traced_bytes(op, [shape, []], ["float", "ScalarList"], ["", str(pad)])
    grad = torch.randn_like(forward())
    return partial(getattr(aten, op), grad, x, pad), _traced_bytes(
        op, [list(grad.shape), shape, []], ["float", "float", "ScalarList"], ["", "", str(pad)])


def measure_resample(op: str, side: int, threads: int, budget: Budget) -> dict:
    """Time one resampling, edge-padding or flip op (one of ``RESAMPLE``) on ``[64, 16, side,
    side]`` fp32; a record."""
    return _record(op, *_resample_call(op, side), threads, budget, input=[POOL_BATCH, POOL_CHANNELS, side, side])
