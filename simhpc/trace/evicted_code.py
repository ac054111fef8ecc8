"""What an op pays when the rest of the step has evicted its code.

Every ATen call runs its own code besides the shared dispatcher's: its autograd wrapper, its
argument checks, its kernel's set-up. An op called once a step (a classifier's ``addmm``, the
loss, the optimizer's set-up) finds that code gone when the data the step touched since its
last call is past the last-level cache: it is fetched from memory again, with the branch
predictors' and the TLBs' state. The calibration's ``evicted_call`` point
(``validation/microbench/dispatch.py``) is its cost per call, measured on tiny ops each run once
after a CNN's training step and a fill of 128 MiB: 10-15 us per call on the EPYC Zen 5 guest
against about 1 us repeated (a tiny ``addmm`` 58 us against 2). In the fresh checks' CNN
captures the classifier's ``addmm`` takes 30-40 us over its loop time (``validation/README.md``).

An op's code is taken as evicted when the distinct bytes touched since an op of the same name
last ran exceed the last-level cache. Distinct, not moved: a mixed-precision MLP's step moves
38 MB but re-reads the same 10 MB of weights and gradients, and its once-a-step loss ops take
1-3 us there (charged by the bytes moved, its 2-thread capture went +13.9 -> +26.5 %). Two counts
bound them from below, and the larger is taken: the tensors the ops read, one per shape and
element width (as :class:`~simhpc.trace.framework_costs.Footprint` counts them), and, where the
trace has memory events, the blocks allocated, one per address. The first misses a network's
activations of one shape, each kept for the backward in a block of its own (a ResNet's), the second
the tensors no op allocates in the step (weights). The trace is taken as periodic: an op's first
call in it follows its last one, as the step before the trace ran like the steps in it.

A BLAS product also finds the library's own code evicted when as many distinct bytes passed since
the last product (of any name): the first product after a step's other kernels pays the probe's
product's own extra (``product_extra_s``, measured after the probe's network step alone) instead of
the mean, less the cold call's constant its prediction holds already
(:meth:`~simhpc.costs.calibration.CalibratedEfficiency.cold_call_parts`, one thread's, as the probe
ran). On the EPYC Zen 5 guest a CNN's classifier ``addmm`` took 25-35 us less at 1 and 2 threads
with a tiny product run just before it, and no less with an elementwise op there; the probe's
``addmm`` paid 29-40 us after the network's step, 54-58 us after the fill too (``validation/README.md``,
session 52). A product right after another one finds the library's code warm and pays the mean.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from simhpc.costs.kernels import Gemm, Kernel, dtype_bytes
from simhpc.costs.model import CostModel
from simhpc.costs.opnames import base_name
from simhpc.trace.framework_costs import last_level_cache, overhead_of, tensor_bytes
from simhpc.trace.readers import MemoryEvent


def charge_evicted_code(predictions: Sequence[Any], model: CostModel, memory: Sequence[MemoryEvent] = ()) -> None:
    """Add the calibration's ``evicted_call`` cost to every modelled op (``OpPrediction``s, any
    order) whose code the distinct bytes touched since its name last ran evicted (see the module
    docstring); a kernel-free op then costs the warm dispatch cost plus it, and the first BLAS
    product after the library's code was evicted its probe product's cost instead. Nothing changes
    without the point."""
    extra = overhead_of(model)("evicted_call")
    cache = last_level_cache(model)
    if not extra or math.isinf(cache):
        return
    warm = overhead_of(model)("no_kernel_op")
    product_extra = _product_extra(model)
    ordered = sorted((p for p in predictions if p.modelled), key=lambda p: (p.op.start, p.op.index))
    tensors = [_tensors(p.op, p.kernel) for p in ordered]
    allocations = [event for event in memory if event.size > 0]
    allocated_by = [bisect.bisect_left(allocations, p.op.start, key=lambda e: e.time) for p in ordered]  # rising
    by_shape, by_block = _RecentTensors(2 * len(ordered)), _RecentTensors(2 * len(ordered))
    last_call: dict[str, tuple[int, float]] = {}  # name -> (when, the bytes moved by then)
    moved = 0.0  # an upper bound of the distinct bytes, cheap to test first

    def evicted_since(before: tuple[int, float] | None) -> bool:
        return (before is not None and moved - before[1] > cache
                and max(by_shape.since(before[0]), by_block.since(before[0])) > cache)

    for lap in range(2):  # the first lap only sets up the state the trace's end leaves
        applied = 0
        for position, (prediction, touched) in enumerate(zip(ordered, tensors, strict=True)):
            when = lap * len(ordered) + position
            for event in allocations[applied:allocated_by[position]]:
                by_block.touch(event.address, event.size, when)
                moved += event.size
            applied = allocated_by[position]
            name = base_name(prediction.op.name)
            product = _blas_product(prediction.kernel)
            if lap and product and product_extra is not None and evicted_since(last_call.get(PRODUCTS)):
                charge = product_extra
            elif lap and evicted_since(last_call.get(name)):
                charge = extra if prediction.kernel is not None else warm + extra - prediction.predicted_s
            else:
                charge = 0.0
            if charge:
                prediction.predicted_s += charge
                prediction.evicted_code_s = charge
            last_call[name] = (when, moved)
            if product:
                last_call[PRODUCTS] = (when, moved)
            for key, nbytes in touched:
                by_shape.touch(key, nbytes, when)
                moved += nbytes


PRODUCTS = "BLAS products"
"""The key under which :func:`charge_evicted_code` records the last product of any name."""


def _blas_product(kernel: Kernel | None) -> bool:
    """Whether ``kernel`` is a product the BLAS runs (not a convolution's)."""
    return isinstance(kernel, Gemm) and not kernel.conv


def _product_extra(model: CostModel) -> float | None:
    """What the first product after the library's code was evicted pays over its prediction: the
    calibration's ``evicted_product`` less one thread's cold call constant; None without either."""
    extra = overhead_of(model)("evicted_product")
    parts = getattr(model.efficiency, "cold_call_parts", lambda threads: None)(1)
    if not extra or parts is None:
        return None
    return max(0.0, extra - parts[0])


def _tensors(op: Any, kernel: Kernel | None) -> list[tuple[Any, float]]:
    """(key, bytes) of the tensors an op with ``kernel`` touches: one per input shape and element
    width (:func:`~simhpc.trace.framework_costs.tensor_bytes`); an op without shapes, its kernel's
    bytes under a key of its own. A kernel-free op touches nothing."""
    if kernel is None:
        return []
    width = dtype_bytes(kernel.dtype)
    return [((shape, width), nbytes) for shape, nbytes in tensor_bytes(op, kernel).items()] or [
        ((op.index,), kernel.bytes())]


class _RecentTensors:
    """Tensors by their last touch: the distinct bytes touched after a given moment are those of
    the tensors whose last touch came after it (a Fenwick tree of bytes over the moments
    ``0 .. moments - 1``)."""

    def __init__(self, moments: int) -> None:
        self._last: dict[Any, tuple[int, float]] = {}
        self._tree = [0.0] * (moments + 1)
        self._total = 0.0

    def touch(self, key: Any, nbytes: float, when: int) -> None:
        """Record a touch of ``key`` (``nbytes``: the most of it one touch covered) at ``when``."""
        previous = self._last.get(key)
        if previous is not None:
            self._add(previous[0], -previous[1])
            nbytes = max(nbytes, previous[1])
        self._last[key] = (when, nbytes)
        self._add(when, nbytes)

    def since(self, when: int) -> float:
        """The distinct bytes touched after ``when``."""
        total, index = 0.0, when + 1
        while index > 0:
            total += self._tree[index]
            index -= index & -index
        return self._total - total

    def _add(self, when: int, nbytes: float) -> None:
        self._total += nbytes
        index = when + 1
        while index < len(self._tree):
            self._tree[index] += nbytes
            index += index & -index
