"""What a checkpoint policy sees and what it decides: phases, facts, observations, plans.

A policy (``simhpc.policies.checkpoint``) gets :class:`ClusterFacts` once, a
:class:`Observation` after every iteration, and returns a :class:`CheckpointPlan` before every
iteration. The MoE workload executes the plan as transfers on the simulated machine. Nothing
here needs SimPy, so policies are unit-tested with hand-made facts and observations.

Every GPU holds the same amount of checkpoint state (the layout is symmetric), so a plan is
uniform: each :class:`Chunk` is cut from every GPU's state at once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

PhaseKind = Literal["compute", "comm"]


@dataclass(frozen=True)
class Phase:
    """One step of an iteration, executed by every GPU together.

    Attributes:
        index: position in the iteration.
        name: e.g. ``"fwd.3.expert"``.
        kind: ``"compute"`` (the network is idle: a gap) or ``"comm"`` (training traffic).
        stage: ``"fwd"``, ``"bwd"``, ``"sync"`` (gradient all-reduce) or ``"step"`` (optimizer).
        part: ``"attention"``, ``"dispatch"``, ``"expert"``, ``"combine"``, ``"ffn"`` (a dense
            layer's feed-forward network), ``"allreduce"`` or ``"optimizer"``.
        layer: the transformer layer, or None.
    """

    index: int
    name: str
    kind: PhaseKind
    stage: str
    part: str
    layer: int | None = None


def iteration_phases(layers: int, moe_layers: Collection[int] | None = None) -> tuple[Phase, ...]:
    """The phases of one training iteration of a ``layers``-layer MoE transformer.

    Forward, per MoE layer: attention (with gate), dispatch all-to-all, experts, combine
    all-to-all; per dense layer: attention, feed-forward network. Backward, layers in reverse:
    combine-gradient all-to-all, expert backward, dispatch-gradient all-to-all, attention
    backward (dense: feed-forward, attention). Then the gradient all-reduce and the optimizer
    step (the consistency deadline of the running checkpoint). ``moe_layers``: the layers with
    experts (default: all).
    """
    moe = set(range(layers) if moe_layers is None else moe_layers)
    forward_moe = (("attention", "compute"), ("dispatch", "comm"), ("expert", "compute"), ("combine", "comm"))
    backward_moe = (("combine", "comm"), ("expert", "compute"), ("dispatch", "comm"), ("attention", "compute"))
    forward_dense = (("attention", "compute"), ("ffn", "compute"))
    backward_dense = (("ffn", "compute"), ("attention", "compute"))
    spec: list[tuple[str, PhaseKind, str, str, int | None]] = []
    for layer in range(layers):
        for part, kind in forward_moe if layer in moe else forward_dense:
            spec.append((f"fwd.{layer}.{part}", kind, "fwd", part, layer))
    for layer in reversed(range(layers)):
        for part, kind in backward_moe if layer in moe else backward_dense:
            spec.append((f"bwd.{layer}.{part}", kind, "bwd", part, layer))
    spec.append(("allreduce", "comm", "sync", "allreduce", None))
    spec.append(("optimizer", "compute", "step", "optimizer", None))
    return tuple(Phase(i, *entry) for i, entry in enumerate(spec))


@dataclass(frozen=True)
class ClusterFacts:
    """What a policy knows about the machine and the job (fixed for a run).

    Attributes:
        nodes: machines.
        gpus_per_node: GPUs per machine.
        layers: transformer layers.
        phases: the phases of an iteration.
        state_bytes: checkpoint bytes per GPU.
        buffer_bytes: reserved GPU buffer per GPU.
        replicas: in-memory copies of a node's checkpoint (local one included).
        pcie_rate: GPU->host bandwidth one GPU gets when every GPU copies at once (bytes/s).
        copy_rates: ``copy_rates[p]``: bandwidth one GPU gets when every GPU copies its state
            to its host and to ``p`` peers' hosts at once (the bottleneck link's fair share).
        storage_rate: persistent-storage write bandwidth per node (bytes/s).
        host_memory: host memory per node (bytes).
        every: the scenario's checkpoint interval (iterations).
    """

    nodes: int
    gpus_per_node: int
    layers: int
    phases: tuple[Phase, ...]
    state_bytes: float
    buffer_bytes: float
    replicas: int
    pcie_rate: float
    copy_rates: tuple[float, ...]
    storage_rate: float
    host_memory: float
    every: int = 1

    @property
    def optimizer_phase(self) -> int:
        return self.phases[-1].index

    def memory_rate(self, peers: int) -> float:
        """Per-GPU drain rate of an in-memory checkpoint with ``peers`` remote replicas."""
        if peers <= 0 or not self.copy_rates:
            return self.pcie_rate
        return self.copy_rates[min(peers, len(self.copy_rates) - 1)]

    def layer_phases(self, layer: int) -> tuple[int, ...]:
        """Indices of every phase of ``layer`` (forward and backward)."""
        return tuple(p.index for p in self.phases if p.layer == layer)


@dataclass(frozen=True)
class Observation:
    """What the workload reports to the policy after an iteration.

    Attributes:
        iteration: the iteration just finished.
        duration: its wall time (host timer; free).
        gpu_loads: ``(layers, expert_parallel)`` tokens of the most-loaded expert on each GPU
            (known from the routing metadata the all-to-all needs anyway; free; zero in dense
            layers).
        durations: phase index -> seconds, only for the phases the plan asked to profile.
        stall: seconds training waited for the checkpoint in this iteration.
    """

    iteration: int
    duration: float
    gpu_loads: np.ndarray
    durations: Mapping[int, float] = field(default_factory=dict)
    stall: float = 0.0


@dataclass(frozen=True)
class Chunk:
    """A slice of every GPU's checkpoint state, released when phase ``release`` starts.

    Attributes:
        release: phase index.
        nbytes: bytes per GPU (the executor splits it into pieces that fit the GPU buffer).
    """

    release: int
    nbytes: float


@dataclass(frozen=True)
class CheckpointPlan:
    """A policy's decision for one iteration.

    Attributes:
        take: checkpoint the state of the previous optimizer step during this iteration.
        target: ``"memory"`` (GPU -> local host memory over PCIe, then host -> the ``peers``'
            host memory over the NIC) or ``"storage"`` (GPU -> host, then host -> storage).
        chunks: the state, cut into chunks with release points; bytes sum to the state size.
        blocking: training waits for the GPU->host copy before the iteration starts
            (TorchSnapshot's synchronous staging).
        profile: phases to time during this iteration (each costs the workload's
            ``profile_overhead`` on every GPU).
        peers: for each node, the nodes holding its remote replicas.
        interval: the checkpoint interval in force (reported).
    """

    take: bool = False
    target: Literal["memory", "storage"] = "memory"
    chunks: tuple[Chunk, ...] = ()
    blocking: bool = False
    profile: frozenset[int] = frozenset()
    peers: tuple[tuple[int, ...], ...] = ()
    interval: int = 1

    @property
    def nbytes(self) -> float:
        """Bytes per GPU the plan moves."""
        return sum(chunk.nbytes for chunk in self.chunks)
