"""Running a pipeline plan on simulated GPUs: dependencies, transfers, memory.

Each device runs its op list in order on its ``compute`` stream. An op whose input comes from
another device waits for that transfer to arrive; inputs from the same device are ready by
construction (the plan is validated deadlock-free, so the producer ran earlier in the list).
When an op ends, its output goes to the consumer's device: an activation after a forward, an
activation gradient after a backward, over ``send`` (the network), asynchronously — compute and
communication overlap, as with non-blocking NCCL send/recv. A boundary inside one device costs
nothing. With ``p2p`` ``blocking`` or ``rendezvous`` (:mod:`~simhpc.policies.pipeline.blocking`) a
device that sent waits for the bytes to arrive before its next op, and with a rendezvous a transfer
starts only once its receiver has ended the op before the consumer (the plan is checked to be
deadlock-free under that rule first).

Split backward (zero-bubble plans): ``B`` computes the input gradient and sends it on at once,
``W`` computes the weight gradient later on the same device (after its ``B`` in the device's
list, so no wait) and sends nothing. ``B`` takes the stage's input-gradient time
(:attr:`StageCosts.input_grad_s`), ``W`` its weight-gradient time (``weight_grad_s``); both
count as busy time and each pays the per-op overhead.

Idle time: a device that waits for an input from another device waits first for the op that
produces it (a dependency: the pipeline's bubble) and then, once that op has ended, for the bytes
in flight: the *transfer wait*, the point-to-point communication the schedule leaves exposed
(:meth:`PipelineExecutor.transfer_wait_fractions`). A sender that waits for its send counts the
same way: its wait from the moment the transfers it waits for have all left is a transfer wait.
The trace shows both kinds of wait on a ``p2p wait`` thread beside each device's ``compute`` stream.

Memory: the weights, gradients and optimizer state of every stage a device hosts are allocated
before the first iteration; a forward allocates its stage's activation stash when it starts and
the last pass that reads it frees it when it ends: the backward, or in a split plan the ``W``
(the weight gradients need the layers' saved inputs, so the stash lives until ``W``). With
activation recomputation the stash is the stage's input, and the backward allocates the
activations it rebuilds when it starts; they go with the stash. The approximation: the
activations only ``B`` reads are not freed earlier, and the output gradients ``B`` leaves for
``W`` are not counted. Exceeding the device raises
:class:`~simhpc.errors.SimulatedOOM` naming the device and the op.

Variable op times: with ``variation`` (a coefficient of variation) every op takes its time times
an independent factor drawn from a lognormal distribution of median 1 and that coefficient (each
device its own seeded stream, so runs are reproducible), as ops on a real machine vary from one
call to the next. The plan's time is then the median op's; busy time counts what each op took.
An op delayed on one device delays every op that waits for it, so a tightly coupled schedule
loses more than its ops' mean slow-down.

Bidirectional plans hold two copies of each stage; with ``sync_replicas`` each copy sends its
gradients to the other after its last backward (or ``W``) of the iteration (an all-reduce of
two), and the iteration ends when those arrive. A ``gradient_sync`` callback replaces that
exchange (data-parallel replicas of the whole pipeline): it is told when each copy of a stage has
run its last pass and returns the event its gradients' reduction fires, which the iteration waits for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from simhpc.engine import Simulation, Track
from simhpc.errors import SimulatedOOM
from simhpc.hardware.devices import Device, Stream
from simhpc.policies.pipeline.blocking import P2P, consumer_of, waiting_senders
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op, PipelinePlan
from simhpc.workloads.pipeline.stages import StageCosts

Send = Callable[[int, int, float, str], simpy.Event]
"""``send(src device index, dst device index, nbytes, label)`` -> event firing on arrival."""

GradientSync = Callable[[int, int], simpy.Event]
"""``sync(pipeline, stage)``: that copy of the stage has run its last pass of the iteration; returns
the event firing when its gradients are reduced."""

CATEGORY = {FORWARD: "forward", BACKWARD: "backward", WEIGHT: "weight"}
"""Trace category of each pass (the Gantt chart colours by it)."""
WAIT_THREAD = "p2p wait"
"""The trace thread beside each device's ``compute`` stream that shows its waits for transfers."""


class PipelineExecutor:
    """Runs ``plan`` with ``costs`` on ``devices`` for some iterations.

    Args:
        sim: the simulation.
        plan: a validated plan.
        costs: per-stage durations and bytes (``costs.stages == plan.stages``).
        devices: one runtime device per plan device.
        send: moves bytes between two devices; None: transfers are instantaneous.
        overhead: fixed seconds added to every op (per-stage scheduling/launch cost).
        sync_replicas: exchange the gradients of the two copies of a stage (bidirectional).
        gradient_sync: reduces each stage's gradients instead (replicas of the pipeline elsewhere).
        variation: coefficient of variation of every op's time (0: each op takes its time exactly).
        stream: the name of this executor's random streams (one per device, ``<stream>.d<index>``).
        p2p: ``overlapped``, ``blocking`` or ``rendezvous`` (a plan validated deadlock-free under it).
    """

    def __init__(
        self,
        sim: Simulation,
        plan: PipelinePlan,
        costs: StageCosts,
        devices: Sequence[Device],
        send: Send | None = None,
        overhead: float = 0.0,
        sync_replicas: bool = True,
        gradient_sync: GradientSync | None = None,
        variation: float = 0.0,
        stream: str = "pipeline.op_times",
        p2p: P2P = "overlapped",
    ) -> None:
        if costs.stages != plan.stages:
            raise ValueError(f"{costs.stages} stage costs for a plan of {plan.stages} stages")
        if len(devices) != plan.devices:
            raise ValueError(f"{len(devices)} devices for a plan over {plan.devices}")
        if plan.split_backward and not costs.weight_grad_s:
            raise ValueError(f"{plan.name} splits the backward: the stage costs need weight_grad_s")
        self.sim = sim
        self.plan = plan
        self.costs = costs
        self.devices = list(devices)
        self.send = send
        self.overhead = overhead
        self.sync_replicas = sync_replicas and plan.pipelines > 1
        self.gradient_sync = gradient_sync
        self.streams: list[Stream] = []
        self._wait_tracks: list[Track] = []
        """Per device: its ``p2p wait`` track, made right after its stream so that a timeline shows
        them together (none for a single device: it waits for nothing)."""
        for device in self.devices:
            self.streams.append(device.stream("compute"))
            if plan.devices > 1:
                self._wait_tracks.append(sim.trace.track(device.name, WAIT_THREAD))
        self.iteration_times: list[float] = []
        self.busy: list[list[float]] = []
        """Per iteration, each device's compute-busy seconds."""
        self.transfer_waits: list[list[float]] = []
        """Per iteration, each device's seconds waiting for inputs in flight (their producer done)."""
        self.sync_waits: list[float] = []
        """Per iteration, seconds from the last op's end to the iteration's: the gradient exchange or
        all-reduce left exposed."""
        self.transfers = 0
        self.transfer_bytes = 0.0
        self.iterations_done = 0
        self._duration = {FORWARD: [f + overhead for f in costs.forward_s],
                          BACKWARD: [b + overhead for b in costs.backward_s]}
        if plan.split_backward:
            self._duration[BACKWARD] = [b + overhead for b in costs.input_grad_s]
            self._duration[WEIGHT] = [w + overhead for w in costs.weight_grad_s]
        self._sigma = math.sqrt(math.log1p(variation * variation))
        """Standard deviation of the log of an op's time factor (lognormal of median 1, CV ``variation``)."""
        self._rngs = [sim.rng(f"{stream}.d{d}") for d in range(plan.devices)] if variation > 0 else []
        self._sends = waiting_senders(plan, p2p)
        """With waiting senders, who waits for whom (None: overlapped transfers)."""
        self._last_pass = WEIGHT if plan.split_backward else BACKWARD
        """The pass that ends a micro-batch on a stage: frees its stash, completes its gradients."""
        self._labels = {op: op.label() for ops in plan.ops for op in ops}
        self._remote = {op: self._producer_elsewhere(op) for ops in plan.ops for op in ops}
        per_pipeline = [0] * plan.pipelines
        for q in plan.micro_batch_pipeline:
            per_pipeline[q] += 1
        self._per_pipeline = per_pipeline
        self._arrivals: dict[Op, simpy.Event] = {}
        self._posted: dict[Op, simpy.Event] = {}
        """Per consumer op on another device, with a rendezvous: fires when its receive is posted."""
        self._departed: dict[Op, float] = {}
        """Per consumer op on another device: when its input's transfer left."""
        self._arrows_due: dict[Op, tuple[str, Track, float]] = {}
        """Per consumer op whose input arrived: the trace arrow to draw once it has run."""
        self._backwards: dict[tuple[int, int], int] = {}
        self._syncs: list[simpy.Event] = []
        self._iteration = 0
        self.oom: SimulatedOOM | None = None
        """The simulated out-of-memory that ended the run, if any."""

    def _producer_elsewhere(self, op: Op) -> bool:
        """Whether ``op``'s cross-stage input is produced on another device."""
        kind, j, s = op
        if kind == FORWARD:
            producer = Op(FORWARD, j, s - 1) if s > 0 else None
        elif kind == BACKWARD:
            producer = Op(BACKWARD, j, s + 1) if s < self.plan.stages - 1 else None
        else:  # W reads its own B's output, on the same device
            producer = None
        return producer is not None and self.plan.device_of(producer) != self.plan.device_of(op)

    def allocate_states(self) -> None:
        """Allocate each device's weights, gradients and optimizer state (may raise OOM)."""
        for d, device in enumerate(self.devices):
            hosted = self.plan.hosted_stages(d)
            total = sum(self.costs.state_bytes[s] for _, s in hosted)
            stages = ", ".join(f"s{s}" + (f"/p{q}" if self.plan.pipelines > 1 else "") for q, s in hosted)
            device.memory.allocate(total, f"weights, gradients and optimizer state of stages {stages}")

    def _abort(self, oom: SimulatedOOM) -> None:
        """End the run with ``oom``: raised from an event callback, it leaves ``Simulation.run``
        as is (SimPy rebuilds exceptions that fail a process from their ``args``, which would
        lose the OOM's fields)."""
        self.oom = oom

        def raise_oom(_: simpy.Event) -> None:
            raise oom

        event = self.sim.env.event()
        event.callbacks.append(raise_oom)
        event.succeed()

    def run(self, iterations: int) -> Generator[Any, Any, None]:
        """SimPy process: allocate states, then run ``iterations`` flushed iterations."""
        try:
            self.allocate_states()
        except SimulatedOOM as oom:
            self._abort(oom)
            return
        env = self.sim.env
        for iteration in range(iterations):
            self._iteration = iteration
            self._arrivals = {}
            self._posted = {}
            self._departed = {}
            self._arrows_due = {}
            self._backwards = {}
            self._syncs = []
            start = env.now
            busy = [0.0] * self.plan.devices
            waits = [0.0] * self.plan.devices
            workers = [env.process(self._device(d, busy, waits)) for d in range(self.plan.devices)]
            yield env.all_of(workers)
            ops_done = env.now
            if self._syncs:
                yield env.all_of(self._syncs)
            self.sync_waits.append(env.now - ops_done)
            self.iteration_times.append(env.now - start)
            self.busy.append(busy)
            self.transfer_waits.append(waits)
            self.iterations_done += 1

    def _arrival(self, op: Op) -> simpy.Event:
        event = self._arrivals.get(op)
        if event is None:
            event = self._arrivals[op] = self.sim.env.event()
        return event

    def _receive_posted(self, op: Op) -> simpy.Event:
        """With a rendezvous: the event that fires when ``op``'s device posts the receive of its input."""
        event = self._posted.get(op)
        if event is None:
            event = self._posted[op] = self.sim.env.event()
        return event

    def _device(self, d: int, busy: list[float], waits: list[float]) -> Generator[Any, Any, None]:
        stream = self.streams[d]
        memory = self.devices[d].memory
        costs = self.costs
        rebuilt = bool(costs.recompute_bytes)
        remote = self._remote
        labels = self._labels
        iteration = self._iteration
        last_pass = self._last_pass
        ops = self.plan.ops[d]
        rendezvous = self._sends is not None and self._sends.rendezvous
        if rendezvous and ops and remote[ops[0]]:
            self._receive_posted(ops[0]).succeed()  # posted from the start
        sending: Op | None = None  # waiting senders: the consumer of the previous op's output
        for index, op in enumerate(ops):
            kind, j, s = op
            awaited = [op] if remote[op] else []
            if sending is not None:
                awaited.append(sending)
                sending = None
            if awaited:
                yield from self._wait_for(awaited, d, waits)
            if kind == FORWARD or (kind == BACKWARD and rebuilt):
                what = "activations of" if kind == FORWARD else "activations recomputed by"
                try:
                    memory.allocate(costs.allocated_by(kind, s), f"{what} {labels[op]} (iteration {iteration})")
                except SimulatedOOM as oom:
                    self._abort(oom)
                    return
            duration = self._duration[kind][s]
            if self._rngs:
                duration *= math.exp(self._sigma * float(self._rngs[d].standard_normal()))
            args = {"micro_batch": j, "stage": s, "pipeline": self.plan.micro_batch_pipeline[j],
                    "iteration": iteration}
            yield from stream.run(labels[op], duration, CATEGORY[kind], args)
            busy[d] += duration
            if remote[op]:
                self._draw_arrow(op, stream.track)
            if kind == last_pass:
                memory.free(costs.released(s))
                self._count_backward(op, d)
            if kind != WEIGHT:
                sending = self._deliver(op, d)
            if rendezvous and index + 1 < len(ops) and remote[ops[index + 1]]:
                self._receive_posted(ops[index + 1]).succeed()
        if sending is not None:  # the last op's send
            yield from self._wait_for([sending], d, waits)

    def _wait_for(self, consumers: list[Op], d: int, waits: list[float]) -> Generator[Any, Any, None]:
        """Wait until the inputs of ``consumers`` (ops on other devices) have arrived; count the wait
        from the moment the last of their transfers left as device ``d``'s transfer wait."""
        env = self.sim.env
        asked = env.now
        arrivals = [self._arrival(consumer) for consumer in consumers]
        yield arrivals[0] if len(arrivals) == 1 else env.all_of(arrivals)
        departed = max(asked, *(self._departed[consumer] for consumer in consumers))
        waits[d] += env.now - departed
        if env.now > asked:
            self._record_wait(d, consumers, asked, departed)

    def _record_wait(self, d: int, consumers: list[Op], asked: float, departed: float) -> None:
        """Show device ``d``'s wait on its ``p2p wait`` track: from ``asked`` until the transfers
        left (``p2p_dependency``: a producer still running, a receive not yet posted), then until
        they arrived (``p2p_transfer``: the bytes in flight, the transfer wait)."""
        track = self._wait_tracks[d]
        what = " + ".join(("recv " if self.plan.device_of(consumer) == d else "send to ") + self._labels[consumer]
                          for consumer in consumers)
        args = {"iteration": self._iteration}
        if departed > asked:
            track.span(f"wait: {what}", asked, departed, "p2p_dependency", args)
        if self.sim.env.now > departed:
            track.span(f"in flight: {what}", departed, self.sim.env.now, "p2p_transfer", args)

    def _deliver(self, op: Op, d: int) -> Op | None:
        """Hand ``op``'s output to the op that consumes it on another device; with waiting senders,
        return that consumer (the sender waits for its input to arrive)."""
        consumer = consumer_of(op, self.plan.stages)
        if consumer is None or not self._remote[consumer]:
            return None
        nbytes = self.costs.boundary_bytes[min(op.stage, consumer.stage)]  # the boundary between them
        if self._sends is not None:
            self.sim.env.process(self._blocking_transfer(op, consumer, d, nbytes))
            return consumer
        self._departed[consumer] = self.sim.env.now
        arrival = self._arrival(consumer)
        if self.send is None:
            arrival.succeed()
            return None
        self._transfer(op, consumer, d, nbytes).callbacks.append(lambda _: arrival.succeed())
        return None

    def _blocking_transfer(self, op: Op, consumer: Op, d: int, nbytes: float) -> Generator[Any, Any, None]:
        """SimPy process: with a rendezvous, wait for the receive to be posted; then move the bytes."""
        if self._sends is not None and self._sends.rendezvous:
            yield self._receive_posted(consumer)
        self._departed[consumer] = self.sim.env.now
        if self.send is not None:
            yield self._transfer(op, consumer, d, nbytes)
        self._arrival(consumer).succeed()

    def _transfer(self, op: Op, consumer: Op, d: int, nbytes: float) -> simpy.Event:
        """Send ``op``'s output (``nbytes``) from device ``d`` to ``consumer``'s device; the event
        fires on arrival, once the trace arrow to draw is due."""
        assert self.send is not None
        kind = op.kind
        target = self.plan.device_of(consumer)
        self.transfers += 1
        self.transfer_bytes += nbytes
        label = f"{'act' if kind == FORWARD else 'grad'} {self._labels[op]}->{self._labels[consumer]}"
        event = self.send(d, target, nbytes, label)
        source = self.streams[d].track
        produced = source.spans[-1]  # the op that ran last: the producer

        def arrived(_: simpy.Event) -> None:
            self._arrows_due[consumer] = (label, source, (produced.start + produced.end) / 2)

        event.callbacks.append(arrived)
        return event

    def _draw_arrow(self, op: Op, track: Track) -> None:
        """A trace arrow from the op that produced ``op``'s input to ``op``, which just ran: from
        the middle of one slice to the middle of the other, so viewers bind it to those two ops."""
        due = self._arrows_due.pop(op, None)
        if due is not None:
            label, source, source_time = due
            ran = track.spans[-1]
            self.sim.trace.arrow(label, source, source_time, track, (ran.start + ran.end) / 2)

    def _count_backward(self, op: Op, d: int) -> None:
        """After a copy's last backward (or W) of the iteration, reduce its gradients: with
        ``gradient_sync``, or by sending them to the other copy."""
        if not self.sync_replicas and self.gradient_sync is None:
            return
        q = self.plan.micro_batch_pipeline[op.micro_batch]
        key = (q, op.stage)
        count = self._backwards.get(key, 0) + 1
        self._backwards[key] = count
        if count != self._per_pipeline[q]:
            return
        if self.gradient_sync is not None:
            self._syncs.append(self.gradient_sync(q, op.stage))
            return
        peer = self.plan.stage_device[1 - q][op.stage]
        if peer == d or self.send is None:
            return
        nbytes = self.costs.grad_bytes[op.stage]
        self.transfers += 1
        self.transfer_bytes += nbytes
        self._syncs.append(self.send(d, peer, nbytes, f"grad sync s{op.stage}/p{q}"))

    def bubble_fractions(self) -> list[float]:
        """Per iteration: ``1 - sum(busy) / (devices x iteration time)``."""
        return [1.0 - share if time > 0 else 0.0 for time, share in zip(self.iteration_times, self._shares(self.busy))]

    def transfer_wait_fractions(self) -> list[float]:
        """Per iteration: ``sum(transfer waits) / (devices x iteration time)``, the part of the
        bubble spent waiting for bytes in flight."""
        return self._shares(self.transfer_waits)

    def _shares(self, seconds: list[list[float]]) -> list[float]:
        """Per iteration, the devices' summed ``seconds`` over ``devices x iteration time``."""
        return [sum(per_device) / (len(per_device) * time) if time > 0 else 0.0
                for time, per_device in zip(self.iteration_times, seconds)]
