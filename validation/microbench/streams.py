"""Streaming kernels in C: elementwise maps, reductions and STREAM copy/triad.

Sizes are working sets (bytes of all arrays touched) from 4 KiB, inside L1, to 256 MiB, well
past any last-level cache, in steps of 4x. The memory-bound ``add`` and ``sum`` (fp32) are also
measured *cold*: single calls, each after the caches were flushed (``cache: cold`` rows). Bytes
are counted STREAM-style: each array once (read or write), no write-allocate traffic.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from .native import library
from .timing import Budget, Measurement, measure_cold, measure_native

SIZES = tuple(4096 * 4**i for i in range(9))  # 4 KiB .. 256 MiB
QUICK_SIZES = (16384, 1 << 20)
ELEMENTWISE_OPS = ("add", "mul", "tanh", "exp", "gelu")
REDUCTION_OPS = ("sum", "max")
BANDWIDTH_OPS = {"copy": 2, "triad": 3}
DTYPES = {"fp32": (np.float32, "f32"), "fp64": (np.float64, "f64")}


def _ptr(array: np.ndarray) -> int:
    return array.ctypes.data


_POOLS: dict[type, np.ndarray] = {}


def _inputs(count: int, n: int, dtype: type) -> tuple[np.ndarray, ...]:
    """``count`` read-only uniform(-2, 2) arrays of ``n`` elements: disjoint slices of one pool per
    dtype, drawn once and grown as needed (drawing them for every point took a third of
    ``simhpc calibrate``)."""
    pool = _POOLS.get(dtype)
    if pool is None or pool.size < count * n:
        pool = np.random.default_rng(1).random(count * n, dtype=dtype)
        pool *= 4.0
        pool -= 2.0
        pool.flags.writeable = False
        _POOLS[dtype] = pool
    return tuple(pool[i * n : (i + 1) * n] for i in range(count))


def _arrays(count: int, n: int, dtype: type) -> list[np.ndarray]:
    """``count - 1`` shared input arrays and a fresh output array (the last)."""
    return [*_inputs(count - 1, n, dtype), np.empty(n, dtype=dtype)] if count > 1 else list(_inputs(1, n, dtype))


COLD_OPS = {"elementwise": ("add",), "reduction": ("sum",)}
"""Measured cold too (fp32): the memory-bound curves a framework op's in-step time follows."""
FLUSH_BYTES = 128 << 20
"""Moved between cold calls: 4x the AMD reference machine's last-level cache."""
_flush_buffers: list[np.ndarray] = []


def flush_caches(threads: int = 1) -> None:
    """Evict the caches: copy half of ``FLUSH_BYTES`` into the other half on ``threads`` threads.

    The copy runs in the kernels' own OpenMP pool, so that its threads are awake when the timed
    kernel starts, as between the ops of a step; after a single-threaded flush, waking the second
    thread had made a 2-thread cold ``add`` of 1 MiB take 176 us here, against 40 us (and 67 us
    on one thread)."""
    stream_through(FLUSH_BYTES, threads)


def stream_through(nbytes: int, threads: int = 1) -> None:
    """Move ``nbytes`` (at most ``FLUSH_BYTES``) through the caches: copy half of them into the
    other half on ``threads`` threads (what :func:`flush_caches` does with all of them)."""
    if not _flush_buffers:
        _flush_buffers.extend(np.ones(FLUSH_BYTES // 16) for _ in range(2))
    source, target = _flush_buffers
    count = min(source.size, nbytes // 16)
    if count:
        library().bw_copy(_ptr(source), _ptr(target), count, 1, threads)


def _timed(run: Callable[[int], float], budget: Budget, cold: bool, threads: int) -> Measurement:
    return measure_cold(run, lambda: flush_caches(threads), budget) if cold else measure_native(run, budget)


def measure_elementwise(
    op: str, dtype: str, working_set: int, threads: int, budget: Budget, cold: bool = False
) -> dict:
    """``c = f(a, b)`` (``f(a)`` for tanh, exp, gelu) over arrays filling ``working_set``.

    ``cold``: one call at a time, after evicting the caches (the state of an op's operands inside
    a training step, where megabytes of other tensors pass between their uses); else repeated
    calls over the same, cache-warm arrays.
    """
    np_type, suffix = DTYPES[dtype]
    size = np.dtype(np_type).itemsize
    n = max(16, working_set // (3 * size))
    a, b, c = _arrays(3, n, np_type)
    function = getattr(library(), f"ew_{op}_{suffix}")
    result = _timed(lambda reps: function(_ptr(a), _ptr(b), _ptr(c), n, reps, threads), budget, cold, threads)
    moved = (3 if op in ("add", "mul") else 2) * n * size
    return _stream_row(op, dtype, threads, n, moved, result, cold)


def measure_reduction(
    op: str, dtype: str, working_set: int, threads: int, budget: Budget, cold: bool = False
) -> dict:
    """Reduce one array of ``working_set`` bytes to a scalar (``cold``: as :func:`measure_elementwise`)."""
    np_type, suffix = DTYPES[dtype]
    size = np.dtype(np_type).itemsize
    n = max(16, working_set // size)
    (a,) = _arrays(1, n, np_type)
    out = ctypes.c_double()
    function = getattr(library(), f"red_{op}_{suffix}")
    result = _timed(lambda reps: function(_ptr(a), n, reps, threads, ctypes.byref(out)), budget, cold, threads)
    return _stream_row(op, dtype, threads, n, n * size, result, cold)


def _stream_row(op: str, dtype: str, threads: int, n: int, moved: int, result: Measurement, cold: bool) -> dict:
    return {
        "op": op,
        "dtype": dtype,
        "threads": threads,
        "n": n,
        "bytes": moved,
        "cache": "cold" if cold else "warm",
        **result.row(),
        "bytes_per_s": moved / result.median_s,
    }


def measure_bandwidth(op: str, working_set: int, threads: int, budget: Budget) -> dict:
    """STREAM copy (``b = a``) or triad (``a = b + s c``) over float64 arrays (the output is the last)."""
    arrays = BANDWIDTH_OPS[op]
    n = max(16, working_set // (arrays * 8))
    data = _arrays(arrays, n, np.float64)
    lib = library()
    if op == "copy":
        result = measure_native(lambda reps: lib.bw_copy(_ptr(data[0]), _ptr(data[1]), n, reps, threads), budget)
    else:
        result = measure_native(
            lambda reps: lib.bw_triad(_ptr(data[2]), _ptr(data[0]), _ptr(data[1]), n, reps, threads), budget
        )
    moved = arrays * n * 8
    return {
        "op": op,
        "threads": threads,
        "n": n,
        "bytes": moved,
        **result.row(),
        "bytes_per_s": moved / result.median_s,
    }
