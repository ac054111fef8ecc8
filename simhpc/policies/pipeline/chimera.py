"""Chimera (Li & Hoefler, SC'21): two pipelines in opposite directions over the same devices.

The "down" pipeline maps stage ``s`` to device ``s``, the "up" pipeline to device ``p-1-s``;
each device holds two stages (one per direction, so twice the weights). The first ``ceil(m/2)``
micro-batches flow down, the rest up; ``m`` counts micro-batches over both directions.

Bubble convention: with ``m`` micro-batches in total (``m/2`` per direction), ``m`` even and at
least ``p``, uniform stages, no communication and a backward as long as a forward (the paper's
figures count equal forward and backward slots), the bubble fraction is ``(p-2)/(2m+p-2)``
exactly. With a backward twice a forward the bubble is larger: the paper's count treats a
backward slot like a forward one.

The op order comes from greedy list scheduling
(:func:`~simhpc.policies.pipeline.greedy.list_schedule`): forwards before backwards, later stages
first, at most ``max_inflight`` micro-batches of each direction in flight (default ``p``; a device
then holds at most ``2p`` activations). The planner (:func:`bidirectional_plan`) also tries one and
two fewer in flight, 1F1B's backwards-first rule, a bound on each device's activations instead of
on the micro-batches in flight (with the deepest backward first too), and Megatron's order within
each direction, and keeps the fastest order that holds no more activations of a direction than
``max_inflight`` micro-batches'. "Fastest" is a dry run with unit costs or, given the workload's
:class:`~simhpc.policies.pipeline.profile.StageProfile` (``dry_run: profile``), the profile's
estimate; the orders are then also dry-run with the profiled op and transfer times and with the op
times alone (a dry run that knows the transfers leaves room for them, but a greedy order is not
always better for knowing more). With a backward as long as a forward none beats the greedy rule's
order, which meets the formula above; with a backward twice a forward the others are sometimes a
step faster (``p = 16, m = 14``: 72 against 75 forward-times).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Literal

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.classic import megatron_limits
from simhpc.policies.pipeline.greedy import fastest_order, grouped_queues, list_schedule, micro_batch_groups
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


def deeper_backward_first(op: Op) -> tuple[int, int, int]:
    """Forwards first, deeper first; then the backward with the most backward stages still ahead
    of it (the deepest) first."""
    if op.kind == FORWARD:
        return (0, -op.stage, op.micro_batch)
    return (1, -op.stage, op.micro_batch)


def backward_first(op: Op) -> tuple[int, int, int]:
    """Greedy 1F1B priority: backwards first (shallower first), then deeper forwards."""
    if op.kind == FORWARD:
        return (1, -op.stage, op.micro_batch)
    return (0, op.stage, op.micro_batch)


def split_directions(micro_batches: int) -> tuple[int, ...]:
    """Pipeline of each micro-batch: the first half down (0), the rest up (1)."""
    down = (micro_batches + 1) // 2
    return tuple(0 if j < down else 1 for j in range(micro_batches))


def direction_queues(maps: Sequence[tuple[int, ...]], pipelines: Sequence[int], devices: int,
                     group: int) -> tuple[list[list[Op]], list[list[float]]]:
    """Megatron's interleaved order within each direction, for :func:`list_schedule`'s ``queues``.

    Each direction's micro-batches go in groups of ``group`` (:func:`grouped_queues`); returns
    per device and direction a forward and a backward queue, and per direction and device
    Megatron's warm-up depth + 1 for the largest group (:func:`megatron_limits`).
    """
    queues: list[list[Op]] = []
    limits: list[list[float]] = []
    for q, mapping in enumerate(maps):
        mine = [j for j, pipeline in enumerate(pipelines) if pipeline == q]
        size = min(group, len(mine))
        forward, backward = grouped_queues(mapping, devices, len(mine), size)
        queues += [[Op(op.kind, mine[op.micro_batch], op.stage) for op in queue] for queue in (*forward, *backward)]
        largest = max(len(g) for g in micro_batch_groups(len(mine), size))
        limits.append(megatron_limits(mapping, devices, largest))
    return queues, limits


def holds_at_most(plan: PipelinePlan, inflight: float) -> bool:
    """Whether no device ever holds more than ``inflight`` micro-batches' activations of a
    direction: ``inflight`` x (that direction's stages on the device)."""
    for device, ops in enumerate(plan.ops):
        bound = Counter(q for q, _ in plan.hosted_stages(device))
        held: Counter[int] = Counter()
        for op in ops:
            q = plan.micro_batch_pipeline[op.micro_batch]
            held[q] += 1 if op.kind == FORWARD else -1
            if held[q] > inflight * bound[q]:
                return False
    return True


def bidirectional_plan(name: str, down: Sequence[int], devices: int, micro_batches: int,
                       inflight: float, backward_cost: float, profile: StageProfile | None = None) -> PipelinePlan:
    """Two opposite pipelines over ``down``'s stage layout: the fastest of several greedy orders.

    Candidates, in order (the first wins a tie):

    * Chimera's rule (:func:`forward_first`) with at most ``inflight`` micro-batches of each
      direction in flight, then with one and two fewer: fewer in flight can leave fewer of a deep
      pipeline's forwards waiting on a busy device;
    * 1F1B's rule (:func:`backward_first`) with the same limits: with a backward twice a
      forward, the deeper pipeline of PRT at ``p = 4, k = 4, m = 16`` then leaves a bubble of 0.035
      where Chimera's rule left 0.063 (Chimera's own order 0.059);
    * both rules, and forwards first with the deepest backward first
      (:func:`deeper_backward_first`), with micro-batches entering freely but each device holding
      at most ``inflight`` micro-batches' activations of a direction per stage of it
      (:func:`list_schedule`'s ``limits``): in flight, a micro-batch of a deep pipeline holds
      activations on some of its stages only, so counting micro-batches leaves memory unused while
      forwards wait (PRT at ``p = 4, k = 2, m = 16``, backward twice a forward: 0.068 -> 0.030);
      the deepest backward has the longest chain of backwards still ahead of it (PRT at
      ``p = 4, k = 3, m = 18``, backward three times a forward: 0.057 -> 0.018, Chimera 0.053);
    * Megatron's interleaved order within each direction (groups of ``p/2`` and of ``p``
      micro-batches; :func:`direction_queues`), the two directions interleaved by the same rule,
      with Megatron's warm-up limits and without them.

    Each is dry-run with unit costs and, given ``profile``, with its times
    (:func:`~.greedy.fastest_order`). Only candidates that hold at most ``inflight`` micro-batches'
    activations of each direction on each device are kept (:func:`holds_at_most`).

    Args:
        name: the schedule's name.
        down: the down pipeline's stage -> device map (the up one is its mirror image).
        devices: number of devices.
        micro_batches: micro-batches over both directions.
        inflight: micro-batches of each direction in flight at most under Chimera's rule; every
            candidate holds no more activations than that many micro-batches leave.
        backward_cost: backward / forward time of the unit-cost dry run.
        profile: op and transfer times for the dry runs and the estimate that picks the order.
    """
    maps = (tuple(down), mirror(down, devices))
    pipelines = split_directions(micro_batches)
    schedule = partial(list_schedule, name, devices, maps, pipelines, backward_cost=backward_cost)
    most = min(inflight, float(max(pipelines.count(0), pipelines.count(1))))
    in_flight = [limit for limit in (inflight, most - 1, most - 2) if limit >= 1]
    builders = [partial(schedule, priority=priority, pipeline_limits=(limit, limit))
                for priority in (forward_first, backward_first) for limit in in_flight]
    held = [[inflight * mapping.count(device) for device in range(devices)] for mapping in maps]
    builders += [partial(schedule, priority=priority, limits=held)
                 for priority in (forward_first, backward_first, deeper_backward_first)]
    for group in sorted({max(1, devices // 2), devices}):
        queues, warmup = direction_queues(maps, pipelines, devices, group)
        builders += [partial(schedule, priority=forward_first, queues=queues, limits=limits)
                     for limits in (warmup, None)]
    return fastest_order(builders, profile, backward_cost, fits=lambda plan: holds_at_most(plan, inflight))


@register("pipeline", "chimera")
class Chimera(PipelineSchedule):
    """Bidirectional pipeline on ``p`` (even) devices, depth ``p``."""

    Params = ChimeraParams
    bidirectional = True

    def stages(self, devices: int) -> int:
        return devices

    def stage_maps(self, devices: int) -> tuple[tuple[int, ...], ...]:
        return tuple(range(devices)), mirror(range(devices), devices)

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
