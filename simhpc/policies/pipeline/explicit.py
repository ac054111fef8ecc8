"""``explicit``: a plan given op by op, as another tool planned it or a real run executed it.

The scenario lists each device's ops in the order it runs them, by label (``F3@s5``: the forward
of micro-batch 3 through stage 5; ``B`` its backward; ``W`` the weight gradient of a split
backward), and the stage -> device map of each pipeline. simhpc checks the plan (every op once,
on its stage's device, no deadlock) and runs it unchanged: a schedule exported from a framework
replayed on a simulated machine, or the plan a measured run executed
(``validation/traces/pipeline_capture.py``), which a schedule that plans from the measured
figures might order otherwise.

    schedule:
      kind: explicit
      stage_device: [[0, 1, 0, 1]]          # 4 stages round-robin on 2 devices
      ops: [[F0@s0, F0@s2, B0@s2, B0@s0], [F0@s1, F0@s3, B0@s3, B0@s1]]
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.plan import WEIGHT, Op, PipelinePlan, PlanError
from simhpc.registry import register
from simhpc.scenario.types import Strict

LABEL = re.compile(r"([FBW])(\d+)@s(\d+)")
"""An op's label: pass, micro-batch, stage (:meth:`Op.label`)."""


class ExplicitParams(Strict):
    """A plan written out: per device its ops in order, per pipeline its stage -> device map."""

    kind: Literal["explicit"]
    ops: Annotated[list[list[str]], Field(min_length=2)]
    """Per device, its op labels in the order it runs them (``F<micro-batch>@s<stage>``, ``B...``,
    ``W...``)."""
    stage_device: Annotated[list[list[Annotated[int, Field(ge=0)]]], Field(min_length=1, max_length=2)]
    """Per pipeline (one, or two running in opposite directions), the device of each stage."""
    micro_batch_pipeline: list[Annotated[int, Field(ge=0, le=1)]] | None = None
    """The pipeline each micro-batch flows through (default: all the first)."""

    @field_validator("ops")
    @classmethod
    def _labels(cls, ops: list[list[str]]) -> list[list[str]]:
        for device, labels in enumerate(ops):
            for label in labels:
                if not LABEL.fullmatch(label):
                    raise ValueError(f"device {device}: {label!r} is not an op label such as 'F3@s5', 'B0@s2', 'W1@s0'")
        return ops

    @field_validator("stage_device")
    @classmethod
    def _same_depth(cls, maps: list[list[int]]) -> list[list[int]]:
        if not maps[0] or any(len(mapping) != len(maps[0]) for mapping in maps):
            raise ValueError("every pipeline needs the same number of stages, at least one")
        return maps


def parse_op(label: str) -> Op:
    """The op a label such as ``F3@s5`` names."""
    match = LABEL.fullmatch(label)
    if match is None:
        raise ValueError(f"{label!r} is not an op label")
    kind, micro_batch, stage = match.groups()
    return Op(kind, int(micro_batch), int(stage))


def written_out(plan: PipelinePlan) -> dict[str, Any]:
    """The ``explicit`` schedule section that runs ``plan`` as it is."""
    return {"kind": "explicit", "ops": [[op.label() for op in ops] for ops in plan.ops],
            "stage_device": [list(mapping) for mapping in plan.stage_device],
            "micro_batch_pipeline": list(plan.micro_batch_pipeline)}


@register("pipeline", "explicit")
class Explicit(PipelineSchedule):
    """The plan the scenario writes out, checked and run as it is."""

    Params = ExplicitParams

    def stages(self, devices: int) -> int:
        return len(self.params.stage_device[0])

    def stage_maps(self, devices: int) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(mapping) for mapping in self.params.stage_device)

    def check(self, devices: int, micro_batches: int) -> None:
        self.plan(devices, micro_batches)

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        params = self.params
        if len(params.ops) != devices:
            raise PlanError(f"explicit: {len(params.ops)} op lists for {devices} devices")
        pipelines = [0] * micro_batches if params.micro_batch_pipeline is None else params.micro_batch_pipeline
        if len(pipelines) != micro_batches or max(pipelines, default=0) >= len(params.stage_device):
            raise PlanError(f"explicit: micro_batch_pipeline needs {micro_batches} entries (the micro-batches), "
                            f"each a pipeline below {len(params.stage_device)}")
        ops = tuple(tuple(parse_op(label) for label in labels) for labels in params.ops)
        plan = PipelinePlan("explicit", devices, self.stages(devices), micro_batches, self.stage_maps(devices),
                            tuple(pipelines), ops, split_backward=any(op.kind == WEIGHT for row in ops for op in row))
        plan.validate()
        return plan
