"""Pointer-chase latency, core clock and FMA throughput probes (C, one thread).

The pointer chase follows a random cycle through 64-byte lines of buffers from 8 KiB (L1) to
four times the last-level cache, two sizes per octave; its steps are the cache and DRAM latencies.
"""

from __future__ import annotations

import ctypes

from .native import library
from .timing import summarize


def chase_sizes(llc_bytes: float, quick: bool = False) -> list[int]:
    """Buffer sizes: 8 KiB to 4 x the last-level cache, two per octave up to the LLC, then one
    per octave (quick: four sizes)."""
    if quick:
        return [16384, 1 << 20, 1 << 22, 1 << 24]
    sizes: list[int] = []
    size = 8192.0
    while size <= 4 * llc_bytes * 1.0001:
        sizes.append(int(size) // 64 * 64)
        size *= 2**0.5 if size < llc_bytes else 2.0
    return sizes


def measure_chase(nbytes: int, repeats: int, steps: int = 1 << 19) -> dict:
    """Median seconds per dependent load over ``repeats`` freshly shuffled buffers."""
    lib = library()
    samples = [lib.chase_latency(nbytes, steps, 12345 + 7919 * i) for i in range(repeats)]
    if min(samples) <= 0:
        raise RuntimeError(f"pointer chase over {nbytes} bytes failed (out of memory?)")
    result = summarize(samples, steps)
    return {
        "bytes": nbytes,
        "latency_s": result.median_s,
        "spread_s": result.spread_s,
        "min_s": result.min_s,
        "samples": result.samples,
        "steps": steps,
    }


def measure_clock(chunks: int = 200, iters: int = 50_000) -> dict:
    """Core clock from a dependent add chain (one add per cycle), Hz: the fastest of ``chunks``
    chunks of about 0.3 ms, so that time-slicing with other processes does not lower it."""
    lib = library()
    lib.clock_probe(iters, 10)
    return {"clock_hz": lib.clock_probe(iters, chunks), "chunks": chunks, "adds_per_chunk": 16 * iters}


def measure_fma(chunks: int = 200, iters: int = 20_000) -> dict:
    """Single-precision vector FMA throughput of one core (fastest chunk), FLOP/s, and the vector width."""
    lib = library()
    width = ctypes.c_int()
    lib.fma_probe(iters, 10, ctypes.byref(width))
    best = lib.fma_probe(iters, chunks, ctypes.byref(width))
    return {"flops_per_s": best, "vector_bits": 8 * width.value, "chunks": chunks}
