"""Training traffic of the MoE job: expert all-to-all and gradient all-reduce.

Both follow NCCL's rail-aligned schedule on multi-NIC nodes: traffic between machines travels
between GPUs of the same local index (a *rail*: GPU ``j`` of every node, each with its own NIC),
after an NVLink hop inside the source node (PXN for the all-to-all; the intra-node
reduce-scatter / all-gather of a hierarchical all-reduce). The rail transfers are flows on the
network (in flow mode they share NIC and PCIe links with checkpoint traffic); the NVLink part,
which nothing else uses, is computed in closed form (bytes / NVLink bandwidth + latency) and
recorded as a span on the node's ``nvlink`` track. One flow per (rail, node pair) keeps the
event count modest: about ``rails x nodes x (nodes - 1)`` flows per all-to-all.
"""

from __future__ import annotations

import numpy as np
import simpy

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network


class TrainingComm:
    """The communicators of one job and the collectives of one iteration.

    Args:
        sim: the simulation.
        network: the cluster network.
        nodes: machines.
        gpus_per_node: GPUs per machine (= rails).
        expert_parallel: GPUs per expert-parallel group (consecutive ranks).
        nvlink_bandwidth: per GPU and direction (bytes/s).
        nvlink_latency: seconds.
    """

    def __init__(
        self,
        sim: Simulation,
        network: Network,
        nodes: int,
        gpus_per_node: int,
        expert_parallel: int,
        nvlink_bandwidth: float,
        nvlink_latency: float,
    ) -> None:
        self.sim = sim
        self.network = network
        self.nodes = nodes
        self.gpus = gpus_per_node
        self.ep = expert_parallel
        self.nvlink_bandwidth = nvlink_bandwidth
        self.nvlink_latency = nvlink_latency
        self.ep_nodes = max(1, expert_parallel // gpus_per_node)
        groups = nodes // self.ep_nodes
        # Rail communicators of each expert-parallel group (only when it spans nodes).
        self.a2a_rails: list[list[Communicator]] = []
        if self.ep_nodes > 1:
            for g in range(groups):
                members = range(g * self.ep_nodes, (g + 1) * self.ep_nodes)
                self.a2a_rails.append([
                    Communicator(network, [f"n{a}.gpu{j}" for a in members], f"a2a.rail{j}")
                    for j in range(gpus_per_node)
                ])
        self.dp_rails = (
            [Communicator(network, [f"n{a}.gpu{j}" for a in range(nodes)], f"allreduce.rail{j}")
             for j in range(gpus_per_node)] if nodes > 1 else []
        )
        # Copies of an expert: GPUs at the same place in every expert-parallel group. A group
        # inside a node leaves local copies on the node (reduced over NVLink) and one per node on
        # every rail; a group of several nodes, one copy per group on the rail of each of its GPUs.
        self.local_replicas = max(1, gpus_per_node // expert_parallel)
        self.replica_rails: list[Communicator] = []
        if self.ep_nodes > 1 and groups > 1:
            self.replica_rails = [
                Communicator(network, [f"n{o + g * self.ep_nodes}.gpu{j}" for g in range(groups)],
                             f"allreduce.experts{o}.rail{j}")
                for o in range(self.ep_nodes) for j in range(gpus_per_node)
            ]
        self._nvlink_tracks = [sim.trace.track(f"n{a}", "nvlink") for a in range(nodes)]

    # -- all-to-all ---------------------------------------------------------------------------

    def all_to_all(self, dest_bytes: np.ndarray, reverse: bool, label: str) -> simpy.Event:
        """One expert all-to-all over every expert-parallel group.

        Args:
            dest_bytes: ``(expert_parallel,)`` bytes each GPU of a group sends to each GPU of
                it (dispatch direction: to the experts' GPUs).
            reverse: the combine direction (experts' GPUs send back).
            label: span name.

        Returns:
            An event that fires when every GPU has all its data.
        """
        gpus, ep_nodes = self.gpus, self.ep_nodes
        sizes = dest_bytes.reshape(ep_nodes, gpus) if ep_nodes > 1 else dest_bytes.reshape(1, -1)
        events: list[simpy.Event] = []
        if ep_nodes > 1:
            for rails in self.a2a_rails:
                for j, comm in enumerate(rails):
                    # Node a sends node b's GPU j the bytes all its GPUs route to that GPU.
                    matrix = np.tile(sizes[:, j] * gpus, (ep_nodes, 1))
                    events.append(comm.all_to_all(matrix=matrix.T if reverse else matrix))
        nvlink = self._nvlink_time(sizes)
        events.append(self.sim.timeout(nvlink))
        start = self.sim.now
        for track in self._nvlink_tracks:
            if nvlink > 0:
                track.span(label, start, start + nvlink, "comm")
        return self.sim.env.all_of(events)

    def _nvlink_time(self, sizes: np.ndarray) -> float:
        """NVLink time of an all-to-all: intra-node exchange plus the PXN hop of remote bytes.

        ``sizes[b, j]``: bytes every GPU sends GPU ``j`` of node ``b`` of the group. A GPU sends
        its local peers their share and forwards remote bytes for other rails to the GPU of the
        destination's rail; the busiest GPU port sets the time (same in both directions).
        """
        gpus = sizes.shape[1]
        local = sizes.sum(axis=0)  # per local index, bytes from one GPU to that rail's GPUs
        total = local.sum()
        # Out of GPU j: everything except what stays on its own rail (own copy and same-rail remote).
        out = total - local
        # Into GPU j: the data of its 7 local peers for itself and for remote GPUs of rail j.
        inbound = (gpus - 1) * local
        busiest = float(max(out.max(), inbound.max()))
        if busiest <= 0 or gpus == 1:
            return 0.0
        return self.nvlink_latency + busiest / self.nvlink_bandwidth

    # -- all-reduce ---------------------------------------------------------------------------

    def all_reduce(self, dense_bytes: float, expert_bytes: float = 0.0) -> simpy.Event:
        """Hierarchical all-reduce of the gradients: the dense ones (``dense_bytes``, every GPU)
        over all GPUs, a GPU's expert ones (``expert_bytes``) over the copies of its experts.

        Inside a node: reduce-scatter, then all-gather, over NVLink (the dense bytes among the
        node's GPUs, the expert bytes among its copies of each expert); between nodes: a ring per
        rail of each GPU's shard (dense, and expert when every node holds copies), or a ring per
        rail among the expert-parallel groups' copies when a group spans nodes.

        Returns:
            A process event that fires when the all-reduce is done.
        """
        return self.sim.process(self._all_reduce(dense_bytes, expert_bytes))

    def _all_reduce(self, dense_bytes: float, expert_bytes: float):
        gpus, local = self.gpus, self.local_replicas
        nvlink_bytes = (gpus - 1) / gpus * dense_bytes + (local - 1) / local * expert_bytes
        intra = 0.0 if gpus == 1 else self.nvlink_latency + nvlink_bytes / self.nvlink_bandwidth
        start = self.sim.now
        if intra > 0:
            yield self.sim.timeout(intra)
            for track in self._nvlink_tracks:
                track.span("reduce_scatter", start, self.sim.now, "comm")
        rail_expert = expert_bytes / local if self.ep_nodes == 1 else 0.0  # every node holds copies
        events = [comm.all_reduce(dense_bytes / gpus + rail_expert, "ring") for comm in self.dp_rails]
        if expert_bytes > 0:
            events += [comm.all_reduce(expert_bytes, "ring") for comm in self.replica_rails]
        if events:
            yield self.sim.env.all_of(events)
        if intra > 0:
            start = self.sim.now
            yield self.sim.timeout(intra)
            for track in self._nvlink_tracks:
                track.span("all_gather", start, self.sim.now, "comm")
