"""PRT, pipeline reuse: a pipeline deeper than the number of devices (CLUSTER 2025).

The model is cut into ``D = k x p`` stages and each of the ``p`` devices runs ``k`` of them,
placed by a stage -> device map: ``round_robin`` (stage ``s`` on device ``s mod p``; every
boundary crosses devices; with ``groups: n``, each of ``n`` groups of devices, e.g. a node's
GPUs, is gone round in turn, so the pipeline crosses between nodes ``n - 1`` times),
``v_shape`` (zig-zag; each turn keeps two consecutive stages on one device, and each device
holds an early and a late stage) or a custom list.

Why a deeper pipeline can be faster on the same devices, in this simulator:

* **Smaller bubbles.** Fill and drain take ``(p-1)`` stage-times on the critical path; a stage
  now does ``1/k`` of a device's work, so the idle time per iteration shrinks by about ``k``
  (Megatron's interleaving is the round-robin special case).
* **Finer balance.** Real layers are not uniform (embedding and head layers, ResNet stage
  widths). Cutting into ``k x p`` stages lets the per-device sums come out more even than a cut
  into ``p`` stages can.

What it costs, also simulated: ``k`` times more cross-device activation and gradient transfers
(latency + bytes over the node's links), ``k`` times more ops, each with the scenario's fixed
per-stage overhead (kernel launch and scheduling), and more in-flight activations. Hence the
gain falls as ``m`` grows (the baseline's bubble shrinks anyway), as the per-stage overhead or
link latency grows, and has an optimum in ``k``.

Directions: ``uni`` runs one pipeline; ``bi`` runs two in opposite directions over the same
cut, the second on the mirrored devices (stage ``s`` on device ``p-1-d(s)``: Chimera's idea on the
deeper pipeline; each device holds ``2k`` stages, on an even number of devices never both copies
of one stage).

Op orders: the unidirectional round-robin plan uses Megatron's interleaved order and warm-up
(``order: grouped``); V-shaped, grouped round-robin and custom maps use greedy list scheduling
with at most ``D-s`` activations on stage ``s`` (1F1B's bound on the deeper pipeline;
``order: greedy``).
Bidirectional plans come from the same planner as Chimera's
(:func:`~simhpc.policies.pipeline.chimera.bidirectional_plan`): the fastest of Chimera's greedy rule
(forwards first, deeper first) and of 1F1B's (backwards first) with at most ``max_inflight``
micro-batches of each direction in flight (default ``p``, as for Chimera) or one or two fewer, or
with each device's activations bounded instead (then also with the deepest backward first), and of
Megatron's interleaved order within each direction with the two directions interleaved by that
rule. Every candidate keeps a device's activations of a direction within ``max_inflight``
micro-batches' worth (``k x max_inflight`` stage activations, each ``1/k`` of a depth-``p`` stage):
at most ``2 k p`` in all, the bytes of Chimera's bound (``2p`` depth-``p`` stages) at the same
``max_inflight``. With no communication, uniform stages, a backward as long as a forward and ``m`` a
multiple of ``p/2`` this reaches ``(p-2)/(2km+p-2)``: Chimera's bubble with ``k`` times the ops per
device (``tests/test_prt_bidirectional.py``); other ``m`` leave more bubble (0.158 against 0.111 at
``p = 6, k = 2, m = 8``), still no more than Chimera's. With a backward twice a forward the greedy
rule alone left more than Chimera's (0.068 against 0.059 at ``p = 4, k = 2, m = 16``, 0.030 with the
device bound; 0.063 at ``k = 4``, 0.035 with the backwards-first candidates); with a backward three
times a forward too (0.057 against 0.053 at ``p = 4, k = 3, m = 18``, 0.018 with the deepest backward
first). Over p in {4, 6, 8, 12}, k in {2, 3, 4}, even ``m`` from p to 32 and a backward 1 to 4
forwards, none of 795 cases is now above Chimera's bubble (34 were before session 29). Greedy rule
alone, the deeper pipeline lost to Chimera at some ``m`` it had beaten with fewer micro-batches
(``p = 8, k = 3``: +30.6 % at ``m = 8``, -0.7 % at ``m = 12``); Megatron's order within each
direction keeps the gain falling with ``m`` (+27.1, +18.3, +11.3 % at ``m`` = 8, 10, 12).

The V-shaped map's greedy order is not a tuned schedule: the fastest of the backwards-first,
forwards-first and deepest-backward-first rules, each with at most ``D-s`` activations on stage
``s``. With free communication, uniform stages and a backward twice a forward, it leaves a bubble
of 0.368 at ``p = 8, k = 2, m = 8`` (interleaved formula 0.304, 1F1B 0.467). The backwards-first
rule alone was throttled by the per-stage limits as ``m`` grew (0.185 at ``p = 4, k = 2, m = 64``,
against 1F1B's 0.045; the forwards-first rules 0.030). With ``order: grouped`` it is about 0.4 at
any ``m``. The round-robin map with Megatron's order is the schedule the reproduction uses.

Greedy orders (bidirectional, V-shaped, custom) come from a unit-cost dry run; with
``dry_run: profile`` (default) dry runs with the workload's profiled op times, with and without its
transfer times, are also made and the order the profile estimates fastest is kept
(:func:`~simhpc.policies.pipeline.greedy.fastest_order`), as for Chimera.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.chimera import (
    DryRun,
    backward_first,
    bidirectional_plan,
    deeper_backward_first,
    forward_first,
)
from simhpc.policies.pipeline.classic import grouped_plan
from simhpc.policies.pipeline.greedy import ScheduleStall, fastest_order, list_schedule
from simhpc.policies.pipeline.mapping import custom, mirror, round_robin, v_shape
from simhpc.policies.pipeline.plan import PipelinePlan
from simhpc.policies.pipeline.profile import StageProfile
from simhpc.registry import register
from simhpc.scenario.types import PositiveInt, Strict


class PrtParams(Strict):
    """Pipeline reuse: depth ``k x devices``, a stage map and a direction."""

    kind: Literal["prt"]
    k: PositiveInt = 2
    """Reuse factor: stages per device (per direction)."""
    mapping: Literal["round_robin", "v_shape"] | list[int] = "round_robin"
    """Stage -> device map: a named layout or one device index per stage."""
    groups: PositiveInt = 1
    """Round-robin map only: the devices as this many consecutive groups (nodes), each gone round
    ``k`` times by its own consecutive part of the stages before the next group's part."""
    direction: Literal["uni", "bi"] = "uni"
    order: Literal["auto", "grouped", "greedy"] = "auto"
    """Unidirectional op order: Megatron-style groups or greedy (auto: grouped for round-robin)."""
    max_inflight: PositiveInt | None = None
    """Bidirectional only: micro-batches of each direction in flight (default: the number of devices)."""
    dry_run: DryRun = "profile"
    """Greedy orders from unit-cost dry runs only, or from the better of those and a profiled one."""


@register("pipeline", "prt")
class Prt(PipelineSchedule):
    """Pipeline reuse: ``k`` stages per device, unidirectional or bidirectional."""

    Params = PrtParams

    @property
    def bidirectional(self) -> bool:  # type: ignore[override]
        return self.params.direction == "bi"

    def stages(self, devices: int) -> int:
        return self.params.k * devices

    @property
    def _megatron_map(self) -> bool:
        """Whether the map is Megatron's interleaving (plain round-robin), whose order is known."""
        return self.params.mapping == "round_robin" and self.params.groups == 1

    def stage_map(self, devices: int) -> tuple[int, ...]:
        """The stage -> device map of the (down) pipeline."""
        stages = self.stages(devices)
        mapping = self.params.mapping
        if self.params.groups > 1 and mapping != "round_robin":
            raise ValueError("groups: only the round_robin map splits the devices into groups")
        if mapping == "round_robin":
            return round_robin(devices, stages, self.params.groups)
        if mapping == "v_shape":
            return v_shape(devices, stages)
        return custom(mapping, devices, stages)

    def stage_maps(self, devices: int) -> tuple[tuple[int, ...], ...]:
        down = self.stage_map(devices)
        return (down, mirror(down, devices)) if self.bidirectional else (down,)

    def check(self, devices: int, micro_batches: int) -> None:
        self.stage_map(devices)
        if self.bidirectional and devices % 2:
            raise ValueError(f"bidirectional prt needs an even number of devices (the middle one would hold "
                             f"both copies of its stages), got {devices}")
        if self.bidirectional and micro_batches < 2:
            raise ValueError("bidirectional prt needs at least 2 micro-batches (one per direction)")

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0,
             profile: StageProfile | None = None) -> PipelinePlan:
        self.check(devices, micro_batches)
        mapping = self.stage_map(devices)
        stages = len(mapping)
        if self.bidirectional:
            inflight = self.params.max_inflight or devices
            return bidirectional_plan("prt-bi", mapping, devices, micro_batches, float(inflight), backward_cost,
                                      profile)
        order = self.params.order
        if order == "auto":
            order = "grouped" if self._megatron_map else "greedy"
        if order == "grouped":
            try:
                return grouped_plan("prt-uni", mapping, devices, micro_batches, backward_cost)
            except ScheduleStall:
                if self._megatron_map:
                    raise
                raise ScheduleStall("order: grouped deadlocks on this stage map (Megatron's warm-up depths "
                                    "assume the round-robin map); use order: greedy") from None

        greedy = partial(list_schedule, "prt-uni", devices, (mapping,), (0,) * micro_batches,
                         stage_limits=lambda q, s: float(stages - s), backward_cost=backward_cost)
        return fastest_order([partial(greedy, priority=priority)
                              for priority in (backward_first, forward_first, deeper_backward_first)],
                             profile, backward_cost)

    def plan_for(self, devices: int, micro_batches: int, backward_cost: float,
                 profile: StageProfile | None = None) -> PipelinePlan:
        use = profile if self.params.dry_run == "profile" else None
        return self.plan(devices, micro_batches, backward_cost, profile=use)
