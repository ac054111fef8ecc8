"""Pointer-chase latency, core clock and FMA throughput probes (C, one thread), and the round trip
of a cache line between two cores.

The pointer chase follows a random cycle through 64-byte lines of buffers from 8 KiB (L1) to
four times the last-level cache, two sizes per octave; its steps are the cache and DRAM latencies.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time

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


def two_cpus_available() -> bool:
    """Whether this process may run on two CPUs at once (not under ``taskset -c 0``, where the two
    threads of :func:`measure_peer_round_trip` would wait for the scheduler at every hand-over)."""
    return len(os.sched_getaffinity(0)) >= 2


def measure_peer_round_trip(bursts: int = 20, trips: int = 20_000) -> dict:
    """Seconds a cache line takes to go to another core and back, over ``bursts`` bursts of
    ``trips`` round trips, 20 ms apart: their median, fastest and slowest. On the 2-core KVM guests
    it moves between about 70 ns and 330 ns or more within seconds (where the host runs the two vCPUs),
    and multi-thread products with it: the calibration records it at its start and at its end."""
    samples = []
    for _ in range(bursts):
        samples.append(_round_trip_burst(trips))
        time.sleep(0.02)
    return {"round_trip_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "bursts": bursts, "trips": trips}


def _round_trip_burst(trips: int) -> float:
    """Seconds per round trip over one burst of ``trips``."""
    elapsed = library().peer_round_trip(trips)
    if elapsed <= 0:
        raise RuntimeError("the cores' round trip could not start its second thread")
    return elapsed / trips


def quick_round_trip(bursts: int = 5, trips: int = 2000) -> float:
    """The cores' round trip now: the median of ``bursts`` back-to-back bursts of ``trips`` (about
    1.4 ms while the cores are near, five while far). Taken before every multi-thread point of a
    calibration and around every capture: on the 2-core EPYC Zen 4 guest a 2-thread 64 x 4096 x 10
    product took 125-150 us while it read 55-75 ns, 280-370 us while it read 310-340 ns (a 512^3
    product 1.33 against 1.40 ms; at 1 thread both the same)."""
    return statistics.median(_round_trip_burst(trips) for _ in range(bursts))


L1_PROBE_SHARE = 0.75
"""The share of the L1 data cache the L1 probe's pointer chase covers."""


def measure_l1_probe(l1_bytes: int, steps: int = 1 << 14) -> float:
    """Seconds per dependent load of a pointer chase over :data:`L1_PROBE_SHARE` of the L1 data
    cache (about 50 us): an L1 hit while this core has its L1 to itself, up to 3x that while
    another hardware thread shares it. On the Xeon guest of session 14 the host ran something on
    the other thread of our vCPU's core for seconds at a time (the guest's other CPU idle): a 64 x
    64 x 64 product then took 10 us instead of 6.5, an FMA loop on registers only 5 % longer."""
    return library().chase_latency(_l1_probe_bytes(l1_bytes), steps, 4242)


def _l1_probe_bytes(l1_bytes: int) -> int:
    return max(4096, int(l1_bytes * L1_PROBE_SHARE) // 64 * 64)


PEER_PROBE_CPUS = 4
"""Most CPUs :func:`measure_l1_probes` probes one by one (beyond, only the calling core)."""


def measure_l1_probes(l1_bytes: int, steps: int = 1 << 14) -> float:
    """The slowest L1 probe of every CPU this process may run on (each on a thread bound to it; the
    calling core's alone where there are over :data:`PEER_PROBE_CPUS`): the probe before a
    multi-thread point, whose threads wait for the slowest. On the EPYC Zen 4 guest a 2-thread
    64 x 10 x 4096 product took 90 us with both cores' probes fast, 116-127 us with one core's
    over 1.3x its fastest, 136 us with both (cores near each other; at 1 thread the calling core's
    probe alone decides)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > PEER_PROBE_CPUS:
        return measure_l1_probe(l1_bytes, steps)
    return max(measure_l1_probe_on(cpu, l1_bytes, steps) for cpu in cpus)


def measure_l1_probe_on(cpu: int, l1_bytes: int, steps: int = 1 << 14) -> float:
    """:func:`measure_l1_probe` on a thread bound to CPU ``cpu``."""
    reading = library().chase_latency_on(cpu, _l1_probe_bytes(l1_bytes), steps, 4242)
    if reading <= 0:
        raise RuntimeError(f"the L1 probe could not run on CPU {cpu}")
    return reading
