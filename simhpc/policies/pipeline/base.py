"""What every pipeline schedule implements: its parameters and a pure ``plan`` method."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from simhpc.policies.pipeline.plan import PipelinePlan
from simhpc.policies.pipeline.profile import StageProfile
from simhpc.scenario.types import Strict


class PipelineSchedule(ABC):
    """A pipeline schedule: decides the stage -> device map and each device's op order.

    Subclasses set ``Params`` (a :class:`Strict` model whose ``kind`` literal is the registered
    name) and are registered with ``@register("pipeline", name)``. They never touch SimPy: the
    plan is a pure function of the parameters, device and micro-batch counts.
    """

    Params: ClassVar[type[Strict]]
    bidirectional: ClassVar[bool] = False

    def __init__(self, params: Any) -> None:
        self.params = params

    @abstractmethod
    def stages(self, devices: int) -> int:
        """Pipeline depth D on ``devices`` devices."""

    def stage_maps(self, devices: int) -> tuple[tuple[int, ...], ...]:
        """Per pipeline, the device of each stage: the plan's ``stage_device``, known before the
        model is cut. By default one pipeline with stage ``d`` on device ``d``."""
        return (tuple(range(devices)),)

    def check(self, devices: int, micro_batches: int) -> None:
        """Raise ValueError if the schedule cannot run ``micro_batches`` on ``devices``."""

    @abstractmethod
    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        """The per-device op lists and stage -> device maps.

        Args:
            devices: number of devices ``p``.
            micro_batches: micro-batches per iteration ``m``.
            backward_cost: a backward's duration relative to a forward, for schedules that
                derive their order from a dry run (the model's ratio; 2 for matmul layers).
        """

    def plan_for(self, devices: int, micro_batches: int, backward_cost: float,
                 profile: StageProfile | None = None) -> PipelinePlan:
        """The plan for a machine described by ``profile`` (what the workload calls).

        By default :meth:`plan`, the profile unused; schedules that derive their order from a
        dry run override it to plan with the profile's op and transfer times.
        """
        return self.plan(devices, micro_batches, backward_cost=backward_cost)
