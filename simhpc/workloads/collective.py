"""``kind: collective`` — run one collective of a given size over a set of ranks, N times.

The demo workload and the network's calibration check: its summary gives the time per
iteration, the algorithm bandwidth S/t and the bus bandwidth (nccl-tests convention), beside
the alpha-beta estimate of the same collective: its algorithm on uncontended links, each
message costing the latency plus size over bandwidth of the path it takes (a ring step waits
for its slowest hop; a tree's messages follow its rounds). Not for the hierarchical all-reduce,
nor for an all-to-all whose paths differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Annotated, Any, Literal

from pydantic import Field

from simhpc.network.schedules import binomial_children
from simhpc.registry import register
from simhpc.scenario.types import Count, PositiveInt, PositiveSize, Strict, Time
from simhpc.workloads.base import InvalidReference, Workload

# Bytes each rank moves over the wire per byte of buffer, for the bus-bandwidth convention.
_BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


class CollectiveConfig(Strict):
    """A collective benchmark: which operation, algorithm, buffer size, ranks and repetitions."""

    kind: Literal["collective"]
    collective: Literal["all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "send_recv"]
    algorithm: Literal["ring", "tree", "hierarchical"] = "ring"
    size: PositiveSize
    """Per-rank buffer size S (all_to_all: S is split evenly among the destinations)."""
    ranks: PositiveInt | list[str] | None = None
    """How many endpoints take part (the first N), their names, or all (default)."""
    iterations: Annotated[int, Field(gt=0, le=10_000, strict=True)] = 1
    """Times the collective runs, at most 10,000 (each one is simulated message by message)."""
    gap: Time = 0.0
    """Idle time between iterations (stands for compute)."""
    root: Count = 0


@register("workload", "collective")
class CollectiveWorkload(Workload):
    """Repeat a collective; record each iteration's duration."""

    Config = CollectiveConfig
    needs_network = True

    def __init__(self, config: CollectiveConfig, context: Any) -> None:
        super().__init__(config, context)
        from simhpc.network import Communicator
        from simhpc.network.collectives import (
            MAX_TRANSFERS,
            MAX_TRANSFERS_A_ROUND,
            check_all_to_all_ranks,
            simulated_transfers,
            transfer_count,
            uneven_nodes,
        )

        endpoints = list(self.ctx.network.topology.endpoints)
        if config.ranks is None:
            ranks = endpoints
        elif isinstance(config.ranks, int):
            if config.ranks > len(endpoints):
                raise InvalidReference("ranks", f"{config.ranks} ranks requested, the topology has {len(endpoints)}")
            ranks = endpoints[: config.ranks]
        else:
            unknown = [name for name in config.ranks if name not in endpoints]
            if unknown:
                raise InvalidReference("ranks", f"unknown endpoint {unknown[0]!r} (e.g. {endpoints[0]!r})")
            repeated = next((name for i, name in enumerate(config.ranks) if name in config.ranks[:i]), None)
            if repeated is not None:
                raise InvalidReference("ranks", f"endpoint {repeated!r} is listed twice")
            ranks = list(config.ranks)
        if len(endpoints) < 2:
            raise InvalidReference("network.topology", f"the topology has {len(endpoints)} endpoint; "
                                   "a collective needs at least 2 ranks", absolute=True)
        if len(ranks) < 2:
            raise InvalidReference("ranks", "a collective needs at least 2 ranks")
        if config.collective == "all_to_all":
            try:
                check_all_to_all_ranks(len(ranks))
            except ValueError as error:
                raise InvalidReference("ranks", f"{error} (set workload.ranks)") from None
        if config.root >= len(ranks):
            raise InvalidReference("root", f"root {config.root} is not one of the {len(ranks)} ranks")
        if config.collective == "all_reduce" and config.algorithm == "hierarchical":
            per_node = uneven_nodes(self.ctx.network, ranks)
            if per_node is not None:
                raise InvalidReference("ranks", "the hierarchical all-reduce needs the same number of ranks "
                                       f"on every node, got {per_node}")
        nodes = len({self.ctx.network.topology.node_of(rank) for rank in ranks})
        mode = self.ctx.network.mode
        transfers = transfer_count(config.collective, config.algorithm, len(ranks), nodes)
        cost = simulated_transfers(config.collective, config.algorithm, len(ranks), nodes, mode)
        counted = (f"{transfers:,} transfers, each simulated on its own" if cost == transfers else
                   f"{transfers:,} transfers, which a ring on the analytic network simulates as {cost:,} on their own")
        if cost > MAX_TRANSFERS_A_ROUND:
            raise InvalidReference("ranks", f"a {self.algorithm} {config.collective} among {len(ranks)} ranks makes "
                                   f"{counted}: at most {MAX_TRANSFERS_A_ROUND:,} (set workload.ranks)")
        if cost * config.iterations > MAX_TRANSFERS:
            raise InvalidReference("iterations", f"{config.iterations} x {counted}: at most {MAX_TRANSFERS:,} in all")
        self.ranks = ranks
        self.comm = Communicator(self.ctx.network, ranks, name=config.collective)
        self.durations: list[float] = []

    def _operation(self) -> Any:
        c, size = self.config, self.config.size
        if c.collective == "all_reduce":
            return self.comm.all_reduce(size, algorithm=c.algorithm)
        if c.collective == "reduce_scatter":
            return self.comm.reduce_scatter(size)
        if c.collective == "all_gather":
            return self.comm.all_gather(size)
        if c.collective == "broadcast":
            return self.comm.broadcast(self.ranks[c.root], size)
        if c.collective == "all_to_all":
            return self.comm.all_to_all(size / len(self.ranks))
        return self.comm.send(self.ranks[0], self.ranks[1], size)

    def _run(self) -> Generator[Any, Any, None]:
        for iteration in range(self.config.iterations):
            if iteration and self.config.gap:
                yield self.sim.timeout(self.config.gap)
            start = self.sim.now
            yield self._operation()
            self.durations.append(self.sim.now - start)

    def start(self) -> None:
        self.sim.process(self._run())

    def summary(self) -> dict[str, Any]:
        n, size = len(self.ranks), self.config.size
        done = self.durations
        mean = sum(done) / len(done) if done else None
        alpha, bandwidth = self._path_figures(0, 1)
        result: dict[str, Any] = {
            "kind": "collective",
            "collective": self.config.collective,
            "algorithm": self.algorithm,
            "ranks": n,
            "size_bytes": size,
            "iterations_done": len(done),
            "iteration_times_s": done,
            "mean_time_s": mean,
            "path_alpha_s": alpha,
            "path_bandwidth_Bps": bandwidth,
        }
        if mean:
            result["algbw_Bps"] = size / mean
            result["busbw_Bps"] = size / mean * _BUS_FACTOR[self.config.collective](n)
        estimate = alpha_beta_estimate(self.config.collective, self.algorithm, n, size, self._path_figures,
                                       self.config.root)
        if estimate is not None:
            result["alpha_beta_estimate_s"] = estimate
        return result

    def _path_figures(self, src: int, dst: int) -> tuple[float, float]:
        """Latency and bandwidth of the path between two ranks."""
        topology = self.ctx.network.topology
        path = topology.path(self.ranks[src], self.ranks[dst])
        return topology.path_latency(path), topology.path_bandwidth(path)

    @property
    def algorithm(self) -> str:
        """The algorithm the collective runs (``algorithm`` applies to all-reduce only)."""
        if self.config.collective == "all_reduce":
            return self.config.algorithm
        return _FIXED_ALGORITHM[self.config.collective]


_FIXED_ALGORITHM = {"reduce_scatter": "ring", "all_gather": "ring", "broadcast": "binomial_tree",
                    "all_to_all": "direct", "send_recv": "point_to_point"}


PathFigures = Callable[[int, int], tuple[float, float]]
"""Latency (s) and bandwidth (bytes/s) of the path from rank ``src`` to rank ``dst``."""
MessageTime = Callable[[int, int, float], float]
"""Seconds for ``nbytes`` from rank ``src`` to rank ``dst`` on uncontended links."""

MAX_ALL_TO_ALL_PAIRS = 4096
"""All-to-all estimates compare every pair's path; past this many pairs they are not given."""


def alpha_beta_estimate(collective: str, algorithm: str, n: int, size: float, figures: PathFigures,
                        root: int = 0) -> float | None:
    """Alpha-beta time of ``collective`` over ``n`` ranks, its algorithm run on uncontended links.

    ``size`` is the buffer ``S`` per rank (for all-to-all, the bytes each rank sends in all);
    ``figures(src, dst)`` the latency and bandwidth of a message's path. A ring step lasts as long
    as its slowest hop (each rank waits for its predecessor's chunk); binomial trees are walked
    message by message. None for the hierarchical all-reduce, and for an all-to-all whose pairs'
    paths differ (or that has more than ``MAX_ALL_TO_ALL_PAIRS`` pairs).
    """

    def message(src: int, dst: int, nbytes: float) -> float:
        latency, bandwidth = figures(src, dst)
        return latency + nbytes / bandwidth

    if collective == "all_reduce":
        if algorithm == "ring":
            return 2 * (n - 1) * _ring_step(n, size / n, message)
        if algorithm == "tree":  # binomial reduce to rank 0, then binomial broadcast, whole buffer per message
            return _tree_time(n, 0, size, message, broadcast=False) + _tree_time(n, 0, size, message, broadcast=True)
        return None
    if collective in ("reduce_scatter", "all_gather"):
        return (n - 1) * _ring_step(n, size / n, message)
    if collective == "broadcast":
        return _tree_time(n, root, size, message, broadcast=True)
    if collective == "all_to_all":  # every pair at once: each rank's end link carries (n-1)/n of S
        if n * (n - 1) > MAX_ALL_TO_ALL_PAIRS:
            return None
        latency, bandwidth = figures(0, 1)
        pairs = (figures(i, j) for i in range(n) for j in range(n) if i != j)
        if any(not (math.isclose(a, latency, rel_tol=1e-12) and math.isclose(b, bandwidth, rel_tol=1e-12))
               for a, b in pairs):
            return None
        return latency + (n - 1) / n * size / bandwidth
    return message(0, 1, size)


def _ring_step(n: int, chunk: float, message: MessageTime) -> float:
    """One ring step: every rank sends ``chunk`` to its successor; the slowest hop sets the pace."""
    return max(message(i, (i + 1) % n, chunk) for i in range(n))


def _tree_time(n: int, root: int, nbytes: float, message: MessageTime, broadcast: bool) -> float:
    """A binomial tree over ``n`` ranks rooted at ``root`` (:class:`~simhpc.network.schedules.BinomialTree`):
    a broadcast sends to each rank's children one after another, largest subtree first; a reduce
    takes them one after another, smallest first, and sends up once all have arrived."""
    children = binomial_children(n)

    def cost(a: int, b: int) -> float:
        return message((a + root) % n, (b + root) % n, nbytes)

    if broadcast:
        has = [0.0] * n
        for v in range(n):  # a parent is always a smaller index than its children
            clock = has[v]
            for child in children[v]:
                clock += cost(v, child)
                has[child] = clock
        return max(has)
    ready = [0.0] * n
    for v in reversed(range(n)):
        clock = 0.0
        for child in reversed(children[v]):
            clock = max(clock, ready[child]) + cost(child, v)
        ready[v] = clock
    return ready[0]
