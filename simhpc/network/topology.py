"""Network topology: nodes, full-duplex links and deterministic routing.

A :class:`Topology` wraps a :class:`networkx.DiGraph`. Every physical cable is two directed
:class:`Link` objects, one per direction, each with its own capacity. Routing is deterministic:
the path of least total routing cost (by default the link latency), ties broken by hop count,
then by node names (walking back from the destination, the smallest-named predecessor wins).
With ``ecmp=True`` the tie between equal-cost predecessors is broken by the destination's
ordinal modulo the number of choices (fat-tree D-mod-k routing, as InfiniBand subnet managers
route): each source spreads its destinations evenly over the parallel spines, all-to-all loads
every uplink equally, and shift patterns (host ``i`` to host ``i + s``, GPU ``j`` of one node to
GPU ``j`` of another, a rail) use distinct spines.

Endpoints are the nodes traffic starts and ends at. Rank endpoints (``Topology.endpoints``) are
the ordered names ranks map onto; other endpoints (host memory, say) are reachable but hold no
rank. An endpoint belongs to a machine (:meth:`Topology.node_of`); traffic between machines
leaves through the endpoint's gateway (its NIC) when one is set.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import dijkstra

_COST_QUANTUM = 1e-15
"""Routing costs are compared as integer multiples of this (femtoseconds), so equal-cost
paths tie exactly whatever order their latencies are added in."""

_TREE_CACHE_ENTRIES = 1 << 25
"""Array entries (4 bytes each) the shortest-path trees kept per topology may hold in all; the least
recently used are dropped past it. A tree holds about three per node of the network, so a
2048-GPU cluster keeps the trees of all its NICs."""

_EXACT_FLOAT = 2**53
"""Integers below this add exactly in float64, as SciPy's Dijkstra sums path costs."""

Predecessors = tuple[tuple[str, int], ...]
"""A node's equal-cost predecessors on the way from a source: (node, link index), sorted."""


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
        self._cost: list[int] = []
        self._transit: dict[str, bool] = {}
        self._ordinal: dict[str, int] = {}
        self._machine: dict[str, str] = {}
        self._gateway: dict[str, str] = {}
        self._rails: dict[str, tuple[str, ...]] = {}
        self._rail_index: dict[str, int] = {}
        self._adjacency: dict[str, list[tuple[str, int]]] = {}
        self._paths: dict[tuple[str, str], tuple[int, ...]] = {}
        self._routes: dict[tuple[str, str], Route] = {}
        self._trees: OrderedDict[str, Mapping[str, Predecessors]] = OrderedDict()
        self._tree_entries = 0
        self._arrays: _LinkArrays | None = None
        self._relay_graph: tuple[np.ndarray, csr_array] | None = None

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
        self._arrays = None
        self._relay_graph = None

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
        self._trees.clear()
        self._tree_entries = 0
        self._arrays = None
        self._relay_graph = None
        return pair

    def _add_link(self, src: str, dst: str, bandwidth: float, latency: float, cost: float) -> Link:
        link = Link(len(self.links), src, dst, float(bandwidth), float(latency), f"{src}->{dst}")
        self.links.append(link)
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
        return sum(self.links[i].latency for i in path)

    def path_bandwidth(self, path: tuple[int, ...]) -> float:
        """Bottleneck bandwidth along ``path`` (bytes/s; infinite for an empty path)."""
        return min((self.links[i].bandwidth for i in path), default=math.inf)

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
        all of its own predecessors). From a switch or NIC, whose search spreads over the fabric
        before it settles a device behind it, the whole tree is searched (and cached).
        """
        if not self._transit[src] and self._machine[src] == self._machine[dst] and src not in self._trees:
            tree = self._search(src, dst)
        else:
            tree = self._tree(src)
        if dst not in tree:
            raise ValueError(f"topology {self.name!r}: no route from {src!r} to {dst!r}")
        links: list[int] = []
        node = dst
        while node != src:
            choices = tree[node]
            if self.ecmp and len(choices) > 1:
                choice = choices[spread % len(choices)]
            else:
                choice = choices[0]
            node, index = choice
            links.append(index)
        links.reverse()
        return links

    def _tree(self, src: str) -> Mapping[str, Predecessors]:
        """Equal-cost predecessors (node, link) of every node reachable from ``src``, by name (cached).

        A node whose single outgoing link leads to a node with several (a host under its leaf
        switch) reaches everything through that link's far end, so its tree is the far end's with
        the first hop prepended: every path from it is that hop plus a path from the far end, the
        same constant added to every label, so the same least-cost predecessors win. Hosts of a
        leaf share one search.
        """
        tree = self._trees.get(src)
        if tree is not None:
            self._trees.move_to_end(src)
            return tree
        out = self._adjacency[src]
        via, index = out[0] if len(out) == 1 else (src, -1)
        if via != src and self._transit[via] and len(self._adjacency[via]) > 1:
            tree = _FirstHop(self._tree(via), src, via, index)
        else:
            tree = self._search_all(src)
        self._trees[src] = tree
        self._tree_entries += _entries(tree)
        while self._tree_entries > _TREE_CACHE_ENTRIES and len(self._trees) > 1:
            self._tree_entries -= _entries(self._trees.popitem(last=False)[1])
        return tree

    def _search_all(self, src: str) -> Mapping[str, Predecessors]:
        """:meth:`_search`'s tree from ``src`` over the whole network, by SciPy's Dijkstra.

        The labels come from :func:`scipy.sparse.csgraph.dijkstra`, exact: the integer costs,
        divided by their greatest common divisor, add exactly in float64 while the largest times
        the node count is below 2**53 (past it :meth:`_search` runs instead). A least-cost path
        uses only *tight* links (``cost[u] + c == cost[v]``), and the fewest hops among them is
        the breadth-first depth over tight links; the predecessors kept are the tight links one
        hop shallower: the labels and equal-label predecessors of the search, found by
        vectorised passes instead of a Python heap. Where the sums stay exact with each link
        weighing ``cost * nodes + 1`` (a label is then ``cost * nodes + hops``, and hops are
        fewer than the nodes), one search orders by cost, then hops, and a link is kept when
        its tail's label plus its weight is its head's.
        """
        arrays = self._link_arrays()
        if arrays is None:
            return self._search(src)
        s = self._ordinal[src]
        size = len(arrays.names)
        if self._transit[src]:  # its own links relay: the graph every transit source shares
            links, graph = self._relays()
        else:  # an endpoint passes on nothing but its own traffic
            links = np.flatnonzero(arrays.relays | (arrays.src == s))
            graph = _graph(arrays, links, size)
        tails, heads = arrays.src[links], arrays.dst[links]
        if arrays.weight is not None:
            label = dijkstra(graph, indices=s)
            reached = np.isfinite(label)
            kept = reached[tails] & (label[tails] + arrays.weight[links] == label[heads])
        else:
            cost = dijkstra(graph, indices=s)
            reached = np.isfinite(cost)
            tight = reached[tails] & (cost[tails] + arrays.cost[links] == cost[heads])
            tails, heads, links = tails[tight], heads[tight], links[tight]
            hops = dijkstra(csr_array((np.ones(len(tails)), (tails, heads)), shape=(size, size)), indices=s,
                            unweighted=True)
            kept = hops[tails] + 1 == hops[heads]
        tails, heads, links = tails[kept], heads[kept], links[kept]
        order = np.lexsort((links, arrays.name_rank[tails], heads))
        return _Tree(arrays.names, self._ordinal, reached, heads[order], tails[order], links[order])

    def _relays(self) -> tuple[np.ndarray, csr_array]:
        """The links out of transit nodes and their search graph (cached)."""
        if self._relay_graph is None:
            arrays = self._link_arrays()
            assert arrays is not None
            links = np.flatnonzero(arrays.relays)
            self._relay_graph = links, _graph(arrays, links, len(arrays.names))
        return self._relay_graph

    def _link_arrays(self) -> _LinkArrays | None:
        """The links as arrays for :meth:`_search_all` (cached; None when costs could add inexactly)."""
        if self._arrays is None:
            names = list(self._ordinal)
            ordinal = self._ordinal
            src = np.fromiter((ordinal[link.src] for link in self.links), np.int64, len(self.links))
            dst = np.fromiter((ordinal[link.dst] for link in self.links), np.int64, len(self.links))
            transit = np.fromiter((self._transit[name] for name in names), bool, len(names))
            rank = np.empty(len(names), np.int64)
            rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
            unit = math.gcd(*self._cost) or 1  # costs in units of their greatest common divisor: smaller sums
            costs = [cost // unit for cost in self._cost]
            largest, count = max(costs, default=0), len(names)
            exact = largest * count < _EXACT_FLOAT  # bounds every label the search forms
            weight = np.array(costs, dtype=float) * count + 1 if (largest + 1) * count * count < _EXACT_FLOAT else None
            self._arrays = _LinkArrays(names, src, dst, np.array(costs, dtype=float), weight, transit[src], rank,
                                       exact)
        return self._arrays if self._arrays.exact else None

    def _search(self, src: str, target: str | None = None) -> dict[str, Predecessors]:
        """Dijkstra from ``src`` over (cost, hops) labels, keeping every equal-cost predecessor;
        with ``target``, only until it is settled (complete for the nodes settled by then)."""
        best: dict[str, tuple[int, int]] = {src: (0, 0)}
        preds: dict[str, list[tuple[str, int]]] = {src: []}
        done: set[str] = set()
        heap: list[tuple[int, int, str]] = [(0, 0, src)]
        cost = self._cost
        while heap:
            dist, hops, node = heapq.heappop(heap)
            if node in done:
                continue
            done.add(node)
            if node == target:
                break
            if node != src and not self._transit[node]:
                continue
            for nxt, index in self._adjacency[node]:
                label = (dist + cost[index], hops + 1)
                known = best.get(nxt)
                if known is None or label < known:
                    best[nxt] = label
                    preds[nxt] = [(node, index)]
                    heapq.heappush(heap, (label[0], label[1], nxt))
                elif label == known:
                    preds[nxt].append((node, index))
        return {node: tuple(sorted(choices)) for node, choices in preds.items()}


@dataclass(frozen=True)
class _LinkArrays:
    """The links of a topology as arrays (node ordinals), for the vectorised tree search."""

    names: list[str]
    src: np.ndarray
    dst: np.ndarray
    cost: np.ndarray
    weight: np.ndarray | None
    """Per link: ``cost * nodes + 1``, whose sums order paths by cost, then hops (None where they
    could add inexactly)."""
    relays: np.ndarray
    """Per link: whether its tail passes traffic on (a transit node)."""
    name_rank: np.ndarray
    """Per node: its place among the names sorted, the predecessors' order."""
    exact: bool


def _graph(arrays: _LinkArrays, links: np.ndarray, size: int) -> csr_array:
    """The search graph of ``links``: weighted by cost, then hops, where that is exact, else by cost."""
    weights = arrays.cost[links] if arrays.weight is None else arrays.weight[links]
    return csr_array((weights, (arrays.src[links], arrays.dst[links])), shape=(size, size))


class _Tree(Mapping[str, Predecessors]):
    """The equal-cost predecessors of every node reached from a source, kept as arrays grouped by
    node and turned into :data:`Predecessors` only for the nodes a route walks through."""

    def __init__(self, names: list[str], ordinal: dict[str, int], reached: np.ndarray, heads: np.ndarray,
                 tails: np.ndarray, links: np.ndarray) -> None:
        self._names = names
        self._ordinal = ordinal
        self._reached = reached
        self._starts = np.searchsorted(heads, np.arange(len(names) + 1)).astype(np.int32)
        self._tails = tails.astype(np.int32)
        self._links = links.astype(np.int32)
        self._walked: dict[str, Predecessors] = {}

    @property
    def entries(self) -> int:
        """Array entries it holds, for the cache's budget (not the predecessors it has handed out,
        kept for the next walk: at most one tuple per node)."""
        return self._starts.size + self._tails.size + self._links.size + self._reached.size // 4

    def __getitem__(self, node: str) -> Predecessors:
        found = self._walked.get(node)
        if found is not None:
            return found
        if node not in self:
            raise KeyError(node)
        i = self._ordinal[node]
        names, first, last = self._names, int(self._starts[i]), int(self._starts[i + 1])
        found = self._walked[node] = tuple(zip(map(names.__getitem__, self._tails[first:last].tolist()),
                                               self._links[first:last].tolist()))
        return found

    def __contains__(self, node: object) -> bool:
        i = self._ordinal.get(node) if isinstance(node, str) else None
        return i is not None and i < len(self._reached) and bool(self._reached[i])  # a node added since: not

    def __iter__(self) -> Iterator[str]:
        return (self._names[i] for i in np.flatnonzero(self._reached))

    def __len__(self) -> int:
        return int(np.count_nonzero(self._reached))


class _FirstHop(Mapping[str, Predecessors]):
    """The tree of a node whose one link leads to ``via``: ``via``'s tree with that hop first."""

    def __init__(self, tree: Mapping[str, Predecessors], src: str, via: str, index: int) -> None:
        self._tree = tree
        self._own = {via: ((src, index),), src: ()}
        self.entries = _entries(tree)  # it keeps ``via``'s tree alive

    def __getitem__(self, node: str) -> Predecessors:
        own = self._own.get(node)
        return own if own is not None else self._tree[node]

    def __contains__(self, node: object) -> bool:
        return node in self._own or node in self._tree

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        yield from (node for node in self._tree if node not in self._own)

    def __len__(self) -> int:
        return len(self._own) + sum(node not in self._own for node in self._tree)


def _entries(tree: Mapping[str, Predecessors]) -> int:
    """Array entries a cached tree keeps alive (a heap search's dict: one per node)."""
    return getattr(tree, "entries", len(tree))
