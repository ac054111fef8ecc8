"""The analytic all-to-all (its batch timed in advance) against the message-by-message batch."""

from __future__ import annotations

import numpy as np
import pytest
from test_analytic_ring import uneven_switches

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, Topology, fat_tree, single_switch, torus
from simhpc.network.analytic_batch import AnalyticBatch, PairRoutes, end_link_drains


def uneven_matrix(n: int, seed: int, zeros: float = 0.3) -> np.ndarray:
    """Bytes from rank i to rank j: a few sizes (so some messages end together), some pairs none."""
    rng = np.random.default_rng(seed)
    matrix = rng.choice([1.0, 3e5, 3e5, 7e6], (n, n))
    return np.where(rng.random((n, n)) < zeros, 0.0, matrix)


def run_all_to_all(topo: Topology, matrices: list[np.ndarray], *, advance: bool, spans: bool = True,
                   until: float | None = None, traffic: int = 0, seed: int = 0) -> dict:
    """All-to-alls one after another from 1 ms among other transfers; what the run recorded.
    Without ``advance`` the network does not say it is analytic, so the batch is message by message."""
    sim = Simulation(seed)
    network = Network(sim, topo, "analytic", link_spans=spans)
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
    busy = {}
    for link, track in enumerate(network.accounting._tracks):
        if track is not None:
            tally = track.spans
            busy[link] = ([(s.start, s.end) for s in tally] if spans
                          else (len(tally), tally.busy_time(), tally[-1].start, tally[-1].end))
    return {"done": done, "transfers": network.transfers, "bytes_sent": network.bytes_sent,
            "link_bytes": network.link_bytes.copy(), "busy": busy, "now": sim.now,
            "tracks": [(track.process, track.thread) for track in sim.trace.tracks]}


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


@pytest.mark.parametrize("spans", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_an_uneven_all_to_all_among_other_traffic_is_timed_and_recorded_as_message_by_message(
        seed: int, spans: bool) -> None:
    topo = uneven_switches(9, seed)
    matrices = [uneven_matrix(9, seed), uneven_matrix(9, seed + 10, zeros=0.0), np.full((9, 9), 2e5)]
    slow = run_all_to_all(topo, matrices, advance=False, spans=spans, traffic=30, seed=seed)
    fast = run_all_to_all(topo, matrices, advance=True, spans=spans, traffic=30, seed=seed)
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
    for spans in (True, False):
        assert_same(run_all_to_all(topo, matrices, advance=True, spans=spans, traffic=10),
                    run_all_to_all(topo, matrices, advance=False, spans=spans, traffic=10))


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


def test_end_link_drains_follow_their_definition() -> None:
    """Each message: the largest of its bytes over its bottleneck and the batch's bytes through its
    first and last links over their bandwidths, the loads summed message after message."""
    rng = np.random.default_rng(7)
    links, messages = 6, 40
    capacity = rng.choice([1e9, 4e9, 1e10], links)
    first = rng.integers(-1, links, messages)
    last = np.where(rng.random(messages) < 0.3, first, rng.integers(0, links, messages))
    last = np.where(first < 0, -1, last)
    nbytes = rng.choice([0.0, 1.0, 3e5, 7e6 / 3], messages)
    bottleneck = rng.choice([5e8, 1e9], messages)
    load = [0.0] * links
    for m in range(messages):
        if nbytes[m] > 0 and first[m] >= 0:
            load[first[m]] += nbytes[m]
            if last[m] != first[m]:
                load[last[m]] += nbytes[m]
    expected = [max(b / neck, load[f] / capacity[f], load[t] / capacity[t]) if b > 0 and f >= 0 else 0.0
                for b, neck, f, t in zip(nbytes.tolist(), bottleneck.tolist(), first.tolist(), last.tolist())]
    assert end_link_drains(nbytes, bottleneck, first, last, capacity).tolist() == expected
