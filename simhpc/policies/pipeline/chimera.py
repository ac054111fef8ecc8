"""Chimera (Li & Hoefler, SC'21): two pipelines in opposite directions over the same devices.

The "down" pipeline maps stage ``s`` to device ``s``, the "up" pipeline to device ``p-1-s``;
each device holds two stages (one per direction, so twice the weights). The first ``ceil(m/2)``
micro-batches flow down, the rest up; ``m`` counts micro-batches over both directions.

Bubble convention: with ``m`` micro-batches in total (``m/2`` per direction), ``m`` even and at
least ``p``, uniform stages, no communication and a backward as long as a forward (the paper's
figures count equal forward and backward slots), the bubble fraction is ``(p-2)/(2m+p-2)``
exactly. With a backward twice a forward the bubble is larger: the paper's count treats a
backward slot like a forward one.

The op order comes from greedy list scheduling (:func:`~simhpc.policies.pipeline.greedy.list_schedule`):
forwards before backwards, later stages first, at most ``max_inflight`` micro-batches of each
direction in flight (default ``p``; a device then holds at most ``2p`` activations). The dry run
that yields the order uses unit costs; given the workload's
:class:`~simhpc.policies.pipeline.profile.StageProfile` (``dry_run: profile``) it also runs one
with the profiled op and transfer times and one with the op times alone, and keeps whichever
order the profile estimates fastest (a dry run that knows the transfers leaves room for them, but
a greedy order is not always better for knowing more).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.greedy import list_schedule, profiled_order
from simhpc.policies.pipeline.mapping import mirror
from simhpc.policies.pipeline.plan import FORWARD, Op, PipelinePlan
from simhpc.policies.pipeline.profile import StageProfile
from simhpc.registry import register
from simhpc.scenario.types import PositiveInt, Strict

DryRun = Literal["profile", "unit"]
"""Costs of the dry runs that order a greedy plan: ``unit`` (forward 1, backward the model's
ratio, free transfers) or ``profile`` (also the workload's op times with and without its transfer times; the
order the profile estimates fastest is kept)."""


class ChimeraParams(Strict):
    """Chimera with two pipelines (down and up); depth = number of devices."""

    kind: Literal["chimera"]
    max_inflight: PositiveInt | None = None
    """Micro-batches of each direction in flight (default: the number of devices)."""
    dry_run: DryRun = "profile"
    """Order the ops from unit-cost dry runs only, or from the better of those and a profiled one."""


def forward_first(op: Op) -> tuple[int, int, int]:
    """Chimera's greedy priority: forwards first, deeper forwards first, shallower backwards first."""
    if op.kind == FORWARD:
        return (0, -op.stage, op.micro_batch)
    return (1, op.stage, op.micro_batch)


def split_directions(micro_batches: int) -> tuple[int, ...]:
    """Pipeline of each micro-batch: the first half down (0), the rest up (1)."""
    down = (micro_batches + 1) // 2
    return tuple(0 if j < down else 1 for j in range(micro_batches))


def bidirectional_plan(name: str, down: Sequence[int], devices: int, micro_batches: int,
                       inflight: float, backward_cost: float, profile: StageProfile | None = None) -> PipelinePlan:
    """Two opposite pipelines over ``down``'s stage layout, greedily scheduled.

    Args:
        name: the schedule's name.
        down: the down pipeline's stage -> device map (the up one is its mirror image).
        devices: number of devices.
        micro_batches: micro-batches over both directions.
        inflight: micro-batches of each direction in flight at most.
        backward_cost: backward / forward time of the unit-cost dry run.
        profile: op and transfer times; when given, dry runs with them (and with the op times
            alone) are tried too and the order the profile estimates fastest kept (:func:`~.greedy.profiled_order`).
    """
    maps = (tuple(down), mirror(down, devices))
    pipelines = split_directions(micro_batches)

    def greedy(**costs: Any) -> PipelinePlan:
        return list_schedule(name, devices, maps, pipelines, forward_first, backward_cost=backward_cost,
                             pipeline_limits=(inflight, inflight), **costs)

    return profiled_order(greedy, profile)


@register("pipeline", "chimera")
class Chimera(PipelineSchedule):
    """Bidirectional pipeline on ``p`` (even) devices, depth ``p``."""

    Params = ChimeraParams
    bidirectional = True

    def stages(self, devices: int) -> int:
        return devices

    def check(self, devices: int, micro_batches: int) -> None:
        if devices % 2:
            raise ValueError(f"chimera needs an even number of devices, got {devices}")
        if micro_batches < 2:
            raise ValueError("chimera needs at least 2 micro-batches (one per direction)")

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0,
             profile: StageProfile | None = None) -> PipelinePlan:
        self.check(devices, micro_batches)
        inflight = self.params.max_inflight or devices
        return bidirectional_plan("chimera", range(devices), devices, micro_batches, float(inflight),
                                  backward_cost, profile)

    def plan_for(self, devices: int, micro_batches: int, backward_cost: float,
                 profile: StageProfile | None = None) -> PipelinePlan:
        use = profile if self.params.dry_run == "profile" else None
        return self.plan(devices, micro_batches, backward_cost, profile=use)
