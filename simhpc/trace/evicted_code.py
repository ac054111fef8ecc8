"""What an op pays when the rest of the step has evicted its code.

Every ATen call runs its own code besides the shared dispatcher's: its autograd wrapper, its
argument checks, its kernel's set-up. An op called once a step (a classifier's ``addmm``, the
loss, the optimizer's set-up) finds that code gone when the data the step touched since its
last call is past the last-level cache: it is fetched from memory again, with the branch
predictors' and the TLBs' state. The calibration's ``evicted_call`` point
(``validation/microbench/dispatch.py``) is its cost per call, measured on tiny ops each run once
after a CNN's training step and a fill of 128 MiB: 14-15 us per call on the EPYC Zen 5 guest
against about 1 us repeated (a tiny ``addmm`` 58 us against 2). In the fresh checks' CNN
captures the classifier's ``addmm`` takes 30-40 us over its loop time (``validation/README.md``).

An op's code is taken as evicted when the distinct bytes touched since an op of the same name
last ran exceed the last-level cache. Distinct, not moved: a mixed-precision MLP's step moves
38 MB but re-reads the same 10 MB of weights and gradients, and its once-a-step loss ops take
1-3 us there. The bytes are counted per tensor as :class:`~simhpc.trace.framework_costs.Footprint`
counts them (by shape and element width). The trace is taken as periodic: an op's first call
in the trace follows its last one, as the step before the trace ran like the steps in it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from simhpc.costs.kernels import Kernel, dtype_bytes
from simhpc.costs.model import CostModel
from simhpc.costs.op_arguments import is_shape
from simhpc.costs.opnames import base_name
from simhpc.trace.framework_costs import overhead_of


def last_level_cache(model: CostModel) -> float:
    """The calibrated host's last-level cache in bytes (infinite without a calibration)."""
    calibration = getattr(model.efficiency, "calibration", None)
    return float(calibration.host.last_level_cache) if calibration is not None else math.inf


def charge_evicted_code(predictions: Sequence[Any], model: CostModel) -> None:
    """Add the calibration's ``evicted_call`` cost to every modelled op (``OpPrediction``s, any
    order) whose code the distinct bytes touched since its name last ran evicted (see the module
    docstring); a kernel-free op then costs the warm dispatch cost plus it. Nothing changes
    without the point."""
    extra = overhead_of(model)("evicted_call")
    cache = last_level_cache(model)
    if not extra or math.isinf(cache):
        return
    warm = overhead_of(model)("no_kernel_op")
    ordered = sorted((p for p in predictions if p.modelled), key=lambda p: (p.op.start, p.op.index))
    tensors = [_tensors(p.op, p.kernel) for p in ordered]
    recent = _RecentTensors()
    last_call: dict[str, tuple[int, float]] = {}  # name -> (its position, the bytes moved by then)
    moved = 0.0
    for lap in range(2):  # the first lap only sets up the state the trace's end leaves
        for position, (prediction, touched) in enumerate(zip(ordered, tensors, strict=True)):
            name = base_name(prediction.op.name)
            when = lap * len(ordered) + position
            before = last_call.get(name)
            if lap and before is not None and moved - before[1] > cache and recent.since(before[0], cache) > cache:
                charge = extra if prediction.kernel is not None else warm + extra - prediction.predicted_s
                prediction.predicted_s += charge
                prediction.evicted_code_s = charge
            last_call[name] = (when, moved)
            for key, nbytes in touched:
                recent.touch(key, nbytes, when)
            moved += sum(nbytes for _, nbytes in touched)


def _tensors(op: Any, kernel: Kernel | None) -> list[tuple[Any, float]]:
    """(key, bytes) of the tensors an op with ``kernel`` touches: one per input shape and element
    width, times the inputs of that shape; an op without shapes, its kernel's bytes under a key of
    its own. A kernel-free op touches nothing."""
    if kernel is None:
        return []
    shapes = [tuple(s) for s in op.shapes if s and is_shape(s)]
    if not shapes:
        return [((op.index,), kernel.bytes())]
    width = dtype_bytes(kernel.dtype)
    return [((shape, width), shapes.count(shape) * math.prod(shape) * width) for shape in set(shapes)]


class _RecentTensors:
    """Tensors by their last touch, the latest last: the distinct bytes touched since a given
    moment are those of the tensors touched after it."""

    def __init__(self) -> None:
        self._last: OrderedDict[Any, tuple[int, float]] = OrderedDict()

    def touch(self, key: Any, nbytes: float, when: int) -> None:
        """Record a touch of ``key`` (``nbytes``: the most of it an op touched) at ``when``."""
        previous = self._last.pop(key, None)
        self._last[key] = (when, max(nbytes, previous[1]) if previous else nbytes)

    def since(self, when: int, enough: float) -> float:
        """The distinct bytes touched after ``when``, counted up to just past ``enough``."""
        total = 0.0
        for touched, nbytes in reversed(self._last.values()):
            if touched <= when or total > enough:
                break
            total += nbytes
        return total
