"""Node failures and rollback recovery.

At a failure the training loop stops, the checkpoint in progress is abandoned and the failed
node's host memory (its local copy and the replicas it held for peers) is lost. Training
rolls back to the newest complete checkpoint that survives:

* in memory, if every node's state still has a copy on a surviving node (its own host, or a
  peer holding its replica);
* else in storage, if a persisted version exists (not on a node-local device, ``local: true``
  in the catalog, whose data the failed node took with it);
* else nowhere: training restarts from the beginning, and the summary says so.

Recovery takes the restart time (detection, replacement, process restart) plus the state
reload, simulated as transfers: from memory, each GPU loads its state from a surviving
holder's host memory (PCIe locally, NIC from a peer); from storage, each node reads its state
and copies it to its GPUs. A failure during a recovery (or at the same instant as another)
cuts it short: the node's memory is lost too, and recovery starts again from what survives
both. Lost work is the training time whose results a failure discards: the iteration it cuts
short and the iterations after the restored state, each counted once, so that useful time,
lost work and recovery time add up to the makespan.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from simhpc.engine import Simulation
from simhpc.network import Network
from simhpc.workloads.moe.checkpointer import CheckpointStore
from simhpc.workloads.moe.config import FailuresConfig
from simhpc.workloads.moe.storage import Storage
from simhpc.workloads.moe.trainer import Trainer


class FailureInjector:
    """Injects the configured failures and runs each recovery.

    Args:
        sim: the simulation.
        config: failure times, MTBF, restart time.
        trainer: the training loop to stop and restart.
        store: the checkpoint versions.
        network: carries the state reload.
        storage: the storage server of each node.
        nodes: machines.
        gpus_per_node: GPUs per machine.
    """

    def __init__(
        self,
        sim: Simulation,
        config: FailuresConfig,
        trainer: Trainer,
        store: CheckpointStore,
        network: Network,
        storage: list[Storage],
        nodes: int,
        gpus_per_node: int,
    ) -> None:
        self.sim = sim
        self.config = config
        self.trainer = trainer
        self.store = store
        self.network = network
        self.storage = storage
        self.nodes = nodes
        self.gpus = gpus_per_node
        self.events: list[dict[str, Any]] = []
        self.gave_up = False
        """Training was abandoned: ``give_up_after`` failures in a row restored no newer state
        than the failure before them."""
        self._without_progress = 0
        self._restored = 0
        """State the last failure restored (training starts from state 0)."""
        self._rng = sim.rng("moe.failures")
        self._recovery: simpy.Process | None = None
        """The recovery in progress (restart wait and reload), if any."""
        self._readers: list[simpy.Process] = []
        """Its storage reads (a memory reload's flows cannot be called back: they drain unused)."""
        self._reload_start: float | None = None
        self._running = 0
        """Iteration training was at when the current outage began."""
        self._version = 0
        """State the current outage has rolled back to so far."""

    def start(self) -> None:
        """Schedule the failures (nothing to do without any)."""
        if self.config.at or self.config.mtbf:
            self.sim.process(self._run())

    def _schedule(self) -> Generator[tuple[float, int], None, None]:
        explicit = sorted({(float(spec.time), spec.node) for spec in self.config.at})  # a node fails once at a time
        mtbf = self.config.mtbf
        drawn_at = 0.0
        upcoming = None
        index = 0
        count = 0
        while count < self.config.max_failures:
            if mtbf and upcoming is None:
                drawn_at += float(self._rng.exponential(mtbf))
                upcoming = (drawn_at, int(self._rng.integers(self.nodes)))
            candidates = [c for c in (explicit[index] if index < len(explicit) else None, upcoming) if c]
            if not candidates:
                return
            nxt = min(candidates)
            if index < len(explicit) and nxt == explicit[index]:
                index += 1
            else:
                upcoming = None
            count += 1
            yield nxt

    def _run(self) -> Generator[Any, Any, None]:
        for time, node in self._schedule():
            if self.gave_up:
                return
            if node >= self.nodes:
                raise ValueError(f"failure of node {node}: the cluster has {self.nodes} nodes")
            if self.trainer.finished.triggered:
                return
            if time > self.sim.now:
                yield self.sim.env.any_of([self.sim.background_timeout(time - self.sim.now), self.trainer.finished])
                if self.trainer.finished.triggered or self.gave_up:
                    return
            self._fail(node)

    def _fail(self, node: int) -> None:
        """Node ``node`` fails now: stop training (or cut the recovery in progress short, whose
        source may have died with it), wipe the node's memory, recover from what survives."""
        sim, trainer = self.sim, self.trainer
        now = float(sim.now)
        sim.trace.instant(f"n{node}", "failure", f"node n{node} fails", now)
        lost_s = 0.0
        if self._recovery is not None and self._recovery.is_alive:  # a failure during recovery
            event = self.events[-1]
            event["interrupted"] = True
            event["recovery_s"] = now - event["time_s"]
            event["reload_s"] = now - self._reload_start if self._reload_start is not None else 0.0
            self._recovery.interrupt("failure")
            for reader in self._readers:  # storage reads of the recovery cut short stop
                if reader.is_alive:
                    reader.interrupt("failure")
        else:
            running = [r for r in trainer.records if r.status == "running"]
            lost_s = sum(now - r.start for r in running)  # the iteration cut short
            self._running = trainer.iteration
            self._version = trainer.iteration
            trainer.interrupt()
        self.store.fail(node)
        source, version = self._newest_surviving()
        for record in trainer.records:  # the rollback discards the work after the restored state
            if record.status == "done" and record.iteration >= version:
                record.status = "lost"
                lost_s += record.duration or 0.0
        self.events.append({
            "time_s": now,
            "node": node,
            "recovered_from": source,
            "recoverable": source != "none",
            "version": version,
            "iteration_at_failure": self._running,
            "lost_iterations": self._version - version,
            "lost_work_s": lost_s,
            "reload_s": 0.0,
            "recovery_s": 0.0,
            "interrupted": False,
        })
        self._version = version
        self._reload_start = None
        self._readers = []
        progressed = version > self._restored  # a newer state survived
        self._without_progress = 0 if progressed else self._without_progress + 1
        self._restored = version
        if self._without_progress >= self.config.give_up_after:
            self.gave_up = True
            self._recovery = None
            sim.trace.instant(f"n{node}", "failure", "training abandoned: no progress between failures", now)
            return
        self._recovery = sim.process(self._recover(node, source, version))

    def _newest_surviving(self) -> tuple[str, int]:
        """Where the newest recoverable state is (``memory``, ``storage`` or ``none``) and its version."""
        store = self.store
        source, version = "none", 0
        if store.memory is not None:
            source, version = "memory", store.memory[0]
        if store.persisted is not None and (source == "none" or store.persisted > version):
            source, version = "storage", store.persisted
        return source, version

    def _recover(self, node: int, source: str, version: int) -> Generator[Any, Any, None]:
        """Restart wait and state reload, then training resumes at ``version`` (a process a
        further failure interrupts)."""
        sim, trainer = self.sim, self.trainer
        if self._recovery is not sim.env.active_process:
            return  # a failure at the same instant superseded this recovery before it began
        event = self.events[-1]
        try:
            if self.config.restart_time > 0:
                yield sim.timeout(self.config.restart_time)
            self._reload_start = sim.now
            yield from self._reload(source, node)
        except simpy.Interrupt:
            return
        sim.trace.instant(f"n{node}", "failure", f"recovered from {source} (v{version})", sim.now)
        event["reload_s"] = sim.now - self._reload_start
        event["recovery_s"] = sim.now - event["time_s"]
        self._recovery = None
        trainer.iteration = version
        trainer.start()

    def _reload(self, source: str, failed: int) -> Generator[Any, Any, None]:
        state = self.store.state_bytes
        if source == "none" or state <= 0:
            return
        events: list[simpy.Event] = []
        if source == "memory":
            for node in range(self.nodes):
                holder = self.store.holders(node, {failed})[0]
                for gpu in range(self.gpus):
                    events.append(self.network.transfer(f"n{holder}.cpu", f"n{node}.gpu{gpu}", state, "restore"))
        else:
            self._readers = [self.sim.process(self._from_storage(node)) for node in range(self.nodes)]
            events += self._readers
        yield self.sim.env.all_of(events)

    def _from_storage(self, node: int) -> Generator[Any, Any, None]:
        state = self.store.state_bytes
        try:
            yield from self.storage[node].read(self.gpus * state, f"n{node} restore")
        except simpy.Interrupt:  # a further failure cut the recovery short
            return
        yield self.sim.env.all_of([
            self.network.transfer(f"n{node}.cpu", f"n{node}.gpu{gpu}", state, "restore") for gpu in range(self.gpus)
        ])

    def summary(self) -> dict[str, Any]:
        """Failures, lost work and recovery time (JSON-serialisable); a recovery still under
        way (the run stopped by ``outputs.max_time``) counts until now."""
        if self._recovery is not None and self._recovery.is_alive:
            self.events[-1]["recovery_s"] = self.sim.now - self.events[-1]["time_s"]
            self.events[-1]["in_progress"] = True
        lost = float(np.sum([e["lost_work_s"] for e in self.events])) if self.events else 0.0
        recovery = float(np.sum([e["recovery_s"] for e in self.events])) if self.events else 0.0
        return {
            "count": len(self.events),
            "unrecoverable": sum(1 for e in self.events if not e["recoverable"]),
            "gave_up": self.gave_up,
            "interrupted_recoveries": sum(1 for e in self.events if e["interrupted"]),
            "lost_work_s": lost,
            "recovery_s": recovery,
            "events": self.events,
        }
