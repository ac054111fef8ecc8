"""Pipeline-parallel training schedules (registry family ``pipeline``).

A schedule is a small policy object: from the device count ``p``, the micro-batch count ``m``
and its own parameters it returns a :class:`~simhpc.policies.pipeline.plan.PipelinePlan` (the
op list of every device plus the stage -> device maps). The ``pipeline_training`` workload
runs plans on simulated GPUs. Schedules: ``gpipe``, ``1f1b``, ``interleaved`` (:mod:`.classic`),
``chimera``, ``prt``, ``zb-h1`` (:mod:`.zero_bubble`, split backward: ``B`` and ``W`` ops) and
``explicit`` (a plan written out op by op).
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
from simhpc.policies.pipeline.explicit import Explicit, ExplicitParams
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op, PipelinePlan, PlanError
from simhpc.policies.pipeline.prt import Prt, PrtParams
from simhpc.policies.pipeline.timing import PlanTiming, plan_timing
from simhpc.policies.pipeline.zero_bubble import ZeroBubbleH1, ZeroBubbleH1Params

ScheduleConfig = Annotated[
    Union[GPipeParams, OneFOneBParams, InterleavedParams, ChimeraParams, PrtParams,  # noqa: UP007
          ZeroBubbleH1Params, ExplicitParams],
    Field(discriminator="kind"),
]
"""The ``schedule:`` section of a ``pipeline_training`` workload."""

__all__ = [
    "BACKWARD", "FORWARD", "WEIGHT", "Chimera", "Explicit", "GPipe", "Interleaved", "OneFOneB", "Op", "PipelinePlan",
    "PipelineSchedule", "PlanError", "PlanTiming", "Prt", "ScheduleConfig", "ZeroBubbleH1", "plan_timing",
]
