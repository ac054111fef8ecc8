"""``kind: collective`` — run one collective of a given size over a set of ranks, N times.

The demo workload and the network's calibration check: its summary gives the time per
iteration, the algorithm bandwidth S/t and the bus bandwidth (nccl-tests convention), beside
the alpha-beta estimate of the same collective (its algorithm on uncontended links with the
figures of the path between the first two ranks; not for the hierarchical all-reduce).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Generator
from typing import Any, Literal

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
    iterations: PositiveInt = 1
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
        if config.root >= len(ranks):
            raise InvalidReference("root", f"root {config.root} is not one of the {len(ranks)} ranks")
        if config.collective == "all_reduce" and config.algorithm == "hierarchical":
            per_node = Counter(self.ctx.network.topology.node_of(rank) for rank in ranks)
            if len(set(per_node.values())) > 1:
                raise InvalidReference("ranks", "the hierarchical all-reduce needs the same number of ranks "
                                       f"on every node, got {dict(per_node)}")
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
        topology = self.ctx.network.topology
        path = topology.path(self.ranks[0], self.ranks[1])
        alpha, bandwidth = topology.path_latency(path), topology.path_bandwidth(path)
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
        estimate = alpha_beta_estimate(self.config.collective, self.algorithm, n, size, alpha, bandwidth)
        if estimate is not None:
            result["alpha_beta_estimate_s"] = estimate
        return result

    @property
    def algorithm(self) -> str:
        """The algorithm the collective runs (``algorithm`` applies to all-reduce only)."""
        if self.config.collective == "all_reduce":
            return self.config.algorithm
        return _FIXED_ALGORITHM[self.config.collective]


_FIXED_ALGORITHM = {"reduce_scatter": "ring", "all_gather": "ring", "broadcast": "binomial_tree",
                    "all_to_all": "direct", "send_recv": "point_to_point"}


def alpha_beta_estimate(collective: str, algorithm: str, n: int, size: float, alpha: float,
                        bandwidth: float) -> float | None:
    """Alpha-beta time of ``collective`` over ``n`` ranks on uncontended links of one path's figures.

    ``size`` is the buffer ``S`` per rank (for all-to-all, the bytes each rank sends in all);
    ``alpha``, ``bandwidth``: latency and bandwidth of the path between two ranks. None for the
    hierarchical all-reduce, whose intra- and inter-node paths differ.
    """
    rounds = math.ceil(math.log2(n))
    if collective == "all_reduce":
        if algorithm == "ring":
            return 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * alpha
        if algorithm == "tree":  # binomial reduce, then binomial broadcast, whole buffer per message
            return 2 * rounds * (alpha + size / bandwidth)
        return None
    if collective in ("reduce_scatter", "all_gather"):
        return (n - 1) / n * size / bandwidth + (n - 1) * alpha
    if collective == "broadcast":
        return rounds * (alpha + size / bandwidth)
    if collective == "all_to_all":  # every pair at once: each rank's end link carries (n-1)/n of S
        return alpha + (n - 1) / n * size / bandwidth
    return alpha + size / bandwidth
