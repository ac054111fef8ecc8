"""The training loop: phases of each iteration on every GPU, checkpoint release and deadline.

All GPUs step through the phases together (each all-to-all is a barrier): a compute phase
lasts as long as its slowest GPU (for the experts, the GPU with the most-loaded expert), each
GPU's own busy time is a span on its ``compute`` track. Before each phase the running
checkpoint releases the chunks its plan attaches to the phase; before the optimizer step the
loop waits until the checkpoint is captured (a ``stall`` span when it is late). Phases the
plan asks to profile are timed, which costs ``profile_overhead`` on every GPU.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from simhpc.engine import Simulation, Track
from simhpc.workloads.moe.checkpointer import CheckpointRun, CheckpointStore
from simhpc.workloads.moe.comm import TrainingComm
from simhpc.workloads.moe.loads import ExpertLoads
from simhpc.workloads.moe.model import MoEModel
from simhpc.workloads.moe.plan import Observation, Phase


@dataclass
class IterationRecord:
    """One execution of an iteration (a rollback may execute an index again)."""

    iteration: int
    start: float
    end: float | None = None
    stall: float = 0.0
    profile: float = 0.0
    checkpoint: bool = False
    status: str = "running"
    """``running``, ``done`` (in the final state), ``lost`` (rolled back) or ``aborted``."""
    phase_durations: list[float] = field(default_factory=list)

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start


class Trainer:
    """Runs iterations until ``iterations`` are done; restartable after a rollback.

    Args:
        sim: the simulation.
        model: sizes and kernel costs.
        loads: expert routing shares per iteration.
        comm: training collectives.
        phases: the phases of an iteration.
        policy: the checkpoint policy (``plan`` / ``observe``).
        store: checkpoint versions and their transfers.
        iterations: iterations to complete.
        profile_overhead: seconds charged per profiled phase.
    """

    def __init__(
        self,
        sim: Simulation,
        model: MoEModel,
        loads: ExpertLoads,
        comm: TrainingComm,
        phases: tuple[Phase, ...],
        policy: Any,
        store: CheckpointStore,
        iterations: int,
        profile_overhead: float,
    ) -> None:
        self.sim = sim
        self.model = model
        self.loads = loads
        self.comm = comm
        self.phases = phases
        self.policy = policy
        self.store = store
        self.target = iterations
        self.profile_overhead = profile_overhead
        layout = model.layout
        self.world = layout.world
        self.ep = layout.expert_parallel
        self.iteration = 0
        self.records: list[IterationRecord] = []
        self.run: CheckpointRun | None = None
        self.process: simpy.Process | None = None
        self.finished = sim.event()
        self.stall_time = 0.0
        self.profile_time = 0.0
        names = [f"n{r // layout.gpus_per_node}.gpu{r % layout.gpus_per_node}" for r in range(self.world)]
        self.tracks: list[Track] = [sim.trace.track(name, "compute") for name in names]
        self.attention = model.attention_time
        self.dense_attention, self.dense_ffn = model.dense_attention_time, model.dense_ffn_time
        self.moe_layers = frozenset(model.config.moe_layers)
        self.optimizer = model.optimizer_time()
        self.dense_grad_bytes = model.dense_params * model.act_bytes
        self.expert_grad_bytes = model.local_expert_params * model.act_bytes if layout.expert_replicas > 1 else 0.0

    def start(self) -> None:
        """Start (or restart, after a rollback) the loop at :attr:`iteration`."""
        self.process = self.sim.process(self._loop())

    def interrupt(self) -> None:
        """Stop the loop now (a failure); the running checkpoint is abandoned."""
        if self.process is not None and self.process.is_alive:
            self.process.interrupt("failure")
        if self.run is not None:
            self.run.abandon()
            self.run = None

    # -- loop ---------------------------------------------------------------------------------

    def _loop(self) -> Generator[Any, Any, None]:
        try:
            while self.iteration < self.target:
                yield from self._iteration(self.iteration)
                self.iteration += 1
        except simpy.Interrupt:
            if self.records and self.records[-1].status == "running":
                self.records[-1].status = "aborted"
                self.records[-1].end = self.sim.now
            return
        if not self.finished.triggered:
            self.finished.succeed()

    def _routing(self, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """Per layer: peak expert load per GPU ``(layers, ep)`` and dispatch bytes ``(layers, ep)``
        (zero rows for dense layers)."""
        shares = self.loads.shares(iteration)
        peaks = np.zeros((self.model.config.layers, self.ep))
        sends = np.zeros_like(peaks)
        for layer, layer_shares in zip(self.model.config.moe_layers, shares, strict=True):
            tokens = self.model.expert_tokens(layer_shares)
            peaks[layer] = self.model.gpu_expert_load(tokens)
            sends[layer] = self.model.dispatch_bytes(tokens)
        return peaks, sends

    def _iteration(self, iteration: int) -> Generator[Any, Any, None]:
        sim = self.sim
        record = IterationRecord(iteration, sim.now)
        self.records.append(record)
        peaks, sends = self._routing(iteration)
        expert = [[self.model.expert_time(load) for load in layer] for layer in peaks]
        plan = self.policy.plan(iteration)
        run = self.store.start(iteration, plan) if plan.take else None
        self.run = run
        record.checkpoint = run is not None
        measured: dict[int, float] = {}
        for phase in self.phases:
            if run is not None:
                run.release(phase.index)
                if phase.index == 0 and plan.blocking:
                    yield from self._wait(run.captured, "stall: snapshot staging", record)
                if phase.part == "optimizer":
                    yield from self._wait(run.captured, "stall: checkpoint deadline", record)
            start = sim.now
            yield from self._phase(phase, expert, sends)
            record.phase_durations.append(sim.now - start)
            if phase.index in plan.profile:
                measured[phase.index] = sim.now - start
                yield from self._charge_profile(phase, record)
        record.end = sim.now
        record.status = "done"
        self.run = None
        observation = Observation(iteration, record.end - record.start, peaks, measured, record.stall)
        self.policy.observe(observation)

    def _phase(self, phase: Phase, expert: list[list[tuple[float, float]]], sends: np.ndarray):
        part, layer = phase.part, phase.layer
        backward = phase.stage == "bwd"
        if part == "attention":
            attention = self.attention if layer in self.moe_layers else self.dense_attention
            yield from self._compute(phase.name, np.full(self.world, attention[1 if backward else 0]))
        elif part == "ffn":
            yield from self._compute(phase.name, np.full(self.world, self.dense_ffn[1 if backward else 0]))
        elif part == "expert":
            assert layer is not None
            per_gpu = np.array([times[1 if backward else 0] for times in expert[layer]])
            yield from self._compute(phase.name, np.resize(per_gpu, self.world))
        elif part in ("dispatch", "combine"):
            assert layer is not None
            # Forward dispatch and backward combine-gradient travel towards the experts.
            reverse = (part == "combine") != backward
            yield self.comm.all_to_all(sends[layer], reverse, phase.name)
        elif part == "allreduce":
            yield self.comm.all_reduce(self.dense_grad_bytes, self.expert_grad_bytes)
        else:
            yield from self._compute(phase.name, np.full(self.world, self.optimizer))

    def _compute(self, name: str, durations: np.ndarray) -> Generator[Any, Any, None]:
        start = self.sim.now
        longest = float(durations.max())
        if longest <= 0:
            return
        yield self.sim.timeout(longest)
        for track, seconds in zip(self.tracks, durations.tolist()):
            track.span(name, start, start + seconds, "compute")

    def _wait(self, event: simpy.Event, label: str, record: IterationRecord) -> Generator[Any, Any, None]:
        if event.triggered:
            return
        start = self.sim.now
        yield event
        stalled = self.sim.now - start
        record.stall += stalled
        self.stall_time += stalled
        for track in self.tracks:
            track.span(label, start, self.sim.now, "stall")

    def _charge_profile(self, phase: Phase, record: IterationRecord) -> Generator[Any, Any, None]:
        cost = self.profile_overhead
        if cost <= 0:
            return
        start = self.sim.now
        yield self.sim.timeout(cost)
        record.profile += cost
        self.profile_time += cost
        for track in self.tracks:
            track.span(f"profile {phase.name}", start, self.sim.now, "profile")
