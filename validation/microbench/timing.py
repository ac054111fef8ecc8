"""Warm-up, repeats, median and spread: how every microbenchmark point is timed."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Budget:
    """How long to time one point.

    Attributes:
        warmup: untimed calls first (page faults, cache and thread-pool warm-up).
        repeats: timed samples at least (more while under ``min_time_s``, at most ``max_repeats``).
        min_time_s: keep sampling until this much time was spent timing.
        sample_time_s: a sample batches enough calls of the kernel to last about this long,
            so that clock resolution and call overhead stay negligible.
        max_repeats: upper bound on samples.
        long_call_s: calls longer than this get ``long_repeats`` samples (large working sets).
        long_repeats: samples of long calls.
    """

    warmup: int = 1
    repeats: int = 5
    min_time_s: float = 0.02
    sample_time_s: float = 2e-3
    max_repeats: int = 25
    long_call_s: float = 0.01
    long_repeats: int = 3


FULL = Budget()
QUICK = Budget(warmup=1, repeats=3, min_time_s=0.0, sample_time_s=2e-4, max_repeats=3, long_repeats=3)

_pace = [1.0]
"""The share of its budget every point gets (1 unless a run is falling behind its deadline)."""


def set_pace(fraction: float) -> None:
    """Give each point ``fraction`` of its budget (:func:`paced`): how :func:`~.runner.run` keeps a
    slow machine's run within its deadline."""
    _pace[0] = min(1.0, max(0.0, fraction))


def paced(budget: Budget) -> Budget:
    """``budget`` at the current pace: its minimum sampling time scaled by the pace, its samples'
    length by the pace but at least a quarter, its repeats by the pace but at least 3 (2 for long
    calls); the budget itself at pace 1."""
    pace = _pace[0]
    if pace >= 1.0:
        return budget
    return replace(budget, min_time_s=budget.min_time_s * pace,
                   sample_time_s=budget.sample_time_s * max(pace, 0.25),
                   repeats=min(budget.repeats, max(3, math.ceil(budget.repeats * pace))),
                   long_repeats=min(budget.long_repeats, max(2, math.ceil(budget.long_repeats * pace))))


@dataclass(frozen=True)
class Measurement:
    """Seconds per kernel call: median over samples, and their spread."""

    median_s: float
    spread_s: float
    """Half the inter-quartile range (half of max - min for fewer than 4 samples)."""
    min_s: float
    samples: int
    calls_per_sample: int

    def row(self) -> dict[str, float | int]:
        """The fields recorded in a calibration file."""
        return {
            "time_s": self.median_s,
            "spread_s": self.spread_s,
            "min_s": self.min_s,
            "samples": self.samples,
            "calls_per_sample": self.calls_per_sample,
        }


def summarize(per_call: list[float], calls: int) -> Measurement:
    """Median and spread of per-call times."""
    ordered = sorted(per_call)
    if len(ordered) >= 4:
        quartiles = statistics.quantiles(ordered, n=4)
        spread = (quartiles[2] - quartiles[0]) / 2
    else:
        spread = (ordered[-1] - ordered[0]) / 2
    return Measurement(statistics.median(ordered), spread, ordered[0], len(ordered), calls)


def measure_python(call: Callable[[], object], budget: Budget) -> Measurement:
    """Time a Python callable (a numpy GEMM) with ``perf_counter``."""
    budget = paced(budget)
    for _ in range(budget.warmup):
        call()
    start = time.perf_counter()
    call()
    first = max(time.perf_counter() - start, 1e-9)
    calls = max(1, min(10_000, int(budget.sample_time_s / first)))
    repeats = budget.long_repeats if first > budget.long_call_s else budget.repeats
    samples: list[float] = []
    spent = 0.0
    while len(samples) < repeats or (spent < budget.min_time_s and len(samples) < budget.max_repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        elapsed = time.perf_counter() - start
        spent += elapsed
        samples.append(elapsed / calls)
    return summarize(samples, calls)


def measure_cold(run: Callable[[int], float], flush: Callable[[], object], budget: Budget) -> Measurement:
    """Time single calls of a C kernel, each after ``flush()`` evicted its data from the caches."""
    run(1)
    samples = []
    for _ in range(max(budget.repeats, 3)):
        flush()
        samples.append(run(1))
    return summarize(samples, 1)


def measure_native(run: Callable[[int], float], budget: Budget) -> Measurement:
    """Time a C kernel: ``run(reps)`` executes it ``reps`` times and returns elapsed seconds."""
    budget = paced(budget)
    for _ in range(budget.warmup):
        run(1)
    first = max(run(1), 1e-9)
    calls = max(1, min(1_000_000, int(budget.sample_time_s / first)))
    repeats = budget.long_repeats if first > budget.long_call_s else budget.repeats
    samples: list[float] = []
    spent = 0.0
    while len(samples) < repeats or (spent < budget.min_time_s and len(samples) < budget.max_repeats):
        elapsed = run(calls)
        spent += elapsed
        samples.append(elapsed / calls)
    return summarize(samples, calls)
