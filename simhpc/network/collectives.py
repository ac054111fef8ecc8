"""`Communicator`: MPI/NCCL-style collectives built on network transfers.

``nbytes`` is the per-rank buffer size ``S``. Ring algorithms move ``S / n`` per step. The
compute cost of reductions is ignored: only the data movement is simulated. Every method
returns an event that fires when every rank has finished; each rank's part is recorded as a
span on its track ``(rank, name)`` (overlapping collectives on one rank go to extra lanes
``name.1``, ``name.2``, ...) with the argument ``bytes`` (``S``; all-to-all: the total moved).
:meth:`Communicator.send` also records a trace arrow from the send to its receive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import simpy

from simhpc.engine import Track
from simhpc.network.analytic_batch import AnalyticBatch, PairRoutes
from simhpc.network.analytic_ring import AnalyticRing
from simhpc.network.fabric import Network
from simhpc.network.schedules import BinomialTree, Ring

MAX_ALL_TO_ALL_RANKS = 1024
"""The most ranks an all-to-all runs among: it makes n (n - 1) transfers, each routed, and in flow
mode each simulated on its own (1024 ranks in analytic mode, where the batch is timed in advance:
16-17 s and 1.1 GB here, most of it routing the pairs; 10 000 would take most of an hour and 100 GB)."""


def check_all_to_all_ranks(n: int) -> None:
    """Refuse (``ValueError``) an all-to-all among more than :data:`MAX_ALL_TO_ALL_RANKS` ranks."""
    if n > MAX_ALL_TO_ALL_RANKS:
        raise ValueError(f"an all-to-all among {n} ranks makes {n * (n - 1):,} transfers, each simulated "
                         f"on its own: at most {MAX_ALL_TO_ALL_RANKS} ranks")


MAX_TRANSFERS_A_ROUND = 1 << 26
"""The most transfers one collective of a workload makes, each simulated on its own: a ring among n
ranks makes about 2 n^2 (flow mode, 256 hosts of a fat-tree: 130 000 transfers in 5 s here), so a
million ranks would run for ever."""
MAX_TRANSFERS = 1 << 30
"""The most over all of a workload's iterations (about an hour of simulation)."""
ANALYTIC_RING_SHARE = 16
"""How many transfers of a ring timed in advance (analytic mode, :mod:`simhpc.network.analytic_ring`)
count as one against those limits: a step's transfers that end together are one event done with
numpy (a 4096-rank ring all-reduce on a fat-tree, 33.5 M transfers, in 15 s with its links' busy
time tallied: 0.45 us a transfer, against about 9 us one by one)."""


def simulated_transfers(collective: str, algorithm: str, ranks: int, nodes: int, mode: str) -> int:
    """What one collective costs to simulate, in transfers simulated on their own: its
    :func:`transfer_count`, those of rings timed in advance on an analytic network counted
    :data:`ANALYTIC_RING_SHARE` to one (a hierarchical all-reduce's but its all-gathers in the nodes)."""
    transfers = transfer_count(collective, algorithm, ranks, nodes)
    if mode != "analytic":
        return transfers
    if (collective, algorithm) == ("all_reduce", "hierarchical"):
        gathers = ranks * (ranks // nodes - 1)
        return gathers + -(-(transfers - gathers) // ANALYTIC_RING_SHARE)
    ring = collective in ("reduce_scatter", "all_gather") or (collective, algorithm) == ("all_reduce", "ring")
    return -(-transfers // ANALYTIC_RING_SHARE) if ring else transfers


def _ignore(_rank: int) -> None:
    """A ring's ``on_done`` where nothing waits on it."""


def uneven_nodes(network: Network, ranks: Sequence[str]) -> dict[str, int] | None:
    """Ranks per node when the nodes hold different numbers of ``ranks`` (the hierarchical
    all-reduce needs as many on every node), else None."""
    per_node: dict[str, int] = {}
    for rank in ranks:
        node = network.topology.node_of(rank)
        per_node[node] = per_node.get(node, 0) + 1
    return per_node if len(set(per_node.values())) > 1 else None


def transfer_count(collective: str, algorithm: str, ranks: int, nodes: int = 1) -> int:
    """Transfers one ``collective`` (with ``algorithm`` for an all-reduce) among ``ranks`` ranks
    makes, the hierarchical all-reduce's ranks spread evenly over ``nodes`` nodes."""
    n = ranks
    if collective == "all_reduce":
        if algorithm == "tree":
            return 2 * (n - 1)
        if algorithm == "hierarchical":
            local = n // nodes
            return 2 * n * (local - 1) + 2 * n * (nodes - 1)  # the rings in the nodes, then across them
        return 2 * n * (n - 1)
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return n * (n - 1)
    return n - 1 if collective == "broadcast" else 1


ALL_REDUCE_ALGORITHMS = ("ring", "tree", "hierarchical")


class _Collective:
    """Tracks which ranks have finished one collective; records spans, fires ``done``."""

    def __init__(self, comm: Communicator, label: str, ranks: list[int], nbytes: float) -> None:
        self.comm = comm
        self.label = label
        self.ranks = ranks
        self.nbytes = nbytes
        self.start = comm.network.sim.now
        self.ends: dict[int, float] = {}
        self.tracks: dict[int, Track] = {}
        self.done = comm.network.sim.event()

    def finish(self, rank: int) -> None:
        """Rank ``rank`` (an index into the communicator) has finished its part."""
        self.ends[rank] = self.comm.network.sim.now
        if len(self.ends) == len(self.ranks):
            self.comm._record(self)
            self.done.succeed()


class Communicator:
    """A group of ranks (endpoint names) running collectives over a :class:`Network`.

    Args:
        network: the network the transfers use.
        ranks: endpoint names, one per rank, in rank order.
        name: label of the trace tracks and transfers.
        record: record per-rank spans and send arrows in the trace.
    """

    def __init__(
        self, network: Network, ranks: Sequence[str], name: str = "comm", record: bool = True
    ) -> None:
        self.network = network
        self.ranks = list(ranks)
        self.name = name
        self.record = record
        if not self.ranks:
            raise ValueError(f"communicator {name!r} has no ranks")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"communicator {name!r}: a rank appears twice in {self.ranks}")
        for rank in self.ranks:
            network.topology.node_of(rank)  # raises on an unknown endpoint
        self._index = {rank: i for i, rank in enumerate(self.ranks)}
        self._lanes: dict[str, list[Track]] = {}
        self._pair_routes: PairRoutes | None = None
        """The routes between the ranks as arrays, made by the first analytic all-to-all."""

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def _rank_index(self, rank: str | int) -> int:
        if isinstance(rank, int) and not isinstance(rank, bool):
            if not 0 <= rank < self.size:
                raise ValueError(f"communicator {self.name!r}: rank {rank} out of range 0..{self.size - 1}")
            return rank
        try:
            return self._index[rank]  # type: ignore[index]
        except KeyError:
            raise ValueError(f"communicator {self.name!r}: {rank!r} is not one of its ranks") from None

    @staticmethod
    def _size(nbytes: float) -> float:
        if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
            raise ValueError(f"message size must be a finite number of bytes >= 0, got {nbytes!r}")
        return float(nbytes)

    # -- collectives --------------------------------------------------------------------------

    def send(self, src: str | int, dst: str | int, nbytes: float) -> simpy.Event:
        """Point-to-point send of ``nbytes`` from rank ``src`` to rank ``dst``."""
        a, b = self._rank_index(src), self._rank_index(dst)
        op = _Collective(self, "send", sorted({a, b}), self._size(nbytes))
        event = self.network.transfer(self.ranks[a], self.ranks[b], op.nbytes, f"{self.name}.send")
        event.callbacks.append(partial(self._sent, op, a, b))
        return op.done

    def _sent(self, op: _Collective, a: int, b: int, _event: simpy.Event) -> None:
        for rank in op.ranks:
            op.finish(rank)
        if self.record:  # from the middle of the send's slice to the middle of the receive's
            sim = self.network.sim
            middle = (op.start + sim.now) / 2
            sim.trace.arrow(f"{self.name}.send", op.tracks[a], middle, op.tracks[b], middle)

    def broadcast(self, root: str | int, nbytes: float) -> simpy.Event:
        """Binomial-tree broadcast of ``nbytes`` from ``root``: ``ceil(log2 n)`` rounds."""
        op = self._begin("broadcast", nbytes)
        tree = BinomialTree(
            self.network,
            self.ranks,
            self._rank_index(root),
            op.nbytes,
            True,
            self._tag("broadcast"),
            op.finish,
        )
        tree.start(self._rank_index(root))
        return op.done

    def reduce_scatter(self, nbytes: float) -> simpy.Event:
        """Ring reduce-scatter: ``n - 1`` steps of ``S / n``."""
        return self._ring("reduce_scatter", nbytes, self.size - 1)

    def all_gather(self, nbytes: float) -> simpy.Event:
        """Ring all-gather into an ``S``-byte buffer: ``n - 1`` steps of ``S / n``."""
        return self._ring("all_gather", nbytes, self.size - 1)

    def _ring(self, kind: str, nbytes: float, steps: int) -> simpy.Event:
        op = self._begin(kind, nbytes)
        Ring(self.network, self.ranks, steps, op.nbytes / self.size, self._tag(kind), op.finish).start_all()
        return op.done

    def all_reduce(self, nbytes: float, algorithm: str = "ring") -> simpy.Event:
        """All-reduce of an ``S``-byte buffer.

        Args:
            nbytes: buffer size ``S`` per rank.
            algorithm: ``"ring"`` (``2(n-1)`` steps of ``S/n``), ``"tree"`` (binomial reduce to
                rank 0, then binomial broadcast, full ``S`` per message) or ``"hierarchical"``
                (ring reduce-scatter within each node, ring all-reduce of ``S/L`` across nodes
                among ranks of the same local index, ring all-gather within each node; every
                node must hold the same number ``L`` of ranks).
        """
        if algorithm not in ALL_REDUCE_ALGORITHMS:
            raise ValueError(
                f"all-reduce algorithm must be one of {', '.join(ALL_REDUCE_ALGORITHMS)}, got {algorithm!r}"
            )
        if algorithm == "ring":
            return self._ring("all_reduce", nbytes, 2 * (self.size - 1))
        op = self._begin(f"all_reduce.{algorithm}", nbytes)
        tag = self._tag(f"all_reduce.{algorithm}")
        if algorithm == "tree":
            down = BinomialTree(self.network, self.ranks, 0, op.nbytes, True, tag, op.finish)
            up = BinomialTree(self.network, self.ranks, 0, op.nbytes, False, tag, down.start)
            for i in range(self.size):
                up.start(i)
        else:
            self._hierarchical(op, tag)
        return op.done

    def _hierarchical(self, op: _Collective, tag: str) -> None:
        machines: dict[str, list[int]] = {}
        for i, rank in enumerate(self.ranks):
            machines.setdefault(self.network.topology.node_of(rank), []).append(i)
        nodes = list(machines.values())
        local = len(nodes[0])
        if any(len(members) != local for members in nodes):
            sizes = {name: len(members) for name, members in machines.items()}
            raise ValueError(
                f"hierarchical all-reduce needs the same number of ranks on every node, got {sizes}"
            )
        size = op.nbytes

        def in_node(members: list[int], done: Callable[[int], None]) -> Ring:
            """A ring over one node's ranks moving a 1/local share of the buffer per step."""
            return Ring(self.network, [self.ranks[i] for i in members], local - 1, size / local, tag, done)

        gather = [in_node(members, partial(self._map_done, members, op.finish)) for members in nodes]
        if self.network.mode == "analytic":
            self._hierarchical_in_advance(nodes, gather, size)
            return
        across = [
            Ring(
                self.network,
                [self.ranks[members[j]] for members in nodes],
                2 * (len(nodes) - 1),
                size / (local * len(nodes)),
                tag,
                partial(self._start_in, gather, j),
            )
            for j in range(local)
        ]
        scatter = [in_node(members, partial(self._start_across, across, a)) for a, members in enumerate(nodes)]
        for ring in scatter:
            ring.start_all()

    def _hierarchical_in_advance(self, nodes: list[list[int]], gather: list[Ring], size: float) -> None:
        """The analytic network's hierarchical all-reduce: the rings in the nodes and across them
        timed in advance (:class:`AnalyticRing`), each rank joining a ring across the nodes when
        its node's ring is done with it; the all-gathers in the nodes (each rank's input at its own
        time) transfer by transfer."""
        network, local = self.network, len(nodes[0])
        ready = np.empty((len(nodes), local))
        for a, members in enumerate(nodes):
            scatter = AnalyticRing(network, [self.ranks[i] for i in members], local - 1, size / local, _ignore)
            ready[a] = scatter.done_times()
            scatter.start()
        for j in range(local):
            across = AnalyticRing(network, [self.ranks[members[j]] for members in nodes], 2 * (len(nodes) - 1),
                                  size / (local * len(nodes)), partial(self._start_in, gather, j))
            across.start(ready[:, j])

    @staticmethod
    def _map_done(members: list[int], finish: Callable[[int], None], j: int) -> None:
        finish(members[j])

    @staticmethod
    def _start_in(rings: list[Ring], j: int, a: int) -> None:
        rings[a].start(j)

    @staticmethod
    def _start_across(rings: list[Ring], a: int, j: int) -> None:
        rings[j].start(a)

    def all_to_all(self, nbytes_per_pair: float = 0.0, matrix: Any = None) -> simpy.Event:
        """Every rank sends to every other rank at once, as one batch of transfers.

        In analytic mode the messages share their end links (see
        :meth:`Network.transfer_batch`), and the batch is timed in advance
        (:mod:`simhpc.network.analytic_batch`): on a non-blocking switch an even all-to-all of ``S``
        bytes per rank takes ``alpha + (n - 1) / n * S / B``, and one by matrix ``alpha`` plus
        the busiest host link's bytes over its bandwidth.

        Args:
            nbytes_per_pair: bytes each rank sends each other rank.
            matrix: ``n x n`` bytes from rank ``i`` to rank ``j`` (uneven MoE dispatch); the
                diagonal (local data) and zero entries send nothing. Overrides
                ``nbytes_per_pair``.
        """
        n = self.size
        check_all_to_all_ranks(n)
        if matrix is None:
            sizes = np.full((n, n), self._size(nbytes_per_pair))
        else:
            sizes = np.array(matrix, dtype=float)
            if sizes.shape != (n, n) or not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
                raise ValueError(f"all-to-all matrix must be {n}x{n} finite bytes >= 0")
        np.fill_diagonal(sizes, 0.0)
        op = self._begin("all_to_all", float(sizes.sum()))
        if self.network.mode == "analytic":
            if self._pair_routes is None:
                self._pair_routes = PairRoutes(self.network, self.ranks)
            AnalyticBatch(self.network, self._pair_routes, sizes, op.finish).start()
            return op.done
        pending = (np.count_nonzero(sizes, axis=0) + np.count_nonzero(sizes, axis=1)).tolist()
        tag = self._tag("all_to_all")
        rows, cols = np.nonzero(sizes)
        pairs = list(zip(rows.tolist(), cols.tolist()))
        ranks = self.ranks
        batch = [(ranks[i], ranks[j], nbytes) for (i, j), nbytes in zip(pairs, sizes[rows, cols].tolist())]
        for (i, j), event in zip(pairs, self.network.transfer_batch(batch, tag)):
            event.callbacks.append(partial(self._pair_done, op, pending, i, j))
        for i, count in enumerate(pending):
            if count == 0:
                op.finish(i)
        return op.done

    @staticmethod
    def _pair_done(op: _Collective, pending: list[int], i: int, j: int, _event: simpy.Event) -> None:
        for rank in (i, j):
            pending[rank] -= 1
            if pending[rank] == 0:
                op.finish(rank)

    # -- trace --------------------------------------------------------------------------------

    def _tag(self, kind: str) -> str:
        return f"{self.name}.{kind}"

    def _begin(self, label: str, nbytes: float) -> _Collective:
        return _Collective(self, label, list(range(self.size)), self._size(nbytes))

    def _record(self, op: _Collective) -> None:
        """One span per rank on the first lane of its track that is free since the op began."""
        if not self.record:
            return
        trace = self.network.sim.trace
        for i in op.ranks:
            rank = self.ranks[i]
            lanes = self._lanes.setdefault(rank, [])
            for track in lanes:
                if not track.spans or track.spans[-1].end <= op.start:
                    break
            else:
                track = trace.track(rank, self.name if not lanes else f"{self.name}.{len(lanes)}")
                lanes.append(track)
            track.span(op.label, op.start, op.ends[i], "comm", {"bytes": op.nbytes})
            op.tracks[i] = track
