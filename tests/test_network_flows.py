"""Max-min fairness of the flow solver and of the network's flow mode, against independent oracles."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from simhpc.engine import Simulation
from simhpc.network import FlowSolver, Network, Topology, flows, single_switch

REL = 1e-6
# Drawn from integers: some test modules switch the CPU to flush-to-zero, which st.floats rejects.
CAPACITY = st.integers(1, 10**6).map(lambda k: k / 1e4)


def progressive_filling(paths: list[list[int]], capacity: list[float]) -> list[float]:
    """Textbook max-min: raise every unfrozen flow equally; freeze the flows of the link that fills."""
    rates = [0.0] * len(paths)
    frozen = [False] * len(paths)
    spare = list(capacity)
    while not all(frozen):
        users = [
            [f for f, path in enumerate(paths) if link in path and not frozen[f]]
            for link in range(len(capacity))
        ]
        step = min(spare[link] / len(users[link]) for link in range(len(capacity)) if users[link])
        for f in range(len(paths)):
            if not frozen[f]:
                rates[f] += step
                for link in paths[f]:
                    spare[link] -= step
        for link in range(len(capacity)):
            if users[link] and spare[link] <= 1e-12 * capacity[link]:
                for f in users[link]:
                    frozen[f] = True
    return rates


def lexicographic_lp(paths: list[list[int]], capacity: list[float]) -> list[float]:
    """Max-min by repeated linear programs: maximise the common level of the unfrozen flows, then
    freeze each flow that cannot exceed that level without lowering another below it."""
    n, m = len(paths), len(capacity)
    a_cap = np.zeros((m, n))
    for f, path in enumerate(paths):
        a_cap[path, f] = 1.0
    fixed: dict[int, float] = {}
    while len(fixed) < n:
        free = [f for f in range(n) if f not in fixed]
        # variables: rates (n) then level t; maximise t
        c = np.zeros(n + 1)
        c[-1] = -1.0
        a_ub = [np.append(row, 0.0) for row in a_cap]
        b_ub = list(capacity)
        for f in free:
            row = np.zeros(n + 1)
            row[f], row[-1] = -1.0, 1.0
            a_ub.append(row)
            b_ub.append(0.0)
        bounds = [(fixed[f], fixed[f]) if f in fixed else (0, None) for f in range(n)] + [(0, None)]
        level = -linprog(c, A_ub=np.array(a_ub), b_ub=b_ub, bounds=bounds).fun
        for f in free:
            c2 = np.zeros(n + 1)
            c2[f] = -1.0
            bounds2 = [(fixed[g], fixed[g]) if g in fixed else (level * (1 - 1e-9), None) for g in range(n)]
            best = -linprog(c2, A_ub=np.array(a_ub[:m]), b_ub=b_ub[:m], bounds=[*bounds2, (0, None)]).fun
            if best <= level * (1 + 1e-7):
                fixed[f] = level
    return [fixed[f] for f in range(n)]


@st.composite
def flow_sets(draw, max_links: int = 10, max_flows: int = 24):
    links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(CAPACITY, min_size=links, max_size=links))
    paths = draw(
        st.lists(
            st.lists(st.integers(0, links - 1), min_size=1, max_size=min(links, 5), unique=True),
            min_size=1,
            max_size=max_flows,
        )
    )
    return capacity, paths


def assert_within_capacity(paths: list[list[int]], capacity: list[float], rates: list[float]) -> None:
    load = np.zeros(len(capacity))
    for path, rate in zip(paths, rates):
        load[path] += rate
    assert np.all(load <= np.array(capacity) * (1 + 1e-9))


@pytest.mark.parametrize("level_cost", [flows._LEVEL_COST, 0, 10**9], ids=["adaptive", "rounds", "levels"])
@settings(max_examples=200, deadline=None)
@given(case=flow_sets())
def test_solver_matches_progressive_filling(level_cost: int, case) -> None:
    capacity, paths = case
    solver = FlowSolver(capacity)
    for f, path in enumerate(paths):
        solver.add(f, path)
    with mock.patch.object(flows, "_LEVEL_COST", level_cost):  # both filling strategies
        rates = solver.rates
    got = [rates[f] for f in range(len(paths))]
    assert got == pytest.approx(progressive_filling(paths, capacity), rel=REL)
    assert_within_capacity(paths, capacity, got)
    assert np.all(solver.link_load <= np.array(capacity) * (1 + 1e-9))


@settings(max_examples=40, deadline=None)
@given(flow_sets(max_links=5, max_flows=6))
def test_solver_matches_lexicographic_linear_programs(case) -> None:
    capacity, paths = case
    solver = FlowSolver(capacity)
    for f, path in enumerate(paths):
        solver.add(f, path)
    rates = solver.rates
    assert [rates[f] for f in range(len(paths))] == pytest.approx(lexicographic_lp(paths, capacity), rel=REL)


@settings(max_examples=200, deadline=None)
@given(flow_sets(), st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=1, max_size=30))
def test_incremental_updates_equal_solving_from_scratch(case, operations) -> None:
    capacity, paths = case
    solver = FlowSolver(capacity)
    active: dict[int, list[int]] = {}
    for step, (add, pick) in enumerate(operations):
        if add or not active:
            solver.add(step, paths[pick % len(paths)])
            active[step] = paths[pick % len(paths)]
        else:
            victim = sorted(active)[pick % len(active)]
            solver.remove(victim)
            del active[victim]
        if pick % 3 == 0:  # batch some changes
            continue
        fresh = FlowSolver(capacity)
        for flow, path in active.items():
            fresh.add(flow, path)
        expected = fresh.rates
        got = solver.rates
        assert got.keys() == expected.keys()
        for flow in active:
            assert got[flow] == pytest.approx(expected[flow], rel=1e-9)


def test_two_flows_on_one_bottleneck_get_half_each() -> None:
    solver = FlowSolver([10.0, 4.0, 10.0])
    solver.add("a", [0, 1])
    solver.add("b", [1, 2])
    assert solver.rates == {"a": 2.0, "b": 2.0}
    solver.remove("b")
    assert solver.rates == {"a": 4.0}


def test_textbook_example_with_three_levels() -> None:
    # link 0 (cap 1): a, b, c; link 1 (cap 2): c, d; link 2 (cap 10): d, e
    solver = FlowSolver([1.0, 2.0, 10.0])
    for flow, path in {"a": [0], "b": [0], "c": [0, 1], "d": [1, 2], "e": [2]}.items():
        solver.add(flow, path)
    rates = solver.rates
    third = 1 / 3
    assert rates == pytest.approx({"a": third, "b": third, "c": third, "d": 2 - third, "e": 10 - (2 - third)})


def test_solver_validates_input() -> None:
    with pytest.raises(ValueError, match="capacities"):
        FlowSolver([1.0, 0.0])
    solver = FlowSolver([1.0, 1.0])
    with pytest.raises(ValueError, match="no link"):
        solver.add("x", [])
    with pytest.raises(ValueError, match="out of range"):
        solver.add("x", [2])
    with pytest.raises(ValueError, match="twice"):
        solver.add("x", [1, 1])
    solver.add("x", [0])
    with pytest.raises(ValueError, match="already active"):
        solver.add("x", [1])


def test_independent_components_are_left_alone() -> None:
    solver = FlowSolver([1.0, 1.0])
    solver.add("left", [0])
    solver.add("right", [1])
    solver.update()
    solver.add("left2", [0])
    changed, links = solver.update()
    assert sorted(changed.tolist()) == sorted([solver.slot("left"), solver.slot("left2")])
    assert links.tolist() == []  # link 0 stays full, link 1 untouched
    solver.remove("right")
    changed, links = solver.update()
    assert changed.tolist() == [] and links.tolist() == [1]


# -- the network's flow mode on random topologies ------------------------------------------------


@st.composite
def random_networks(draw):
    size = draw(st.integers(2, 7))
    nodes = [f"r{i}" for i in range(size)]
    edges = {(i, i + 1) for i in range(size - 1)}  # a chain keeps it connected
    edges |= set(draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)), max_size=10)))
    edges = sorted({(min(a, b), max(a, b)) for a, b in edges if a != b})
    cables = [(a, b, draw(CAPACITY), draw(st.sampled_from([0.0, 1e-6, 2e-6, 5e-6]))) for a, b in edges]
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).filter(lambda p: p[0] != p[1]),
            min_size=1,
            max_size=16,
        )
    )
    topo = Topology("random")
    for name in nodes:
        topo.add_endpoint(name, transit=True)
    for a, b, bandwidth, latency in cables:
        topo.connect(nodes[a], nodes[b], bandwidth, latency)
    return topo, [(nodes[a], nodes[b]) for a, b in pairs]


@settings(max_examples=200, deadline=None)
@given(random_networks())
def test_flow_mode_rates_are_max_min_fair(case) -> None:
    topo, pairs = case
    sim = Simulation()
    network = Network(sim, topo, "flow")
    for i, (src, dst) in enumerate(pairs):
        network.transfer(src, dst, 1e30, name=f"f{i}")
    sim.run(until=1.0)  # every latency has passed, no flow can have finished
    flows = {flow.name: flow for flow in network.active_flows()}
    assert sorted(flows) == sorted(f"f{i}" for i in range(len(pairs)))
    paths = [list(topo.path(src, dst)) for src, dst in pairs]
    capacity = [link.bandwidth for link in topo.links]
    rates = [flows[f"f{i}"].rate for i in range(len(pairs))]
    assert rates == pytest.approx(progressive_filling(paths, capacity), rel=REL)
    assert_within_capacity(paths, capacity, rates)


def test_flow_joined_midway_finishes_at_hand_computed_time() -> None:
    bandwidth, latency, size = 1e10, 1e-6, 1e9
    sim = Simulation()
    network = Network(sim, single_switch(3, bandwidth, latency), "flow")
    alpha = 2 * latency  # two links from host to host
    join = 0.05
    done: dict[str, float] = {}

    def first():
        yield network.transfer("h0", "h2", size)
        done["a"] = sim.now

    def second():
        yield sim.timeout(join)
        yield network.transfer("h1", "h2", size)
        done["b"] = sim.now

    sim.process(first())
    sim.process(second())
    sim.run()
    # a drains alone at B from alpha until b starts draining at join + alpha: B * join bytes.
    alone = bandwidth * join
    # then both share the h2 downlink at B/2 until a's remaining bytes are gone
    a_end = join + alpha + (size - alone) / (bandwidth / 2)
    # b drained (size - alone) meanwhile, then finishes its rest at the full B
    b_end = a_end + (size - (size - alone)) / bandwidth
    assert done["a"] == pytest.approx(a_end, rel=1e-12)
    assert done["b"] == pytest.approx(b_end, rel=1e-12)
    assert a_end == pytest.approx(0.150002) and b_end == pytest.approx(0.200002)
