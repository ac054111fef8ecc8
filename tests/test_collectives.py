"""Collectives against their alpha-beta formulas, flow mode against analytic, and trace records."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, gpu_cluster, single_switch

B, LAT = 1e10, 1e-6
ALPHA = 2 * LAT  # host -> switch -> host


def timed(mode: str, n: int, call, topo=None, **kwargs) -> tuple[float, Network, Communicator]:
    """Run ``call(comm)`` on ``n`` hosts of a single switch; returns its duration."""
    sim = Simulation()
    topo = topo or single_switch(n, B, LAT)
    network = Network(sim, topo, mode, **kwargs)
    comm = Communicator(network, topo.endpoints)
    finished: list[float] = []

    def run():
        yield call(comm)
        finished.append(sim.now)

    sim.process(run())
    sim.run()
    return finished[0], network, comm


SIZES = [1e3, 1e6, 3e8]
COUNTS = [2, 3, 5, 8, 16]


@pytest.mark.parametrize("n", COUNTS)
@pytest.mark.parametrize("size", SIZES)
def test_ring_all_reduce_matches_alpha_beta(n: int, size: float) -> None:
    expected = 2 * (n - 1) / n * size / B + 2 * (n - 1) * ALPHA
    analytic, _, _ = timed("analytic", n, lambda c: c.all_reduce(size))
    assert analytic == pytest.approx(expected, rel=1e-9)
    flow, _, _ = timed("flow", n, lambda c: c.all_reduce(size))
    assert flow == pytest.approx(analytic, rel=0.01)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n", COUNTS)
@pytest.mark.parametrize("size", SIZES)
def test_ring_gather_and_scatter_match_alpha_beta(kind: str, n: int, size: float) -> None:
    expected = (n - 1) / n * size / B + (n - 1) * ALPHA
    for mode in ("analytic", "flow"):
        took, _, _ = timed(mode, n, lambda c: getattr(c, kind)(size))
        assert took == pytest.approx(expected, rel=1e-9 if mode == "analytic" else 0.01)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 9])
def test_binomial_broadcast_and_tree_all_reduce_take_log_rounds(n: int) -> None:
    size = 1e7
    rounds = math.ceil(math.log2(n))
    for mode in ("analytic", "flow"):
        took, _, _ = timed(mode, n, lambda c: c.broadcast(n - 1, size))
        assert took == pytest.approx(rounds * (ALPHA + size / B), rel=1e-9)
        took, _, _ = timed(mode, n, lambda c: c.all_reduce(size, algorithm="tree"))
        assert took == pytest.approx(2 * rounds * (ALPHA + size / B), rel=1e-9)


def test_tree_beats_ring_for_small_messages_and_loses_for_large() -> None:
    n = 16
    small_tree, _, _ = timed("analytic", n, lambda c: c.all_reduce(1e3, "tree"))
    small_ring, _, _ = timed("analytic", n, lambda c: c.all_reduce(1e3, "ring"))
    assert small_tree < small_ring
    big_tree, _, _ = timed("flow", n, lambda c: c.all_reduce(1e9, "tree"))
    big_ring, _, _ = timed("flow", n, lambda c: c.all_reduce(1e9, "ring"))
    assert big_ring < big_tree


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_to_all_on_a_single_switch(n: int) -> None:
    per_pair = 1e6
    # every host link carries n - 1 messages: analytic mode shares a batch's end links, flow
    # mode gives each flow B / (n - 1); both take alpha + (n - 1) / n * S / B with S = n * per_pair
    analytic, network, _ = timed("analytic", n, lambda c: c.all_to_all(per_pair))
    assert analytic == pytest.approx(ALPHA + (n - 1) * per_pair / B, rel=1e-9)
    assert network.stats()["transfers"] == n * (n - 1)
    flow, network, _ = timed("flow", n, lambda c: c.all_to_all(per_pair))
    assert flow == pytest.approx(ALPHA + (n - 1) * per_pair / B, rel=1e-9)
    assert network.stats()["flows"] == n * (n - 1)


def test_all_to_all_matrix_for_uneven_dispatch() -> None:
    n = 4
    matrix = np.zeros((n, n))
    matrix[0, 3] = 4e6
    matrix[1, 3] = 1e6
    matrix[2, 2] = 9e9  # local: free
    took, network, _ = timed("flow", n, lambda c: c.all_to_all(matrix=matrix))
    # both share h3's downlink until the 1 MB flow ends, then the 4 MB flow has 3 MB left alone
    assert took == pytest.approx(ALPHA + 2e6 / B + 3e6 / B, rel=1e-9)
    assert network.bytes_sent == 5e6
    # analytic: h3's downlink carries 5 MB, so both messages (and the collective) take that long
    analytic, network, comm = timed("analytic", n, lambda c: c.all_to_all(matrix=matrix))
    assert analytic == pytest.approx(took, rel=1e-9)
    ends = {rank: network.sim.trace.track(rank, "comm").spans[0].end for rank in comm.ranks}
    assert ends["h2"] == 0.0  # sends and receives nothing: done at once
    assert ends["h0"] == ends["h1"] == ends["h3"] == pytest.approx(took, rel=1e-9)
    uniform, _, _ = timed("flow", n, lambda c: c.all_to_all(matrix=np.full((n, n), 1e6)))
    assert uniform == pytest.approx(timed("flow", n, lambda c: c.all_to_all(1e6))[0], rel=1e-12)
    with pytest.raises(ValueError, match="matrix"):
        timed("flow", n, lambda c: c.all_to_all(matrix=np.zeros((n, n + 1))))


def dgx_pair(nics: int) -> gpu_cluster:
    return gpu_cluster(
        nodes=2,
        gpus_per_node=8,
        nvlink_bandwidth=300e9,
        nvlink_latency=1e-6,
        pcie_bandwidth=32e9,
        pcie_latency=1e-6,
        nics_per_node=nics,
        nic_bandwidth=25e9,
        nic_latency=2e-6,
    )


@pytest.mark.parametrize("mode", ["analytic", "flow"])
@pytest.mark.parametrize("nics", [1, 8])
def test_hierarchical_all_reduce_beats_flat_ring_when_nics_are_the_bottleneck(mode: str, nics: int) -> None:
    topo = dgx_pair(nics)
    size = 2**28
    ring, _, _ = timed(mode, 16, lambda c: c.all_reduce(size, "ring"), topo)
    hierarchical, network, _ = timed(mode, 16, lambda c: c.all_reduce(size, "hierarchical"), topo)
    assert hierarchical < 0.75 * ring
    # each rank's inter-node traffic: 2(N-1)/N of its S/L shard, here S/8 over the NICs
    nic_bytes = sum(network.link_bytes[link.index] for link in topo.links if link.src == "switch")
    assert nic_bytes == pytest.approx(16 * size / 8 * 2 * (2 - 1) / 2)


def test_hierarchical_needs_equal_ranks_per_node() -> None:
    topo = dgx_pair(8)
    network = Network(Simulation(), topo, "analytic")
    comm = Communicator(network, [*topo.endpoints[:8], topo.endpoints[8]])
    with pytest.raises(ValueError, match="same number of ranks"):
        comm.all_reduce(1e6, "hierarchical")


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_link_bytes_conserve_bytes_sent(mode: str) -> None:
    n, size = 6, 6e6
    _, network, _ = timed(mode, n, lambda c: c.all_reduce(size))
    per_rank = 2 * (n - 1) * size / n
    assert network.bytes_sent == pytest.approx(n * per_rank)
    assert network.link_bytes.sum() == pytest.approx(2 * network.bytes_sent)  # two links per path
    assert network.link_bytes == pytest.approx(np.full(2 * n, per_rank))


def test_send_records_spans_and_an_arrow() -> None:
    sim = Simulation()
    topo = single_switch(3, B, LAT)
    comm = Communicator(Network(sim, topo, "flow"), topo.endpoints)
    comm.send("h0", 2, 1e6)
    sim.run()
    assert sim.now == pytest.approx(ALPHA + 1e6 / B)
    (arrow,) = sim.trace.arrows
    assert (arrow.source.process, arrow.target.process) == ("h0", "h2")
    assert arrow.source.thread == arrow.target.thread == "comm"
    assert arrow.source_time == arrow.target_time == pytest.approx(sim.now / 2)  # mid-slice on both
    span = sim.trace.track("h2", "comm").spans[0]
    assert (span.name, span.start, span.end) == ("send", 0.0, sim.now)


def test_each_rank_records_its_part_and_concurrent_collectives_use_lanes() -> None:
    sim = Simulation()
    topo = single_switch(4, B, LAT)
    comm = Communicator(Network(sim, topo, "flow"), topo.endpoints, name="dp")
    comm.all_reduce(1e6)
    comm.all_gather(1e6)
    sim.run()
    for rank in topo.endpoints:
        first, second = sim.trace.track(rank, "dp").spans, sim.trace.track(rank, "dp.1").spans
        assert len(first) == len(second) == 1
        assert {first[0].name, second[0].name} == {"all_reduce", "all_gather"}


def test_single_rank_collectives_finish_at_once() -> None:
    sim = Simulation()
    topo = single_switch(2, B, LAT)
    comm = Communicator(Network(sim, topo, "flow"), ["h1"])
    events = [
        comm.all_reduce(1e9),
        comm.all_reduce(1e9, "tree"),
        comm.all_reduce(1e9, "hierarchical"),
        comm.broadcast("h1", 1e9),
        comm.all_to_all(1e9),
    ]
    sim.run()
    assert all(event.processed for event in events) and sim.now == 0.0


def test_communicator_rejects_bad_input() -> None:
    topo = single_switch(2, B, LAT)
    network = Network(Simulation(), topo)
    with pytest.raises(ValueError, match="twice"):
        Communicator(network, ["h0", "h0"])
    with pytest.raises(ValueError, match="unknown node"):
        Communicator(network, ["h0", "h7"])
    comm = Communicator(network, topo.endpoints)
    with pytest.raises(ValueError, match="algorithm"):
        comm.all_reduce(1.0, "butterfly")
    with pytest.raises(ValueError, match="not one of its ranks"):
        comm.broadcast("h5", 1.0)
    with pytest.raises(ValueError, match="bytes"):
        comm.all_gather(-5.0)


def test_collectives_are_byte_identical_across_runs() -> None:
    def run() -> str:
        sim = Simulation(seed=7)
        topo = dgx_pair(2)
        network = Network(sim, topo, "flow")
        comm = Communicator(network, topo.endpoints)

        def work():
            yield comm.all_reduce(2**24, "hierarchical")
            yield comm.all_to_all(2**18)
            yield comm.all_reduce(2**20, "tree")

        sim.process(work())
        sim.run()
        spans = [(t.label, [(s.name, s.start, s.end) for s in t.spans]) for t in sim.trace.tracks]
        counters = [(c.process, c.name, c.times, c.values) for c in sim.trace.counters]
        return json.dumps([sim.now, network.stats(), spans, counters, network.link_bytes.tolist()])

    assert run() == run()


@pytest.mark.parametrize("mode", ["analytic", "flow"])
@pytest.mark.parametrize(("collective", "algorithm"), [
    ("all_reduce", "ring"), ("all_reduce", "tree"), ("reduce_scatter", "ring"), ("all_gather", "ring"),
    ("broadcast", "ring"), ("all_to_all", "ring"), ("send_recv", "ring"),
])
def test_collective_workload_summary_gives_the_alpha_beta_time_of_what_it_ran(
        mode: str, collective: str, algorithm: str) -> None:
    """On a non-blocking switch nothing contends: each collective takes its estimate exactly.

    ``algorithm`` applies to all-reduce only; the summary names the algorithm that ran.
    """
    from simhpc.runner import simulate
    from simhpc.scenario.loader import scenario_from_dict

    scenario = scenario_from_dict({
        "name": "estimate", "seed": 0,
        "network": {"mode": mode, "topology": {"kind": "single_switch", "hosts": 6, "bandwidth": "80 Gb/s",
                                               "latency": "1 us"}},
        "workload": {"kind": "collective", "collective": collective, "algorithm": algorithm, "size": "24 MiB",
                     "iterations": 2},
        "outputs": {"trace": False, "timeline": False},
    }, "estimate.yaml")
    summary = simulate(scenario, "estimate.yaml").summary["workload"]
    expected = {"all_reduce": algorithm, "broadcast": "binomial_tree", "all_to_all": "direct",
                "send_recv": "point_to_point"}.get(collective, "ring")
    assert summary["algorithm"] == expected
    assert summary["mean_time_s"] == pytest.approx(summary["alpha_beta_estimate_s"], rel=1e-9)


@pytest.mark.parametrize(("scenario", "overrides"), [
    ("allreduce_torus.yaml", []),  # ring hops of 1 to 3 torus links
    ("allreduce_fat_tree_2048.yaml", ["network.topology.hosts=256"]),  # hops of 2 links in a leaf, 4 across
    ("allreduce_two_nodes.yaml", ["workload.algorithm=ring"]),  # NVLink hops and one NIC hop
    ("allreduce_two_nodes.yaml", ["workload.algorithm=tree"]),
    ("allreduce_two_nodes.yaml", ["workload.collective=broadcast", "workload.root=5"]),
    ("allreduce_two_nodes.yaml", ["workload.collective=reduce_scatter"]),
])
def test_the_estimate_follows_each_message_path(scenarios_dir, scenario: str, overrides: list[str]) -> None:
    """Where hops differ, a ring step waits for its slowest hop and a tree for its messages' paths:
    the estimate walks the algorithm with each message's path, and the uncontended (analytic)
    simulation takes exactly that time."""
    from simhpc.runner import simulate
    from simhpc.scenario.loader import load_scenario

    config = load_scenario(scenarios_dir / scenario, [*overrides, "network.mode=analytic", "workload.iterations=1"])
    summary = simulate(config, scenario).summary["workload"]
    assert summary["mean_time_s"] == pytest.approx(summary["alpha_beta_estimate_s"], rel=1e-9)


def test_rings_timed_in_advance_count_a_sixteenth_against_the_limits() -> None:
    from simhpc.network.collectives import simulated_transfers, transfer_count

    assert simulated_transfers("all_reduce", "ring", 64, 1, "flow") == transfer_count("all_reduce", "ring", 64)
    assert simulated_transfers("all_reduce", "ring", 64, 1, "analytic") == 2 * 64 * 63 // 16
    assert simulated_transfers("all_reduce", "tree", 64, 1, "analytic") == 2 * 63
    # 8 nodes of 4: the all-gathers in the nodes (32 x 3) each count, the reduce-scatters and rings across a sixteenth
    assert simulated_transfers("all_reduce", "hierarchical", 32, 8, "analytic") == 32 * 3 + (32 * 3 + 2 * 32 * 7) // 16


def test_transfer_counts_are_what_the_collectives_send() -> None:
    """Counted from the communicator's own sends: a ring 2 n (n - 1) (all-reduce) or n (n - 1), a
    tree 2 (n - 1), the hierarchical rings inside and across the nodes, a broadcast n - 1."""
    from simhpc.network.collectives import transfer_count

    for collective, algorithm, call in (("all_reduce", "ring", lambda c: c.all_reduce(6e6)),
                                        ("all_reduce", "tree", lambda c: c.all_reduce(6e6, "tree")),
                                        ("all_gather", "ring", lambda c: c.all_gather(6e6)),
                                        ("broadcast", "ring", lambda c: c.broadcast(0, 6e6)),
                                        ("all_to_all", "ring", lambda c: c.all_to_all(1e5))):
        _, network, _ = timed("analytic", 6, call)
        assert network.transfers == transfer_count(collective, algorithm, 6), collective
    _, network, _ = timed("analytic", 16, lambda c: c.all_reduce(6e6, "hierarchical"), dgx_pair(1))
    assert network.transfers == transfer_count("all_reduce", "hierarchical", 16, nodes=2) == 2 * 16 * 7 + 2 * 16


@pytest.mark.parametrize(("mode", "hosts", "iterations", "field"), [
    ("flow", 6000, 1, "ranks"), ("flow", 1024, 600, "iterations"),
    ("analytic", 32768, 1, "ranks"), ("analytic", 4096, 600, "iterations"),
])
def test_a_collective_too_large_to_simulate_is_refused_before_it_runs(mode: str, hosts: int, iterations: int,
                                                                     field: str) -> None:
    """A ring among a million ranks validated, then ran for ever; a cap on the transfers simulated
    (one round, and all the iterations) names the field to change. A ring timed in advance on the
    analytic network counts a sixteenth of its transfers."""
    from simhpc.errors import ScenarioError
    from simhpc.runner import simulate
    from simhpc.scenario.loader import scenario_from_dict

    scenario = scenario_from_dict({
        "network": {"mode": mode, "topology": {"kind": "single_switch", "hosts": hosts, "bandwidth": "80 Gb/s"}},
        "workload": {"kind": "collective", "collective": "all_reduce", "size": "1 MiB", "iterations": iterations},
    }, "big.yaml")
    counted = "each simulated on its own" if mode == "flow" else "which a ring on the analytic network simulates as"
    with pytest.raises(ScenarioError, match=rf"big.yaml: workload\.{field}: .*{counted}.* at most"):
        simulate(scenario, "big.yaml")
