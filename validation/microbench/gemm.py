"""GEMM through numpy's BLAS and, when torch is importable, through torch's: fp32 and fp64, 1 and all threads.

Two backends (the ``blas`` field of every point): ``numpy`` (``np.matmul``, numpy's OpenBLAS,
threads set with threadpoolctl) and ``torch`` (``torch.mm`` / ``torch.bmm`` with ``out=``, the
BLAS PyTorch's CPU build multiplies with: MKL / oneDNN in the 2.x wheels; threads set with
``torch.set_num_threads``). The cost model predicts a torch.profiler trace from the ``torch``
points: the same shape on another BLAS can run 20-40 % faster or slower.

Shapes: a log-spaced (m, n, k) grid (16 .. 4096 per dimension, at most 0.5 GFLOP per call, plus a 1024^3 square) that
covers square, skinny and small products; for torch (fp32 only, the precision traces are taken in) a finer grid
(4, then 16 .. 4096 in steps of 2x above 256, up to 2 GFLOP per call: framework layers are 512 or 2048 wide, and
factor-4 steps left up to 60 % between grid points); extra squares; the DeepMD embedding-net
(1 -> 25 -> 50 -> 100 per neighbour) and fitting-net (descriptor -> 240 -> 240 -> 240 -> 1)
shapes of ``validation/papers/deepmd_sve.md``; and batched products (attention-like ``bmm``). Every point
multiplies untransposed operands (``nn``) except the torch layout points: narrow products with a
transposed operand (``nt``, ``tn``; the ``layout`` field), where MKL's kernels differ up to 10x.

**Interleaved batched products** (torch fp32, :func:`interleaved_shapes`, one round): the batched
shapes with the operands of multi-head attention stored as views of one projection's output.

**Cold products** (torch fp32, :func:`cold_shapes`, section ``gemm_cold``): each timed in a loop
and as single calls after a cache flush, the state of a product inside a training step; and a
small product right after one of another layout (:func:`measure_gemm_path`, rows with ``after``):
the part of that cold cost which is the kernels of its layout.

**Matrix-vector products** (torch fp32, :func:`vector_shapes`, one round): m = 1 (a linear layer's
forward at batch 1) or n = 1 (a layer with one output), in the three layouts. MKL runs them as
``gemv``, which reads its matrix once: a 256 x 1 x 256 ``nn`` product took 5.5 us here, one of
256 x 4 x 256 75 us, so the grid's narrowest points (4) cannot stand for them.

**Classifier heads** (torch fp32, :func:`head_shapes`, one round): a linear layer to 10 classes,
its three products over batch and hidden widths in steps of 2x, where the layout points step 8x
and MKL's time is not smooth between them.

**Outer products** (torch fp32, :func:`outer_shapes`, one round): k = 1 (the input gradient of a
layer with one output, the forward of a layer with one input). torch runs them as a rank-1 update
that writes the result once, on one thread: a 128 x 512 x 1 product took 4.0 us on the Zen 5 guest,
128 x 512 x 4 13 us and 128 x 512 x 2 23 us, so the grid's narrowest points cannot stand for them
either.

**16-bit products** (torch only, one round): bf16 and fp16 on a coarse grid in the three layouts
a training step uses. Without AVX512-BF16/FP16 or AMX, PyTorch multiplies them in fallback
kernels: 1.3 GFLOP/s for a bf16 64 x 512 x 256 ``nn`` product here, 6-7.5 ``nt`` (a linear
layer's forward), against 66 in fp32; a trace under ``torch.autocast`` is predicted from these.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .streams import FLUSH_BYTES
from .timing import Budget, measure_cold, measure_python

DTYPES = {"fp32": np.float32, "fp64": np.float64}
GRID = (16, 64, 256, 1024, 4096)
FINE_GRID = (4, 16, 64, 256, 512, 1024, 2048, 4096)
"""Torch fp32 only (what ``simhpc compare`` predicts traces from); keeps ``simhpc calibrate`` under 3 minutes."""
MAX_MNK = 2**28
FINE_MAX_MNK = 2**30
SQUARES = (8, 24, 32, 48, 96, 128, 192, 384, 512, 768, 1024)
DEEPMD = (
    # embedding net, rows = neighbours x atoms: (m, n, k)
    *((rows, n, k) for rows in (1024, 8192) for k, n in ((1, 25), (25, 50), (50, 100))),
    # fitting net, rows = atoms; descriptor 100 x 16 = 1600 wide
    *((rows, n, k) for rows in (256, 2048) for k, n in ((1600, 240), (240, 240), (240, 1))),
)
BATCHED = tuple(
    (b, m, n, k)
    for b in (8, 64)
    for m, n, k in ((64, 64, 64), (128, 128, 64), (128, 64, 128), (64, 128, 128), (256, 256, 64), (256, 64, 256))
)
"""Attention-like products (batch = heads x sequences): head size 64, sequences of 64-256."""
QUICK_SHAPES = ((1, 64, 64, 64), (1, 256, 256, 256), (1, 1024, 64, 16), (8, 64, 64, 64))
LAYOUTS = ("nt", "tn")
"""Transposed-operand layouts measured through torch (fp32) besides ``nn``: a linear layer's forward
multiplies by its transposed weight (``nt``), its weight gradient by the transposed input (``tn``)."""
NARROW = (4, 10, 16)
"""Narrow widths of the layout points: MKL's kernels for products with a dimension under 16 differ
by layout (an ``nt`` product with n = 10 ran in 0.45x the ``nn`` time here) and are not monotone in
the width (n = 10 took longer than 8, 12 or 16), so one width that is no multiple of the 8-float
vector is measured besides the grid's 4 and 16."""
WIDE = (64, 512, 4096)
LAYOUT_MAX_MNK = 2**26
HALF = ("bf16", "fp16")
"""16-bit types measured through torch (their own points: converted, not computed at the fp32 rate)."""
HALF_GRID = (16, 64, 256, 1024)
HALF_MAX_MNK = 2**24
"""The 16-bit grid's largest product (33 MFLOP: 25 ms at this host's 1.3 GFLOP/s)."""
HALF_BUDGET = Budget(warmup=1, repeats=3, min_time_s=0.01, max_repeats=5, long_repeats=2)
"""Fewer samples for the slow 16-bit products (15 s for all of them; keeps calibrate under 3 minutes)."""
HALF_LAYOUTS = ("nn", "nt", "tn")
NATIVE_HALF_GRID = (64, 256, 512, 1024)
NATIVE_HALF_MAX_MNK = 2**26
"""Where the CPU multiplies a 16-bit type natively (AVX512-BF16, AMX, ...), its products keep gaining
from size as fp32 ones do (bf16 on the EPYC Zen 5 guest: 361 GFLOP/s at 256^3, 1 thread, and on 2
threads only 1.17x that), so the grid also has the shell of products above ``HALF_MAX_MNK``, up to a
linear layer's 128 x 512 x 1024: without it a 2-thread bf16 MLP's products were predicted from the
2^24 points, 1.4-1.9x their traced time. Fallback kernels run at a flat rate and skip it."""


def half_shapes(quick: bool = False, native: bool = False) -> list[tuple[int, int, int, str]]:
    """(m, n, k, layout) of the 16-bit points: the coarse grid in every layout a step uses, and, for a
    type the CPU computes natively, the larger products of ``NATIVE_HALF_GRID``."""
    if quick:
        return [(64, 64, 64, "nn")]
    grid = [(m, n, k) for m, n, k in itertools.product(HALF_GRID, HALF_GRID, HALF_GRID) if m * n * k <= HALF_MAX_MNK]
    if native:
        grid += [(m, n, k) for m, n, k in itertools.product(NATIVE_HALF_GRID, repeat=3)
                 if HALF_MAX_MNK < m * n * k <= NATIVE_HALF_MAX_MNK]
    return [(*shape, layout) for layout in HALF_LAYOUTS for shape in grid]


def layout_shapes(quick: bool = False) -> list[tuple[int, int, int, str]]:
    """(m, n, k, layout) of the torch points measured per layout (one round): one narrow dimension,
    the other two wide, in every position, up to 2^26 multiply-adds; ``nn`` only for the widths the
    fine grid lacks."""
    if quick:
        return [(64, 10, 512, layout) for layout in ("nn", *LAYOUTS)]
    found: list[tuple[int, int, int, str]] = []
    for layout in ("nn", *LAYOUTS):
        for narrow in NARROW:
            if layout == "nn" and narrow in FINE_GRID:
                continue
            for position in range(3):
                for wide in itertools.product(WIDE, WIDE):
                    dims = list(wide)
                    dims.insert(position, narrow)
                    if dims[0] * dims[1] * dims[2] <= LAYOUT_MAX_MNK:
                        found.append((*dims, layout))  # type: ignore[arg-type]
    return found


HEAD_CLASSES = 10
"""The classes of the classifier-head points (the narrow width the layout points also measure)."""
HEAD_SIDES = (16, 64, 128, 256, 512, 1024, 2048, 4096)
"""The batch and hidden widths of the classifier-head points: every step of 2x from 64, where the
layout points' wide widths step 8x."""


def head_shapes(quick: bool = False) -> list[tuple[int, int, int, str]]:
    """(m, n, k, layout) of the torch classifier-head points (one round): a linear layer to
    :data:`HEAD_CLASSES` classes from a hidden width ``h`` at batch ``b``, both from
    :data:`HEAD_SIDES`, in its three products (forward ``nt`` b x 10 x h, input gradient ``nn``
    b x h x 10, weight gradient ``tn`` 10 x h x b), up to 2^26 multiply-adds, but for those the
    layout points measure. MKL is not smooth between the layout points' widths: a 128 x 1024 x 10
    ``nn`` product took 70 us at 1 thread, 128 x 512 x 10 13 us and 128 x 4096 x 10 261 us, and
    the surface through them read 42 us (the Zen 5 guest, session 49)."""
    if quick:
        return [(32, HEAD_CLASSES, 256, "nt")]
    found = []
    for batch, hidden in itertools.product(HEAD_SIDES, HEAD_SIDES):
        if (batch in WIDE and hidden in WIDE) or HEAD_CLASSES * batch * hidden > LAYOUT_MAX_MNK:
            continue
        found += [(batch, HEAD_CLASSES, hidden, "nt"), (batch, hidden, HEAD_CLASSES, "nn"),
                  (HEAD_CLASSES, hidden, batch, "tn")]
    return found


VECTOR_AXIS = (16, 128, 1024, 4096)
"""The matrix's sides (its rows or columns, and k) of the matrix-vector points."""
VECTOR_MAX_ELEMENTS = 2**24
"""The largest matrix of the matrix-vector points (64 MiB in fp32: twice the largest L3 here)."""
VECTOR_BUDGET = Budget(min_time_s=0.004, sample_time_s=1e-3)
"""A fifth of the other points' sampling time: a matrix-vector product streams its matrix at a steady
rate. The 96 points of one thread count took 3.7 s with the full budget and 1.2 s with this one
here, and the two measurements differed by 4 % on average. The classifier-head and outer-product
points take it too (318 and 64 points: 4 and 1 s)."""


def vector_shapes(quick: bool = False) -> list[tuple[int, int, int, str]]:
    """(m, n, k, layout) of the torch fp32 matrix-vector points: a row vector times a matrix (m = 1)
    and a matrix times a column vector (n = 1), the matrix's sides from :data:`VECTOR_AXIS`, in the
    layouts of a linear layer's three products (:data:`PATH_LAYOUTS`)."""
    if quick:
        return [(1, 64, 64, "nt")]
    sides = [(rows, k) for rows, k in itertools.product(VECTOR_AXIS, VECTOR_AXIS) if rows * k <= VECTOR_MAX_ELEMENTS]
    return [shape for layout in PATH_LAYOUTS for rows, k in sides
            for shape in ((1, rows, k, layout), (rows, 1, k, layout))]


OUTER_LAYOUTS = ("nn", "nt")
"""The layouts of a linear layer's outer products: the input gradient of a layer with one output
(``nn``) and the forward of a layer with one input (``nt``)."""


def outer_shapes(quick: bool = False) -> list[tuple[int, int, int, str]]:
    """(m, n, k, layout) of the torch fp32 outer-product points (k = 1): the result's sides from
    :data:`VECTOR_AXIS` (at most :data:`VECTOR_MAX_ELEMENTS` of them), in :data:`OUTER_LAYOUTS`."""
    if quick:
        return [(64, 64, 1, "nn")]
    return [(m, n, 1, layout) for layout in OUTER_LAYOUTS for m, n in itertools.product(VECTOR_AXIS, VECTOR_AXIS)
            if m * n <= VECTOR_MAX_ELEMENTS]


INTERLEAVED_PATTERNS = (("nt", "ab"), ("nn", "b"), ("tn", "b"), ("tn", "a"))
"""(layout, interleaved operands) of a multi-head attention's batched products when its heads are
views of one projection's output: ``Q K^T`` (both), ``P V`` and the query gradient (``V``, ``K``),
the key and value gradients (one transposed operand each)."""


def interleaved_shapes(quick: bool = False) -> list[tuple[int, int, int, int, str, str]]:
    """(batch, m, n, k, layout, interleaved) of the torch fp32 points with interleaved operands:
    the batched (attention-like) shapes in every pattern of :data:`INTERLEAVED_PATTERNS`."""
    shapes = [(8, 64, 64, 64)] if quick else list(BATCHED)
    patterns = INTERLEAVED_PATTERNS[:1] if quick else INTERLEAVED_PATTERNS
    return [(*shape, layout, which) for layout, which in patterns for shape in shapes]


COLD_SQUARES = (32, 128, 512, 1024)
COLD_NARROW = (4, 16)
COLD_WIDE = ((64, 4096), (512, 512))


def cold_shapes(quick: bool = False) -> list[tuple[int, int, int, str]]:
    """(m, n, k, layout) of the torch fp32 products also timed cold (single calls after a cache
    flush): squares, and one narrow dimension in every position and layout with two wide pairs."""
    if quick:
        return [(64, 16, 512, "nn")]
    found = [(s, s, s, "nn") for s in COLD_SQUARES]
    for layout in ("nn", *LAYOUTS):
        for narrow in COLD_NARROW:
            for position in range(3):
                for wide in COLD_WIDE:
                    dims = list(wide)
                    dims.insert(position, narrow)
                    found.append((*dims, layout))  # type: ignore[arg-type]
    return found


@functools.cache
def _torch_flush() -> Callable[[], object]:
    """Evict the caches by filling ``FLUSH_BYTES`` through torch's intra-op pool (what
    :func:`~.streams.flush_caches` does in the C kernels' pool): its threads are then awake when the
    product starts, as between the ops of a training step (after numpy's single-threaded flush,
    waking them added 100-200 us to a 2-thread product here)."""
    import torch

    buffer = torch.empty(FLUSH_BYTES // 4)
    return lambda: buffer.fill_(1.0)


def measure_gemm_cold(m: int, n: int, k: int, layout: str, threads: int, budget: Budget) -> dict:
    """A torch fp32 product timed both ways: repeated calls (``warm_s``, as :func:`measure_gemm`)
    and single calls each after a cache flush (``time_s``), the state of a product's
    operands, and of the BLAS's own buffers, inside a training step. The difference is what
    ``simhpc compare`` charges a product on top of its warm time."""
    flush = _torch_flush()
    return _cold_row(m, n, k, layout, threads, budget, lambda operands: flush())


def _cold_row(m: int, n: int, k: int, layout: str, threads: int, budget: Budget,
              before: Callable[[tuple[Any, Any]], object], **identity: str) -> dict:
    """The ``gemm_cold`` row of a torch fp32 product timed in a loop (``warm_s``) and as single
    calls each after ``before(operands)`` (``time_s``; ``operands``: the product's two torch
    tensors); ``identity``: more fields naming the point."""
    operands = _torch_operands(_operand((m, k), "fp32", 0), _operand((k, n), "fp32", 1), layout)
    call = _torch_product(*operands, np.empty((m, n), np.float32))

    def once(reps: int) -> float:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    with torch_threads(threads):
        warm = measure_python(call, budget)
        cold = measure_cold(once, lambda: before(operands), budget)
    return {"blas": "torch", "dtype": "fp32", "threads": threads, "batch": 1, "m": m, "n": n, "k": k,
            "layout": layout, **identity, "cache": "cold", **cold.row(), "warm_s": warm.median_s}


PATH_LAYOUTS = ("nt", "nn", "tn")
"""The layouts of a linear layer's three products: its forward (``nt``), input gradient (``nn``)
and weight gradient (``tn``)."""
PATH_LAYER = (32, 64, 10)
"""(batch, inputs, outputs) of the linear layer whose products the :func:`measure_gemm_path` points
time: a small classifier head, the product a step most often finds with its layout's kernels
evicted. MKL runs such odd sizes through edge kernels besides its main ones: on the EPYC Zen 5
guest (1 thread, operands read first; ``validation/traces/layout_path.py``) its products paid
2.3-4.3 us over their loop time after one of another layout, 32 x 16 x 256 ones 1.1-1.8 us; in the
plain captures' steps the heads' weight gradients paid 2.6-2.9 us."""


def path_shape(layout: str) -> tuple[int, int, int]:
    """(m, n, k) of :data:`PATH_LAYER`'s product of ``layout``: its forward (``nt``), input gradient
    (``nn``) or weight gradient (``tn``)."""
    batch, inputs, outputs = PATH_LAYER
    return {"nt": (batch, outputs, inputs), "nn": (batch, inputs, outputs), "tn": (outputs, inputs, batch)}[layout]


def path_pairs(quick: bool = False) -> list[tuple[str, str]]:
    """(layout called first, layout timed) of the :func:`measure_gemm_path` points: every ordered
    pair of two different :data:`PATH_LAYOUTS`."""
    pairs = [(first, then) for first in PATH_LAYOUTS for then in PATH_LAYOUTS if first != then]
    return pairs[:1] if quick else pairs


def measure_gemm_path(after: str, layout: str, threads: int, budget: Budget) -> dict:
    """:data:`PATH_LAYER`'s torch fp32 product of ``layout`` timed in a loop (``warm_s``) and as
    single calls, each right after a cache flush, a read of its operands and the layer's product of
    the ``after`` layout on other operands (``time_s``; the row's ``operands`` field says they were
    read: ``cached``).

    A product's first call after a flush re-fetches the code and state of the BLAS and of the
    framework; one of another layout right before it re-fetches most of that, but not the
    kernels of this layout (measured at 1 thread, a 32 x 16 x 256 product: 106-116 us over its
    loop time alone, 7-18 us after one of another layout, 4-5 us after one of its own). In a
    training step a linear layer's backward products follow its forward one: ``simhpc compare``
    charges a product the part of its cold cost that these points give its layout's kernels
    (:mod:`simhpc.trace.product_reuse`), and its operands' fetch apart, by where they are. Up to
    suite 39 the points were 32 x 16 x 256 products with their operands left cold: on the EPYC Zen
    5 guest they paid 4.4-5.8 us (1 thread) over their loop time, 1.1-1.6 with the operands read."""
    m, n, k = path_shape(after)
    first = _torch_call(_operand((m, k), "fp32", 2), _operand((k, n), "fp32", 3), np.empty((m, n), np.float32), after)
    m, n, k = path_shape(layout)
    flush = _torch_flush()

    def before(operands: tuple[Any, Any]) -> None:
        flush()
        for operand in operands:
            operand.sum()
        first()

    return _cold_row(m, n, k, layout, threads, budget, before, after=after, operands="cached")


def dtypes(blas: str) -> tuple[str, ...]:
    """Precisions of the main grid through ``blas``: numpy both, torch fp32 (what traces are taken
    in; a torch fp64 GEMM is then predicted from the fp32 fractions of peak). The torch 16-bit
    points have a grid of their own (:func:`half_shapes`)."""
    return ("fp32",) if blas == "torch" else tuple(DTYPES)


def shapes(quick: bool = False, blas: str = "numpy", dtype: str = "fp32") -> list[tuple[int, int, int, int]]:
    """(batch, m, n, k) of every measured product, deduplicated, in a fixed order.

    The torch set leaves out the DeepMD shapes (the grid covers them) and uses the finer grid for
    fp32 only, to keep ``simhpc calibrate`` under 3 minutes on 2 cores.
    """
    if quick:
        return list(QUICK_SHAPES)
    found: list[tuple[int, int, int, int]] = []
    fine = blas == "torch" and dtype == "fp32"
    axis, largest = (FINE_GRID, FINE_MAX_MNK) if fine else (GRID, MAX_MNK)
    grid = ((1, m, n, k) for m, n, k in itertools.product(axis, axis, axis) if m * n * k <= largest)
    squares = ((1, s, s, s) for s in SQUARES)
    deepmd = ((1, m, n, k) for m, n, k in DEEPMD) if blas == "numpy" else ()
    for shape in itertools.chain(grid, squares, deepmd, BATCHED):
        if shape not in found:
            found.append(shape)
    return found


@contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """Limit numpy's BLAS to ``threads`` threads inside the block."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise RuntimeError("threadpoolctl is needed to set BLAS threads: pip install threadpoolctl") from None
    with threadpool_limits(limits=threads, user_api="blas"):
        yield


def torch_available() -> bool:
    """Whether the torch backend can run (torch importable; validation code only, simhpc never imports it)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def backends() -> tuple[str, ...]:
    """The GEMM backends measured on this machine: ``numpy``, and ``torch`` when it is importable."""
    return ("numpy", "torch") if torch_available() else ("numpy",)


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run torch's intra-op pool (and its BLAS) on ``threads`` threads inside the block."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _torch_call(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, layout: str = "nn", dtype: str | None = None, interleaved: str = ""
) -> Callable[[], object]:
    """``torch.mm``/``torch.bmm`` of ``a`` and ``b`` as :func:`_torch_operands` stores them, into
    an output of ``c``'s shape (:func:`_torch_product`)."""
    return _torch_product(*_torch_operands(a, b, layout, dtype, interleaved), c)


def _torch_operands(a: np.ndarray, b: np.ndarray, layout: str = "nn", dtype: str | None = None,
                    interleaved: str = "") -> tuple[Any, Any]:
    """Torch copies of ``a`` and ``b``. ``layout``: a ``t`` operand is the transposed view of a
    contiguous copy of its transpose. ``dtype``: a 16-bit type the operands are converted to
    (``bf16``, ``fp16``). ``interleaved``: the batched operands stored with the batch inside each
    row, as attention heads sliced from one projection's output (a ``[b, r, c]`` view of an
    ``[r, b, c]`` array)."""
    import torch

    to = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype or "")

    def stored(x: np.ndarray, transposed: str, interleave: bool) -> torch.Tensor:
        order = (2, 0, 1) if transposed == "t" else (1, 0, 2)  # the array as laid out in memory
        if interleave:
            tensor = torch.from_numpy(np.ascontiguousarray(x.transpose(order))).clone()
            tensor = tensor.permute(*np.argsort(order).tolist())
        elif transposed == "t":
            tensor = torch.from_numpy(np.ascontiguousarray(x.swapaxes(-1, -2))).clone().transpose(-1, -2)
        else:
            tensor = torch.from_numpy(x).clone()
        return tensor if to is None else tensor.to(to)

    return stored(a, layout[0], "a" in interleaved), stored(b, layout[1], "b" in interleaved)


def _torch_product(ta: Any, tb: Any, c: np.ndarray) -> Callable[[], object]:
    """``torch.mm``/``torch.bmm`` of two torch tensors into an output of ``c``'s shape from torch's
    allocator: into a numpy-allocated one, MKL took twice as long here for a 2048 x 1024 fp32
    output (29 against 15 ms, 1 thread)."""
    import torch

    tc = torch.empty(c.shape, dtype=ta.dtype)
    if ta.dim() == 3:
        return lambda: torch.bmm(ta, tb, out=tc)
    return lambda: torch.mm(ta, tb, out=tc)


_POOLS: dict[tuple[str, int], np.ndarray] = {}


def _operand(shape: tuple[int, ...], dtype: str, which: int) -> np.ndarray:
    """A normal-random operand: a view of a per-(dtype, operand) pool drawn once and grown as
    needed (drawing fresh 4096^2 matrices for each of ~1500 points cost a minute of ``calibrate``)."""
    size = int(np.prod(shape))
    pool = _POOLS.get((dtype, which))
    if pool is None or pool.size < size:
        pool = np.random.default_rng(which).standard_normal(max(size, 1 << 20)).astype(DTYPES[dtype])
        _POOLS[(dtype, which)] = pool
    return pool[:size].reshape(shape)


def measure_gemm(
    batch: int, m: int, n: int, k: int, dtype: str, threads: int, budget: Budget, blas: str = "numpy",
    layout: str = "nn", interleaved: str = "",
) -> dict:
    """Time ``C = A @ B`` once per call (``np.matmul`` or ``torch.mm``/``torch.bmm`` with ``out=``); a record.

    ``layout`` (torch only): operands stored transposed, ``nn``, ``nt``, ``tn`` or ``tt``;
    ``interleaved`` (torch, batched): operands whose matrices interleave (``a``, ``b``, ``ab``).
    """
    lead = (batch,) if batch > 1 else ()
    half = dtype in HALF
    if half and blas != "torch":
        raise ValueError("16-bit products are measured through torch only")
    stored = "fp32" if half else dtype  # 16-bit operands: converted from fp32 ones by torch
    a = _operand((*lead, m, k), stored, 0)
    b = _operand((*lead, k, n), stored, 1)
    c = np.empty((*lead, m, n), dtype=DTYPES[stored])
    if blas == "torch":
        with torch_threads(threads):
            result = measure_python(_torch_call(a, b, c, layout, dtype if half else None, interleaved), budget)
    elif layout != "nn":
        raise ValueError("transposed layouts are measured through torch only")
    elif blas == "numpy":
        with blas_threads(threads):
            result = measure_python(lambda: np.matmul(a, b, out=c), budget)
    else:
        raise ValueError(f"unknown GEMM backend {blas!r} (numpy or torch)")
    flops = 2.0 * batch * m * n * k
    return {
        "blas": blas,
        "dtype": dtype,
        "threads": threads,
        "batch": batch,
        "m": m,
        "n": n,
        "k": k,
        **({"layout": layout} if blas == "torch" else {}),
        **({"interleaved": interleaved} if interleaved else {}),
        **result.row(),
        "flops_per_s": flops / result.median_s,
    }
