"""Deriving per-device op orders from a unit-cost dry run of the pipeline.

Schedules without a closed-form op order are built by simulating the pipeline once with
abstract costs (a forward takes 1, a backward ``backward_cost``, no communication) and
recording the order in which each device starts its ops. The workload then runs those orders
with the real costs. The engine is greedy list scheduling (:func:`list_schedule`): an idle device
starts, among *all* its ready ops, the admissible one of smallest priority key. Optional queues
fix the order within groups of ops and leave only their interleaving to the priority: one
forward and one backward queue per device in Megatron-LM's interleaved order
(:func:`grouped_queues`, generalised to any stage map), forwards first, with the warm-up depth + 1
as the activation limit, reproduce 1F1B and Megatron's schedules exactly. Without queues it orders
Chimera, bidirectional PRT and stage maps without a natural queue order (V-shaped, custom).

A forward is admissible only while the device holds fewer of its pipeline's activations (and,
optionally, its stage fewer in flight) than the limit: the knob that trades bubbles for memory,
as 1F1B's warm-up does.
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

Delay = Callable[[Op, Op, int, int], float]
"""Dry-run delay from a producer's end to its output reaching a consumer on another device
(the two ops, then their devices)."""

class ScheduleStall(RuntimeError):
    """The dry run could not progress: every device waits (in-flight limits too low)."""


class _DryRun:
    """Shared state of a dry run: in-flight counts, the event heap, the orders so far."""

    def __init__(self, stages: int, maps: list[tuple[int, ...]], pipeline_of: Sequence[int],
                 devices: int, backward_cost: float, duration: Duration | None = None) -> None:
        self.stages = stages
        self.maps = maps
        self.pipeline_of = pipeline_of
        unit = {FORWARD: 1.0, BACKWARD: backward_cost}
        self.duration: Duration = duration if duration is not None else (lambda op: unit[op.kind])
        self.held: dict[tuple[int, int], int] = {}
        """Activations each (device, pipeline) holds."""
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

    def holding(self, device: int, op: Op) -> int:
        """Activations of ``op``'s pipeline that ``device`` holds."""
        return self.held.get((device, self.pipeline_of[op.micro_batch]), 0)

    def start(self, device: int, op: Op) -> None:
        self.orders[device].append(op)
        if op.kind == FORWARD:
            self.held[device, self.pipeline_of[op.micro_batch]] = self.holding(device, op) + 1
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
            if op.kind == BACKWARD:
                self.held[device, self.pipeline_of[op.micro_batch]] -= 1
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


class _ReadyOps:
    """The ops of a dry run whose inputs are there, per device, in the order they became ready (of
    two of equal priority the earlier starts first).

    A device looks only at those that may start: of the micro-batches' first forwards, which all
    wait from the start, the best of each pipeline (all of one pipeline are admissible alike), and
    of the ops a queue orders, the queue's head. So a choice costs what is in flight, not all ``m``
    micro-batches: Chimera's plan at m = 1024 (39 dry runs) took 12.7 s when every choice scanned
    every ready op, 4.0 s so (``benchmarks/pipeline_planner.py``).
    """

    def __init__(self, run: _DryRun, devices: int, micro_batches: int, priority: Priority,
                 place: dict[Op, tuple[int, int]], queues: Sequence[Sequence[Op]]) -> None:
        self._run = run
        self._place = place
        self._arrival = itertools.count(micro_batches)  # the first forwards came first, by micro-batch
        self._free: list[dict[Op, int]] = [{} for _ in range(devices)]
        """Per device, ready ops no queue orders -> arrival number."""
        self._queued: list[dict[Op, int]] = [{} for _ in range(devices)]
        """Per device, ready ops a queue orders -> arrival number."""
        self._device_queues: list[list[tuple[int, Sequence[Op]]]] = [[] for _ in range(devices)]
        for number, queue in enumerate(queues):
            for device in sorted({run.device(op) for op in queue}):
                self._device_queues[device].append((number, queue))
        self._firsts: list[dict[int, list[Op]]] = [{} for _ in range(devices)]
        """Per device and pipeline, first forwards not yet started, the best last."""
        for j in range(micro_batches):
            first = Op(FORWARD, j, 0)
            device = run.device(first)
            if first in place:
                self._queued[device][first] = j
            else:
                self._firsts[device].setdefault(run.pipeline_of[j], []).append(first)
        for waiting in self._firsts:
            for pipeline, ops in waiting.items():
                waiting[pipeline] = sorted(ops, key=priority)[::-1]  # stable: the lower micro-batch on a tie

    def add(self, op: Op) -> None:
        """``op``'s input is there."""
        held = self._queued if op in self._place else self._free
        held[self._run.device(op)][op] = next(self._arrival)

    def candidates(self, device: int, heads: Sequence[int]) -> list[tuple[int, Op]]:
        """The ready ops of ``device`` that may be admissible, each with its arrival number (unique:
        the earlier ready, the smaller)."""
        found = [(ops[-1].micro_batch, ops[-1]) for ops in self._firsts[device].values() if ops]
        found += [(arrival, op) for op, arrival in self._free[device].items()]
        queued = self._queued[device]
        for number, queue in self._device_queues[device]:
            if heads[number] < len(queue) and queue[heads[number]] in queued:
                head = queue[heads[number]]
                found.append((queued[head], head))
        return found

    def remove(self, device: int, op: Op) -> None:
        """``op`` starts."""
        waiting = self._firsts[device].get(self._run.pipeline_of[op.micro_batch])
        if waiting and waiting[-1] == op:
            waiting.pop()
        else:
            (self._queued if op in self._place else self._free)[device].pop(op)


def list_schedule(
    name: str,
    devices: int,
    stage_device: Sequence[Sequence[int]],
    micro_batch_pipeline: Sequence[int],
    priority: Priority,
    limits: Sequence[Sequence[float]] | None = None,
    stage_limits: Callable[[int, int], float] | None = None,
    backward_cost: float = 2.0,
    duration: Duration | None = None,
    delay: Delay | None = None,
    pipeline_limits: Sequence[float] | None = None,
    queues: Sequence[Sequence[Op]] | None = None,
) -> PipelinePlan:
    """Greedy list scheduling over one or more pipelines.

    Args:
        name: the schedule's name.
        devices: number of devices.
        stage_device: per pipeline, the device of each stage.
        micro_batch_pipeline: the pipeline of each micro-batch.
        priority: sort key; the smallest admissible ready op starts first.
        limits: per pipeline, per device, the most activations of that pipeline the device may
            hold (default: unlimited); Megatron's warm-up depth + 1 for its queue order.
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
        queues: op sequences (each op in at most one) that must start in their order: an op of a
            queue is ready only once every op before it in that queue has started. With one
            forward and one backward queue per device and pipeline this merges fixed per-pipeline
            orders (Megatron's, :func:`grouped_queues`) and leaves only their interleaving to
            ``priority``.

    Raises:
        ScheduleStall: if the limits make the pipeline wait forever.
    """
    maps = [tuple(mapping) for mapping in stage_device]
    stages = len(maps[0])
    m = len(micro_batch_pipeline)
    run = _DryRun(stages, maps, micro_batch_pipeline, devices, backward_cost, duration)
    entered = [0] * len(maps)
    """Per pipeline, micro-batches in flight."""

    def may_enter(op: Op) -> bool:
        """Whether ``op`` may start under ``pipeline_limits`` (only a first stage's forward is held)."""
        if pipeline_limits is None or op.kind != FORWARD or op.stage != 0:
            return True
        q = run.pipeline_of[op.micro_batch]
        return entered[q] < pipeline_limits[q]

    place = {op: (number, index) for number, queue in enumerate(queues or ()) for index, op in enumerate(queue)}
    heads = [0] * len(queues or ())

    ready = _ReadyOps(run, devices, m, priority, place, queues or ())

    def admissible(device: int, op: Op) -> bool:
        if op in place:
            number, index = place[op]
            if heads[number] != index:
                return False
        if op.kind != FORWARD:
            return True
        if limits is not None and run.holding(device, op) >= limits[run.pipeline_of[op.micro_batch]][device]:
            return False
        if stage_limits is None:
            return True
        q, s = run.key(op)
        return run.stage_inflight.get((q, s), 0) < stage_limits(q, s)

    def hand_on(producer: Op, consumer: Op) -> None:
        source, target = run.device(producer), run.device(consumer)
        lag = delay(producer, consumer, source, target) if delay is not None and target != source else 0.0
        if lag > 0.0:
            run.send(consumer, lag)
        else:
            ready.add(consumer)

    remaining = 2 * m * stages
    while remaining:
        for d in range(devices):
            if run.idle[d]:
                # the best op that may start (a new micro-batch may not fit); the first ready on a tie
                best = min(((priority(op), arrival, op) for arrival, op in ready.candidates(d, heads)
                            if admissible(d, op) and may_enter(op)), key=lambda item: item[:2], default=None)
                if best is None:
                    continue
                op = best[2]
                if op.kind == FORWARD and op.stage == 0:
                    entered[run.pipeline_of[op.micro_batch]] += 1
                ready.remove(d, op)
                run.start(d, op)
                if op in place:
                    heads[place[op][0]] += 1
        finished = run.advance(name)
        remaining -= len(finished)
        for op in run.arrived:
            ready.add(op)
        for op in finished:
            kind, j, s = op
            if kind == FORWARD:
                if s + 1 < stages:
                    hand_on(op, Op(FORWARD, j, s + 1))
                else:  # the last stage's backward needs only its own forward
                    ready.add(Op(BACKWARD, j, s))
            elif s > 0:
                hand_on(op, Op(BACKWARD, j, s - 1))
            else:  # the micro-batch has left its pipeline
                entered[run.pipeline_of[j]] -= 1
    return run.plan(name, devices, m)


Fits = Callable[[PipelinePlan], bool]
"""Whether a candidate plan keeps the schedule's memory bound."""


def fastest_order(builders: Sequence[Callable[..., PipelinePlan]], profile: StageProfile | None,
                  backward_cost: float, fits: Fits | None = None) -> PipelinePlan:
    """The fastest of the greedy plans ``builders`` make; the first one wins a tie.

    Each builder is called with no arguments (a unit-cost dry run) and, given ``profile``, also
    with the profile's op times and transfer delays and with its op times alone
    (:func:`list_schedule`'s ``duration`` and ``delay``). A greedy dry run does not wait: an input
    a transfer delays by even 1e-9 of a forward makes it start another ready op, so the order
    jumps away from the free-transfer one (Chimera at p = 12, m = 14: bubble 0.282 against its
    formula's 0.263), hence the run without transfers. Knowing more does not always make a greedy
    order better, hence the comparison.

    Args:
        builders: plan builders (:func:`list_schedule` with the schedule's arguments bound).
        profile: the machine's estimated times; "fastest" is the makespan :func:`plan_timing`
            gives with them, or without a profile with a forward of 1 and a backward of
            ``backward_cost`` and free transfers.
        backward_cost: backward / forward time of the unit-cost estimate.
        fits: keeps only the candidates it accepts (the first builder's unit-cost plan always).

    Raises:
        ScheduleStall: if the first builder's unit-cost dry run stalls (later ones that stall are
            skipped).
    """
    def estimate(plan: PipelinePlan) -> float:
        if profile is not None:
            return plan_timing(plan, profile.duration, profile.delay).makespan
        return plan_timing(plan, lambda op: backward_cost if op.kind == BACKWARD else 1.0).makespan

    runs: tuple[dict[str, Callable], ...] = ({},)
    if profile is not None:
        runs = ({}, {"duration": profile.duration, "delay": profile.delay}, {"duration": profile.duration})
    best = builders[0]()
    best_time = estimate(best)
    for number, builder in enumerate(builders):
        for costs in runs[1:] if number == 0 else runs:
            try:
                candidate = builder(**costs)
            except ScheduleStall:
                continue
            if fits is not None and not fits(candidate):
                continue
            time = estimate(candidate)
            if time < best_time:
                best, best_time = candidate, time
    return best
