"""The analytic all-to-all (its batch timed in advance) against the message-by-message batch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_analytic_ring import run_records, uneven_switches

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, Topology, fat_tree, single_switch, torus
from simhpc.network.analytic_batch import AnalyticBatch, PairRoutes, batch_drains, end_links


def uneven_matrix(n: int, seed: int, zeros: float = 0.3) -> np.ndarray:
    """Bytes from rank i to rank j: a few sizes (so some messages end together), some pairs none."""
    rng = np.random.default_rng(seed)
    matrix = rng.choice([1.0, 3e5, 3e5, 7e6], (n, n))
    return np.where(rng.random((n, n)) < zeros, 0.0, matrix)


def run_all_to_all(topo: Topology, matrices: list[np.ndarray], *, advance: bool, spans: bool = True,
                   until: float | None = None, traffic: int = 0, seed: int = 0, links: str = "ends",
                   compact: bool = False) -> dict:
    """All-to-alls one after another from 1 ms among other transfers; what the run recorded.
    Without ``advance`` the network does not say it is analytic, so the batch is message by message
    (``compact``: the spans kept in arrays)."""
    sim = Simulation(seed)
    network = Network(sim, topo, "analytic", link_spans=spans, compact_spans=compact, batch_links=links)
    if not advance:
        network.mode = "analytic, message by message"  # transfers still analytic; the batch event-driven
    rng = np.random.default_rng(seed)
    hosts = topo.endpoints
    comm = Communicator(network, hosts, "a2a")
    done: list[dict[int, float]] = []

    def other(delay: float, src: str, dst: str, nbytes: float):
        yield sim.timeout(delay)
        yield network.transfer(src, dst, nbytes)

    for _ in range(traffic):  # transfers of their own across the batches' time, over their links
        src, dst = rng.choice(len(hosts), 2, replace=False)
        sim.process(other(float(rng.uniform(0, 4e-3)), hosts[src], hosts[dst], float(rng.uniform(1e3, 1e6))))

    def batches():
        yield sim.timeout(1e-3)
        for matrix in matrices:
            yield comm.all_to_all(matrix=matrix)
            done.append(dict(sorted(last_ends(comm).items())))

    sim.process(batches())
    sim.run(until)
    return run_records(sim, network, spans, done)


def last_ends(comm: Communicator) -> dict[int, float]:
    """When each rank finished the communicator's last all-to-all, from its trace span."""
    return {comm.ranks.index(rank): lanes[-1].spans[-1].end for rank, lanes in comm._lanes.items()}


def assert_same(fast: dict, slow: dict) -> None:
    assert fast["done"] == slow["done"]  # the same times, to the bit
    assert fast["now"] == slow["now"]
    assert fast["transfers"] == slow["transfers"]
    assert fast["bytes_sent"] == slow["bytes_sent"]
    np.testing.assert_allclose(fast["link_bytes"], slow["link_bytes"], rtol=1e-12)
    assert fast["busy"] == slow["busy"]
    assert fast["tracks"] == slow["tracks"]


@pytest.mark.parametrize("links", ["ends", "paths"])
@pytest.mark.parametrize("spans", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_an_uneven_all_to_all_among_other_traffic_is_timed_and_recorded_as_message_by_message(
        seed: int, spans: bool, links: str) -> None:
    topo = uneven_switches(9, seed)
    matrices = [uneven_matrix(9, seed), uneven_matrix(9, seed + 10, zeros=0.0), np.full((9, 9), 2e5)]
    slow = run_all_to_all(topo, matrices, advance=False, spans=spans, traffic=30, seed=seed, links=links)
    fast = run_all_to_all(topo, matrices, advance=True, spans=spans, traffic=30, seed=seed, links=links)
    assert len(fast["done"]) == 3 and all(len(ends) == 9 for ends in fast["done"])
    assert len({time for ends in fast["done"] for time in ends.values()}) > 9  # ranks end at many times
    assert_same(fast, slow)


@pytest.mark.parametrize("topo", [fat_tree(hosts=24, hosts_per_leaf=4, bandwidth=1.25e10, latency=1e-6,
                                           oversubscription=2),
                                  torus([3, 4], 1e10, 1e-6)], ids=["fat_tree", "torus"])
def test_other_topologies_are_the_same(topo: Topology) -> None:
    """On a torus a link can be one message's first and another's last (hosts relay)."""
    n = len(topo.endpoints)
    matrices = [uneven_matrix(n, 3), uneven_matrix(n, 4, zeros=0.9)]
    for spans, links in itertools.product((True, False), ("ends", "paths")):
        assert_same(run_all_to_all(topo, matrices, advance=True, spans=spans, traffic=10, links=links),
                    run_all_to_all(topo, matrices, advance=False, spans=spans, traffic=10, links=links))


@pytest.mark.parametrize("spans", [True, False])
def test_a_run_stopped_mid_batch_records_what_it_would(spans: bool) -> None:
    topo = uneven_switches(7, 11)
    matrices = [uneven_matrix(7, 1), uneven_matrix(7, 2)]
    whole = run_all_to_all(topo, matrices, advance=True)
    for fraction in (0.0, 0.2, 0.45, 0.8):
        until = 1e-3 + fraction * (whole["now"] - 1e-3)
        slow = run_all_to_all(topo, matrices, advance=False, spans=spans, until=until, traffic=10)
        fast = run_all_to_all(topo, matrices, advance=True, spans=spans, until=until, traffic=10)
        assert_same(fast, slow)


def test_link_bytes_read_mid_batch_are_those_of_the_messages_ended_by_then() -> None:
    topo = uneven_switches(8, 5)
    matrix = uneven_matrix(8, 6, zeros=0.0)
    whole = run_all_to_all(topo, [matrix], advance=True)["now"] - 1e-3
    runs = []
    for advance in (False, True):
        sim = Simulation()
        network = Network(sim, topo, "analytic")
        if not advance:
            network.mode = "analytic, message by message"
        done = Communicator(network, topo.endpoints).all_to_all(matrix=matrix)
        middles = []
        for until in (0.3 * whole, 0.6 * whole, 0.9 * whole):
            sim.run(until=until)
            middles.append(network.link_bytes.copy())
        sim.run()
        assert done.processed
        runs.append((middles, network.link_bytes.copy(), sim.events_processed))
    (slow_middles, slow_end, slow_events), (fast_middles, fast_end, fast_events) = runs
    assert 0 < fast_middles[0].sum() < fast_middles[-1].sum() < fast_end.sum()
    for fast, slow in zip([*fast_middles, fast_end], [*slow_middles, slow_end]):
        np.testing.assert_allclose(fast, slow, rtol=1e-12)
    assert fast_events < slow_events


def test_an_even_all_to_all_takes_an_event_and_its_alpha_beta_time() -> None:
    """What the batch is for: 64 x 63 messages that end together are one event."""
    n, per_pair, bandwidth, latency = 64, 1e6, 1e10, 1e-6
    sim = Simulation()
    topo = single_switch(n, bandwidth, latency)
    network = Network(sim, topo, "analytic")
    done = Communicator(network, topo.endpoints).all_to_all(per_pair)
    sim.run()
    assert done.processed and sim.events_processed <= 3 and network.transfers == n * (n - 1)
    assert sim.now == pytest.approx(2 * latency + (n - 1) * per_pair / bandwidth, rel=1e-12)


def test_ranks_with_nothing_to_send_or_receive_are_done_at_once() -> None:
    sim = Simulation()
    topo = single_switch(4, 1e10, 1e-6)
    network = Network(sim, topo, "analytic")
    finished: dict[int, float] = {}
    matrix = np.zeros((4, 4))
    matrix[0, 1] = 1e6
    AnalyticBatch(network, PairRoutes(network, topo.endpoints), matrix, lambda rank: finished.setdefault(rank, sim.now)
                  ).start()
    assert finished == {2: 0.0, 3: 0.0}  # before any event
    sim.run()
    assert finished[0] == finished[1] == pytest.approx(2e-6 + 1e-4, rel=1e-12)


def test_only_an_analytic_network_times_a_batch_in_advance() -> None:
    sim = Simulation()
    topo = single_switch(3, 1e10, 1e-6)
    network = Network(sim, topo, "flow")
    with pytest.raises(ValueError, match="analytic"):
        AnalyticBatch(network, PairRoutes(network, topo.endpoints), np.ones((3, 3)), print)


@pytest.mark.parametrize("shared", ["ends", "paths"])
def test_batch_drains_follow_their_definition(shared: str) -> None:
    """Each message: the largest of its bytes over its bottleneck and, over each link it shares
    (its first and last, or its whole path), the batch's bytes sharing that link over its
    bandwidth, the loads summed message after message; 0 without bytes or path."""
    rng = np.random.default_rng(7)
    links, messages = 6, 40
    capacity = rng.choice([1e9, 4e9, 1e10], links)
    paths = [tuple(rng.permutation(links)[: rng.integers(0, 4)].tolist()) for _ in range(messages)]
    nbytes = rng.choice([0.0, 1.0, 3e5, 7e6 / 3], messages)
    bottleneck = rng.choice([5e8, 1e9], messages)
    sharing = [(path if shared == "paths" else tuple(dict.fromkeys((path[0], path[-1]))))
               if path and b > 0 else () for path, b in zip(paths, nbytes.tolist())]
    load = [0.0] * links
    for m, used in enumerate(sharing):
        for link in used:
            load[link] += nbytes[m]
    expected = [max([b / neck] + [load[link] / capacity[link] for link in used]) if used else 0.0
                for b, neck, used in zip(nbytes.tolist(), bottleneck.tolist(), sharing)]
    if shared == "paths":
        given = (np.array([link for used in sharing for link in used], dtype=np.int64),
                 np.repeat(np.arange(messages), [len(used) for used in sharing]))
    else:
        given = end_links(np.array([path[0] if path else -1 for path in paths]),
                          np.array([path[-1] if path else -1 for path in paths]), nbytes > 0)
    assert batch_drains(nbytes, bottleneck, *given, capacity).tolist() == expected
    assert sum(map(bool, sharing)) > messages / 2 and any(len(used) > 2 for used in sharing) == (shared == "paths")
