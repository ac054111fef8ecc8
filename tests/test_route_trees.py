"""Least-cost trees (simhpc/network/route_trees.py): the vectorised searches against the heap's,
the shortcut of single-link nodes, the cache's budget, and the search that stops at its end."""

from __future__ import annotations

import itertools

import pytest

from simhpc.network import Topology, dragonfly, fat_tree, route_trees, single_switch, torus
from tests.test_topology import GB, dgx


@pytest.mark.parametrize("build", [
    lambda: single_switch(hosts=5, bandwidth=10 * GB, latency=1e-6),
    lambda: fat_tree(hosts=40, hosts_per_leaf=8, bandwidth=10 * GB, latency=1e-6, oversubscription=2.0),
    lambda: dragonfly(groups=4, routers_per_group=2, hosts_per_router=2, bandwidth=10 * GB, latency=1e-6),
    lambda: torus(dims=(3, 2, 2), bandwidth=10 * GB, latency=1e-6),
    lambda: dgx(2, fabric="fat_tree", nodes_per_leaf=1),
], ids=["single_switch", "fat_tree", "dragonfly", "torus", "gpu_cluster"])
def test_a_single_link_node_shares_its_neighbours_search(build) -> None:
    """The shortcut tree of a node with one outgoing link equals a full search from it."""
    topo = build()
    trees = topo._route_trees()
    for node in topo.nodes:
        assert trees.tree(node) == trees.search(node), node


@pytest.mark.parametrize(("build", "search"), [
    (lambda: single_switch(hosts=5, bandwidth=10 * GB, latency=1e-6), "one pass"),
    (lambda: fat_tree(hosts=24, hosts_per_leaf=4, bandwidth=10 * GB, latency=0.0), "one pass"),  # every path costs 0
    (lambda: fat_tree(hosts=40, hosts_per_leaf=8, bandwidth=10 * GB, latency=1e-6, oversubscription=2.0), "one pass"),
    (lambda: dragonfly(groups=4, routers_per_group=3, hosts_per_router=2, bandwidth=10 * GB, latency=1e-6),
     "one pass"),
    (lambda: torus(dims=(4, 3, 2), bandwidth=10 * GB, latency=1e-6), "one pass"),
    (lambda: dgx(3, nics=4, fabric="fat_tree", nodes_per_leaf=2), "one pass"),
    (lambda: mixed_costs(), "one pass"),
    (lambda: mixed_costs(far=4e7), "two passes"),
    (lambda: mixed_costs(far=1e6), "heap"),
], ids=["single_switch", "fat_tree_free", "fat_tree", "dragonfly", "torus", "gpu_cluster", "mixed_costs",
        "costly_for_one_pass", "too_costly_for_floats"])
def test_the_vectorised_tree_search_keeps_the_heaps_labels_and_ties(build, search: str) -> None:
    """SciPy's Dijkstra plus the tight-link passes give, from every node, the heap search's
    equal-cost predecessors of every node it reaches: the same routes, ECMP choices included.
    One search ordering by cost, then hops, where those labels add exactly; a search by cost and
    one by hops over the tight links where only the costs do; the heap where not even they do."""
    topo = build()
    trees = topo._route_trees()
    for node in topo.nodes:
        assert dict(trees.search_all(node)) == trees.search(node), node
    assert trees.search_kind == search


def test_trees_past_the_cache_budget_are_dropped_least_recently_used_first(monkeypatch) -> None:
    """Under a budget of array entries the routing trees kept stay within it (one at least), the
    least recently used leave first, and the routes are those of an unlimited cache."""
    pairs = list(itertools.permutations(dgx(3).endpoints[::5], 2))
    expected = {pair: dgx(3).path(*pair) for pair in pairs}
    monkeypatch.setattr(route_trees, "TREE_CACHE_ENTRIES", 1)
    topo = dgx(3)
    assert {pair: topo.path(*pair) for pair in pairs} == expected
    trees = topo._route_trees()
    assert len(trees.kept) == 1 and trees.kept_entries == route_trees.entries(trees.tree(trees.kept[0]))
    fabric = fat_tree(hosts=32, hosts_per_leaf=4, bandwidth=10 * GB, latency=1e-6)
    budget = 3 * route_trees.entries(fabric._route_trees().search_all("leaf0")) + 1
    monkeypatch.setattr(route_trees, "TREE_CACHE_ENTRIES", budget)
    trees = fabric._route_trees()
    for node in ("leaf0", "leaf1", "leaf2", "leaf0", "leaf3"):  # leaf0 used again: leaf1 goes
        trees.tree(node)
    assert trees.kept == ["leaf2", "leaf0", "leaf3"]
    assert trees.kept_entries == sum(route_trees.entries(trees.tree(node)) for node in trees.kept) <= budget


def machines_through_machines() -> Topology:
    """Machines of a bus and two NICs on fabric switches x and y, which a costly cable joins and a
    switch z with hosts bridges: the cheapest way between x and y runs through a machine, paths
    out through x and through y tie, and in the last machine, both of whose NICs are on x, a way
    between its NICs out through x ties with the one inside."""
    topo = Topology("through", ecmp=True)
    for switch in ("x", "y", "z"):
        topo.add_switch(switch)
    topo.connect("x", "y", GB, 9e-6)
    topo.connect("x", "z", GB, 1e-6)
    topo.connect("y", "z", GB, 1e-6)
    for h in range(2):
        topo.add_endpoint(f"h{h}")
        topo.connect(f"h{h}", "z", GB, 1e-6)
    for m, (inside, out, switches) in enumerate([(2e-6, 1e-6, "xy"), (1e-6, 2e-6, "xy"), (3e-6, 1e-6, "xy"),
                                                 (1e-6, 1e-6, "xx")]):
        topo.add_switch(f"m{m}.bus", machine=f"m{m}")
        topo.add_endpoint(f"m{m}.gpu", machine=f"m{m}")
        topo.connect(f"m{m}.gpu", f"m{m}.bus", GB, 1e-6)
        for k, switch in enumerate(switches):
            topo.add_switch(f"m{m}.nic{k}", machine=f"m{m}")
            topo.connect(f"m{m}.nic{k}", f"m{m}.bus", GB, inside)
            topo.connect(f"m{m}.nic{k}", switch, GB, out)
    return topo


@pytest.mark.parametrize("build", [
    lambda: dgx(3),
    lambda: dgx(4, nics=2, fabric="fat_tree", nodes_per_leaf=1),
    lambda: dgx(5, nics=4, fabric="fat_tree", nodes_per_leaf=2, oversubscription=2.0),
    lambda: dgx(4, nics=8, fabric="fat_tree", nodes_per_leaf=2, spines=3, host_rails=True),
    lambda: dgx(3, nics=1, ecmp=False),
    machines_through_machines,
], ids=["single_switch", "fat_tree", "oversubscribed", "rails", "one_nic", "through_machines"])
def test_a_switch_in_a_machine_joins_its_search_inside_with_its_exits_trees(build, monkeypatch) -> None:
    """The tree of a switch inside a machine (a NIC, a bus, the host), joined from its machine's
    search and the trees of the fabric switches its machine's links lead to, equals the whole
    network's search from it: every node's equal-cost predecessors, so every route and ECMP
    choice. The fabric is searched once per switch, not once per NIC."""
    topo = build()
    trees = topo._route_trees()
    searched = []
    search_all = trees.search_all
    monkeypatch.setattr(trees, "search_all", lambda src: searched.append(src) or search_all(src))
    inside = [node for node in topo.nodes if topo._transit[node] and topo.node_of(node) != node]
    for node in inside:
        tree = trees.tree(node)
        assert isinstance(tree, route_trees._ViaExits), node
        assert dict(tree) == trees.search(node), node
    assert searched and all(topo.node_of(node) == node for node in searched)
    assert len(searched) == len(set(searched)) < len(inside)


def test_a_machine_of_half_the_network_searches_it_whole() -> None:
    """Joining pays only where the machine is small beside the network: a machine of half its
    nodes or more, or a node alone in its machine, searches the whole network."""
    assert dgx(1)._route_trees().via_exits("n0.nvswitch") is None
    fabric = fat_tree(hosts=8, hosts_per_leaf=4, bandwidth=10 * GB, latency=1e-6)
    assert fabric._route_trees().via_exits("leaf0") is None
    assert dgx(2)._route_trees().via_exits("n0.nic0") is not None


def mixed_costs(far: float = 0.0) -> Topology:
    """A ring of switches with hosts, latencies and routing costs of several sizes, zero ones
    too, so that cheaper paths with more hops and equal-cost paths of unequal hops compete; with
    ``far``, a link of that cost (seconds). Costs count in units of their greatest common divisor
    in femtoseconds: 4e7 s keeps the unit at 1 us, and the labels add exactly by cost but not by
    cost and hops; 1e6 s rounds to 999999999999999868928 fs, the unit falls to 512 fs, and not
    even the costs add exactly."""
    topo = Topology("far" if far else "mixed")
    for i in range(8):
        topo.add_switch(f"s{i}")
        topo.add_endpoint(f"h{i}")
        topo.connect(f"h{i}", f"s{i}", GB, 1e-6)
    for i in range(8):
        topo.connect(f"s{i}", f"s{(i + 1) % 8}", GB, (i % 3) * 1e-6, cost=(i % 3) * 1e-6)
    topo.connect("s0", "s4", GB, 2e-6)
    topo.connect("s2", "s6", GB, 0.0)
    if far:
        topo.connect("s1", "s5", GB, 1e-15, cost=far)
    return topo


@pytest.mark.parametrize("ecmp", [False, True])
def test_a_search_that_stops_at_its_end_finds_the_whole_trees_path(ecmp: bool) -> None:
    """Inside a machine the route search stops once it reaches the destination: every pair of its
    nodes (GPUs, switches, NICs, the host) gets the path the whole network's tree gives, ECMP's
    choice among equal-cost hops included, or no route where the tree has none."""

    def walk(src: str, dst: str) -> tuple[int, ...] | None:
        try:
            return tuple(topo._walk(src, dst, topo._ordinal[dst]))
        except ValueError:
            return None

    topo = dgx(nodes=3, nics=4, ecmp=ecmp)
    machine = [node for node in topo.nodes if node.startswith("n1.")]
    routed = 0
    for src, dst in itertools.permutations(machine, 2):
        topo._trees = None  # nothing kept
        stopped = walk(src, dst)
        topo._route_trees().tree(src)  # the whole tree, kept: _walk takes it
        assert walk(src, dst) == stopped
        routed += stopped is not None
    assert routed > len(machine) ** 2 / 2


def test_stopped_searches_are_kept_for_the_routes_through_the_same_end(monkeypatch) -> None:
    """A device's search to its gateway serves every route that leaves the machine through it: kept
    (at most PARTIAL_TREES, least recently used dropped first), the routes those of fresh searches."""
    pairs = [(f"n{a}.gpu{g}", f"n{b}.cpu") for a in range(3) for g in range(8) for b in range(3) if a != b]
    expected = {pair: dgx(3).path(*pair) for pair in pairs}
    monkeypatch.setattr(route_trees, "PARTIAL_TREES", 3)
    topo = dgx(3)
    trees = topo._route_trees()
    searches = []
    search = trees.search
    monkeypatch.setattr(trees, "search", lambda src, target=None: searches.append((src, target)) or search(src, target))
    assert {pair: topo.path(*pair) for pair in pairs} == expected
    assert len(searches) == len(set(searches)) < len(pairs)  # each gateway's search once, in order
    assert trees.toward(*searches[-1]) is trees.toward(*searches[-1]) and len(trees._partial) == 3


def two_way_machines(machines: int = 3) -> Topology:
    """Machines whose two GPUs reach their NIC, the gateway, over two equal-cost PCIe switches,
    the NICs on one fabric switch: which switch a GPU's traffic takes depends on the destination."""
    topo = Topology("two-way", ecmp=True)
    topo.add_switch("fabric")
    for m in range(machines):
        topo.add_switch(f"m{m}.nic", machine=f"m{m}")
        topo.connect(f"m{m}.nic", "fabric", GB, 1e-6)
        for k in range(2):
            topo.add_switch(f"m{m}.pcie{k}", machine=f"m{m}")
            topo.connect(f"m{m}.pcie{k}", f"m{m}.nic", GB, 1e-6)
        for g in range(2):
            topo.add_endpoint(f"m{m}.gpu{g}", machine=f"m{m}")
            for k in range(2):
                topo.connect(f"m{m}.gpu{g}", f"m{m}.pcie{k}", GB, 1e-6)
            topo.set_gateway(f"m{m}.gpu{g}", f"m{m}.nic")
    return topo


@pytest.mark.parametrize("build", [
    two_way_machines,
    lambda: dgx(3, nics=2, fabric="fat_tree", nodes_per_leaf=1, spines=2),
    lambda: fat_tree(hosts=16, hosts_per_leaf=4, bandwidth=10 * GB, latency=1e-6),
], ids=["two_way", "gpu_cluster", "fat_tree"])
def test_walks_to_and_from_gateways_are_kept_only_where_no_tie_chose_them(build, monkeypatch) -> None:
    """A walk with an endpoint at one end that made no equal-cost choice serves every route through
    it; one that did is walked again for each destination: the routes are those walked afresh."""
    nodes = [node for node in build().nodes if not build()._transit[node] or node.endswith(".cpu")]
    pairs = list(itertools.permutations(nodes, 2))
    topo = build()
    routes = {pair: topo.path(*pair) for pair in pairs}
    assert topo._segments or build is two_way_machines  # there every walk a device ends makes a choice
    assert all(not (topo._transit[a] and topo._transit[b]) for a, b in topo._segments)

    class NothingKept(dict):
        def __setitem__(self, key, value) -> None:
            pass

    fresh = build()
    monkeypatch.setattr(fresh, "_segments", NothingKept())
    assert {pair: fresh.path(*pair) for pair in pairs} == routes
