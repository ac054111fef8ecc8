"""Least-cost trees of a topology: from a source, every node's equal-cost predecessors.

A route is walked back from its destination over these predecessors (:meth:`Topology.path
<simhpc.network.topology.Topology.path>`). A path's label is (total routing cost, hop count),
compared in that order; a predecessor is kept when it reaches a node with the node's least label,
so the equal-cost paths of fewest hops all stay for the walk to choose among (ECMP). Only transit
nodes (switches, NICs, routers of a direct network) pass traffic on; an endpoint starts and ends
it.

Costs are integers (femtoseconds, so that equal costs tie exactly). Where their sums stay exact in
float64 a tree comes from SciPy's Dijkstra and vectorised passes over the links; elsewhere from a
Python heap. :class:`RouteTrees` caches the trees of one topology under a budget of array entries.
A switch inside a machine (a multi-GPU node's NIC) does not search the whole network: its tree is
its search inside the machine joined with the trees of the fabric switches the machine's links
lead to, which the machines on those switches share.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import dijkstra

TREE_CACHE_ENTRIES = 1 << 26
"""Array entries (4 bytes each) the trees kept per topology may hold in all; the least recently
used are dropped past it. A tree holds about six per node of the network. The NICs of multi-GPU
nodes keep small trees joined with their fabric switches' (:meth:`RouteTrees.via_exits`), so a
cluster of 8192 GPUs on 256 leaf switches keeps every switch's tree."""

MACHINE_SEARCH_NODES = 1024
"""Most nodes a machine may have for its switches' trees to be joined from a search inside it and
the trees of the switches its links lead to (:meth:`RouteTrees.via_exits`); a larger one searches
the whole network from each."""

PARTIAL_TREES = 1 << 16
"""Searches stopped at their target (:meth:`RouteTrees.toward`) kept per topology; the least
recently used are dropped past it."""

_EXACT_FLOAT = 2**53
"""Integers below this add exactly in float64, as SciPy's Dijkstra sums path costs."""

Predecessors = tuple[tuple[str, int], ...]
"""A node's equal-cost predecessors on the way from a source: (node, link index), sorted."""


class LinkEnds(Protocol):
    """What the search reads of a link: the nodes it leaves and enters."""

    src: str
    dst: str


class RouteTrees:
    """The least-cost trees of one topology's links, searched on demand and cached.

    It reads the topology's own tables, which must not change while it is used: a topology that
    gains a node or a link makes a new one.

    Args:
        ordinal: each node's index, in the order added.
        transit: per node, whether it passes traffic on.
        adjacency: per node, its outgoing (neighbour, link index) pairs.
        links: every link, by index.
        cost: every link's routing cost, an integer.
        machine: per node, the machine it sits in (each node alone in its own where not given).
    """

    def __init__(self, ordinal: dict[str, int], transit: dict[str, bool],
                 adjacency: dict[str, list[tuple[str, int]]], links: Sequence[LinkEnds], cost: list[int],
                 machine: Mapping[str, str] | None = None) -> None:
        self._ordinal = ordinal
        self._transit = transit
        self._machine = machine
        self._machine_sizes: dict[str, int] | None = None
        self._adjacency = adjacency
        self._links = links
        self._cost = cost
        self._trees: OrderedDict[str, Mapping[str, Predecessors]] = OrderedDict()
        self._tree_entries = 0
        self._partial: OrderedDict[tuple[str, str], dict[str, Predecessors]] = OrderedDict()
        self._arrays: _LinkArrays | None = None
        self._relay_graph: tuple[np.ndarray, csr_array] | None = None

    def cached(self, src: str) -> bool:
        """Whether ``src``'s tree is kept."""
        return src in self._trees

    @property
    def kept(self) -> list[str]:
        """The sources whose trees are kept, least recently used first."""
        return list(self._trees)

    @property
    def kept_entries(self) -> int:
        """Array entries the kept trees hold, for the budget."""
        return self._tree_entries

    def tree(self, src: str) -> Mapping[str, Predecessors]:
        """Equal-cost predecessors (node, link) of every node reachable from ``src``, by name (cached).

        A node whose single outgoing link leads to a node with several (a host under its leaf
        switch) reaches everything through that link's far end, so its tree is the far end's with
        the first hop prepended: every path from it is that hop plus a path from the far end, the
        same constant added to every label, so the same least-cost predecessors win. Hosts of a
        leaf share one search. A switch inside a machine joins its search inside the machine with
        the trees of the switches the machine's links lead to (:meth:`via_exits`).
        """
        tree = self._trees.get(src)
        if tree is not None:
            self._trees.move_to_end(src)
            return tree
        out = self._adjacency[src]
        via, index = out[0] if len(out) == 1 else (src, -1)
        if via != src and self._transit[via] and len(self._adjacency[via]) > 1:
            tree = _FirstHop(self.tree(via), src, via, index)
        else:
            joined = self.via_exits(src)
            tree = self.search_all(src) if joined is None else joined
        self._trees[src] = tree
        self._tree_entries += entries(tree)
        while self._tree_entries > TREE_CACHE_ENTRIES and len(self._trees) > 1:
            self._tree_entries -= entries(self._trees.popitem(last=False)[1])
        return tree

    def toward(self, src: str, target: str) -> dict[str, Predecessors]:
        """:meth:`search` from ``src`` until ``target`` is settled (cached: a device's few hops to
        its machine's gateway serve every route that leaves the machine through it)."""
        key = (src, target)
        tree = self._partial.get(key)
        if tree is None:
            tree = self._partial[key] = self.search(src, target)
            if len(self._partial) > PARTIAL_TREES:
                self._partial.popitem(last=False)
        else:
            self._partial.move_to_end(key)
        return tree

    def via_exits(self, src: str) -> Mapping[str, Predecessors] | None:
        """:meth:`search`'s tree from a transit node of a machine, joined from a search inside the
        machine and the trees of the switches its links out lead to; None where that does not
        apply (a node alone in its machine, or in one of more than :data:`MACHINE_SEARCH_NODES` or
        of half the network or more; costs that could add inexactly; an exit switch sharing its
        machine with other nodes or without a vectorised tree).

        Every path from ``src`` either stays in the machine (its last node perhaps a switch a link
        out of the machine enters) or first leaves it into such a switch ``h`` and goes on from
        there. So a node's label is the least of its label inside the machine and, over the exit
        switches, ``h``'s label inside plus the node's in ``h``'s tree; its predecessors are those
        of the terms that reach that least label (a term's predecessors of the node are tight from
        ``src`` too, and a predecessor tight from ``src`` is one of a least term's). The machines on
        a fabric switch share its tree, so a cluster of multi-GPU nodes searches its fabric once
        per switch instead of once per NIC.
        """
        machine, arrays = self._machine, self._link_arrays()
        if machine is None or arrays is None or not self._transit[src]:
            return None
        sizes = self._sizes()
        home = machine[src]
        if not 2 <= sizes[home] <= MACHINE_SEARCH_NODES or 2 * sizes[home] >= len(self._ordinal):
            return None
        found, preds = self._labelled_search(src, within=home)
        labels = {node: (cost // arrays.unit, hops) for node, (cost, hops) in found.items()}  # the trees' units
        exits = []
        for node, label in labels.items():
            if machine[node] == home or not self._transit[node]:
                continue
            head = self.tree(node) if sizes[machine[node]] == 1 else None
            if not isinstance(head, _Tree):
                return None
            exits.append((label, head))
        inside = {node: (label, tuple(sorted(preds[node]))) for node, label in labels.items()}
        return _ViaExits(inside, exits)

    def _sizes(self) -> dict[str, int]:
        """Nodes per machine (cached)."""
        if self._machine_sizes is None:
            sizes: dict[str, int] = {}
            for name in self._ordinal:
                home = self._machine[name] if self._machine is not None else name
                sizes[home] = sizes.get(home, 0) + 1
            self._machine_sizes = sizes
        return self._machine_sizes

    @property
    def search_kind(self) -> str:
        """How :meth:`search_all` searches: ``one pass`` (by cost, then hops), ``two passes`` (by
        cost, then by hops over the least-cost links) or ``heap`` (costs too large to add exactly)."""
        arrays = self._link_arrays()
        return "heap" if arrays is None else "one pass" if arrays.weight is not None else "two passes"

    def search_all(self, src: str) -> Mapping[str, Predecessors]:
        """:meth:`search`'s tree from ``src`` over the whole network, by SciPy's Dijkstra.

        The labels come from :func:`scipy.sparse.csgraph.dijkstra`, exact: the integer costs,
        divided by their greatest common divisor, add exactly in float64 while the largest times
        the node count is below 2**53 (past it :meth:`search` runs instead). A least-cost path
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
            return self.search(src)
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
            packed = np.where(reached, label, 0.0).astype(np.int64)  # cost * nodes + hops, exact
            cost_of, hops_of = packed // size, packed % size
        else:
            cost = dijkstra(graph, indices=s)
            reached = np.isfinite(cost)
            tight = reached[tails] & (cost[tails] + arrays.cost[links] == cost[heads])
            tails, heads, links = tails[tight], heads[tight], links[tight]
            hops = dijkstra(csr_array((np.ones(len(tails)), (tails, heads)), shape=(size, size)), indices=s,
                            unweighted=True)
            kept = hops[tails] + 1 == hops[heads]
            cost_of, hops_of = (np.where(reached, found, 0.0).astype(np.int64) for found in (cost, hops))
        tails, heads, links = tails[kept], heads[kept], links[kept]
        order = np.lexsort((links, arrays.name_rank[tails], heads))
        return _Tree(arrays.names, self._ordinal, reached, heads[order], tails[order], links[order], cost_of,
                     hops_of)

    def search(self, src: str, target: str | None = None) -> dict[str, Predecessors]:
        """Dijkstra from ``src`` over (cost, hops) labels, keeping every equal-cost predecessor;
        with ``target``, only until it is settled (complete for the nodes settled by then)."""
        preds = self._labelled_search(src, target)[1]
        return {node: tuple(sorted(choices)) for node, choices in preds.items()}

    def _labelled_search(self, src: str, target: str | None = None, within: str | None = None
                         ) -> tuple[dict[str, tuple[int, int]], dict[str, list[tuple[str, int]]]]:
        """:meth:`search`'s (cost, hops) labels and unsorted predecessors; with ``within``, nodes
        outside that machine are reached but not passed through."""
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
            if within is not None and self._machine is not None and self._machine[node] != within:
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
        return best, preds

    def _relays(self) -> tuple[np.ndarray, csr_array]:
        """The links out of transit nodes and their search graph (cached)."""
        if self._relay_graph is None:
            arrays = self._link_arrays()
            assert arrays is not None
            links = np.flatnonzero(arrays.relays)
            self._relay_graph = links, _graph(arrays, links, len(arrays.names))
        return self._relay_graph

    def _link_arrays(self) -> _LinkArrays | None:
        """The links as arrays for :meth:`search_all` (cached; None when costs could add inexactly)."""
        if self._arrays is None:
            names = list(self._ordinal)
            ordinal, links = self._ordinal, self._links
            src = np.fromiter((ordinal[link.src] for link in links), np.int64, len(links))
            dst = np.fromiter((ordinal[link.dst] for link in links), np.int64, len(links))
            transit = np.fromiter((self._transit[name] for name in names), bool, len(names))
            rank = np.empty(len(names), np.int64)
            rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
            unit = math.gcd(*self._cost) or 1  # costs in units of their greatest common divisor: smaller sums
            costs = [cost // unit for cost in self._cost]
            largest, count = max(costs, default=0), len(names)
            exact = largest * count < _EXACT_FLOAT  # bounds every label the search forms
            weight = np.array(costs, dtype=float) * count + 1 if (largest + 1) * count * count < _EXACT_FLOAT else None
            self._arrays = _LinkArrays(names, src, dst, np.array(costs, dtype=float), unit, weight, transit[src], rank,
                                       exact)
        return self._arrays if self._arrays.exact else None


@dataclass(frozen=True)
class _LinkArrays:
    """The links of a topology as arrays (node ordinals), for the vectorised tree search."""

    names: list[str]
    src: np.ndarray
    dst: np.ndarray
    cost: np.ndarray
    """Per link: its cost in units of ``unit``."""
    unit: int
    """The greatest common divisor of the costs."""
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
    node and turned into :data:`Predecessors` only for the nodes a route walks through, and the
    nodes' labels: cost (in units of the costs' greatest common divisor) and hops."""

    def __init__(self, names: list[str], ordinal: dict[str, int], reached: np.ndarray, heads: np.ndarray,
                 tails: np.ndarray, links: np.ndarray, cost: np.ndarray, hops: np.ndarray) -> None:
        self._names = names
        self._ordinal = ordinal
        self._reached = reached
        self._cost = _compact(cost)
        self._hops = _compact(hops)
        self._starts = np.searchsorted(heads, np.arange(len(names) + 1)).astype(np.int32)
        self._tails = tails.astype(np.int32)
        self._links = links.astype(np.int32)
        self._walked: dict[str, Predecessors] = {}

    @property
    def entries(self) -> int:
        """Array entries it holds, for the cache's budget (not the predecessors it has handed out,
        kept for the next walk: at most one tuple per node)."""
        return (self._starts.size + self._tails.size + self._links.size
                + (self._reached.nbytes + self._cost.nbytes + self._hops.nbytes) // 4)

    def label(self, node: str) -> tuple[int, int] | None:
        """``node``'s (cost, hops) from the source, None where it is not reached."""
        if node not in self:
            return None
        i = self._ordinal[node]
        return int(self._cost[i]), int(self._hops[i])

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
        return i is not None and i < len(self._reached) and bool(self._reached[i])  # a node added after the search: not

    def __iter__(self) -> Iterator[str]:
        return (self._names[i] for i in np.flatnonzero(self._reached))

    def __len__(self) -> int:
        return int(np.count_nonzero(self._reached))


def _compact(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in the smallest unsigned type that holds them."""
    return values.astype(np.min_scalar_type(int(values.max(initial=0))))


class _ViaExits(Mapping[str, Predecessors]):
    """The tree of a transit node inside a machine (:meth:`RouteTrees.via_exits`): its labels and
    predecessors inside the machine, and the trees of the switches its links out lead to with
    their labels inside, joined node by node as a route asks."""

    def __init__(self, inside: dict[str, tuple[tuple[int, int], Predecessors]],
                 exits: list[tuple[tuple[int, int], _Tree]]) -> None:
        self._inside = inside
        self._exits = exits
        self._joined: dict[str, Predecessors] = {}
        self.entries = 2 * len(inside)  # the exits' trees are the cache's own entries

    def __getitem__(self, node: str) -> Predecessors:
        found = self._joined.get(node)
        if found is not None:
            return found
        best, choices = self._inside.get(node, (None, ()))
        joined = set(choices)
        for (cost, hops), tree in self._exits:
            far = tree.label(node)
            if far is None:
                continue
            label = (cost + far[0], hops + far[1])
            if best is None or label < best:
                best, joined = label, set(tree[node])
            elif label == best:
                joined.update(tree[node])
        if best is None:
            raise KeyError(node)
        found = self._joined[node] = tuple(sorted(joined))
        return found

    def __contains__(self, node: object) -> bool:
        return node in self._inside or any(node in tree for _, tree in self._exits)

    def __iter__(self) -> Iterator[str]:
        seen = set(self._inside)
        yield from self._inside
        for _, tree in self._exits:
            for node in tree:
                if node not in seen:
                    seen.add(node)
                    yield node

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _FirstHop(Mapping[str, Predecessors]):
    """The tree of a node whose one link leads to ``via``: ``via``'s tree with that hop first."""

    def __init__(self, tree: Mapping[str, Predecessors], src: str, via: str, index: int) -> None:
        self._tree = tree
        self._own = {via: ((src, index),), src: ()}
        self.entries = entries(tree)  # it keeps ``via``'s tree alive

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


def entries(tree: Mapping[str, Predecessors]) -> int:
    """Array entries a kept tree holds alive (a heap search's dict: one per node)."""
    counted = getattr(tree, "entries", None)  # not a default of getattr: len() of a first-hop tree walks it
    return len(tree) if counted is None else counted
