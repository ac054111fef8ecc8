"""Pipeline-parallel training schedules (registry family ``pipeline``).

A schedule is a small policy object: from the device count ``p``, the micro-batch count ``m``
and its own parameters it returns a :class:`~simhpc.policies.pipeline.plan.PipelinePlan` (the
op list of every device plus the stage -> device maps). The ``pipeline_training`` workload
runs plans on simulated GPUs.
"""

from typing import Annotated, Union

from pydantic import Field

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.chimera import Chimera, ChimeraParams
from simhpc.policies.pipeline.classic import (
    GPipe,
    GPipeParams,
    Interleaved,
    InterleavedParams,
    OneFOneB,
    OneFOneBParams,
)
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op, PipelinePlan, PlanError
from simhpc.policies.pipeline.prt import Prt, PrtParams
from simhpc.policies.pipeline.timing import PlanTiming, plan_timing

ScheduleConfig = Annotated[
    Union[GPipeParams, OneFOneBParams, InterleavedParams, ChimeraParams, PrtParams],  # noqa: UP007
    Field(discriminator="kind"),
]
"""The ``schedule:`` section of a ``pipeline_training`` workload."""

__all__ = [
    "BACKWARD", "FORWARD", "Chimera", "GPipe", "Interleaved", "OneFOneB", "Op", "PipelinePlan",
    "PipelineSchedule", "PlanError", "PlanTiming", "Prt", "ScheduleConfig", "plan_timing",
]
