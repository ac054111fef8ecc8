"""Deriving per-device op orders from a unit-cost dry run of the pipeline.

Schedules without a closed-form op order are built by simulating the pipeline once with
abstract costs (a forward takes 1, a backward ``backward_cost``, no communication) and
recording the order in which each device starts its ops. The workload then runs those orders
with the real costs. Two engines:

* :func:`queued_schedule` — every device has a fixed forward queue and a fixed backward queue
  (Megatron-LM's interleaved order, generalised to any stage map). When idle it starts the head
  of one queue: the forward head first if its input is there and the device holds fewer
  in-flight micro-batch activations than its limit, else the backward head if ready. With the
  limit equal to 1F1B's or Megatron's warm-up depth + 1 this reproduces those schedules exactly.
* :func:`list_schedule` — greedy list scheduling: an idle device starts, among *all* its ready
  ops, the admissible one of smallest priority key. Used for Chimera, bidirectional PRT and
  stage maps without a natural queue order (V-shaped, custom).

A forward is admissible only while the device (and, optionally, the stage) holds fewer in-flight
activations than its limit: the knob that trades bubbles for memory, as 1F1B's warm-up does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op, PipelinePlan
from simhpc.policies.pipeline.profile import StageProfile
from simhpc.policies.pipeline.timing import plan_timing

Priority = Callable[[Op], tuple[float, ...]]
"""Sort key of an op: the smallest admissible ready op runs first."""

Duration = Callable[[Op], float]
"""Dry-run duration of an op."""

Delay = Callable[[Op, Op], float]
"""Dry-run delay from a producer's end to its output reaching a consumer on another device."""

_UNLIMITED = float("inf")


class ScheduleStall(RuntimeError):
    """The dry run could not progress: every device waits (in-flight limits too low)."""


class _DryRun:
    """Shared state of a unit-cost dry run: readiness, in-flight counts, the event heap."""

    def __init__(self, stages: int, maps: list[tuple[int, ...]], pipeline_of: Sequence[int],
                 devices: int, backward_cost: float, duration: Duration | None = None) -> None:
        self.stages = stages
        self.maps = maps
        self.pipeline_of = pipeline_of
        unit = {FORWARD: 1.0, BACKWARD: backward_cost}
        self.duration: Duration = duration if duration is not None else (lambda op: unit[op.kind])
        self.forward_done: set[tuple[int, int]] = set()
        self.backward_done: set[tuple[int, int]] = set()
        self.inflight = [0] * devices
        self.stage_inflight: dict[tuple[int, int], int] = {}
        self.idle = [True] * devices
        self.orders: list[list[Op]] = [[] for _ in range(devices)]
        self.events: list[tuple[float, int, int, Op]] = []
        self.arrivals: list[tuple[float, int, Op]] = []
        """Inputs in transit: (arrival time, sequence, consumer op)."""
        self.arrived: list[Op] = []
        """Ops whose input arrived at the last :meth:`advance`."""
        self.now = 0.0
        self._sequence = 0

    def device(self, op: Op) -> int:
        return self.maps[self.pipeline_of[op.micro_batch]][op.stage]

    def key(self, op: Op) -> tuple[int, int]:
        return self.pipeline_of[op.micro_batch], op.stage

    def is_ready(self, op: Op) -> bool:
        kind, j, s = op
        if kind == FORWARD:
            return s == 0 or (j, s - 1) in self.forward_done
        return (j, s) in self.forward_done and (s == self.stages - 1 or (j, s + 1) in self.backward_done)

    def start(self, device: int, op: Op) -> None:
        self.orders[device].append(op)
        if op.kind == FORWARD:
            self.inflight[device] += 1
            key = self.key(op)
            self.stage_inflight[key] = self.stage_inflight.get(key, 0) + 1
        self.idle[device] = False
        heapq.heappush(self.events, (self.now + self.duration(op), self._sequence, device, op))
        self._sequence += 1

    def send(self, op: Op, delay: float) -> None:
        """``op``'s input arrives ``delay`` from now (reported by :meth:`advance` in ``arrived``)."""
        heapq.heappush(self.arrivals, (self.now + delay, self._sequence, op))
        self._sequence += 1

    def advance(self, name: str) -> list[Op]:
        """Jump to the next completion or arrival; return the ops finishing then.

        Inputs arriving at that time are left in :attr:`arrived`.
        """
        if not self.events and not self.arrivals:
            raise ScheduleStall(f"{name}: dry run stalled at t={self.now:g} (in-flight limits too low)")
        self.now = min(queue[0][0] for queue in (self.events, self.arrivals) if queue)
        self.arrived = []
        while self.arrivals and self.arrivals[0][0] == self.now:
            self.arrived.append(heapq.heappop(self.arrivals)[2])
        finished = []
        while self.events and self.events[0][0] == self.now:
            _, _, device, op = heapq.heappop(self.events)
            self.idle[device] = True
            finished.append(op)
            if op.kind == FORWARD:
                self.forward_done.add((op.micro_batch, op.stage))
            else:
                self.backward_done.add((op.micro_batch, op.stage))
                self.inflight[device] -= 1
                self.stage_inflight[self.key(op)] -= 1
        return finished

    def plan(self, name: str, devices: int, micro_batches: int) -> PipelinePlan:
        plan = PipelinePlan(
            name=name,
            devices=devices,
            stages=self.stages,
            micro_batches=micro_batches,
            stage_device=tuple(self.maps),
            micro_batch_pipeline=tuple(self.pipeline_of),
            ops=tuple(tuple(ops) for ops in self.orders),
        )
        plan.validate()
        return plan


def micro_batch_groups(micro_batches: int, group: int) -> list[range]:
    """Consecutive groups of ``group`` micro-batches; a short remainder joins the last full group.

    A device switches to its next chunk ``p`` chunk-times after it started the previous one for
    the group's first micro-batch (the micro-batch has gone once round the ``p`` devices), so a
    group of ``r < p`` micro-batches leaves ``p - r`` idle slots at every chunk switch. Megatron-LM
    therefore first required ``m`` to be a multiple of ``p`` and later allowed groups of any size
    of at least ``p`` (``microbatch_group_size_per_vp_stage``). Folding the remainder into the last
    group (``p + m mod p`` micro-batches) keeps every group at least ``p`` long, so the bubble stays
    ``(p-1)(F+B)/v`` for every ``m >= p``; with ``m < p`` there is one short group (no
    schedule reaches the formula then).
    """
    starts = list(range(0, micro_batches, group))
    if len(starts) > 1 and micro_batches - starts[-1] < group:
        starts.pop()
    bounds = [*starts, micro_batches]
    return [range(a, b) for a, b in itertools.pairwise(bounds)]


def grouped_queues(stage_device: Sequence[int], devices: int, micro_batches: int,
                   group: int) -> tuple[list[list[Op]], list[list[Op]]]:
    """Megatron-LM's interleaved queue order, for any stage map of one pipeline.

    Micro-batches go in groups of ``group``; within a group a device runs its stages in
    increasing order (its "chunks"), each for every micro-batch of the group; backward runs
    the chunks in decreasing order. A remainder of fewer than ``group`` micro-batches joins the
    last full group (:func:`micro_batch_groups`).

    Returns:
        (forward queues, backward queues), one list per device.
    """
    local = [[s for s, d in enumerate(stage_device) if d == device] for device in range(devices)]
    groups = micro_batch_groups(micro_batches, group)
    forward = [[Op(FORWARD, j, s) for g in groups for s in mine for j in g] for mine in local]
    backward = [[Op(BACKWARD, j, s) for g in groups for s in reversed(mine) for j in g] for mine in local]
    return forward, backward


def queued_schedule(
    name: str,
    stage_device: Sequence[int],
    micro_batches: int,
    forward_queues: Sequence[Sequence[Op]],
    backward_queues: Sequence[Sequence[Op]],
    limits: Sequence[float],
    backward_cost: float = 2.0,
) -> PipelinePlan:
    """One pipeline; each device runs its two queues in order, forward first when admissible.

    Args:
        name: the schedule's name.
        stage_device: the device of each stage.
        micro_batches: micro-batches per iteration.
        forward_queues: per device, its forward ops in the order they must run.
        backward_queues: per device, its backward ops in order.
        limits: per device, the most activations it may hold (warm-up depth + 1).
        backward_cost: dry-run duration of a backward (a forward takes 1).

    Raises:
        ScheduleStall: if the limits make the pipeline wait forever.
    """
    devices = len(forward_queues)
    run = _DryRun(len(stage_device), [tuple(stage_device)], [0] * micro_batches, devices, backward_cost)
    heads_f = [0] * devices
    heads_b = [0] * devices
    remaining = sum(len(q) for q in forward_queues) + sum(len(q) for q in backward_queues)
    while remaining:
        for d in range(devices):
            if not run.idle[d]:
                continue
            if heads_f[d] < len(forward_queues[d]) and run.inflight[d] < limits[d]:
                op = forward_queues[d][heads_f[d]]
                if run.is_ready(op):
                    heads_f[d] += 1
                    run.start(d, op)
                    continue
            if heads_b[d] < len(backward_queues[d]):
                op = backward_queues[d][heads_b[d]]
                if run.is_ready(op):
                    heads_b[d] += 1
                    run.start(d, op)
        remaining -= len(run.advance(name))
    return run.plan(name, devices, micro_batches)


def list_schedule(
    name: str,
    devices: int,
    stage_device: Sequence[Sequence[int]],
    micro_batch_pipeline: Sequence[int],
    priority: Priority,
    limits: Sequence[float] | None = None,
    stage_limits: Callable[[int, int], float] | None = None,
    backward_cost: float = 2.0,
    duration: Duration | None = None,
    delay: Delay | None = None,
    pipeline_limits: Sequence[float] | None = None,
) -> PipelinePlan:
    """Greedy list scheduling over one or more pipelines.

    Args:
        name: the schedule's name.
        devices: number of devices.
        stage_device: per pipeline, the device of each stage.
        micro_batch_pipeline: the pipeline of each micro-batch.
        priority: sort key; the smallest admissible ready op starts first.
        limits: per device, the most activations it may hold (default: unlimited).
        stage_limits: ``(pipeline, stage) -> limit`` on one stage's in-flight activations.
        backward_cost: dry-run duration of a backward (a forward takes 1), unless ``duration``.
        duration: dry-run duration of each op (default: 1 and ``backward_cost``).
        delay: dry-run time an output takes to reach a consumer on another device (default: 0).
            An op becomes ready only when its input has arrived, so the order leaves room for
            the transfers (a device runs other ready work meanwhile).
        pipeline_limits: per pipeline, the most micro-batches in flight (from the start of
            their first forward to the end of their first stage's backward). Unlike ``limits``
            it holds back only a micro-batch's entry, never a forward of one already in flight,
            so the dry run cannot stall: a device then holds at most the sum over pipelines of
            limit x (that pipeline's stages on the device) activations.

    Raises:
        ScheduleStall: if the limits make the pipeline wait forever.
    """
    maps = [tuple(mapping) for mapping in stage_device]
    stages = len(maps[0])
    m = len(micro_batch_pipeline)
    run = _DryRun(stages, maps, micro_batch_pipeline, devices, backward_cost, duration)
    device_limits = list(limits) if limits is not None else [_UNLIMITED] * devices
    ready: list[list[Op]] = [[] for _ in range(devices)]
    for j in range(m):
        first = Op(FORWARD, j, 0)
        ready[run.device(first)].append(first)

    entered = [0] * len(maps)
    """Per pipeline, micro-batches in flight."""

    def enters(op: Op) -> bool:
        """Whether ``op`` (a first stage's forward) may start under ``pipeline_limits``; counts it."""
        q = run.pipeline_of[op.micro_batch]
        if pipeline_limits is None:
            return True
        if entered[q] >= pipeline_limits[q]:
            return False
        entered[q] += 1
        return True

    def admissible(device: int, op: Op) -> bool:
        if op.kind != FORWARD:
            return True
        if run.inflight[device] >= device_limits[device]:
            return False
        if stage_limits is None:
            return True
        q, s = run.key(op)
        return run.stage_inflight.get((q, s), 0) < stage_limits(q, s)

    def hand_on(producer: Op, consumer: Op) -> None:
        target = run.device(consumer)
        lag = delay(producer, consumer) if delay is not None and target != run.device(producer) else 0.0
        if lag > 0.0:
            run.send(consumer, lag)
        else:
            ready[target].append(consumer)

    remaining = 2 * m * stages
    while remaining:
        for d in range(devices):
            if run.idle[d] and ready[d]:
                candidates = sorted((op for op in ready[d] if admissible(d, op)), key=priority)
                for op in candidates:  # the best one that may start (a new micro-batch may not fit)
                    if op.kind == FORWARD and op.stage == 0 and not enters(op):
                        continue
                    ready[d].remove(op)
                    run.start(d, op)
                    break
        finished = run.advance(name)
        remaining -= len(finished)
        for op in run.arrived:
            ready[run.device(op)].append(op)
        for op in finished:
            kind, j, s = op
            if kind == FORWARD:
                if s + 1 < stages:
                    hand_on(op, Op(FORWARD, j, s + 1))
                else:  # the last stage's backward needs only its own forward
                    ready[run.device(op)].append(Op(BACKWARD, j, s))
            elif s > 0:
                hand_on(op, Op(BACKWARD, j, s - 1))
            else:  # the micro-batch has left its pipeline
                entered[run.pipeline_of[j]] -= 1
    return run.plan(name, devices, m)


def profiled_order(greedy: Callable[..., PipelinePlan], profile: StageProfile | None) -> PipelinePlan:
    """A greedy plan from a unit-cost dry run, or with ``profile`` the fastest of that one, one
    from a dry run with the profile's op and transfer times and one with its op times alone.

    Args:
        greedy: builds the plan; called with no arguments (unit costs) and with ``duration``
            and ``delay`` keyword arguments (:func:`list_schedule`'s).
        profile: the machine's estimated times; "faster" is the makespan :func:`plan_timing`
            gives with them (a tie keeps the unit-cost order). Knowing the transfers lets the dry
            run leave room for them, but a greedy order is not always better for knowing more,
            hence the comparison.
    """
    plan = greedy()
    if profile is None:
        return plan

    def estimate(candidate: PipelinePlan) -> float:
        return plan_timing(candidate, profile.duration, profile.delay).makespan

    # A greedy dry run does not wait: an input a transfer delays by even 1e-9 of a forward makes
    # it start another ready op, so the order jumps away from the free-transfer one (Chimera at
    # p = 12, m = 14: bubble 0.282 against its formula's 0.263). The profile's op times without
    # the transfers are therefore tried too; the estimate, with the transfers, picks.
    best, best_time = plan, estimate(plan)
    for candidate in (greedy(duration=profile.duration, delay=profile.delay), greedy(duration=profile.duration)):
        time = estimate(candidate)
        if time < best_time:
            best, best_time = candidate, time
    return best
