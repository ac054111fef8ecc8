"""A pipeline plan: the op list of every device plus the stage -> device map of every pipeline.

Vocabulary:

* A **stage** is a contiguous slice of the model's layers (``0 .. stages-1`` from input to loss).
* A **pipeline** is one stage -> device map. Unidirectional schedules have one; bidirectional
  ones (Chimera, bidirectional PRT) have two running in opposite directions, each with its own
  copy of the weights.
* An **op** is one pass of one micro-batch through one stage: ``F`` (forward), ``B`` (backward:
  input gradient, and the weight gradient too unless the plan splits it off) or ``W`` (weight
  gradient only, in zero-bubble plans).

Dependencies (what a valid executor honours):

* ``F(j, s)`` needs ``F(j, s-1)``'s output; ``B(j, s)`` needs ``F(j, s)`` and ``B(j, s+1)``'s
  input gradient (the last stage: only ``F(j, last)``); ``W(j, s)`` needs ``B(j, s)``.
* Ops of one device run one at a time in list order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

FORWARD = "F"
BACKWARD = "B"
WEIGHT = "W"
PASSES = (FORWARD, BACKWARD, WEIGHT)


class Op(NamedTuple):
    """One pass of micro-batch ``micro_batch`` through stage ``stage``."""

    kind: str
    micro_batch: int
    stage: int

    def label(self) -> str:
        """Short text such as ``F3@s5``."""
        return f"{self.kind}{self.micro_batch}@s{self.stage}"


class PlanError(ValueError):
    """A plan is malformed: an op missing, repeated, on the wrong device, or a dependency cycle."""


@dataclass(frozen=True)
class PipelinePlan:
    """What a schedule decides: per-device op lists and the stage -> device maps.

    Attributes:
        name: the schedule that made the plan.
        devices: number of devices ``p``.
        stages: pipeline depth ``D`` (stages per pipeline).
        micro_batches: micro-batches per iteration ``m`` (over all pipelines).
        stage_device: per pipeline, the device of each stage.
        micro_batch_pipeline: the pipeline each micro-batch flows through.
        ops: per device, its ops in execution order.
        split_backward: whether weight gradients are separate ``W`` ops.
    """

    name: str
    devices: int
    stages: int
    micro_batches: int
    stage_device: tuple[tuple[int, ...], ...]
    micro_batch_pipeline: tuple[int, ...]
    ops: tuple[tuple[Op, ...], ...]
    split_backward: bool = False

    @property
    def pipelines(self) -> int:
        """How many pipelines (1: unidirectional, 2: bidirectional)."""
        return len(self.stage_device)

    def device_of(self, op: Op) -> int:
        """The device that runs ``op``."""
        return self.stage_device[self.micro_batch_pipeline[op.micro_batch]][op.stage]

    def expected_ops(self) -> Iterator[Op]:
        """Every op the plan must contain exactly once."""
        kinds = (FORWARD, BACKWARD, WEIGHT) if self.split_backward else (FORWARD, BACKWARD)
        for j in range(self.micro_batches):
            for s in range(self.stages):
                for kind in kinds:
                    yield Op(kind, j, s)

    def hosted_stages(self, device: int) -> list[tuple[int, int]]:
        """(pipeline, stage) pairs whose weights live on ``device``."""
        return [(q, s) for q, mapping in enumerate(self.stage_device)
                for s, d in enumerate(mapping) if d == device]

    def dependencies(self, op: Op) -> list[Op]:
        """The ops whose results ``op`` consumes."""
        kind, j, s = op
        if kind == FORWARD:
            return [Op(FORWARD, j, s - 1)] if s > 0 else []
        if kind == BACKWARD:
            deps = [Op(FORWARD, j, s)]
            if s < self.stages - 1:
                deps.append(Op(BACKWARD, j, s + 1))
            return deps
        return [Op(BACKWARD, j, s)]

    def validate(self) -> None:
        """Check the plan is complete, each op on its stage's device, and free of deadlock.

        Raises:
            PlanError: naming the first problem found.
        """
        if len(self.ops) != self.devices:
            raise PlanError(f"{self.name}: {len(self.ops)} op lists for {self.devices} devices")
        if len(self.micro_batch_pipeline) != self.micro_batches:
            raise PlanError(f"{self.name}: micro_batch_pipeline has {len(self.micro_batch_pipeline)} entries")
        for q, mapping in enumerate(self.stage_device):
            if len(mapping) != self.stages or any(not 0 <= d < self.devices for d in mapping):
                raise PlanError(f"{self.name}: pipeline {q} maps stages to invalid devices {mapping}")
        seen: set[Op] = set()
        pipeline_of, maps = self.micro_batch_pipeline, self.stage_device
        for device, ops in enumerate(self.ops):
            for op in ops:
                if op in seen:
                    raise PlanError(f"{self.name}: {op.label()} appears twice")
                seen.add(op)
                owner = maps[pipeline_of[op.micro_batch]][op.stage]
                if owner != device:
                    raise PlanError(f"{self.name}: {op.label()} listed on device {device}, "
                                    f"its stage lives on device {owner}")
        kinds = 3 if self.split_backward else 2
        if len(seen) != kinds * self.micro_batches * self.stages or any(
                op.kind not in PASSES[:kinds] or not 0 <= op.micro_batch < self.micro_batches
                or not 0 <= op.stage < self.stages for op in seen):
            expected = set(self.expected_ops())
            missing = sorted(expected - seen)
            extra = sorted(seen - expected)
            what = f"missing {missing[0].label()}" if missing else f"unexpected {extra[0].label()}"
            raise PlanError(f"{self.name}: {what}")
        self.__dict__["_order"] = order(self)

    def topological_order(self) -> list[Op]:
        """All ops in an order that respects dependencies and device lists (cached by validate)."""
        cached = self.__dict__.get("_order")
        if cached is None:
            cached = order(self)
            self.__dict__["_order"] = cached
        return cached


def missing_input(op: Op, done: set[Op], stages: int) -> Op | None:
    """The first dependency of ``op`` not in ``done`` (None: ``op`` is ready)."""
    kind, j, s = op
    if kind == FORWARD:
        if s > 0 and (FORWARD, j, s - 1) not in done:
            return Op(FORWARD, j, s - 1)
        return None
    if kind == BACKWARD:
        if (FORWARD, j, s) not in done:
            return Op(FORWARD, j, s)
        if s < stages - 1 and (BACKWARD, j, s + 1) not in done:
            return Op(BACKWARD, j, s + 1)
        return None
    return None if (BACKWARD, j, s) in done else Op(BACKWARD, j, s)


WaitsOn = Callable[[int, int, set[Op]], Op | None]
"""``waits_on(device, index, done)``: an op not yet in ``done`` that the ``index``-th op of
``device``'s list waits for (None: it can run)."""


def order(plan: PipelinePlan) -> list[Op]:
    """A global order of all ops consistent with dependencies and each device's list.

    Raises:
        PlanError: if the device lists and the dependencies form a cycle (the plan deadlocks).
    """
    stages, ops = plan.stages, plan.ops
    return ordered(plan, lambda device, index, done: missing_input(ops[device][index], done, stages))


def ordered(plan: PipelinePlan, waits_on: WaitsOn, deadlock: str = "deadlock") -> list[Op]:
    """All ops of ``plan`` in an order where each comes after the ops ``waits_on`` names and after
    its device's earlier ops.

    Linear time: a device whose next op waits is parked on the op it waits for and woken when that
    one is placed.

    Raises:
        PlanError: ``"<plan>: <deadlock>, devices wait at ..."`` if the waits form a cycle.
    """
    pointer = [0] * plan.devices
    done: set[Op] = set()
    parked: dict[Op, list[int]] = {}
    result: list[Op] = []
    pending = list(range(plan.devices - 1, -1, -1))
    while pending:
        device = pending.pop()
        ops = plan.ops[device]
        index = pointer[device]
        while index < len(ops):
            missing = waits_on(device, index, done)
            if missing is not None:
                parked.setdefault(missing, []).append(device)
                break
            op = ops[index]
            done.add(op)
            result.append(op)
            index += 1
            waiting = parked.pop(op, None)
            if waiting:
                pending.extend(waiting)
        pointer[device] = index
    if len(result) != sum(len(ops) for ops in plan.ops):
        stuck = [ops[pointer[d]].label() for d, ops in enumerate(plan.ops) if pointer[d] < len(ops)]
        raise PlanError(f"{plan.name}: {deadlock}, devices wait at {', '.join(stuck)}")
    return result
