"""Hold a measured trace against the cost model, or two traces against each other.

:func:`compare_trace` predicts every op of a measured trace from its kernel descriptor
(:func:`simhpc.costs.opmap.kernel_for`) and a cost model — never from the measured durations —
and sums per step. Each op's own work is compared with its *self* time (its duration less its
children's), so nested ops are never counted twice: ``aten::linear`` carries no kernel when the
trace shows its ``aten::addmm`` child; ``aten::addmm``'s self time excludes the bias
``aten::copy_`` below it, which is predicted on its own. Ops that cannot be modelled are counted
and listed with the reason.

:func:`compare_traces` aligns two traces (a simhpc trace and a measured one, or two runs) by
track label and span name and reports their differences.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simhpc.costs.kernels import FrameworkOp, Gemm, Kernel
from simhpc.costs.model import CostModel, Device
from simhpc.costs.opmap import OpKernel, kernel_for
from simhpc.costs.opnames import COMPOSITE, UNCOVERED, base_name
from simhpc.trace.allocations import BlockHistory
from simhpc.trace.conv_activations import charge_convolutions
from simhpc.trace.framework_costs import cost_after, in_time_order, subtree_footprint
from simhpc.trace.fresh_memory import allocator_recorded, fresh_writes, heap_writes
from simhpc.trace.product_reuse import charge_products
from simhpc.trace.readers import OVERLAP_TOLERANCE_S, OpRecord, Trace

FRAMEWORK_KINDS = (
    "gemm", "conv", "recurrent", "elementwise", "reduction", "pool", "random", "resample", "embedding", "sort", "view",
    "unknown", "compiled", "comm",
)
"""Op kinds counted as ops (wrappers such as annotations, autograd nodes and steps are not)."""
UNPREDICTED_KINDS = {
    "compiled": "torch.compile graph: its fused kernels are not recorded op by op (its self time is their work)",
    "comm": "collective communication: its time is the network's and the other ranks' "
            "(simulate it with a collective or training scenario)",
}
"""Kinds listed as not modelled whatever their shapes, and why."""
WRAPPER_SELF_SHARE = 0.5
"""An op without a cost model (and not a known composite) whose children are modelled passes as a
wrapper (``aten::lstm``, ``aten::embedding``: their children do the work) only while its self time
is at most this share of its duration; above it the op does work of its own
(``aten::mkldnn_rnn_layer`` before it was modelled: its only children are allocations) and is
listed as not modelled instead of being dropped. The share is taken over every call of the same
op with the same shapes, so that timing noise does not split identical calls."""


@dataclass
class OpPrediction:
    """One op: its kernel (None: no work of its own, or not modelled), measured self time, prediction."""

    op: OpRecord
    kernel: Kernel | None
    measured_s: float
    predicted_s: float
    modelled: bool
    reason: str = ""
    first_touch_s: float = 0.0
    """Of ``predicted_s``: the page faults of its first write into freshly mapped memory
    (:mod:`simhpc.trace.fresh_memory`)."""
    activations_s: float = 0.0
    """Of ``predicted_s``: a convolution's activations fetched from memory
    (:mod:`simhpc.trace.conv_activations`)."""

    @property
    def error_pct(self) -> float | None:
        """Signed error of the prediction, % of the measured self time (None if that is 0)."""
        return percent_error(self.predicted_s, self.measured_s)


def percent_error(predicted: float, measured: float) -> float | None:
    """``100 * (predicted - measured) / measured``; None when nothing was measured."""
    return 100.0 * (predicted - measured) / measured if measured > 0 else None


@dataclass
class Comparison:
    """What ``simhpc compare`` reports for one measured trace."""

    source: str
    threads: int
    steps: int
    measured_total_s: float
    """All profiled steps (or the trace's span without steps)."""
    measured_step_s: float
    """The median step: robust to one step disturbed by another process."""
    predicted_step_s: float
    predictions: list[OpPrediction]
    outside_ops_s: float | None = None
    """Median time per step inside no op (Python, the framework between ops), measured. None
    without profiler steps."""
    call_gaps_s: float = 0.0
    """Predicted time per step between top-level ops: for each, the calibration's profiled gap
    between two ops the autograd engine calls (``engine_gap``) or Python does (``call_gap``);
    part of ``predicted_step_s``."""
    heap_faults_if_fresh_s: float | None = None
    """Per step, the page faults of every heap block of 1 to 32 MiB an op writes first
    (:func:`~simhpc.trace.fresh_memory.heap_writes`) if all came fresh, at the calibrated fault
    cost; not in ``predicted_step_s``. What glibc's default settings expose a step to (a plain
    process's measured excess is of this order: validation/README.md); None where the trace records
    its allocator settings."""
    kinds: dict[str, dict[str, float]] = field(default_factory=dict)
    unmodelled: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped_events: dict[str, int] = field(default_factory=dict)
    """Events of the file the reader could not use, by reason (not in any count above)."""
    notes: dict[str, int] = field(default_factory=dict)
    """Counts of ops read but suspect, or predicted otherwise than they ran, by what (e.g. ops
    that ran alongside another thread's: their predictions are summed one after another)."""

    @property
    def step_error_pct(self) -> float | None:
        """Error of the predicted step against the median measured one, % (None if that is 0)."""
        return percent_error(self.predicted_step_s, self.measured_step_s)

    @property
    def predicted_total_s(self) -> float:
        """The predicted step times the steps measured."""
        return self.predicted_step_s * max(1, self.steps)

    @property
    def first_touch_step_s(self) -> float:
        """Predicted page-fault time per step (part of ``predicted_step_s``)."""
        return sum(p.first_touch_s for p in self.predictions) / max(1, self.steps)

    @property
    def activations_step_s(self) -> float:
        """Predicted time per step of the convolutions' activations fetched from memory (part of
        ``predicted_step_s``)."""
        return sum(p.activations_s for p in self.predictions) / max(1, self.steps)

    @property
    def ops_total(self) -> int:
        return len(self.predictions)

    @property
    def ops_modelled(self) -> int:
        return sum(1 for p in self.predictions if p.modelled)

    def with_kernels(self) -> list[OpPrediction]:
        """Ops that carry a kernel of their own, in trace order."""
        return [p for p in self.predictions if p.kernel is not None]

    def worst(self, count: int = 10) -> list[OpPrediction]:
        """Kernel-carrying ops with the largest absolute time error."""
        ranked = sorted(self.with_kernels(), key=lambda p: (-abs(p.predicted_s - p.measured_s), p.op.index))
        return ranked[:count]

    def summary(self, worst: int = 10) -> dict[str, Any]:
        """The machine-readable report (``simhpc compare --json``)."""
        gemm = self.kinds.get("gemm", {})
        return {
            "source": self.source,
            "threads": self.threads,
            "steps": self.steps,
            "measured_total_s": self.measured_total_s,
            "predicted_total_s": self.predicted_total_s,
            "measured_step_s": self.measured_step_s,
            "predicted_step_s": self.predicted_step_s,
            "total_error_pct": percent_error(self.predicted_total_s, self.measured_total_s),
            "step_error_pct": self.step_error_pct,
            "outside_ops_s": self.outside_ops_s,
            "first_touch_s": self.first_touch_step_s,
            "conv_activations_s": self.activations_step_s,
            "call_gaps_s": self.call_gaps_s,
            "heap_faults_if_fresh_s": self.heap_faults_if_fresh_s,
            "gemm_mape_pct": gemm.get("mape_pct"),
            "gemm_repeat_mape_pct": gemm.get("repeat_mape_pct"),
            "ops_total": self.ops_total,
            "ops_modelled": self.ops_modelled,
            "ops_unmodelled": self.ops_total - self.ops_modelled,
            "kinds": self.kinds,
            "unmodelled": self.unmodelled,
            "skipped_events": self.skipped_events,
            "notes": self.notes,
            "worst_ops": [_op_row(p) for p in self.worst(worst)],
        }


def _shape_text(op: OpRecord) -> str:
    return " ".join(str(s) for s in op.shapes if s not in ([], "")) if op.shapes else ""


def _op_row(prediction: OpPrediction) -> dict[str, Any]:
    op = prediction.op
    return {
        "index": op.index,
        "name": op.name,
        "kind": op.kind,
        "shapes": _shape_text(op),
        "step": op.step,
        "measured_s": prediction.measured_s,
        "predicted_s": prediction.predicted_s,
        "error_pct": prediction.error_pct,
    }


def traced_kernel(trace: Trace, op: OpRecord) -> OpKernel:
    """The kernel descriptor of a traced op's own work (:func:`~simhpc.costs.opmap.kernel_for`)."""
    strides = op.args.get("Input Strides")
    return kernel_for(op.name, op.kind, op.shapes, op.dtypes, op.concrete, bool(op.children),
                      strides if isinstance(strides, list) else None,
                      [trace.ops[child].name for child in op.children])


def predict_ops(trace: Trace, model: CostModel, device: Device, threads: int) -> list[OpPrediction]:
    """A prediction for every framework op of ``trace`` (within its profiler steps, if any).

    An op that computes nothing (a view, a wrapper whose children do the work) takes the
    calibration's profiled dispatch cost (``no_kernel_op``)."""
    own_work = _wrappers_doing_own_work(trace)
    predictions = []
    for op in trace.ops:
        if op.kind not in FRAMEWORK_KINDS or (trace.steps and op.step is None):
            continue
        if op.kind in UNPREDICTED_KINDS:
            predictions.append(OpPrediction(op, None, op.self_time, 0.0, False, UNPREDICTED_KINDS[op.kind]))
            continue
        result = traced_kernel(trace, op)
        if result.kernel is None:
            reason = result.reason
            if not reason and _call_key(op) in own_work:
                reason = UNCOVERED.get(base_name(op.name),
                                       "no cost model for this op's own work (its children are timed on their own)")
            predictions.append(OpPrediction(op, None, op.self_time, 0.0, not reason, reason))
            continue
        covers = getattr(model.efficiency, "covers", None)
        if covers is not None and not covers(result.kernel):
            if isinstance(result.kernel, FrameworkOp):
                reason = f"no {result.kernel.op} points in the calibration (measured where torch is installed)"
            elif getattr(result.kernel, "dtype", "") in ("bf16", "fp16"):
                reason = (f"no {result.kernel.dtype} product points in the calibration (measured where torch "
                          "is installed)")
            else:
                reason = f"no {result.kernel.kind} points in the calibration (re-run 'simhpc calibrate')"
            predictions.append(OpPrediction(op, None, op.self_time, 0.0, False, reason))
            continue
        try:
            predicted = model.duration(result.kernel, device, threads)
        except (KeyError, ValueError) as error:
            predictions.append(OpPrediction(op, None, op.self_time, 0.0, False, f"cost model: {error}"))
            continue
        predictions.append(OpPrediction(op, result.kernel, op.self_time, predicted, True))
    _dispatch_after_kernels(predictions, model)
    charge_products(predictions, model, threads, BlockHistory(trace.memory))
    charge_convolutions(predictions, model, threads)
    _add_first_touch(trace, predictions, model, threads)
    return predictions


def _dispatch_after_kernels(predictions: list[OpPrediction], model: CostModel) -> None:
    """Charge each kernel-free op the dispatch cost of the state the last kernel left the caches in
    (:mod:`simhpc.trace.framework_costs`)."""
    moved = math.inf  # the first op follows the previous step's, or the program's, work
    for p in sorted(predictions, key=lambda p: (p.op.start, p.op.index)):
        if p.kernel is not None:
            moved = p.kernel.bytes()
        elif p.modelled:
            p.predicted_s = cost_after(model, "no_kernel_op", moved)


def _call_key(op: OpRecord) -> tuple[str, str]:
    return op.name, repr(op.shapes)


def _wrappers_doing_own_work(trace: Trace) -> set[tuple[str, str]]:
    """(name, shapes) of the unknown parent ops whose self time, summed over their calls in the
    profiler steps (all calls when there are none), is above ``WRAPPER_SELF_SHARE`` of their
    duration."""
    own: dict[tuple[str, str], float] = defaultdict(float)
    total: dict[tuple[str, str], float] = defaultdict(float)
    for op in trace.ops:
        if trace.steps and op.step is None:
            continue
        if op.kind == "unknown" and op.children and base_name(op.name) not in COMPOSITE:
            own[_call_key(op)] += op.self_time
            total[_call_key(op)] += op.duration
    return {key for key, seconds in own.items() if seconds > WRAPPER_SELF_SHARE * total[key]}


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


def _engine_node_starts(trace: Trace) -> tuple[list[float], list[float]]:
    """Sorted start times of the engine's autograd nodes, and of those accumulating a parameter's gradient."""
    nodes = [op for op in trace.ops if op.name.startswith(ENGINE_NODE)]
    return (sorted(op.start for op in nodes),
            sorted(op.start for op in nodes if op.name.endswith(ACCUMULATE_GRAD)))


def step_work(trace: Trace, top: list[OpRecord], touched: dict[int, float],
              engine_nodes: tuple[list[float], list[float]] | None = None) -> dict[int | None, StepWork]:
    """Per profiler step (None: a trace without steps), its :class:`StepWork` (``engine_nodes``:
    :func:`_engine_node_starts` where the caller has them)."""
    nodes, parameters = engine_nodes or _engine_node_starts(trace)
    spans = {step.number: (step.start, step.start + step.duration) for step in trace.steps}
    bytes_by_step = step_footprints(top, touched)
    work = {}
    for number, nbytes in bytes_by_step.items():
        start, end = spans.get(number, (-math.inf, math.inf))
        work[number] = StepWork(nbytes, _count_between(nodes, start, end), _count_between(parameters, start, end))
    return work


def _count_between(times: list[float], start: float, end: float) -> int:
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


def _call_gaps(trace: Trace, predictions: list[OpPrediction], model: CostModel) -> float:
    """The gaps before every top-level op (Python's or the autograd engine's), each charged warm or
    cold by the distinct tensors the top-level op before it touched (:mod:`simhpc.trace.framework_costs`);
    a step's transitions (:func:`transition_before`), where the calibration has them
    (``framework_transition_s``), by the work done since the same transition last ran its code
    (:class:`StepWork`): a step's worth in a plain training loop, less where a step runs several
    backwards (for the first of each, its step's: the step before the trace was like it)."""
    top = top_level_ops(trace)
    kernels = {p.op.index: p.kernel for p in predictions if p.kernel is not None}
    touched = subtree_footprint(trace, kernels, top)
    nodes, parameters = _engine_node_starts(trace)
    per_step = step_work(trace, top, touched, (nodes, parameters))
    transition_s = getattr(model.efficiency, "framework_transition_s", lambda what, work: None)
    last: dict[str, tuple[float, float]] = {}  # transition -> (bytes touched before it, its time)
    total, moved, before, previous = 0.0, 0.0, math.inf, None
    for op in top:
        transition = transition_before(trace, previous, op)
        charged = None
        if transition:
            work = per_step[op.step]
            if transition in last:
                moved_then, since = last[transition]
                work = StepWork(moved - moved_then, _count_between(nodes, since, op.start),
                                _count_between(parameters, since, op.start))
            charged = transition_s(transition, work)
            last[transition] = (moved, op.start)
        if charged is None:
            charged = cost_after(model, "engine_gap" if engine_called(trace, op) else "call_gap", before)
        total += charged
        moved += touched[op.index]
        before, previous = touched[op.index], op
    return total


def _add_first_touch(trace: Trace, predictions: list[OpPrediction], model: CostModel, threads: int) -> None:
    """Charge each op the page faults of the freshly mapped memory it writes first."""
    first_touch = getattr(model.efficiency, "first_touch_s", None)
    if first_touch is None:
        return
    kernels = {p.op.index: p.kernel for p in predictions if p.kernel is not None}
    carrying = {p.op.index: p for p in predictions if p.op.index in kernels}
    for index, nbytes in fresh_writes(trace, kernels).items():
        prediction = carrying[index]
        prediction.first_touch_s = first_touch(nbytes, threads)
        prediction.predicted_s += prediction.first_touch_s


def _heap_faults_if_fresh(trace: Trace, predictions: list[OpPrediction], model: CostModel, threads: int,
                       steps: int) -> float | None:
    """Per step, the page faults of every heap block of 1 to 32 MiB if all were written fresh, for a
    trace that does not record its allocator settings (None for one that does, or without
    page-fault points)."""
    first_touch = getattr(model.efficiency, "first_touch_s", None)
    if first_touch is None or allocator_recorded(trace):
        return None
    kernels = {p.op.index: p.kernel for p in predictions if p.kernel is not None}
    return sum(first_touch(nbytes, threads) for nbytes in heap_writes(trace, kernels).values()) / steps


def compare_trace(trace: Trace, model: CostModel, device: Device, threads: int) -> Comparison:
    """Predict ``trace``'s ops and step time with ``model`` on ``device`` using ``threads`` cores."""
    predictions = predict_ops(trace, model, device, threads)
    if trace.steps:
        steps = len(trace.steps)
        measured = statistics.median(s.duration for s in trace.steps)
    else:
        steps = 1
        # From the first op to the last: the profiler's own span of the whole capture is not one.
        roots = [op for op in trace.ops if op.parent is None and op.category != "Trace"] or trace.ops
        measured = max(op.end for op in roots) - min(op.start for op in roots)
    call_gaps = _call_gaps(trace, predictions, model) / steps
    predicted = sum(p.predicted_s for p in predictions) / steps + call_gaps
    total = sum(s.duration for s in trace.steps) if trace.steps else measured
    skipped = dict(trace.skipped)
    if trace.steps:
        outside_steps = sum(1 for op in trace.ops if op.kind in FRAMEWORK_KINDS and op.step is None)
        if outside_steps:
            skipped["framework ops outside every profiler step"] = outside_steps
    heap_faults = _heap_faults_if_fresh(trace, predictions, model, threads, steps)
    notes = dict(trace.notes)
    concurrent = concurrent_ops(trace)
    if concurrent:
        notes[CONCURRENT_OPS] = concurrent
    uneven = uneven_steps(trace)
    if uneven:
        notes[UNEVEN_STEPS] = uneven
    other_dtype = getattr(model.efficiency, "other_dtype", None)
    if other_dtype is not None:
        borrowed = sum(1 for p in predictions if p.kernel is not None and other_dtype(p.kernel)) // steps
        if borrowed:
            notes[OTHER_DTYPE] = borrowed
    comparison = Comparison(trace.source, threads, len(trace.steps), total, measured, predicted, predictions,
                            outside_ops(trace), call_gaps, heap_faults, skipped_events=skipped, notes=notes)
    groups: dict[str, list[OpPrediction]] = defaultdict(list)
    for p in predictions:
        if p.kernel is not None:
            groups[p.op.kind].append(p)
    for kind in sorted(groups):
        rows = groups[kind]
        measured_s = sum(p.measured_s for p in rows)
        predicted_s = sum(p.predicted_s for p in rows)
        errors = [abs(error) for p in rows if (error := p.error_pct) is not None]
        comparison.kinds[kind] = {
            "ops": len(rows),
            "measured_s": measured_s,
            "predicted_s": predicted_s,
            "mape_pct": statistics.fmean(errors) if errors else None,
            "repeat_mape_pct": repeat_mape_pct([p.op for p in rows], [p.measured_s for p in rows]),
            "total_error_pct": percent_error(predicted_s, measured_s),
        }
    free = [p for p in predictions if p.modelled and p.kernel is None]
    comparison.kinds["no-kernel"] = {
        "ops": len(free),
        "measured_s": sum(p.measured_s for p in free),
        "predicted_s": sum(p.predicted_s for p in free),
    }
    for p in predictions:
        if not p.modelled:
            entry = comparison.unmodelled.setdefault(p.op.name, {"count": 0, "measured_s": 0.0, "reason": p.reason})
            entry["count"] += 1
            entry["measured_s"] += p.measured_s
    comparison.unmodelled = dict(sorted(comparison.unmodelled.items()))
    return comparison


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


OTHER_DTYPE = ("ops a step timed from another dtype's points of their op, by bytes (no points of their own "
               "dtype, e.g. bf16 pooling: a 16-bit loop can be several times slower per byte)")
"""The :attr:`Comparison.notes` key counting such ops."""


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


def write_ops_csv(comparison: Comparison, path: Path) -> None:
    """One row per op: name, kind, shapes, step, measured and predicted seconds, status."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "name", "kind", "shapes", "step", "measured_s", "predicted_s", "status"])
        for p in comparison.predictions:
            status = "kernel" if p.kernel is not None else ("no-kernel" if p.modelled else f"unmodelled: {p.reason}")
            writer.writerow(
                [
                    p.op.index,
                    p.op.name,
                    p.op.kind,
                    _shape_text(p.op),
                    p.op.step,
                    f"{p.measured_s:.9g}",
                    f"{p.predicted_s:.9g}",
                    status,
                ]
            )


def repeat_mape_pct(ops: list[OpRecord], measured_s: list[float]) -> float | None:
    """The MAPE the trace's own repeats leave: each op that recurs held against the median
    measured time of its recurrences, the error of a prediction exact to that median.

    An op recurs as the same name and shapes at the same place among those of its step (the n-th
    such call of each profiled step), or, in a trace without steps, as the same name and shapes.
    Ops that do not recur are left out; None when none does. Step-to-step variation (the state of
    the caches and of the other tenants when the op ran) that no cost model of the op can follow:
    the floor under a kind's MAPE (``simhpc compare``'s ``repeats`` column)."""
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    seen: dict[tuple[Any, ...], int] = defaultdict(int)
    for op, seconds in zip(ops, measured_s, strict=True):
        key: tuple[Any, ...] = (op.name, _shape_text(op))
        if op.step is not None:
            seen[(op.step, *key)] += 1
            key = (*key, seen[(op.step, *key)])
        groups[key].append(seconds)
    errors = []
    for times in groups.values():
        if len(times) > 1 and (middle := statistics.median(times)) > 0:
            errors += [abs(middle - seconds) / seconds for seconds in times if seconds > 0]
    return 100.0 * statistics.fmean(errors) if errors else None


def plot_comparison(comparison: Comparison, path: Path) -> None:
    """Predicted vs measured time per kernel-carrying op, log-log, one colour per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 5.6))
    rows = [p for p in comparison.with_kernels() if p.measured_s > 0 and p.predicted_s > 0]
    for kind in sorted({p.op.kind for p in rows}):
        chosen = [p for p in rows if p.op.kind == kind]
        axes.scatter(
            [p.measured_s * 1e6 for p in chosen],
            [p.predicted_s * 1e6 for p in chosen],
            s=14,
            alpha=0.7,
            label=f"{kind} ({len(chosen)})",
        )
    if rows:
        low = min(min(p.measured_s, p.predicted_s) for p in rows) * 1e6 / 1.5
        high = max(max(p.measured_s, p.predicted_s) for p in rows) * 1e6 * 1.5
        axes.plot([low, high], [low, high], color="black", linewidth=0.8, label="predicted = measured")
        axes.fill_between(
            [low, high],
            [low / 1.15, high / 1.15],
            [low * 1.15, high * 1.15],
            color="grey",
            alpha=0.15,
            label="±15 %",
        )
        axes.set_xscale("log")
        axes.set_yscale("log")
    axes.set_xlabel("measured self time per op (µs)")
    axes.set_ylabel("predicted time per op (µs)")
    gemm = comparison.kinds.get("gemm", {}).get("mape_pct")
    step = comparison.step_error_pct
    title = f"{Path(comparison.source).name}: step error " + ("-" if step is None else f"{step:+.1f} %")
    if gemm is not None:
        title += f", GEMM MAPE {gemm:.1f} %"
    axes.set_title(title, fontsize=10)
    if rows:
        axes.legend(fontsize=8, loc="upper left")
    else:
        axes.text(0.5, 0.5, "no op with a kernel was modelled", ha="center", va="center", transform=axes.transAxes)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(figure)


_OS_THREAD = re.compile(r"\bthread \d+\b")
"""torch.profiler's thread names carry the OS thread id (``thread 27218 (python)``)."""


def _track_keys(trace: Trace) -> dict[str, str]:
    """Track label -> the key two traces are aligned by: OS thread ids replaced by the thread's
    order of first appearance, so two captures of one program (two processes) align."""
    keys: dict[str, str] = {}
    ordinals: dict[str, int] = {}
    for label in dict.fromkeys(op.track for op in trace.ops):
        for match in _OS_THREAD.findall(label):
            ordinals.setdefault(match, len(ordinals) + 1)
        keys[label] = _OS_THREAD.sub(lambda m: f"thread #{ordinals[m.group(0)]}", label)
    return keys


def _track_busy(trace: Trace) -> dict[str, float]:
    keys = _track_keys(trace)
    busy: dict[str, float] = defaultdict(float)
    for op in trace.ops:
        if op.parent is None:
            busy[keys[op.track]] += op.duration
    return dict(busy)


_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
"""torch.profiler's step spans, numbered from the start of profiling: compared as one name."""


def _name_totals(trace: Trace) -> dict[str, tuple[int, float]]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for op in trace.ops:
        entry = totals[_PROFILER_STEP.sub("ProfilerStep#*", op.name)]
        entry[0] += 1
        entry[1] += op.duration
    return {name: (int(v[0]), v[1]) for name, v in totals.items()}


def _diff(a: float, b: float) -> float | None:
    return 100.0 * (a - b) / b if b else None


def compare_traces(a: Trace, b: Trace) -> dict[str, Any]:
    """Align two traces by track label and span name.

    Returns:
        ``span_s`` of each, and for ``tracks`` (busy time of top-level spans) and ``names`` (count
        and total duration per span name): one row per key present in either trace, with A's and
        B's values and A's difference from B in %; keys in only one trace are listed as such.
    """
    tracks_a, tracks_b = _track_busy(a), _track_busy(b)
    tracks = []
    for key in list(dict.fromkeys([*tracks_a, *tracks_b])):
        va, vb = tracks_a.get(key), tracks_b.get(key)
        tracks.append(
            {
                "track": key,
                "a_busy_s": va,
                "b_busy_s": vb,
                "diff_pct": _diff(va, vb) if va is not None and vb is not None else None,
            }
        )
    names_a, names_b = _name_totals(a), _name_totals(b)
    names = []
    for key in sorted(set(names_a) | set(names_b)):
        ca, ta = names_a.get(key, (0, 0.0))
        cb, tb = names_b.get(key, (0, 0.0))
        names.append(
            {
                "name": key,
                "a_count": ca,
                "b_count": cb,
                "a_total_s": ta,
                "b_total_s": tb,
                "diff_pct": _diff(ta, tb) if ca and cb else None,
            }
        )
    names.sort(key=lambda row: (-abs(row["a_total_s"] - row["b_total_s"]), row["name"]))
    steps = None
    if a.steps and b.steps:  # the median step, as compare's step error
        sa = statistics.median(s.duration for s in a.steps)
        sb = statistics.median(s.duration for s in b.steps)
        steps = {"a_step_s": sa, "b_step_s": sb, "diff_pct": _diff(sa, sb)}
    return {
        "a": a.source,
        "b": b.source,
        "a_span_s": a.span(),
        "b_span_s": b.span(),
        "span_diff_pct": _diff(a.span(), b.span()),
        "steps": steps,
        "tracks": tracks,
        "names": names,
        "only_in_a": sorted(set(names_a) - set(names_b)),
        "only_in_b": sorted(set(names_b) - set(names_a)),
        "matched_names": len(set(names_a) & set(names_b)),
        "matched_tracks": len(set(tracks_a) & set(tracks_b)),
        "a_skipped_events": dict(a.skipped),
        "b_skipped_events": dict(b.skipped),
    }


def default_blas(trace: Trace, backends: list[str]) -> str:
    """The GEMM backend to predict ``trace`` with: ``torch`` for a torch.profiler export when the
    calibration measured torch's BLAS (PyTorch multiplies with its own MKL / oneDNN), else ``numpy``."""
    return "torch" if trace.format == "torch.profiler" and "torch" in backends else "numpy"


def gemm_shape(kernel: Kernel | None) -> str:
    """``b x m x n x k`` of a GEMM kernel, '' otherwise (for reports)."""
    if isinstance(kernel, Gemm):
        return f"{kernel.batch}x{kernel.m}x{kernel.n}x{kernel.k}"
    return ""
