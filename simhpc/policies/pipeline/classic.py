"""The classic unidirectional schedules: GPipe, 1F1B (PipeDream-flush) and Megatron interleaved.

With ``p`` devices, ``m`` micro-batches, uniform stages and no communication their bubble
fractions are ``(p-1)/(m+p-1)`` (GPipe, 1F1B) and ``(p-1)/(v*m+p-1)`` (interleaved, ``v``
stages per device, ``m >= p``): see ``tests/test_pipeline_schedules.py``.
"""

from __future__ import annotations

from typing import Literal

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.greedy import grouped_queues, list_schedule, micro_batch_groups
from simhpc.policies.pipeline.mapping import round_robin
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op, PipelinePlan
from simhpc.registry import register
from simhpc.scenario.types import PositiveInt, Strict


class GPipeParams(Strict):
    """GPipe: every forward of the iteration, then every backward."""

    kind: Literal["gpipe"]


class OneFOneBParams(Strict):
    """1F1B: ``p-d-1`` warm-up forwards on device ``d``, then alternate forward and backward."""

    kind: Literal["1f1b"]


class InterleavedParams(Strict):
    """Megatron-LM interleaved 1F1B: ``v`` model chunks (stages) per device, round-robin."""

    kind: Literal["interleaved"]
    v: PositiveInt = 2
    """Chunks (stages) per device; depth D = v x devices."""


def one_stage_per_device(name: str, devices: int, micro_batches: int,
                         ops: tuple[tuple[Op, ...], ...]) -> PipelinePlan:
    """A plan with stage ``d`` on device ``d``."""
    plan = PipelinePlan(name, devices, devices, micro_batches, (tuple(range(devices)),),
                        (0,) * micro_batches, ops)
    plan.validate()
    return plan


@register("pipeline", "gpipe")
class GPipe(PipelineSchedule):
    """GPipe (Huang et al. 2019): all forwards, then all backwards; holds ``m`` activations."""

    Params = GPipeParams

    def stages(self, devices: int) -> int:
        return devices

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        ops = tuple(
            tuple(Op(FORWARD, j, d) for j in range(micro_batches))
            + tuple(Op(BACKWARD, j, d) for j in range(micro_batches))
            for d in range(devices)
        )
        return one_stage_per_device("gpipe", devices, micro_batches, ops)


@register("pipeline", "1f1b")
class OneFOneB(PipelineSchedule):
    """1F1B / PipeDream-flush (Narayanan et al. 2021): same bubble as GPipe, at most ``p-d``
    activations on device ``d``."""

    Params = OneFOneBParams

    def stages(self, devices: int) -> int:
        return devices

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        lists = []
        for d in range(devices):
            warmup = min(devices - d - 1, micro_batches)
            ops = [Op(FORWARD, j, d) for j in range(warmup)]
            for j in range(micro_batches - warmup):
                ops += [Op(FORWARD, warmup + j, d), Op(BACKWARD, j, d)]
            ops += [Op(BACKWARD, j, d) for j in range(micro_batches - warmup, micro_batches)]
            lists.append(tuple(ops))
        return one_stage_per_device("1f1b", devices, micro_batches, tuple(lists))


def megatron_limits(stage_device: tuple[int, ...], devices: int, group: int | None = None) -> list[float]:
    """Activations each device may hold: Megatron-LM's warm-up depth + 1, for any stage map.

    Megatron: ``(v-1)*g + 2*(p-d-1)`` warm-up forwards on device ``d`` with ``v > 1`` chunks and
    micro-batch groups of ``g`` (default ``g = p``), ``p-d-1`` with one. Generalised: ``p-d-1``
    becomes the number of stages after the device's last one, ``D-1-last(d)``.
    """
    group = devices if group is None else group
    stages = len(stage_device)
    limits = []
    for d in range(devices):
        mine = [s for s, owner in enumerate(stage_device) if owner == d]
        after = stages - 1 - mine[-1]
        warmup = (len(mine) - 1) * group + 2 * after if len(mine) > 1 else after
        limits.append(float(warmup + 1))
    return limits


def forwards_first(op: Op) -> int:
    """Priority of a queue head: a forward before a backward (a forward waits only on its limit)."""
    return 0 if op.kind == FORWARD else 1


def grouped_plan(name: str, stage_device: tuple[int, ...], devices: int, micro_batches: int,
                 backward_cost: float) -> PipelinePlan:
    """Megatron's interleaved order and warm-up for ``stage_device``.

    Micro-batches go in groups of ``p``, a remainder joining the last group
    (:func:`~simhpc.policies.pipeline.greedy.micro_batch_groups`); the warm-up depth follows the
    largest group, which a remainder makes ``(v-1)(m mod p)`` chunk activations deeper.
    """
    forward, backward = grouped_queues(stage_device, devices, micro_batches, group=devices)
    largest = max(len(g) for g in micro_batch_groups(micro_batches, devices))
    limits = megatron_limits(stage_device, devices, max(largest, devices))
    return list_schedule(name, devices, (stage_device,), (0,) * micro_batches, forwards_first,
                         backward_cost=backward_cost, queues=[*forward, *backward], limits=[limits])


@register("pipeline", "interleaved")
class Interleaved(PipelineSchedule):
    """Megatron-LM interleaved 1F1B (Narayanan et al. 2021): device ``d`` runs stages
    ``d, d+p, ..., d+(v-1)p``; the bubble shrinks by ``v``, point-to-point traffic grows by ``v``.

    The op order is Megatron's (micro-batches in groups of ``p``, chunk by chunk, a remainder
    joining the last group); any ``m`` runs, the bubble formula holds for every ``m >= p``. With
    ``m < p`` no schedule reaches it (a device runs out of work before its first micro-batch
    comes back round for the next chunk).
    """

    Params = InterleavedParams

    def stages(self, devices: int) -> int:
        return self.params.v * devices

    def stage_maps(self, devices: int) -> tuple[tuple[int, ...], ...]:
        return (round_robin(devices, self.stages(devices)),)

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        (mapping,) = self.stage_maps(devices)
        return grouped_plan("interleaved", mapping, devices, micro_batches, backward_cost)
