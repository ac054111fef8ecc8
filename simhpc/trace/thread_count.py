"""The intra-op thread count a torch.profiler trace ran with, when the trace does not record it.

A torch.profiler export says nothing of ``torch.get_num_threads()`` (``validation/traces/capture.py``
adds it as ``num_threads``), and a product on two threads takes about half its one-thread time:
predicting a one-thread capture at all of a 2-core host's threads put its step 42 % under the
measured one. :func:`infer_threads` picks, among the thread counts the calibration measured,
the one whose predictions of the trace's large products (the ops the model prices as a product
from the calibration's thread-dependent points: GEMMs, convolutions, fused attention and recurrent
layers such as oneDNN's LSTM, that it puts at ``MIN_PRODUCT_S`` or more on one thread, where the
parallel speed-up is large and dispatch costs negligible) have a median log error nearest zero;
each such op votes alike, whatever its kind. The predictions are the calibration's loop times
(``cache="warm"``): the cold call's constant (100-140 us a product on one thread here, less on two)
put a 1-thread trace's many products of 100-150 us over the threshold, predicted at twice their
times on one thread, and a 1-thread ViT block, rotary attention block and decoder layer were
taken for 2-thread ones. This is the one place where ``simhpc compare`` reads measured durations, to
choose a setting, never an op's prediction; the report says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.kernels import Attention, Gemm, Recurrent
from simhpc.costs.model import CostModel, Device
from simhpc.trace.op_predictions import traced_kernel
from simhpc.trace.readers import Trace

MIN_PRODUCT_S = 200e-6
"""Products predicted at least this long on one thread decide the thread count."""
MIN_PRODUCTS = 3
"""Fewer such products decide nothing."""
PRODUCT_KINDS = ("gemm", "conv", "recurrent")
"""Op kinds whose kernels can be products (attention ops are of kind ``gemm``)."""
PRODUCT_KERNELS = (Gemm, Attention, Recurrent)
"""Kernels timed from the calibration's per-thread-count product surfaces: each votes alike."""


LOOSE_FIT = math.log(1.25)
"""Products that ran between two counts' predictions and are off by more than this (median) at the nearer
make the chosen count a guess (:func:`loose_fit_warning`)."""


def thread_misfits(trace: Trace, model: CostModel, device: Device,
                   candidates: Sequence[int]) -> dict[int, float] | None:
    """Per count in ``candidates``, the median log of measured over predicted time of the trace's large
    products, or None when the trace has fewer than ``MIN_PRODUCTS`` of them (see the module docstring)."""
    warm = getattr(model.efficiency, "warm", None)
    loops = CostModel(warm()) if warm is not None else model
    products = []
    for op in trace.ops:
        if op.kind not in PRODUCT_KINDS or op.self_time <= 0 or (trace.steps and op.step is None):
            continue
        kernel = traced_kernel(trace, op).kernel
        if isinstance(kernel, PRODUCT_KERNELS) and loops.duration(kernel, device, 1) >= MIN_PRODUCT_S:
            products.append((op.self_time, kernel))
    if len(products) < MIN_PRODUCTS or not candidates:
        return None
    return {threads: statistics.median(math.log(measured / loops.duration(kernel, device, threads))
                                       for measured, kernel in products)
            for threads in sorted(candidates)}


def best_fit(misfits: dict[int, float]) -> int:
    """The count whose median log error is nearest zero (the smaller on a tie)."""
    return min(sorted(misfits), key=lambda threads: abs(misfits[threads]))


def infer_threads(trace: Trace, model: CostModel, device: Device, candidates: Sequence[int]) -> int | None:
    """The count in ``candidates`` whose predictions fit the trace's large products best, or None
    when the trace has fewer than ``MIN_PRODUCTS`` of them (see the module docstring)."""
    misfits = thread_misfits(trace, model, device, candidates)
    return None if misfits is None else best_fit(misfits)


def loose_fit_warning(misfits: dict[int, float]) -> str | None:
    """A warning when the trace's large products ran between two counts' predictions, off by over
    ``LOOSE_FIT`` at the nearer (a speed-up a busy host gave only in part): the count is then a guess.
    Products slower than every count's prediction (cold, or a slower host) leave no doubt of the count."""
    chosen = best_fit(misfits)
    between = any(error * misfits[chosen] < 0 for error in misfits.values())
    if not between or abs(misfits[chosen]) <= LOOSE_FIT:
        return None
    fits = ", ".join(f"{threads} thread{'s' if threads > 1 else ''} {math.exp(error):.2f}x"
                     for threads, error in misfits.items())
    return (f"the trace's large products ran between the thread counts' predictions (measured over predicted, "
            f"median: {fits}); compared at {chosen}, the nearer: give --threads if you know the count")


def calibrated_thread_counts(cal: Calibration) -> list[int]:
    """The counts a trace's thread count is chosen among: those the calibration measured products
    at, and all its host's cores."""
    return sorted({*cal.thread_counts("gemm"), cal.host.cores})
