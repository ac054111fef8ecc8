"""What in a measured trace a per-op prediction cannot follow: uneven steps, ops of two threads
running at once, step time outside every op. ``simhpc compare`` counts them in its notes."""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict

from simhpc.trace.readers import OVERLAP_TOLERANCE_S, Trace
from simhpc.trace.step_ops import FRAMEWORK_KINDS, outermost

UNEVEN_STEPS = ("profiled steps that took over twice the fastest one: the ops ran slower as the capture went "
                "on (record_shapes=True keeping tensors alive, whose successors then write fresh pages, or the "
                "machine's speed changing); the median step is compared")
"""The :attr:`Comparison.notes` key counting such steps."""
SLOW_STEP_RATIO = 2.0


def uneven_steps(trace: Trace) -> int:
    """How many profiler steps took over :data:`SLOW_STEP_RATIO` times the fastest one."""
    if not trace.steps:
        return 0
    fastest = min(step.duration for step in trace.steps)
    return sum(1 for step in trace.steps if step.duration > SLOW_STEP_RATIO * fastest)


CONCURRENT_OPS = ("top-level ops that ran while an op of another thread ran (torch.jit.fork, inter-op "
                  "parallelism): the measured step overlaps them, the prediction sums them one after another")
"""The :attr:`Comparison.notes` key counting such ops."""


def concurrent_ops(trace: Trace, tolerance: float = OVERLAP_TOLERANCE_S) -> int:
    """How many top-level framework ops (in the profiler steps, if any) overlap in time, by more than
    ``tolerance`` seconds, a top-level framework op of another track."""
    busy: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for op in trace.ops:
        if op.kind in FRAMEWORK_KINDS and (op.step is not None or not trace.steps) and outermost(trace, op):
            busy[op.track].append((op.start, op.end))
    if len(busy) < 2:
        return 0
    merged: dict[str, tuple[list[float], list[float]]] = {}
    for track, spans in busy.items():
        starts: list[float] = []
        ends: list[float] = []
        for start, end in sorted(spans):
            if ends and start <= ends[-1]:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        merged[track] = (starts, ends)

    def overlaps(track: str, start: float, end: float) -> bool:
        starts, ends = merged[track]
        i = bisect.bisect_left(ends, start + tolerance)  # the first interval ending after the op starts
        return i < len(starts) and min(end, ends[i]) - max(start, starts[i]) > tolerance

    return sum(1 for track, spans in busy.items() for start, end in spans
               if any(overlaps(other, start, end) for other in merged if other != track))


def outside_ops(trace: Trace) -> float | None:
    """Median over profiler steps of the step time no top-level framework op covers."""
    if not trace.steps:
        return None
    roots: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for op in trace.ops:
        if op.step is not None and op.kind in FRAMEWORK_KINDS and outermost(trace, op):
            roots[op.step].append((op.start, op.end))
    gaps = []
    for step in trace.steps:
        covered, reach = 0.0, step.start
        for start, end in sorted(roots.get(step.number, [])):
            start, end = max(start, reach), min(end, step.start + step.duration)
            if end > start:
                covered += end - start
                reach = end
        gaps.append(max(0.0, step.duration - covered))
    return statistics.median(gaps)
