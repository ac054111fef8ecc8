"""The analytic ring (timed in advance) against the transfer-by-transfer ring it stands for."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, Topology, fat_tree, gpu_cluster, single_switch
from simhpc.network.analytic_ring import AnalyticRing
from simhpc.network.schedules import Ring


def uneven_switches(hosts: int, seed: int) -> Topology:
    """Hosts on two switches joined by one link, each host link of its own bandwidth and latency:
    a ring over it keeps no step, its ranks end their transfers at many different times."""
    rng = np.random.default_rng(seed)
    topo = Topology(f"uneven-{seed}")
    topo.add_switch("s0")
    topo.add_switch("s1")
    topo.connect("s0", "s1", 5e9, 3e-6)
    for i in range(hosts):
        topo.add_endpoint(f"h{i}")
        topo.connect(f"h{i}", f"s{i % 2}", float(rng.choice([1e9, 2.5e9, 1e10])), float(rng.choice([1e-6, 2e-6, 5e-6])))
    return topo


def link_records(network: Network, spans: bool) -> dict:
    """What each link that carried traffic recorded: its busy spans, or (``spans`` False) their
    tally: count, summed time and the last span."""
    busy = {}
    for link, track in enumerate(network.accounting._tracks):
        if track is not None:
            tally = track.spans
            busy[link] = ([(s.start, s.end) for s in tally] if spans
                          else (len(tally), tally.busy_time(), tally[-1].start, tally[-1].end))
    return busy


def run_records(sim: Simulation, network: Network, spans: bool, done: object) -> dict:
    """What a run recorded for the differential tests: ``done`` (when the ranks finished), the
    network's counts and link bytes, the links' records, the time reached, the trace's tracks."""
    return {"done": done, "transfers": network.transfers, "bytes_sent": network.bytes_sent,
            "link_bytes": network.link_bytes.copy(), "busy": link_records(network, spans), "now": sim.now,
            "tracks": [(track.process, track.thread) for track in sim.trace.tracks]}


def run_ring(topo: Topology, ranks: list[str], steps: int, chunk: float, *, advance: bool, spans: bool = True,
             until: float | None = None, traffic: int = 0, seed: int = 0, compact: bool = False) -> dict:
    """One ring started at 1 ms among other transfers; what the run recorded (``compact``: the
    spans kept in arrays)."""
    sim = Simulation(seed)
    network = Network(sim, topo, "analytic", link_spans=spans, compact_spans=compact)
    done: dict[int, float] = {}
    rng = np.random.default_rng(seed)
    hosts = topo.endpoints

    def other(delay: float, src: str, dst: str, nbytes: float):
        yield sim.timeout(delay)
        yield network.transfer(src, dst, nbytes)

    for _ in range(traffic):  # transfers of their own across the ring's time, over its links
        src, dst = rng.choice(len(hosts), 2, replace=False)
        sim.process(other(float(rng.uniform(0, 4e-3)), hosts[src], hosts[dst], float(rng.uniform(1e3, 1e6))))

    def ring():
        yield sim.timeout(1e-3)
        schedule = Ring(network, ranks, steps, chunk, "ring", lambda i: done.setdefault(i, sim.now))
        if advance:
            schedule.start_all()
        else:
            for i in range(len(ranks)):
                schedule.start(i)

    sim.process(ring())
    sim.run(until)
    return run_records(sim, network, spans, done)


def assert_same(fast: dict, slow: dict) -> None:
    assert fast["done"] == slow["done"]  # the same times, to the bit
    assert fast["now"] == slow["now"]
    assert fast["transfers"] == slow["transfers"]
    assert fast["bytes_sent"] == pytest.approx(slow["bytes_sent"], rel=1e-12)
    np.testing.assert_allclose(fast["link_bytes"], slow["link_bytes"], rtol=1e-12)
    assert fast["busy"] == slow["busy"]
    assert fast["tracks"] == slow["tracks"]


@pytest.mark.parametrize("spans", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_an_uneven_ring_among_other_traffic_is_timed_and_recorded_as_transfer_by_transfer(seed: int,
                                                                                            spans: bool) -> None:
    topo = uneven_switches(9, seed)
    ranks = list(np.random.default_rng(seed).permutation(topo.endpoints))
    for steps in (1, 3, 16):
        slow = run_ring(topo, ranks, steps, 3e5, advance=False, spans=spans, traffic=30, seed=seed)
        fast = run_ring(topo, ranks, steps, 3e5, advance=True, spans=spans, traffic=30, seed=seed)
        assert len(fast["done"]) == len(ranks)
        assert_same(fast, slow)


@pytest.mark.parametrize("spans", [True, False])
def test_a_fat_tree_ring_is_the_same(spans: bool) -> None:
    topo = fat_tree(hosts=40, hosts_per_leaf=8, bandwidth=1.25e10, latency=1e-6)
    for chunk in (0.0, 1.0, 4e6):
        slow = run_ring(topo, topo.endpoints, 2 * 39, chunk, advance=False, spans=spans, traffic=20)
        fast = run_ring(topo, topo.endpoints, 2 * 39, chunk, advance=True, spans=spans, traffic=20)
        assert_same(fast, slow)


@pytest.mark.parametrize("spans", [True, False])
def test_a_run_stopped_mid_ring_records_what_it_would(spans: bool) -> None:
    topo = uneven_switches(7, 11)
    whole = run_ring(topo, topo.endpoints, 12, 2e6, advance=True)
    for fraction in (0.0, 0.3, 0.77):
        until = 1e-3 + fraction * (whole["now"] - 1e-3)
        slow = run_ring(topo, topo.endpoints, 12, 2e6, advance=False, spans=spans, until=until, traffic=10)
        fast = run_ring(topo, topo.endpoints, 12, 2e6, advance=True, spans=spans, until=until, traffic=10)
        assert_same(fast, slow)
        assert fast["transfers"] - 10 < 7 * 12 or fraction == 0.77


def test_link_bytes_read_mid_ring_then_at_its_end_are_the_transfers_ended_by_then() -> None:
    topo = uneven_switches(7, 5)
    runs = []
    for advance in (False, True):
        sim = Simulation()
        network = Network(sim, topo, "analytic")
        ring = Ring(network, topo.endpoints, 10, 1e6, "ring", lambda i: None)
        if advance:
            ring.start_all()
        else:
            for i in range(7):
                ring.start(i)
        sim.run(until=2e-3)
        middle = network.link_bytes.copy()
        sim.run()
        runs.append((middle, network.link_bytes.copy(), network.transfers))
    (slow_middle, slow_end, slow_count), (fast_middle, fast_end, fast_count) = runs
    assert 0 < fast_middle.sum() < fast_end.sum() and fast_count == slow_count == 70
    np.testing.assert_allclose(fast_middle, slow_middle, rtol=1e-12)
    np.testing.assert_allclose(fast_end, slow_end, rtol=1e-12)


def staggered_run(topo: Topology, ready: np.ndarray, *, advance: bool, spans: bool) -> tuple:
    """A 7-step ring whose ranks have their inputs at ``ready``; what the run recorded."""
    sim = Simulation()
    network = Network(sim, topo, "analytic", link_spans=spans)
    done: dict[int, float] = {}

    def record(rank: int) -> None:
        done[rank] = sim.now

    if advance:
        AnalyticRing(network, topo.endpoints, 7, 5e5, record).start(ready)
    else:
        ring = Ring(network, topo.endpoints, 7, 5e5, "ring", record)
        for i in np.argsort(ready, kind="stable").tolist():
            sim.at(float(ready[i])).callbacks.append(partial(lambda rank, _event: ring.start(rank), i))
    sim.run()
    tracks = [track for track in network.accounting._tracks if track is not None]
    busy = [[(s.start, s.end) for s in track.spans] if spans else (len(track.spans), track.spans.busy_time())
            for track in tracks]
    return done, network.transfers, network.link_bytes.copy(), busy


@pytest.mark.parametrize("seed", range(6))
def test_ranks_joining_at_their_own_times_are_timed_as_transfer_by_transfer(seed: int) -> None:
    """``start(ready)``: each rank has its input at its own time (a hierarchical all-reduce's ring
    across nodes, whose ranks join as their node's ring is done with them)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 10))
    topo = uneven_switches(n, seed)
    ready = 1e-3 + rng.choice([0.0, 1e-4, 2.5e-4, 4e-4], n)
    slow_done, slow_count, slow_bytes, slow_busy = staggered_run(topo, ready, advance=False, spans=bool(seed % 2))
    fast_done, fast_count, fast_bytes, fast_busy = staggered_run(topo, ready, advance=True, spans=bool(seed % 2))
    assert len(fast_done) == n and fast_done == slow_done and fast_count == slow_count == 7 * n
    assert min(fast_done.values()) > ready.max()
    np.testing.assert_allclose(fast_bytes, slow_bytes, rtol=1e-12)
    assert fast_busy == slow_busy


def test_a_uniform_ring_takes_two_events_a_step() -> None:
    """What the analytic ring is for: a step of n transfers that end together is one event."""
    n = 64
    sim = Simulation()
    topo = single_switch(n, 1e10, 1e-6)
    comm = Communicator(Network(sim, topo, "analytic"), topo.endpoints)
    done = comm.all_reduce(1e8)
    sim.run()
    assert done.processed and sim.events_processed < 3 * 2 * (n - 1)
    assert sim.now == pytest.approx(2 * (n - 1) / n * 1e8 / 1e10 + 2 * (n - 1) * 2e-6, rel=1e-12)


def test_only_an_analytic_network_times_a_ring_in_advance() -> None:
    sim = Simulation()
    topo = single_switch(4, 1e10, 1e-6)
    with pytest.raises(ValueError, match="analytic"):
        AnalyticRing(Network(sim, topo, "flow"), topo.endpoints, 3, 1e6, print)


def run_hierarchical(nodes: int, *, advance: bool, spans: bool, until: float | None = None) -> dict:
    """A hierarchical all-reduce over ``nodes`` 4-GPU nodes among other transfers; what the run recorded.
    Without ``advance`` the network does not say it is analytic, so no ring is timed in advance."""
    topo = gpu_cluster(nodes=nodes, gpus_per_node=4, nvlink_bandwidth=300e9, nvlink_latency=1e-6,
                       pcie_bandwidth=32e9, pcie_latency=1e-6, nics_per_node=2, nic_bandwidth=25e9, nic_latency=2e-6,
                       fabric="single_switch")
    sim = Simulation()
    network = Network(sim, topo, "analytic", link_spans=spans)
    if not advance:
        network.mode = "analytic, transfer by transfer"  # transfers still analytic; collectives event-driven
    rng = np.random.default_rng(nodes)
    hosts = topo.endpoints

    def other(delay: float, src: str, dst: str):
        yield sim.timeout(delay)
        yield network.transfer(src, dst, 4e5)

    for _ in range(12):
        src, dst = rng.choice(len(hosts), 2, replace=False)
        sim.process(other(float(rng.uniform(0, 2e-4)), hosts[src], hosts[dst]))
    comm = Communicator(network, hosts)
    comm.all_reduce(6e6, "hierarchical")
    sim.run(until)
    busy = link_records(network, spans)
    ranks = sorted((track.process, track.thread, [(s.start, s.end) for s in track.spans])
                   for track in sim.trace.tracks if track.process != "network")
    return {"now": sim.now, "transfers": network.transfers, "bytes_sent": network.bytes_sent,
            "link_bytes": network.link_bytes.copy(), "busy": busy, "ranks": ranks}


@pytest.mark.parametrize("spans", [True, False])
@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_a_hierarchical_all_reduce_is_timed_and_recorded_as_transfer_by_transfer(nodes: int, spans: bool) -> None:
    slow = run_hierarchical(nodes, advance=False, spans=spans)
    fast = run_hierarchical(nodes, advance=True, spans=spans)
    assert len(fast["ranks"]) == 4 * nodes
    assert fast["ranks"] == slow["ranks"]  # each rank's collective ends at the same time, to the bit
    assert fast["now"] == slow["now"] and fast["transfers"] == slow["transfers"]
    assert fast["bytes_sent"] == pytest.approx(slow["bytes_sent"], rel=1e-12)
    np.testing.assert_allclose(fast["link_bytes"], slow["link_bytes"], rtol=1e-12)
    assert fast["busy"] == slow["busy"]
    for fraction in (0.4, 0.8):  # stopped part way
        until = fraction * fast["now"]
        slow = run_hierarchical(nodes, advance=False, spans=spans, until=until)
        fast = run_hierarchical(nodes, advance=True, spans=spans, until=until)
        assert (fast["transfers"], fast["busy"]) == (slow["transfers"], slow["busy"])
        np.testing.assert_allclose(fast["link_bytes"], slow["link_bytes"], rtol=1e-12)
