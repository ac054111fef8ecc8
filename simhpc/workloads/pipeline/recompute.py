"""Which stages recompute their activations (``recompute: auto``), from each device's peak memory.

A device's memory under :class:`~simhpc.workloads.pipeline.engine.PipelineExecutor` depends only
on its own op list, not on timing: the states of the stages it hosts, then in list order each
forward's stash and each recomputing backward's rebuilt activations, both freed when the stage's
last pass of that micro-batch ends. :func:`peak_memory` walks the lists; :func:`fit_memory`
makes stages recompute, one at a time, until every device fits or every stage recomputes.
"""

from __future__ import annotations

from collections.abc import Callable

from simhpc.policies.pipeline.plan import BACKWARD, WEIGHT, PipelinePlan
from simhpc.workloads.pipeline.stages import StageCosts


def peak_memory(plan: PipelinePlan, costs: StageCosts) -> list[float]:
    """Each device's peak bytes running ``plan`` with ``costs``, as the engine counts them."""
    last_pass = WEIGHT if plan.split_backward else BACKWARD
    peaks = []
    for device, ops in enumerate(plan.ops):
        held = sum(costs.state_bytes[s] for _, s in plan.hosted_stages(device))
        peak = held
        for kind, _, s in ops:
            held += costs.allocated_by(kind, s)
            peak = max(peak, held)
            if kind == last_pass:
                held -= costs.released(s)
        peaks.append(peak)
    return peaks


def fit_memory(plan: PipelinePlan, costs_with: Callable[[tuple[bool, ...]], StageCosts], capacity: float,
               flags: tuple[bool, ...]) -> tuple[bool, ...]:
    """More stages recomputing (from ``flags``) until every device of ``plan`` fits ``capacity``.

    While a device is over, of the stages it hosts that do not recompute yet, the one that frees the
    most bytes per micro-batch per second of forward rerun recomputes next (the lower stage on a
    tie). Stops when every device fits or none of an over-full device's stages is left.

    Args:
        plan: the plan (its op order sets each device's peak).
        costs_with: the stage costs with a recompute flag per stage.
        capacity: usable bytes per device.
        flags: the stages that recompute already.
    """
    flags = tuple(flags)
    plain = costs_with((False,) * len(flags))
    saving = [(stash - kept) / max(forward, 1e-30) for stash, kept, forward
              in zip(plain.stash_bytes, costs_with((True,) * len(flags)).stash_bytes, plain.forward_s)]
    while True:
        peaks = peak_memory(plan, costs_with(flags))
        candidates = sorted({s for device, peak in enumerate(peaks) if peak > capacity
                             for _, s in plan.hosted_stages(device) if not flags[s]})
        if not candidates:
            return flags
        best = max(candidates, key=lambda s: (saving[s], -s))
        flags = tuple(flag or s == best for s, flag in enumerate(flags))
