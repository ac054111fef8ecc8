"""Per-op predictions of a measured trace: each framework op's kernel and predicted time.

:func:`predict_ops` gives every framework op of a trace (within its profiler steps) its kernel
descriptor (:func:`traced_kernel`) and the cost model's time for it, then the charges that
depend on what ran before it (products' and streams' reuse, convolutions' activations, first
touches of fresh pages, evicted code). Ops that cannot be modelled keep the reason;
:mod:`simhpc.trace.compare` sums them into a :class:`~simhpc.trace.compare.Comparison`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from simhpc.costs.kernels import FrameworkOp, Kernel
from simhpc.costs.model import CostModel, Device
from simhpc.costs.op_arguments import OpKernel
from simhpc.costs.opmap import kernel_for
from simhpc.costs.opnames import COMPOSITE, UNCOVERED, base_name
from simhpc.trace.allocations import BlockHistory
from simhpc.trace.conv_activations import charge_convolutions
from simhpc.trace.evicted_code import charge_evicted_code
from simhpc.trace.framework_costs import cost_after
from simhpc.trace.page_charges import add_first_touch
from simhpc.trace.product_reuse import charge_products
from simhpc.trace.records import OpRecord, Trace
from simhpc.trace.step_ops import FRAMEWORK_KINDS
from simhpc.trace.stream_reuse import charge_streams

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
    (:mod:`simhpc.trace.fresh_pages`, :mod:`simhpc.trace.fresh_memory`)."""
    fresh_bytes: float = 0.0
    """The bytes of freshly mapped memory it writes first (what ``first_touch_s`` charges)."""
    heap_growth_s: float = 0.0
    """Of ``first_touch_s``: the part estimated from a plain script's heap growth under the profiler
    (:func:`~simhpc.trace.fresh_memory.largest_heap_writes`; a trace without memory events)."""
    activations_s: float = 0.0
    """Of ``predicted_s``: a convolution's activations fetched from memory
    (:mod:`simhpc.trace.conv_activations`)."""
    evicted_code_s: float = 0.0
    """Of ``predicted_s``: its code fetched again after the step evicted it
    (:mod:`simhpc.trace.evicted_code`)."""

    @property
    def error_pct(self) -> float | None:
        """Signed error of the prediction, % of the measured self time (None if that is 0)."""
        return percent_error(self.predicted_s, self.measured_s)


def percent_error(predicted: float, measured: float) -> float | None:
    """``100 * (predicted - measured) / measured``; None when nothing was measured."""
    return 100.0 * (predicted - measured) / measured if measured > 0 else None


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
    charge_streams(predictions, model, threads)
    charge_convolutions(predictions, model, threads)
    add_first_touch(trace, predictions, model, threads)
    charge_evicted_code(predictions, model, trace.memory)
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
