"""A profiled training step's framework ops: which are top-level, which the autograd engine called,
the transitions between them (a step's start, the backward's entry and exit) and the work done
between two of them."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass

from simhpc.trace.framework_costs import in_time_order
from simhpc.trace.readers import OpRecord, Trace

FRAMEWORK_KINDS = (
    "gemm", "conv", "recurrent", "elementwise", "reduction", "pool", "random", "resample", "embedding", "sort", "view",
    "unknown", "compiled", "comm",
)
"""Op kinds counted as ops (wrappers such as annotations, autograd nodes and steps are not)."""


def top_level_ops(trace: Trace) -> list[OpRecord]:
    """The framework ops no other framework op encloses (within the profiler steps, if any), by start."""
    return in_time_order(op for op in trace.ops if op.kind in FRAMEWORK_KINDS
                         and (op.step is not None or not trace.steps) and outermost(trace, op))


def transition_before(trace: Trace, previous: OpRecord | None, op: OpRecord) -> str | None:
    """Which of a training step's framework transitions the gap before the top-level ``op`` is:
    ``step_start`` (the first op of a profiler step), ``backward_entry`` (the first op the autograd
    engine runs after ops Python called: ``loss.backward()`` setting up its graph task) or
    ``backward_exit`` (the first op Python calls after the engine's: the backward's end and, in a
    training loop, the optimizer's own code before its first op); None for any other gap."""
    if previous is None or previous.step != op.step:
        return "step_start" if trace.steps else None
    by_engine = engine_called(trace, op)
    if by_engine != engine_called(trace, previous):
        return "backward_entry" if by_engine else "backward_exit"
    return None


def step_footprints(top: list[OpRecord], touched: dict[int, float]) -> dict[int | None, float]:
    """Per profiler step (None: a trace without steps), the bytes its top-level ops touched
    (``touched``: :func:`~simhpc.trace.framework_costs.subtree_footprint` of each, summed)."""
    steps: dict[int | None, float] = defaultdict(float)
    for op in top:
        steps[op.step] += touched[op.index]
    return dict(steps)


ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
"""The autograd node that accumulates a leaf's gradient: one per trained parameter tensor."""


@dataclass(frozen=True)
class StepWork:
    """What a stretch of a training step did, as its transitions' costs depend on it."""

    touched_bytes: float
    """Bytes its top-level ops touched (their :class:`~simhpc.trace.framework_costs.Footprint`)."""
    graph_nodes: int
    """Autograd nodes the engine ran (``autograd::engine::evaluate_function`` spans)."""
    parameters: int
    """Of those, the parameter tensors' gradient accumulations."""


def engine_node_starts(trace: Trace) -> tuple[list[float], list[float]]:
    """Sorted start times of the engine's autograd nodes, and of those accumulating a parameter's gradient."""
    nodes = [op for op in trace.ops if op.name.startswith(ENGINE_NODE)]
    return (sorted(op.start for op in nodes),
            sorted(op.start for op in nodes if op.name.endswith(ACCUMULATE_GRAD)))


def step_work(trace: Trace, top: list[OpRecord], touched: dict[int, float],
              engine_nodes: tuple[list[float], list[float]] | None = None) -> dict[int | None, StepWork]:
    """Per profiler step (None: a trace without steps), its :class:`StepWork` (``engine_nodes``:
    :func:`engine_node_starts` where the caller has them)."""
    nodes, parameters = engine_nodes or engine_node_starts(trace)
    spans = {step.number: (step.start, step.start + step.duration) for step in trace.steps}
    bytes_by_step = step_footprints(top, touched)
    work = {}
    for number, nbytes in bytes_by_step.items():
        start, end = spans.get(number, (-math.inf, math.inf))
        work[number] = StepWork(nbytes, count_between(nodes, start, end), count_between(parameters, start, end))
    return work


def count_between(times: list[float], start: float, end: float) -> int:
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


ENGINE_NODE = "autograd::engine::evaluate_function"
"""The profiler's span around each backward node the autograd engine runs."""


def engine_called(trace: Trace, op: OpRecord) -> bool:
    """Whether the autograd engine called ``op`` (one of its ancestors is an engine node)."""
    parent = op.parent
    while parent is not None:
        if trace.ops[parent].name.startswith(ENGINE_NODE):
            return True
        parent = trace.ops[parent].parent
    return False


def outermost(trace: Trace, op: OpRecord) -> bool:
    """Whether no framework op encloses ``op`` (steps, annotations and autograd nodes do not count)."""
    parent = op.parent
    while parent is not None:
        if trace.ops[parent].kind in FRAMEWORK_KINDS:
            return False
        parent = trace.ops[parent].parent
    return True
