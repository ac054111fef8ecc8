"""Network topology: nodes, full-duplex links and deterministic routing.

A :class:`Topology` wraps a :class:`networkx.DiGraph`. Every physical cable is two directed
:class:`Link` objects, one per direction, each with its own capacity. Routing is deterministic:
the path of least total routing cost (by default the link latency), ties broken by hop count,
then by node names (walking back from the destination, the smallest-named predecessor wins).
With ``ecmp=True`` the tie between equal-cost predecessors is broken by the destination's
ordinal modulo the number of choices (fat-tree D-mod-k routing, as InfiniBand subnet managers
route): each source spreads its destinations evenly over the parallel spines, all-to-all loads
every uplink equally, and shift patterns (host ``i`` to host ``i + s``, GPU ``j`` of one node to
GPU ``j`` of another, a rail) use distinct spines. The searches that give every node's
equal-cost predecessors from a source live in :mod:`simhpc.network.route_trees`.

Endpoints are the nodes traffic starts and ends at. Rank endpoints (``Topology.endpoints``) are
the ordered names ranks map onto; other endpoints (host memory, say) are reachable but hold no
rank. An endpoint belongs to a machine (:meth:`Topology.node_of`); traffic between machines
leaves through the endpoint's gateway (its NIC) when one is set.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import networkx as nx
import numpy as np

from simhpc.network.route_trees import Predecessors, RouteTrees

_COST_QUANTUM = 1e-15
"""Routing costs are compared as integer multiples of this (femtoseconds), so equal-cost
paths tie exactly whatever order their latencies are added in."""


@dataclass(frozen=True)
class Link:
    """One direction of a cable.

    Attributes:
        index: position in :attr:`Topology.links`.
        src: node the bytes leave.
        dst: node the bytes enter.
        bandwidth: capacity in bytes/s (this direction only).
        latency: propagation plus switching delay in seconds.
        name: ``"src->dst"``, the trace track of the link.
    """

    index: int
    src: str
    dst: str
    bandwidth: float
    latency: float
    name: str


@dataclass(frozen=True, eq=False)
class Route:
    """A route: link indices, total latency (s), bottleneck bandwidth (bytes/s), links array."""

    path: tuple[int, ...]
    latency: float
    bandwidth: float
    links: np.ndarray


class Topology:
    """A directed graph of nodes and links with cached deterministic routes.

    Args:
        name: a label for summaries.
        ecmp: spread equal-cost paths over the destinations (D mod k).
    """

    MAX_NODES = 2**20
    """Most nodes (endpoints and switches) a topology may have: far beyond any machine simulated
    at link level here, and a clear error instead of exhausting the memory."""
    MAX_CABLES = 2**22
    """Most cables (pairs of directed links) a topology may have."""

    def __init__(
        self,
        name: str = "topology",
        *,
        ecmp: bool = False,
        router: Callable[[str, str], list[str]] | None = None,
    ) -> None:
        self.name = name
        self.ecmp = ecmp
        self.router = router
        """Optional structural routing (node sequence from a to b), used instead of the
        least-cost search: O(path) per pair, for regular networks of thousands of nodes."""
        self.graph = nx.DiGraph()
        self.endpoints: list[str] = []
        self.links: list[Link] = []
        self._latency: list[float] = []
        self._bandwidth: list[float] = []
        self._cost: list[int] = []
        self._transit: dict[str, bool] = {}
        self._ordinal: dict[str, int] = {}
        self._machine: dict[str, str] = {}
        self._gateway: dict[str, str] = {}
        self._rails: dict[str, tuple[str, ...]] = {}
        self._rail_index: dict[str, int] = {}
        self._adjacency: dict[str, list[tuple[str, int]]] = {}
        self._paths: dict[tuple[str, str], tuple[int, ...]] = {}
        self._segments: dict[tuple[str, str], tuple[int, ...]] = {}
        """Walks kept for every route through them (:meth:`_walk`)."""
        self._routes: dict[tuple[str, str], Route] = {}
        self._trees: RouteTrees | None = None

    # -- construction -------------------------------------------------------------------------

    def add_switch(self, name: str, *, machine: str | None = None) -> None:
        """Add a switch (or router, NIC, bus): traffic may pass through it.

        Args:
            name: unique node name.
            machine: the machine it sits in (default: itself).
        """
        self._add_node(name, kind="switch", transit=True, machine=machine or name)

    def add_endpoint(
        self, name: str, *, machine: str | None = None, rank: bool = True, transit: bool = False
    ) -> None:
        """Add an endpoint.

        Args:
            name: unique node name.
            machine: the machine it belongs to (default: itself).
            rank: whether ranks map onto it (appended to :attr:`endpoints`).
            transit: whether traffic between other nodes may pass through it (direct networks).
        """
        self._add_node(name, kind="endpoint", transit=transit, machine=machine or name)
        if rank:
            self.endpoints.append(name)

    def _add_node(self, name: str, *, kind: str, transit: bool, machine: str) -> None:
        if name in self._transit:
            raise ValueError(f"topology {self.name!r}: node {name!r} added twice")
        if len(self._transit) >= self.MAX_NODES:
            raise ValueError(f"topology {self.name!r}: more than the limit of {self.MAX_NODES} nodes")
        self.graph.add_node(name, kind=kind)
        self._transit[name] = transit
        self._ordinal[name] = len(self._ordinal)
        self._machine[name] = machine
        self._adjacency[name] = []
        self._trees = None

    def connect(
        self, a: str, b: str, bandwidth: float, latency: float, *, cost: float | None = None
    ) -> tuple[Link, Link]:
        """Join ``a`` and ``b`` with a full-duplex cable: two links, one per direction.

        Args:
            a: one end (an existing node).
            b: the other end.
            bandwidth: bytes/s in each direction (> 0).
            latency: seconds (>= 0).
            cost: routing cost in seconds (default: ``latency``).

        Returns:
            The links ``a->b`` and ``b->a``.
        """
        for node in (a, b):
            if node not in self._transit:
                raise ValueError(f"topology {self.name!r}: unknown node {node!r}")
        if a == b:
            raise ValueError(f"topology {self.name!r}: a link from {a!r} to itself")
        if self.graph.has_edge(a, b):
            raise ValueError(f"topology {self.name!r}: {a!r} and {b!r} are already connected")
        if len(self.links) >= 2 * self.MAX_CABLES:
            raise ValueError(f"topology {self.name!r}: more than the limit of {self.MAX_CABLES} cables")
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise ValueError(f"link {a}<->{b}: bandwidth must be finite and > 0, got {bandwidth!r}")
        if not (math.isfinite(latency) and latency >= 0):
            raise ValueError(f"link {a}<->{b}: latency must be finite and >= 0, got {latency!r}")
        routing = latency if cost is None else cost
        if not (math.isfinite(routing) and routing >= 0):
            raise ValueError(f"link {a}<->{b}: cost must be finite and >= 0, got {cost!r}")
        pair = (
            self._add_link(a, b, bandwidth, latency, routing),
            self._add_link(b, a, bandwidth, latency, routing),
        )
        self._forget_routes()
        self._trees = None
        return pair

    def _add_link(self, src: str, dst: str, bandwidth: float, latency: float, cost: float) -> Link:
        link = Link(len(self.links), src, dst, float(bandwidth), float(latency), f"{src}->{dst}")
        self.links.append(link)
        self._latency.append(link.latency)
        self._bandwidth.append(link.bandwidth)
        self._cost.append(round(cost / _COST_QUANTUM))
        self.graph.add_edge(src, dst, link=link.index)
        self._adjacency[src].append((dst, link.index))
        return link

    def set_gateway(self, endpoint: str, gateway: str) -> None:
        """Route traffic between ``endpoint``'s machine and other machines through ``gateway``."""
        for node in (endpoint, gateway):
            if node not in self._transit:
                raise ValueError(f"topology {self.name!r}: unknown node {node!r}")
        self._gateway[endpoint] = gateway
        self._forget_routes()

    def set_rail_gateways(self, endpoint: str, gateways: list[str]) -> None:
        """Route ``endpoint``'s traffic with other machines through the gateway of the same rail.

        In a rail-optimised cluster NIC ``i`` of every machine sits on the same fabric plane: traffic
        between ``endpoint`` (host memory, reachable from every NIC of its machine) and an endpoint
        whose gateway is NIC ``i`` of its machine uses ``gateways[i]``; traffic with an endpoint
        without a rail uses ``gateways[0]``.
        """
        for node in (endpoint, *gateways):
            if node not in self._transit:
                raise ValueError(f"topology {self.name!r}: unknown node {node!r}")
        if not gateways:
            raise ValueError(f"topology {self.name!r}: {endpoint!r} needs at least one rail gateway")
        self._rails[endpoint] = tuple(gateways)
        for index, gateway in enumerate(gateways):
            self._rail_index[gateway] = index
        self._gateway[endpoint] = gateways[0]
        self._forget_routes()

    def _gateway_towards(self, endpoint: str, other: str) -> str:
        """The gateway ``endpoint`` uses for traffic with ``other`` (on another machine)."""
        rails = self._rails.get(endpoint)
        if rails is None:
            return self._gateway.get(endpoint, endpoint)
        return rails[self._rail_index.get(self._gateway.get(other, ""), 0) % len(rails)]

    def _forget_routes(self) -> None:
        self._paths.clear()
        self._segments.clear()
        self._routes.clear()

    # -- queries ------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        """Every node, in the order added."""
        return list(self.graph.nodes)

    @property
    def capacities(self) -> np.ndarray:
        """Link bandwidths (bytes/s) indexed by link index."""
        return np.array([link.bandwidth for link in self.links], dtype=float)

    def node_of(self, endpoint: str) -> str:
        """The machine ``endpoint`` belongs to (hierarchical collectives group ranks by it)."""
        try:
            return self._machine[endpoint]
        except KeyError:
            raise ValueError(f"topology {self.name!r}: unknown node {endpoint!r}") from None

    def link(self, src: str, dst: str) -> Link:
        """The link from ``src`` to ``dst``."""
        try:
            return self.links[self.graph.edges[src, dst]["link"]]
        except KeyError:
            raise ValueError(f"topology {self.name!r}: no link {src!r} -> {dst!r}") from None

    def path(self, src: str, dst: str) -> tuple[int, ...]:
        """Link indices from ``src`` to ``dst`` (empty when ``src == dst``); cached."""
        key = (src, dst)
        cached = self._paths.get(key)
        if cached is not None:
            return cached
        for node in key:
            if node not in self._transit:
                raise ValueError(f"topology {self.name!r}: unknown node {node!r}")
        waypoints = [src]
        if self._machine[src] != self._machine[dst]:
            waypoints += [self._gateway_towards(src, dst), self._gateway_towards(dst, src)]
        waypoints.append(dst)
        links: list[int] = []
        spread = self._ordinal[dst]
        for a, b in itertools.pairwise(waypoints):
            if a == b:
                continue
            if self.router is not None:
                edges = self.graph.edges
                links += [edges[u, v]["link"] for u, v in itertools.pairwise(self.router(a, b))]
            else:
                links += self._walk(a, b, spread)
        result = tuple(links)
        self._paths[key] = result
        return result

    def route(self, src: str, dst: str) -> Route:
        """The route from ``src`` to ``dst`` with its latency and bottleneck (cached)."""
        key = (src, dst)
        route = self._routes.get(key)
        if route is None:
            path = self.path(src, dst)
            if len(set(path)) != len(path):
                raise ValueError(f"topology {self.name!r}: the route {src} -> {dst} uses a link twice")
            links = np.array(path, dtype=np.int64)
            route = Route(path, self.path_latency(path), self.path_bandwidth(path), links)
            self._routes[key] = route
        return route

    def path_latency(self, path: tuple[int, ...]) -> float:
        """Sum of the link latencies along ``path`` (seconds)."""
        return sum(map(self._latency.__getitem__, path))

    def path_bandwidth(self, path: tuple[int, ...]) -> float:
        """Bottleneck bandwidth along ``path`` (bytes/s; infinite for an empty path)."""
        return min(map(self._bandwidth.__getitem__, path), default=math.inf)

    def path_nodes(self, path: tuple[int, ...]) -> list[str]:
        """The nodes a path visits, in order."""
        if not path:
            return []
        return [self.links[path[0]].src] + [self.links[i].dst for i in path]

    # -- routing ------------------------------------------------------------------------------

    def _walk(self, src: str, dst: str, spread: int) -> list[int]:
        """Links of the chosen least-cost path, found by walking back over the predecessors.

        From an endpoint to a node of its own machine (a device to its gateway) the search stops
        once it reaches ``dst``: its few hops do not need the whole network's tree, and the
        predecessors of the nodes on the way are the same (each is settled before ``dst``, after
        all of its own predecessors), kept for the other routes through ``dst``. From a switch or
        NIC, whose search spreads over the fabric before it settles a device behind it, the whole
        tree is taken (and cached): a NIC's joined from its machine's search and its fabric
        switches' trees (:meth:`RouteTrees.via_exits`).

        A walk from or to an endpoint (a device to its gateway, a gateway to a device) that made
        no equal-cost choice is the same for every route through it, whatever its ``spread``:
        it is kept.
        """
        kept = self._segments.get((src, dst))
        if kept is not None:
            return list(kept)
        trees = self._route_trees()
        if not self._transit[src] and self._machine[src] == self._machine[dst] and not trees.cached(src):
            tree: Mapping[str, Predecessors] = trees.toward(src, dst)
        else:
            tree = trees.tree(src)
        links: list[int] = []
        chose = False
        node = dst
        try:
            while node != src:
                choices = tree[node]  # only ``dst`` can be missing: the rest are predecessors
                if self.ecmp and len(choices) > 1:
                    choice, chose = choices[spread % len(choices)], True
                else:
                    choice = choices[0]
                node, index = choice
                links.append(index)
        except KeyError:
            raise ValueError(f"topology {self.name!r}: no route from {src!r} to {dst!r}") from None
        links.reverse()
        if not chose and not (self._transit[src] and self._transit[dst]):
            self._segments[src, dst] = tuple(links)
        return links

    def _route_trees(self) -> RouteTrees:
        """The least-cost trees of the links as they are now (made anew once nodes or links are added)."""
        if self._trees is None:
            self._trees = RouteTrees(self._ordinal, self._transit, self._adjacency, self.links, self._cost,
                                     self._machine)
        return self._trees
