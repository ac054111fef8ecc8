"""Rewriting lines written a while before: what an output costs where its block was last used.

A product's output goes into a block the allocator hands back, usually one freed moments before;
its lines are wherever the traffic since left them. ``measure_rewrite`` writes a
``REWRITE_BYTES`` buffer, streams ``since`` bytes of copy traffic through the caches, and times
a second write of the buffer (a store to every element, on one thread): the reuse distance of a
line is then ``since`` plus the buffer. Where the write's time climbs from its cached level to
its level past every cache locates the distance at which written lines leave the caches:
``simhpc compare`` takes that share of a product's output lines as fetched from memory
(:meth:`~simhpc.costs.calibration_file.Calibration.rewrite_memory_share`,
:mod:`simhpc.trace.product_reuse`).

Written lines, not the pointer chase's read ones: a cache may keep them otherwise. On the 2-core
EPYC Zen 5 guest (32 MiB L3) the 1 MiB write took 7.5-10.5 us with up to 16 MiB of traffic, then
14-24 us; the CNN classifier's input gradient (a 1 MiB output) took 132 us at 1 thread with its
output last written up to 16 MiB before and 162 us past 64 MiB (at 2 threads 55-58 and 84 us;
``validation/README.md``, session 51).
"""

from __future__ import annotations

import numpy as np

from .native import library
from .streams import stream_through
from .timing import Budget, summarize

REWRITE_BYTES = 1 << 20
"""The rewritten buffer: a classifier's input gradient's output."""
SINCE_BYTES = (0, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20)
"""Copy traffic between the two writes: none to 4x the reference machines' last-level caches."""
REWRITE_SAMPLES = 21
"""Samples per point (each needs its own traffic, so a point is timed call by call)."""


def measure_rewrite(since: int, budget: Budget) -> dict:
    """One point: the second write of a ``REWRITE_BYTES`` buffer after ``since`` bytes of traffic."""
    lib = library()
    n = REWRITE_BYTES // 4
    buffer = np.zeros(n, dtype=np.float32)
    address = buffer.ctypes.data
    samples = []
    for _ in range(max(budget.repeats, REWRITE_SAMPLES)):
        lib.store_lines(address, n)
        stream_through(since)
        samples.append(lib.store_lines(address, n))
    return {
        "threads": 1,
        "since_bytes": since,
        "bytes": REWRITE_BYTES,
        **summarize(samples, 1).row(),
    }
