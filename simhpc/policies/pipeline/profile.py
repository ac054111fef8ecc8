"""What a schedule may know of the machine when it plans: per-stage op and transfer times.

Schedules with a closed-form op order (GPipe, 1F1B, Megatron's interleaving, ZB-H1) ignore it.
Schedules whose order comes from a dry run (:mod:`~simhpc.policies.pipeline.greedy`: Chimera,
bidirectional PRT, V-shaped and custom maps) can run the dry run with these times instead of
unit costs, so the order leaves room for the transfers it will meet — what a profiling planner
(PipeDream's, zero-bubble's) does. The figures are estimates for planning: the workload then
runs the plan with its own costs and network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op, PipelinePlan

Route = Callable[[int, int], tuple[float, float]]
"""Latency (s) and bottleneck bandwidth (bytes/s) of the path from one device to another."""


@dataclass(frozen=True)
class StageProfile:
    """Estimated seconds per op and per cross-device boundary; index = stage.

    Attributes:
        forward: forward of one micro-batch through the stage (with any per-op overhead).
        backward: its backward.
        transfer: time from the end of stage ``s``'s forward to its activation being on another
            device (``transfer[s]``, also the gradient's way back); one entry per stage, the
            last one unused. What a boundary costs when the devices are not known, or no
            ``route`` is given.
        boundary_bytes: with ``route``, the bytes each boundary carries (one entry per stage).
        route: the path between two devices, so a boundary costs what its own pair of devices
            takes (a pipeline across nodes crosses a slower network between them).
        input_grad: for plans that split the backward (zero-bubble), the ``B`` op: the input
            gradient only.
        weight_grad: for those plans, the ``W`` op: the weight gradient.
    """

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    transfer: tuple[float, ...]
    boundary_bytes: tuple[float, ...] = ()
    route: Route | None = field(default=None, compare=False)
    input_grad: tuple[float, ...] = ()
    weight_grad: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.forward)
        if n == 0 or len(self.backward) != n or len(self.transfer) != n:
            raise ValueError("a stage profile needs one forward, backward and transfer time per stage")
        if len(self.input_grad) != len(self.weight_grad) or len(self.weight_grad) not in (0, n):
            raise ValueError("a stage profile's input- and weight-gradient times need one entry per stage each")
        if self.route is not None and len(self.boundary_bytes) != n:
            raise ValueError("a stage profile with a route needs the bytes of every boundary")
        if any(not t >= 0.0 for t in (*self.forward, *self.backward, *self.transfer, *self.input_grad,
                                      *self.weight_grad)):
            raise ValueError("stage profile times must be non-negative numbers")
        if sum(self.forward) <= 0.0:
            raise ValueError("a stage profile needs a positive forward time")

    @property
    def stages(self) -> int:
        return len(self.forward)

    @property
    def backward_ratio(self) -> float:
        """Total backward over total forward time."""
        return sum(self.backward) / sum(self.forward)

    def duration(self, op: Op) -> float:
        """Seconds of ``op`` (``F`` or ``B``)."""
        return self.forward[op.stage] if op.kind == FORWARD else self.backward[op.stage]

    def op_seconds(self, plan: PipelinePlan) -> Callable[[Op], float]:
        """Seconds of each op of ``plan``: :meth:`duration`, or where the plan splits the backward,
        ``B`` the input gradient's time and ``W`` the weight gradient's."""
        if not plan.split_backward:
            return self.duration
        if not self.weight_grad:
            raise ValueError(f"{plan.name} splits the backward: the stage profile needs weight-gradient times")
        times = {FORWARD: self.forward, BACKWARD: self.input_grad, WEIGHT: self.weight_grad}
        return lambda op: times[op.kind][op.stage]

    def delay(self, producer: Op, consumer: Op, source: int | None = None, target: int | None = None) -> float:
        """Seconds from ``producer``'s end (on device ``source``) to its output reaching
        ``consumer`` on another device (``target``)."""
        boundary = producer.stage if producer.kind == FORWARD else producer.stage - 1
        if self.route is None or source is None or target is None:
            return self.transfer[boundary]
        latency, bandwidth = self.route(source, target)
        return latency + self.boundary_bytes[boundary] / bandwidth
