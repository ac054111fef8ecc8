"""Executing checkpoint plans as transfers: GPU buffer, host memory, replicas, storage.

Paths (flows on the network, so they contend with training traffic):

* a GPU's chunk is cut into pieces of at most half its reserved checkpoint buffer; at most a
  buffer's worth is in flight. A piece leaves the buffer once all its copies have landed;
* ``memory`` plans (Gemini's design): each piece is copied to the local host's memory,
  ``n{i}.gpu{j} -> n{i}.cpu`` (PCIe), and sent from the GPU to every peer holding the node's
  replicas, ``n{i}.gpu{j} -> n{p}.cpu`` (GPUDirect RDMA: the GPU's PCIe switch and NIC, the
  fabric, the peer's host NIC and PCIe);
* ``storage`` plans: pieces are copied to the local host; once a node's whole state is in
  host memory it is written to storage.

A version is *captured* when no byte of it is left only in GPU memory (the optimizer step may
then overwrite the state: the consistency deadline) and *complete* when it is recoverable:
every replica landed (memory) or persisted (storage).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import simpy

from simhpc.engine import Simulation, Track
from simhpc.hardware.devices import Device
from simhpc.network import Network
from simhpc.workloads.moe.plan import CheckpointPlan
from simhpc.workloads.moe.storage import Storage


class Lanes:
    """Non-overlapping trace lanes ``thread.0``, ``thread.1``, ... of one process."""

    def __init__(self, sim: Simulation, process: str, thread: str) -> None:
        self.sim, self.process, self.thread = sim, process, thread
        self._tracks: list[Track] = []

    def span(self, name: str, start: float, end: float, args: dict[str, Any] | None = None) -> None:
        for track in self._tracks:
            if not track.spans or track.spans[-1].end <= start:
                break
        else:
            track = self.sim.trace.track(self.process, f"{self.thread}.{len(self._tracks)}")
            self._tracks.append(track)
        track.span(name, start, end, "checkpoint", args)


@dataclass
class Ledger:
    """Bytes moved and resources used by checkpoints (the invariants the tests check).

    ``pcie_bytes``, ``peer_bytes`` and ``storage_bytes`` are the bytes of completed versions,
    counted when a version completes; ``abandoned_bytes`` what runs given up at a failure had
    moved (and moved after it, draining).
    """

    pcie_bytes: float = 0.0
    peer_bytes: float = 0.0
    storage_bytes: float = 0.0
    abandoned_bytes: float = 0.0
    buffer_peak: float = 0.0
    """Most bytes ever in flight from one GPU's buffer."""
    completed: list[dict[str, Any]] = field(default_factory=list)


class CheckpointStore:
    """The checkpoint versions of a job: where they live, and the shared resources.

    Args:
        sim: the simulation.
        network: carries the copies.
        nodes: machines.
        gpus_per_node: GPUs per machine.
        state_bytes: checkpoint bytes per GPU.
        buffer_bytes: reserved GPU buffer per GPU.
        hosts: one host-memory device per node.
        storage: the storage server of each node (shared storage: the same object).
    """

    def __init__(
        self,
        sim: Simulation,
        network: Network,
        nodes: int,
        gpus_per_node: int,
        state_bytes: float,
        buffer_bytes: float,
        hosts: list[Device],
        storage: list[Storage],
    ) -> None:
        self.sim = sim
        self.network = network
        self.nodes = nodes
        self.gpus = gpus_per_node
        self.state_bytes = state_bytes
        self.buffer_bytes = buffer_bytes
        self.hosts = hosts
        self.storage = storage
        self.ledger = Ledger()
        self.memory: tuple[int, tuple[tuple[int, ...], ...]] | None = None
        """Newest complete in-memory version and its replica holders (``peers``)."""
        self._memory_reservation: list[float] = [0.0] * nodes
        self._wiped: set[int] = set()
        """Nodes whose host memory was lost since the in-memory version was committed."""
        self.persisted: int | None = None
        """Newest version complete in storage."""
        self.persist_idle: simpy.Event = sim.event().succeed()
        """Fires when the last storage write has finished (the next snapshot waits for it)."""
        self.copy_lanes = [Lanes(sim, f"n{i}.gpu{j}", "ckpt") for i in range(nodes) for j in range(gpus_per_node)]
        self.active: list[CheckpointRun] = []
        """Runs neither complete nor abandoned (a storage write may outlive its iteration)."""

    def start(self, version: int, plan: CheckpointPlan) -> CheckpointRun:
        """Begin checkpointing ``version`` according to ``plan``."""
        run = CheckpointRun(self, version, plan)
        if not run.complete.triggered:
            self.active.append(run)
        return run

    def holders(self, node: int, failed: set[int]) -> list[int]:
        """Surviving nodes whose host memory holds ``node``'s newest complete version."""
        if self.memory is None:
            return []
        _, peers = self.memory
        return [n for n in (node, *peers[node]) if n not in failed and n not in self._wiped]

    def fail(self, node: int) -> None:
        """Node ``node`` died: every run in progress is abandoned (an earlier version still being
        written to storage too: it can no longer complete); its host memory is empty."""
        for run in list(self.active):
            run.abandon()
        if self.memory is not None:
            lost = [n for n in range(self.nodes) if not self.holders(n, {node})]
            if lost:
                self._release_memory()
                self.memory = None
        host = self.hosts[node]
        host.memory.free(host.memory.used)
        self._memory_reservation[node] = 0.0
        self._wiped.add(node)
        if self.storage and self.storage[node].spec.local:  # its part of every snapshot went with it
            self.persisted = None
            self.storage[node].wipe()
        # The abandoned writes never complete a version: the next snapshot need not wait.
        self.persist_idle = self.sim.event().succeed()

    def _release_memory(self) -> None:
        for node, nbytes in enumerate(self._memory_reservation):
            if nbytes:
                self.hosts[node].memory.free(min(nbytes, self.hosts[node].memory.used))
        self._memory_reservation = [0.0] * self.nodes

    def commit_memory(self, version: int, peers: tuple[tuple[int, ...], ...], reserved: list[float]) -> None:
        """``version`` is complete in memory: it replaces the previous one, whose space is freed."""
        self._release_memory()
        self._memory_reservation = list(reserved)
        self.memory = (version, peers)
        self._wiped = set()


class CheckpointRun:
    """One version being checkpointed: chunk release, GPU pumps, copies, completion events.

    Args:
        store: the job's checkpoint store.
        version: the optimizer step whose state is saved.
        plan: the policy's plan.
    """

    def __init__(self, store: CheckpointStore, version: int, plan: CheckpointPlan) -> None:
        self.store = store
        self.sim = store.sim
        self.version = version
        self.plan = plan
        self.start_time = self.sim.now
        self.captured = self.sim.event()
        self.complete = self.sim.event()
        nodes, gpus = store.nodes, store.gpus
        self.piece_limit = store.buffer_bytes / 2
        self._chunks: dict[int, list[float]] = {}
        for chunk in plan.chunks:
            if chunk.nbytes > 0:
                count = max(1, math.ceil(chunk.nbytes / self.piece_limit - 1e-9))
                self._chunks.setdefault(chunk.release, []).extend([chunk.nbytes / count] * count)
        pieces = sum(len(sizes) for sizes in self._chunks.values())
        self.peers = plan.peers if plan.target == "memory" else ()
        self._pieces_left = pieces * nodes * gpus
        self._node_pieces = [pieces * gpus] * nodes
        self._persist_left = nodes if plan.target == "storage" else 0
        self._queues: list[deque[tuple[int, float]]] = [deque() for _ in range(nodes * gpus)]
        self.moved = {"pcie": 0.0, "peer": 0.0, "storage": 0.0}
        """Bytes this run has moved so far, by path (the ledger's once it completes)."""
        self.abandoned = False
        self._writers: list[simpy.Process] = []
        self._free = [store.buffer_bytes] * (nodes * gpus)
        self._gate_open = True
        self.reserved = self._reserve()
        if plan.target == "storage" and not store.persist_idle.triggered:
            self._gate_open = False
            store.persist_idle.callbacks.append(self._open_gate)
        if plan.target == "storage":
            store.persist_idle = self.complete
        if self._pieces_left == 0:
            self.captured.succeed()
            if plan.target == "memory":
                self._finish()
            else:
                self._persist_all()

    # -- resources ----------------------------------------------------------------------------

    def _reserve(self) -> list[float]:
        """Host memory for this version on every node (raises SimulatedOOM if it does not fit)."""
        store, plan = self.store, self.plan
        per_node = store.gpus * plan.nbytes
        held = [1] * store.nodes
        for peers in self.peers:
            for peer in peers:
                held[peer] += 1
        reserved = [per_node * count for count in held]
        for node, nbytes in enumerate(reserved):
            if nbytes:
                store.hosts[node].memory.allocate(nbytes, f"checkpoint v{self.version} ({plan.target})")
        return reserved

    # -- release and pumps --------------------------------------------------------------------

    def release(self, phase: int) -> None:
        """Phase ``phase`` starts: hand its chunks' pieces to every GPU's pump."""
        sizes = self._chunks.get(phase)
        if not sizes or self.abandoned:
            return
        for rank, queue in enumerate(self._queues):
            queue.extend((phase, size) for size in sizes)
            if self._gate_open:
                self._pump(rank)

    def _open_gate(self, _event: simpy.Event) -> None:
        if self.abandoned:  # the run it waited for was given up with it, at a failure
            return
        self._gate_open = True
        for rank in range(len(self._queues)):
            self._pump(rank)

    def _pump(self, rank: int) -> None:
        queue, store = self._queues[rank], self.store
        node, gpu = divmod(rank, store.gpus)
        source = f"n{node}.gpu{gpu}"
        targets = [node, *(self.peers[node] if self.peers else ())]
        while queue and self._free[rank] >= queue[0][1] * (1 - 1e-12):
            _, size = queue.popleft()
            self._free[rank] -= size
            store.ledger.buffer_peak = max(store.ledger.buffer_peak, store.buffer_bytes - self._free[rank])
            piece = [len(targets)]
            for target in targets:
                event = store.network.transfer(source, f"n{target}.cpu", size, "ckpt.copy")
                event.callbacks.append(partial(self._copy_landed, rank, target, size, self.sim.now, piece))

    def _copy_landed(
        self, rank: int, target: int, size: float, start: float, piece: list[int], _event: simpy.Event
    ) -> None:
        store = self.store
        node = rank // store.gpus
        if self.abandoned:
            store.ledger.abandoned_bytes += size
        else:
            self.moved["pcie" if target == node else "peer"] += size
        store.copy_lanes[rank].span(f"v{self.version} -> n{target}.cpu", start, self.sim.now, {"bytes": size})
        piece[0] -= 1
        if piece[0]:
            return
        self._free[rank] += size
        if self.abandoned:
            return
        self._pump(rank)
        self._pieces_left -= 1
        self._node_pieces[node] -= 1
        if self.plan.target == "storage":
            if self._node_pieces[node] == 0:
                self._writers.append(self.sim.process(self._persist(node)))
            if self._pieces_left == 0:
                self.captured.succeed()
        elif self._pieces_left == 0:
            self.captured.succeed()
            self._finish()

    # -- storage ------------------------------------------------------------------------------

    def _persist_all(self) -> None:
        for node in range(self.store.nodes):
            self._writers.append(self.sim.process(self._persist(node)))

    def _persist(self, node: int):
        store = self.store
        nbytes = store.gpus * self.plan.nbytes
        try:
            yield from store.storage[node].write(nbytes, self.version, f"n{node} v{self.version}")
        except simpy.Interrupt:  # abandoned at a failure: the write stops, its memory and file are freed
            store.storage[node].discard(self.version, nbytes)
            return
        self.moved["storage"] += nbytes
        if nbytes:
            store.hosts[node].memory.free(min(self.reserved[node], store.hosts[node].memory.used))
            self.reserved[node] = 0.0
        if self.abandoned:
            return
        self._persist_left -= 1
        if self._persist_left == 0:
            self._finish()

    # -- completion ---------------------------------------------------------------------------

    def _finish(self) -> None:
        store, plan = self.store, self.plan
        if self in store.active:
            store.active.remove(self)
        ledger = store.ledger
        ledger.pcie_bytes += self.moved["pcie"]
        ledger.peer_bytes += self.moved["peer"]
        ledger.storage_bytes += self.moved["storage"]
        if plan.target == "memory":
            store.commit_memory(self.version, self.peers, self.reserved)
        else:
            store.persisted = self.version
            for server in {id(server): server for server in store.storage}.values():
                server.retire(self.version)
        store.ledger.completed.append({
            "version": self.version,
            "target": plan.target,
            "start_s": self.start_time,
            "end_s": self.sim.now,
            "bytes_per_gpu": plan.nbytes,
            "copies": (1 + (len(self.peers[0]) if self.peers else 0)) if plan.target == "memory" else 1,
        })
        if not self.complete.triggered:
            self.complete.succeed()

    def abandon(self) -> None:
        """Give the run up after a failure: start no more copies, stop its storage writes, free its
        host memory and count what it moved as abandoned (copies already on the network drain
        unused)."""
        if self.abandoned or self.complete.triggered:
            return
        self.abandoned = True
        self.store.active.remove(self)
        self.store.ledger.abandoned_bytes += sum(self.moved.values())
        for writer in self._writers:
            if writer.is_alive:
                writer.interrupt("failure")
        for node, nbytes in enumerate(self.reserved):
            host = self.store.hosts[node]
            if nbytes:
                host.memory.free(min(nbytes, host.memory.used))
        self.reserved = [0.0] * self.store.nodes
        if self.plan.target == "storage":
            self.complete.succeed()  # unblock whoever waits for the persist gate
