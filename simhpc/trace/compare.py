"""Hold a measured trace against the cost model.

:func:`compare_trace` predicts every op of a measured trace from its kernel descriptor
(:func:`simhpc.costs.opmap.kernel_for`) and a cost model — never from the measured durations —
and sums per step. Each op's own work is compared with its *self* time (its duration less its
children's), so nested ops are never counted twice: ``aten::linear`` carries no kernel when the
trace shows its ``aten::addmm`` child; ``aten::addmm``'s self time excludes the bias
``aten::copy_`` below it, which is predicted on its own. Ops that cannot be modelled are counted
and listed with the reason. The structure of a profiled step is :mod:`simhpc.trace.step_ops`;
what per-op predictions cannot follow, :mod:`simhpc.trace.irregularities`; two traces held
against each other, :mod:`simhpc.trace.against`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from simhpc.costs.kernels import Gemm
from simhpc.costs.model import CostModel, Device
from simhpc.trace.framework_costs import cost_after, subtree_footprint
from simhpc.trace.fresh_pages import PAGE_BYTES, capture_page_faults
from simhpc.trace.irregularities import CONCURRENT_OPS, UNEVEN_STEPS, concurrent_ops, outside_ops, uneven_steps
from simhpc.trace.op_predictions import OpPrediction, percent_error, predict_ops
from simhpc.trace.page_charges import first_touch_basis, heap_faults_if_fresh, unmap_seconds
from simhpc.trace.records import PROFILER_SPAN, OpRecord, Trace
from simhpc.trace.step_ops import (
    FRAMEWORK_KINDS,
    StepWork,
    count_between,
    engine_called,
    engine_node_starts,
    step_work,
    top_level_ops,
    transition_before,
)

LARGE_PRODUCT_S = 0.5e-3
"""Measured self time from which a BLAS product counts in :attr:`Comparison.product_speed_ratio`."""
LARGE_PRODUCTS = 5
"""Products of that size a trace needs for the ratio."""
SPEED_RATIO_BOUNDS = (0.83, 1.2)
"""Outside these, ``simhpc compare`` warns that the calibration may describe another machine: the
committed captures' ratios against their own calibrations lie within 0.86-1.19 (but the Zen 4's
2-thread LeNet, 1.25), the two Zen 5 guests' against each other's 0.72-0.81 and 1.28-1.39."""
OTHER_DTYPE = ("ops a step timed from another dtype's points of their op, by bytes (no points of their own "
               "dtype, e.g. bf16 pooling: a 16-bit loop can be several times slower per byte)")
"""The :attr:`Comparison.notes` key counting such ops."""


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
    cost, beyond what the op is charged already (its memory events); not in ``predicted_step_s``.
    What glibc's default settings expose a step to (a plain process's measured excess is of this
    order: validation/README.md); None where the trace records its allocator settings."""
    unmap_s: float = 0.0
    """Predicted time per step giving written pages back to the kernel: the blocks glibc mapped on
    their own, unmapped as they are freed, and in a plain script's trace the pages the heap's trims
    return (:func:`~simhpc.trace.page_charges.unmap_seconds`); part of ``predicted_step_s``."""
    heap_growth_unmap_s: float = 0.0
    """Of ``unmap_s``: the pages ``heap_growth_step_s`` charges faults for, given back by the trims."""
    capture_page_faults_per_step: float | None = None
    """Page faults a step that ``capture.py`` counted in its process while recording
    (:func:`~simhpc.trace.fresh_pages.capture_page_faults`), to hold ``fresh_pages_per_step`` against."""
    steps_from: str | None = None
    """What marked the steps (:attr:`~simhpc.trace.readers.Trace.steps_from`): ``ProfilerStep``, or
    in a trace without ``ProfilerStep`` events ``Optimizer.step`` or ``repetition``; None without steps."""
    first_touch_basis: str = "shapes"
    """What said which pages are fresh: ``memory events`` (the trace's allocations,
    :mod:`simhpc.trace.fresh_pages`), ``shapes`` (blocks of 32 MiB or more,
    :mod:`simhpc.trace.fresh_memory`) or ``shapes and heap growth`` (those and, in a plain script's
    trace, the blocks of each profiled step's largest heap size,
    :func:`~simhpc.trace.fresh_memory.largest_heap_writes`)."""
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
    def heap_growth_step_s(self) -> float:
        """Of ``first_touch_step_s``: the page faults estimated from the heap's growth under the
        profiler (``first_touch_basis`` ``shapes and heap growth``), 0 otherwise."""
        return sum(p.heap_growth_s for p in self.predictions) / max(1, self.steps)

    @property
    def fresh_pages_per_step(self) -> float:
        """Pages a step the ops write fresh, as charged (``first_touch_step_s``'s pages)."""
        return sum(math.ceil(p.fresh_bytes / PAGE_BYTES) for p in self.predictions) / max(1, self.steps)

    @property
    def activations_step_s(self) -> float:
        """Predicted time per step of the convolutions' activations fetched from memory (part of
        ``predicted_step_s``)."""
        return sum(p.activations_s for p in self.predictions) / max(1, self.steps)

    @property
    def evicted_code_step_s(self) -> float:
        """Predicted time per step of ops' code fetched again after the step evicted it (part of
        ``predicted_step_s``: :mod:`simhpc.trace.evicted_code`)."""
        return sum(p.evicted_code_s for p in self.predictions) / max(1, self.steps)

    @property
    def unmodelled_step_s(self) -> float:
        """Measured self time per step of the ops not modelled (``unmodelled``): not in
        ``predicted_step_s``, so a step with much of it reads low (a ``torch.compile`` graph's
        fused kernels, recorded as one call)."""
        return sum(p.measured_s for p in self.predictions if not p.modelled) / max(1, self.steps)

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

    def large_products(self) -> list[OpPrediction]:
        """The BLAS products of :data:`LARGE_PRODUCT_S` or more, measured: bound by arithmetic, they
        take their loop time within a few percent in a step (the calibration's cold charges are
        1-3 % of them), so their median ratio to the prediction tells the machine's speed."""
        return [p for p in self.predictions if isinstance(p.kernel, Gemm) and not p.kernel.conv
                and p.measured_s >= LARGE_PRODUCT_S and p.predicted_s > 0]

    @property
    def product_speed_ratio(self) -> float | None:
        """The median of measured over predicted time of :meth:`large_products`; None with fewer
        than :data:`LARGE_PRODUCTS` of them. Far from 1, the trace ran on a faster or slower machine
        than the calibration describes (a Zen 5 guest at 4.5 GHz against one at 3.75: 0.7-0.8)."""
        large = self.large_products()
        if len(large) < LARGE_PRODUCTS:
            return None
        return statistics.median(p.measured_s / p.predicted_s for p in large)

    def summary(self, worst: int = 10) -> dict[str, Any]:
        """The machine-readable report (``simhpc compare --json``)."""
        gemm = self.kinds.get("gemm", {})
        return {
            "source": self.source,
            "threads": self.threads,
            "steps": self.steps,
            "steps_from": self.steps_from,
            "measured_total_s": self.measured_total_s,
            "predicted_total_s": self.predicted_total_s,
            "measured_step_s": self.measured_step_s,
            "predicted_step_s": self.predicted_step_s,
            "total_error_pct": percent_error(self.predicted_total_s, self.measured_total_s),
            "step_error_pct": self.step_error_pct,
            "outside_ops_s": self.outside_ops_s,
            "first_touch_s": self.first_touch_step_s,
            "first_touch_basis": self.first_touch_basis,
            "heap_growth_s": self.heap_growth_step_s,
            "fresh_pages_per_step": self.fresh_pages_per_step,
            "capture_page_faults_per_step": self.capture_page_faults_per_step,
            "conv_activations_s": self.activations_step_s,
            "evicted_code_s": self.evicted_code_step_s,
            "call_gaps_s": self.call_gaps_s,
            "unmap_s": self.unmap_s,
            "heap_growth_unmap_s": self.heap_growth_unmap_s,
            "heap_faults_if_fresh_s": self.heap_faults_if_fresh_s,
            "gemm_mape_pct": gemm.get("mape_pct"),
            "product_speed_ratio": self.product_speed_ratio,
            "gemm_repeat_mape_pct": gemm.get("repeat_mape_pct"),
            "ops_total": self.ops_total,
            "ops_modelled": self.ops_modelled,
            "ops_unmodelled": self.ops_total - self.ops_modelled,
            "unmodelled_step_s": self.unmodelled_step_s,
            "kinds": self.kinds,
            "unmodelled": self.unmodelled,
            "skipped_events": self.skipped_events,
            "notes": self.notes,
            "worst_ops": [_op_row(p) for p in self.worst(worst)],
        }


def shape_text(op: OpRecord) -> str:
    """An op's input shapes as one string (``[64, 10] [10, 4096]``), for reports and grouping."""
    return " ".join(str(s) for s in op.shapes if s not in ([], "")) if op.shapes else ""


def _op_row(prediction: OpPrediction) -> dict[str, Any]:
    op = prediction.op
    return {
        "index": op.index,
        "name": op.name,
        "kind": op.kind,
        "shapes": shape_text(op),
        "step": op.step,
        "measured_s": prediction.measured_s,
        "predicted_s": prediction.predicted_s,
        "error_pct": prediction.error_pct,
    }


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
    nodes, parameters = engine_node_starts(trace)
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
                work = StepWork(moved - moved_then, count_between(nodes, since, op.start),
                                count_between(parameters, since, op.start))
            charged = transition_s(transition, work)
            last[transition] = (moved, op.start)
        if charged is None:
            charged = cost_after(model, "engine_gap" if engine_called(trace, op) else "call_gap", before)
        total += charged
        moved += touched[op.index]
        before, previous = touched[op.index], op
    return total


def _per_step(count: int | None, steps: int) -> float | None:
    return None if count is None else count / max(1, steps)


def compare_trace(trace: Trace, model: CostModel, device: Device, threads: int) -> Comparison:
    """Predict ``trace``'s ops and step time with ``model`` on ``device`` using ``threads`` cores."""
    predictions = predict_ops(trace, model, device, threads)
    if trace.steps:
        steps = len(trace.steps)
        measured = statistics.median(s.duration for s in trace.steps)
    else:
        steps = 1
        # From the first op to the last: the profiler's own span of the whole capture is not one.
        roots = [op for op in trace.ops if op.parent is None and op.category != PROFILER_SPAN] or trace.ops
        measured = max(op.end for op in roots) - min(op.start for op in roots)
    call_gaps = _call_gaps(trace, predictions, model) / steps
    unmaps, growth_unmaps = (seconds / steps for seconds in unmap_seconds(trace, predictions, model, threads))
    predicted = sum(p.predicted_s for p in predictions) / steps + call_gaps + unmaps
    total = sum(s.duration for s in trace.steps) if trace.steps else measured
    skipped = dict(trace.skipped)
    if trace.steps:
        outside_steps = sum(1 for op in trace.ops if op.kind in FRAMEWORK_KINDS and op.step is None)
        if outside_steps:
            skipped["framework ops outside every profiler step"] = outside_steps
    heap_faults = heap_faults_if_fresh(trace, predictions, model, threads, steps)
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
                            outside_ops(trace), call_gaps, heap_faults, unmaps, growth_unmaps,
                            steps_from=trace.steps_from if trace.steps else None,
                            first_touch_basis=first_touch_basis(trace, predictions),
                            capture_page_faults_per_step=_per_step(capture_page_faults(trace), len(trace.steps)),
                            skipped_events=skipped, notes=notes)
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
        key: tuple[Any, ...] = (op.name, shape_text(op))
        if op.step is not None:
            seen[(op.step, *key)] += 1
            key = (*key, seen[(op.step, *key)])
        groups[key].append(seconds)
    errors = []
    for times in groups.values():
        if len(times) > 1 and (middle := statistics.median(times)) > 0:
            errors += [abs(middle - seconds) / seconds for seconds in times if seconds > 0]
    return 100.0 * statistics.fmean(errors) if errors else None


def default_blas(trace: Trace, backends: list[str]) -> str:
    """The GEMM backend to predict ``trace`` with: ``torch`` for a torch.profiler export when the
    calibration measured torch's BLAS (PyTorch multiplies with its own MKL / oneDNN), else ``numpy``."""
    return "torch" if trace.format == "torch.profiler" and "torch" in backends else "numpy"


