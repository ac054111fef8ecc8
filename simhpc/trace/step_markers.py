"""The steps of a torch.profiler trace profiled without a ``schedule`` (no ``ProfilerStep`` events):
its training iterations, by the ends of its ``optimizer.step()`` calls, else the repeated runs of its
top-level ops (a model's forward passes)."""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from itertools import pairwise

from simhpc.trace.records import (
    OPTIMIZER_STEPS,
    PROFILER_SPAN,
    PROFILER_STEPS,
    PYTHON_FRAMES,
    REPEATED_RUNS,
    OpRecord,
    Step,
)

_OPTIMIZER_STEP = re.compile(r"Optimizer\.step#\w+\.step$")
"""torch.optim's annotation of each ``optimizer.step()`` call (``Optimizer.step#AdamW.step``)."""
MIN_PERIOD_OPS = 4
"""Fewest top-level ops in a repeated run (:func:`repeated_steps`): a linear layer and its
activation repeat within one forward pass of a stack of them."""


def derived_steps(ops: list[OpRecord]) -> tuple[list[Step], str]:
    """The steps of a torch.profiler trace without ``ProfilerStep`` events and what marked them
    (:attr:`Trace.steps_from`): its optimizer steps, else its repeated runs of top-level ops."""
    for derive, marker in ((optimizer_steps, OPTIMIZER_STEPS), (repeated_steps, REPEATED_RUNS)):
        steps = derive(ops)
        if steps:
            return steps, marker
    return [], PROFILER_STEPS


def _spans(starts: list[float], ends: list[float], track: str) -> list[Step]:
    return [Step(number, start, end - start, track)
            for number, (start, end) in enumerate(zip(starts, ends, strict=True))]


NOT_WORK = ("user_annotation", PYTHON_FRAMES, PROFILER_SPAN)
"""Categories of events that time no framework work: annotations (``record_function``, torch.optim's
own, the steps), ``with_stack=True``'s Python frames, the profiler's span of the whole capture."""


def _framework_top(ops: list[OpRecord], op: OpRecord) -> bool:
    """Whether ``op`` is an event of the framework (not a Python frame) inside no other such event."""
    if op.category in (PYTHON_FRAMES, PROFILER_SPAN):
        return False
    parent = op.parent
    while parent is not None and ops[parent].category == PYTHON_FRAMES:
        parent = ops[parent].parent
    return parent is None


def optimizer_steps(ops: list[OpRecord]) -> list[Step]:
    """The training iterations of a trace without ``ProfilerStep`` events (torch.profiler marks none
    unless given a ``schedule``), each ending where a run of ``optimizer.step()`` calls ends (several
    optimizers step one after another; a run is broken by framework work between two calls) and
    starting where the previous one ended (the first: at the trace's first op); none unless there
    are two or more. The calls may sit inside Python frames (``with_stack=True``) or an annotation
    of the user's (``record_function``). ``ops`` in (track, start) order, nested."""
    track = next((op.track for op in ops if _OPTIMIZER_STEP.match(op.name)), None)
    if track is None:
        return []
    calls: list[OpRecord] = []
    work: list[float] = []  # starts of framework work on the track outside the optimizers' annotations
    inside_until = -math.inf  # the end of the latest optimizer annotation (step, zero_grad)
    for op in ops:  # start order within the track, parents first
        if op.track != track or op.start < inside_until:
            continue
        if op.name.startswith("Optimizer."):
            inside_until = op.end
            if _OPTIMIZER_STEP.match(op.name):
                calls.append(op)
        elif op.category not in NOT_WORK:
            work.append(op.start)
    ends = [calls[0].end]
    for previous, call in pairwise(calls):
        if bisect.bisect_left(work, call.start) > bisect.bisect_right(work, previous.end):
            ends.append(call.end)
        else:
            ends[-1] = call.end  # another optimizer of the same iteration
    if len(ends) < 2:
        return []
    first = min(op.start for op in ops if op.category != PROFILER_SPAN)
    return _spans([first, *ends[:-1]], ends, track)


def repeated_steps(ops: list[OpRecord]) -> list[Step]:
    """The calls of a loop profiled without a ``schedule`` and without an optimizer (a model's
    forward passes): where the top-level framework events of the busiest thread (Python frames
    seen through) are one sequence run two or more times over, of :data:`MIN_PERIOD_OPS` events
    at least or of annotations only (the user's ``record_function`` around each call), each run
    is a step, from its first event's start to the next's (the last: to its last event's end);
    none otherwise. ``ops`` in (track, start) order, nested."""
    tops = [op for op in ops if _framework_top(ops, op)]
    if not tops:
        return []
    track = Counter(op.track for op in tops).most_common(1)[0][0]
    roots = [op for op in tops if op.track == track]
    names = [op.name for op in roots]
    count = len(names)
    for period in range(1, count // 2 + 1):
        marked = period >= MIN_PERIOD_OPS or all(op.category == "user_annotation" for op in roots[:period])
        if marked and count % period == 0 and names[period:] == names[:-period]:
            starts = [roots[i].start for i in range(0, count, period)]
            return _spans(starts, [*starts[1:], max(op.end for op in roots[-period:])], track)
    return []
