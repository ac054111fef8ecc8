"""Closed-form timing of a plan: when each op would start and end, without SimPy.

Given a duration per op and a delay per cross-device dependency, every op starts at the later of
its device finishing the previous op in its list and its inputs arriving. This is the reference
the SimPy workload must match when communication is contention-free, and the fast way to test
schedules (the bubble formulas) without building a machine. With ``p2p`` other than
``overlapped`` the senders wait for their sends (:mod:`~simhpc.policies.pipeline.blocking`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simhpc.policies.pipeline.blocking import P2P, blocking_order, waiting_senders
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op, PipelinePlan


@dataclass(frozen=True)
class PlanTiming:
    """Start and end time of every op; the iteration's makespan and bubble fraction.

    The bubble fraction is ``1 - busy / (devices x makespan)``: the share of the devices' time,
    from the first op to the last, during which they compute nothing.
    """

    start: dict[Op, float]
    end: dict[Op, float]
    busy: tuple[float, ...]
    makespan: float

    @property
    def bubble_fraction(self) -> float:
        """Idle share of ``devices x makespan``."""
        if self.makespan <= 0:
            return 0.0
        return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan)


def plan_timing(
    plan: PipelinePlan,
    duration: Callable[[Op], float],
    delay: Callable[[Op, Op, int, int], float] | None = None,
    p2p: P2P = "overlapped",
) -> PlanTiming:
    """Time ``plan`` with op durations and cross-device delays.

    Args:
        plan: a valid plan.
        duration: seconds of an op (on its device).
        delay: seconds from the end of a dependency to its consumer's input being ready, given the
            two ops and their devices; called only when the devices differ (default: none).
        p2p: ``blocking`` or ``rendezvous``: the senders wait for their sends
            (:mod:`~simhpc.policies.pipeline.blocking`).

    Raises:
        PlanError: if the plan deadlocks.
    """
    start: dict[Op, float] = {}
    end: dict[Op, float] = {}
    free = [0.0] * plan.devices
    busy = [0.0] * plan.devices
    device_of = {op: device for device, ops in enumerate(plan.ops) for op in ops}
    last = plan.stages - 1
    sends = waiting_senders(plan, p2p)
    for op in blocking_order(plan, sends) if sends else plan.topological_order():
        device = device_of[op]
        ready = posted = free[device]  # a rendezvous: the receive of op's input is posted as the previous op ends
        if sends is not None and (sent := sends.previous.get(op)) in sends.remote_consumer:  # its send, waited for
            consumer, opened = sends.remote_consumer[sent], sends.posted_after(sent)
            ready = max(posted, end[opened] if opened is not None else 0.0)  # the transfer starts
            if delay is not None:
                ready += delay(sent, consumer, device, device_of[consumer])
        kind, j, s = op
        if kind == FORWARD:
            deps: tuple[tuple[str, int, int], ...] = ((FORWARD, j, s - 1),) if s else ()
        elif kind == BACKWARD:
            deps = ((FORWARD, j, s), (BACKWARD, j, s + 1)) if s < last else ((FORWARD, j, s),)
        else:
            deps = ((BACKWARD, j, s),)
        for dep in deps:
            arrival = end[dep]
            if device_of[dep] != device:
                if sends is not None and sends.rendezvous:
                    arrival = max(arrival, posted)
                if delay is not None:
                    arrival += delay(Op(*dep), op, device_of[dep], device)
            if arrival > ready:
                ready = arrival
        length = duration(op)
        start[op] = ready
        end[op] = ready + length
        free[device] = ready + length
        busy[device] += length
    makespan = max(end.values(), default=0.0)
    return PlanTiming(start, end, tuple(busy), makespan)
