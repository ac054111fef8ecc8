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
forwards before backwards, later stages first, at most ``p`` activations per device (Chimera's
bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.greedy import list_schedule
from simhpc.policies.pipeline.mapping import reverse
from simhpc.policies.pipeline.plan import FORWARD, Op, PipelinePlan
from simhpc.registry import register
from simhpc.scenario.types import Strict


class ChimeraParams(Strict):
    """Chimera with two pipelines (down and up); depth = number of devices."""

    kind: Literal["chimera"]


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
                       limit: float, backward_cost: float) -> PipelinePlan:
    """Two opposite pipelines over ``down``'s stage layout, greedily scheduled."""
    maps = (tuple(down), reverse(down))
    return list_schedule(name, devices, maps, split_directions(micro_batches), forward_first,
                         limits=[limit] * devices, backward_cost=backward_cost)


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

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        self.check(devices, micro_batches)
        return bidirectional_plan("chimera", range(devices), devices, micro_batches,
                                  float(devices), backward_cost)
