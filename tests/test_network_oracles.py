"""The network against analytic oracles off the usual parameters: collectives for odd and large
rank counts, other sizes, bandwidths and latencies (zero included); flow finish times against an
independent fluid simulation when flows start and end at different times; all-to-all on an
oversubscribed fat-tree against its link bounds.

On one switch a host-to-host path is two links, so ``alpha = 2 x link latency``. All-to-all is the
one collective here whose messages share links (every host link carries ``n - 1``): analytic mode
charges the messages of one batch for the bytes through their end links (injection and
ejection), so both modes meet its ``alpha + (n-1)/n S/B``, and an uneven matrix costs alpha plus
the busiest host link's bytes over its bandwidth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, Topology, fat_tree, single_switch
from tests.test_collectives import timed

LINKS = [(1e9, 0.0), (12.5e9, 5e-7), (3e11, 2.5e-5)]
"""(bandwidth bytes/s, link latency s) of the single switch's host links."""


def collective_time(mode: str, topo: Topology, call, **kwargs) -> tuple[float, Network]:
    """Duration of ``call(communicator)`` over all of ``topo``'s hosts, and the network."""
    took, network, _ = timed(mode, len(topo.endpoints), call, topo, record_links=False, **kwargs)
    return took, network


def formulas(n: int, size: float, bandwidth: float, alpha: float) -> dict[str, tuple[object, float]]:
    rounds = math.ceil(math.log2(n))
    return {
        "all_reduce": (lambda c: c.all_reduce(size), 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * alpha),
        "reduce_scatter": (lambda c: c.reduce_scatter(size), (n - 1) / n * size / bandwidth + (n - 1) * alpha),
        "all_gather": (lambda c: c.all_gather(size), (n - 1) / n * size / bandwidth + (n - 1) * alpha),
        "broadcast": (lambda c: c.broadcast(n // 2, size), rounds * (alpha + size / bandwidth)),
        "tree": (lambda c: c.all_reduce(size, "tree"), 2 * rounds * (alpha + size / bandwidth)),
    }


@pytest.mark.parametrize("n", [2, 3, 5, 7, 16, 64])
@pytest.mark.parametrize(("bandwidth", "latency"), LINKS)
@pytest.mark.parametrize("size", [1.0, 12345.678, 3e8])
def test_collectives_match_alpha_beta_in_both_modes(n: int, bandwidth: float, latency: float, size: float) -> None:
    topo = single_switch(n, bandwidth, latency)
    modes = ("analytic", "flow") if n < 64 or size == 3e8 else ("analytic",)
    for name, (call, expected) in formulas(n, size, bandwidth, 2 * latency).items():
        for mode in modes:
            took, _ = collective_time(mode, topo, call)
            assert took == pytest.approx(expected, rel=1e-9, abs=1e-15), (name, mode)


@pytest.mark.parametrize("n", [2, 3, 7, 16, 64])
@pytest.mark.parametrize(("bandwidth", "latency"), LINKS)
def test_flow_all_to_all_is_bound_by_each_host_link(n: int, bandwidth: float, latency: float) -> None:
    size = 7.7e7  # per rank, split evenly over the n destinations
    topo = single_switch(n, bandwidth, latency)
    took, network = collective_time("flow", topo, lambda c: c.all_to_all(size / n))
    assert took == pytest.approx(2 * latency + (n - 1) / n * size / bandwidth, rel=1e-9)
    assert network.link_bytes.sum() == pytest.approx(2 * (n - 1) * size)


@pytest.mark.parametrize("n", [2, 3, 5, 7, 16, 64])
@pytest.mark.parametrize(("bandwidth", "latency"), LINKS)
@pytest.mark.parametrize("size", [1.0, 12345.678, 3e8])
def test_all_to_all_matches_alpha_beta_in_both_modes(n: int, bandwidth: float, latency: float, size: float) -> None:
    """``S`` per rank, ``S / n`` to each rank (itself included, free): ``alpha + (n-1)/n S/B``,
    evenly or by the same matrix; flow mode agrees (no contention inside a single switch)."""
    topo = single_switch(n, bandwidth, latency)
    expected = 2 * latency + (n - 1) / n * size / bandwidth
    modes = ("analytic", "flow") if n < 64 or size == 3e8 else ("analytic",)
    for mode in modes:
        took, network = collective_time(mode, topo, lambda c: c.all_to_all(size / n))
        assert took == pytest.approx(expected, rel=1e-9, abs=1e-15), mode
        assert network.link_bytes.sum() == pytest.approx(2 * (n - 1) * size)
    matrix = np.full((n, n), size / n)
    took, _ = collective_time("analytic", topo, lambda c: c.all_to_all(matrix=matrix))
    assert took == pytest.approx(expected, rel=1e-9, abs=1e-15)


def rank_ends(mode: str, topo: Topology, matrix: np.ndarray) -> np.ndarray:
    """When each rank finished its part of ``all_to_all(matrix)``, from its trace span."""
    sim = Simulation()
    network = Network(sim, topo, mode, record_links=False)
    comm = Communicator(network, topo.endpoints)
    comm.all_to_all(matrix=matrix)
    sim.run()
    return np.array([sim.trace.track(rank, "comm").spans[0].end for rank in topo.endpoints])


@pytest.mark.parametrize("n", [2, 3, 5, 7, 16, 64])
@pytest.mark.parametrize(("bandwidth", "latency"), LINKS)
def test_uneven_all_to_all_is_bound_by_the_busiest_endpoint(n: int, bandwidth: float, latency: float) -> None:
    """Analytic mode: message i -> j drains in max(out_i, in_j) / B (out: row sums, in: column
    sums, diagonal excluded), so the collective takes alpha + the busiest host link's bytes / B
    and a rank ends with its slowest message; flow mode can be no faster."""
    rng = np.random.default_rng(n)
    matrix = rng.uniform(0, 1e7, (n, n)) * (rng.random((n, n)) < 0.6)
    matrix[0, 1 % n] = 4e7  # one heavy pair
    off = matrix * (1 - np.eye(n))
    out, into = off.sum(axis=1), off.sum(axis=0)
    drain = np.maximum.outer(out, into) / bandwidth
    sends = off > 0
    expected = np.zeros(n)
    for k in range(n):
        touching = np.concatenate([drain[k][sends[k]], drain[:, k][sends[:, k]]])
        expected[k] = 2 * latency + touching.max() if touching.size else 0.0
    topo = single_switch(n, bandwidth, latency)
    ends = rank_ends("analytic", topo, matrix)
    assert ends == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert ends.max() == pytest.approx(2 * latency + max(out.max(), into.max()) / bandwidth, rel=1e-9)
    if n <= 16:
        assert rank_ends("flow", topo, matrix).max() >= ends.max() * (1 - 1e-9)


def test_all_to_all_charges_each_host_link_at_its_own_bandwidth() -> None:
    """Hosts on links of different bandwidths: the busiest end link in time, not in bytes."""
    topo = Topology("mixed")
    topo.add_switch("switch")
    speeds = [1e9, 4e9, 2e9, 8e9]
    for i, speed in enumerate(speeds):
        topo.add_endpoint(f"h{i}")
        topo.connect(f"h{i}", "switch", speed, 1e-6)
    matrix = np.array([[0, 1, 1, 1], [2, 0, 2, 2], [3, 3, 0, 3], [4, 4, 4, 0]]) * 1e6
    busiest = max(max(matrix[i].sum(), matrix[:, i].sum()) / speed for i, speed in enumerate(speeds))
    took, _ = collective_time("analytic", topo, lambda c: c.all_to_all(matrix=matrix))
    assert took == pytest.approx(2e-6 + busiest, rel=1e-12)
    flow, _ = collective_time("flow", topo, lambda c: c.all_to_all(matrix=matrix))
    assert flow >= took * (1 - 1e-9)


# -- flow finish times against an independent fluid simulation ----------------------------------


def max_min(paths: list[list[int]], capacity: list[float]) -> list[float]:
    """Progressive filling, written independently of :mod:`simhpc.network.flows`."""
    rates = [0.0] * len(paths)
    frozen = [False] * len(paths)
    spare = list(capacity)
    while not all(frozen):
        users: dict[int, list[int]] = {}
        for f, path in enumerate(paths):
            if not frozen[f]:
                for link in path:
                    users.setdefault(link, []).append(f)
        step = min(spare[link] / len(flows) for link, flows in users.items())
        for f, path in enumerate(paths):
            if not frozen[f]:
                rates[f] += step
                for link in path:
                    spare[link] -= step
        for link, flows in users.items():
            if spare[link] <= 1e-12 * capacity[link]:
                for f in flows:
                    frozen[f] = True
    return rates


def fluid_finish_times(flows: list[tuple[float, list[int], float]], capacity: list[float]) -> list[float]:
    """Finish time of each (start, links, bytes) flow: rates re-solved at every start and end."""
    remaining = [nbytes for _, _, nbytes in flows]
    finish = [math.nan] * len(flows)
    order = sorted(range(len(flows)), key=lambda i: flows[i][0])
    active: list[int] = []
    now, arrived = 0.0, 0
    while arrived < len(flows) or active:
        while arrived < len(flows) and flows[order[arrived]][0] <= now:
            active.append(order[arrived])
            arrived += 1
        if not active:
            now = flows[order[arrived]][0]
            continue
        rates = max_min([flows[i][1] for i in active], capacity)
        step = min(remaining[i] / rate for i, rate in zip(active, rates))
        if arrived < len(flows):
            step = min(step, flows[order[arrived]][0] - now)
        now += step
        for i, rate in zip(active, rates):
            remaining[i] -= rate * step
        for i in [i for i in active if remaining[i] <= 1e-9 * flows[i][2]]:
            finish[i] = now
            active.remove(i)
    return finish


@st.composite
def staggered_flows(draw):
    size = draw(st.integers(2, 6))
    edges = {(i, i + 1) for i in range(size - 1)}
    edges |= {(min(a, b), max(a, b)) for a, b in draw(st.lists(
        st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)), max_size=8)) if a != b}
    topo = Topology("random")
    for i in range(size):
        topo.add_endpoint(f"r{i}", transit=True)
    for a, b in sorted(edges):
        topo.connect(f"r{a}", f"r{b}", draw(st.sampled_from([1e9, 2.5e9, 3e9, 7e9, 1e10])),
                     draw(st.sampled_from([0.0, 1e-6, 3e-6])))
    pair = st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).filter(lambda p: p[0] != p[1])
    specs = draw(st.lists(st.tuples(
        st.integers(0, 2000).map(lambda us: us * 1e-6), pair, st.integers(1, 10**4).map(lambda k: k * 1e3)),
        min_size=1, max_size=12))
    return topo, [(start, f"r{a}", f"r{b}", nbytes) for start, (a, b), nbytes in specs]


@settings(max_examples=60, deadline=None)
@given(staggered_flows())
def test_flows_starting_and_ending_at_different_times_finish_on_time(case) -> None:
    topo, specs = case
    sim = Simulation()
    network = Network(sim, topo, "flow")
    ends = [math.nan] * len(specs)

    def one(i: int, start: float, src: str, dst: str, nbytes: float):
        yield sim.timeout(start)
        yield network.transfer(src, dst, nbytes)
        ends[i] = sim.now

    for i, spec in enumerate(specs):
        sim.process(one(i, *spec))
    sim.run()
    flows = [(start + topo.route(src, dst).latency, list(topo.path(src, dst)), nbytes)
             for start, src, dst, nbytes in specs]
    expected = fluid_finish_times(flows, [link.bandwidth for link in topo.links])
    assert ends == pytest.approx(expected, rel=1e-9)
    for series in sim.trace.counters:
        assert all(sample["utilisation"] <= 1 + 1e-9 for sample in series.values)


# -- all-to-all on an oversubscribed fat-tree ------------------------------------------------------


@pytest.mark.parametrize(("hosts", "per_leaf", "ratio", "spines"), [
    (64, 8, 2.0, None), (64, 8, 4.0, None), (48, 6, 3.0, None), (32, 4, 1.5, None), (32, 8, 2.0, 4),
    (36, 6, 2.0, 3), (40, 8, 2.5, None), (30, 8, 2.0, None), (24, 4, 2.0, 3), (20, 4, 1.0, None),
])
def test_fat_tree_all_to_all_is_bound_by_the_spine(hosts: int, per_leaf: int, ratio: float, spines) -> None:
    """The time is the busiest link's bytes over its capacity (every flow on one path, the
    fair shares keep every link of the busiest kind full), never below the fluid bound
    ``max(r (N - k), N - 1) S / (N B)``, and equal to it when the spines split the flows evenly.
    So is analytic mode's when the batch shares its paths; sharing its end links only, it is the
    host links' ``(N - 1) S / (N B)``."""
    bandwidth, size = 1e10, 6.4e8
    topo = fat_tree(hosts=hosts, hosts_per_leaf=per_leaf, bandwidth=bandwidth, latency=0.0,
                    oversubscription=ratio, spines=spines)
    took, network = collective_time("flow", topo, lambda c: c.all_to_all(size / hosts))
    flows = np.zeros(len(topo.links))
    for src in topo.endpoints:
        for dst in topo.endpoints:
            if src != dst:
                flows[list(topo.path(src, dst))] += 1
    busiest = max(flows[link.index] * size / hosts / link.bandwidth for link in topo.links)
    assert took == pytest.approx(busiest, rel=1e-9)
    # analytic mode, the batch sharing its paths: each message bound by its busiest link, the batch by the busiest
    analytic, _ = collective_time("analytic", topo, lambda c: c.all_to_all(size / hosts), batch_links="paths")
    assert analytic == pytest.approx(busiest, rel=1e-9)
    ends, _ = collective_time("analytic", topo, lambda c: c.all_to_all(size / hosts))
    assert ends == pytest.approx((hosts - 1) * size / hosts / bandwidth, rel=1e-9)  # the host links alone
    full_leaves = hosts % per_leaf == 0
    fluid = max(ratio * (hosts - per_leaf), hosts - 1) * size / (hosts * bandwidth)
    if full_leaves:
        assert took >= fluid * (1 - 1e-9)
        cross = per_leaf * (hosts - per_leaf)  # flows leaving each leaf
        if cross % (spines or per_leaf) == 0:
            assert took == pytest.approx(fluid, rel=1e-9)
    uplinks = [network.link_bytes[link.index] for link in topo.links
               if link.src.startswith("leaf") and link.dst.startswith("spine")]
    leaf = {host: i // per_leaf for i, host in enumerate(topo.endpoints)}
    cross_pairs = sum(leaf[a] != leaf[b] for a in topo.endpoints for b in topo.endpoints)
    assert sum(uplinks) == pytest.approx(cross_pairs * size / hosts)
