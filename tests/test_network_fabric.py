"""The network's transfers: alpha-beta durations, flow-mode draining, byte accounting and trace."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simhpc.engine import Simulation
from simhpc.network import Network, fat_tree, single_switch

B, LAT = 1e10, 1e-6


def run_transfers(mode: str, transfers: list[tuple[float, str, str, float]], topo=None, **kwargs):
    """Issue (start, src, dst, nbytes) transfers; returns the simulation, network and end times."""
    sim = Simulation()
    network = Network(sim, topo or single_switch(4, B, LAT), mode, **kwargs)
    ends: list[float] = [0.0] * len(transfers)

    def one(i, start, src, dst, nbytes):
        yield sim.timeout(start)
        yield network.transfer(src, dst, nbytes, name=f"t{i}")
        ends[i] = sim.now

    for i, spec in enumerate(transfers):
        sim.process(one(i, *spec))
    sim.run()
    return sim, network, ends


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_single_transfer_takes_latency_plus_size_over_bandwidth(mode: str) -> None:
    _, _, ends = run_transfers(mode, [(0.0, "h0", "h1", 1e8)])
    assert ends[0] == pytest.approx(2 * LAT + 1e8 / B, rel=1e-12)


def run_batch(mode: str, batch: list[tuple[str, str, float]], topo=None, **kwargs) -> tuple[Network, list[float]]:
    """Issue ``batch`` at time 0 with :meth:`Network.transfer_batch`; returns the end times."""
    sim = Simulation()
    network = Network(sim, topo or single_switch(4, B, LAT), mode, **kwargs)
    ends: list[float] = [math.nan] * len(batch)
    for i, event in enumerate(network.transfer_batch(batch, "batch")):
        event.callbacks.append(lambda _event, i=i: ends.__setitem__(i, sim.now))
    sim.run()
    return network, ends


def test_analytic_ignores_contention_and_flow_shares() -> None:
    """Transfers issued separately never see each other in analytic mode, even on a host link."""
    transfers = [(0.0, "h0", "h2", 1e8), (0.0, "h1", "h2", 1e8)]
    _, _, analytic = run_transfers("analytic", transfers)
    _, _, flow = run_transfers("flow", transfers)
    assert analytic == pytest.approx([2 * LAT + 1e8 / B] * 2)
    assert flow == pytest.approx([2 * LAT + 2e8 / B] * 2)


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_a_batch_shares_its_end_links(mode: str) -> None:
    """One batch into h2 shares h2's downlink (its ejection link), out of h0 h0's uplink."""
    _, ends = run_batch(mode, [("h0", "h2", 1e8), ("h1", "h2", 1e8)])
    assert ends == pytest.approx([2 * LAT + 2e8 / B] * 2, rel=1e-12)
    _, ends = run_batch(mode, [("h0", "h1", 1e8), ("h0", "h2", 3e8), ("h0", "h0", 1e9)])
    if mode == "analytic":  # each drains at its constant rate bytes / (4e8 / B): all end together
        assert ends == pytest.approx([2 * LAT + 4e8 / B] * 2 + [0.0], rel=1e-12)
    else:  # fair shares: the small one ends first
        assert ends == pytest.approx([2 * LAT + 2e8 / B, 2 * LAT + 4e8 / B, 0.0], rel=1e-12)


def test_a_batch_of_one_costs_a_transfer_and_an_empty_batch_nothing() -> None:
    network, ends = run_batch("analytic", [("h0", "h3", 1e8)])
    assert ends == pytest.approx([2 * LAT + 1e8 / B], rel=1e-12)
    assert network.transfers == 1 and network.link_bytes.sum() == 2e8
    network, ends = run_batch("analytic", [])
    assert ends == [] and network.transfers == 0
    with pytest.raises(ValueError, match="nbytes"):
        run_batch("analytic", [("h0", "h1", 1e8), ("h1", "h2", -1.0)])


def test_analytic_batch_ignores_contention_inside_the_fabric() -> None:
    """h0 -> h2 and h1 -> h3 share only leaf0's one uplink (capacity B): flow mode halves their
    rates; analytic mode charges each its bottleneck alone, batch or not."""
    topo = fat_tree(hosts=4, hosts_per_leaf=2, bandwidth=B, latency=LAT, oversubscription=2.0, spines=1)
    batch = [("h0", "h2", 1e8), ("h1", "h3", 1e8)]
    _, analytic = run_batch("analytic", batch, topo)
    _, flow = run_batch("flow", batch, topo)
    assert analytic == pytest.approx([4 * LAT + 1e8 / B] * 2, rel=1e-12)
    assert flow == pytest.approx([4 * LAT + 2e8 / B] * 2, rel=1e-12)
    # a slow inner link bounds a message when its end links are less loaded
    topo = fat_tree(hosts=4, hosts_per_leaf=2, bandwidth=B, latency=LAT, oversubscription=8.0, spines=1)
    _, analytic = run_batch("analytic", [("h0", "h2", 1e8), ("h0", "h1", 1e8)], topo)
    assert analytic == pytest.approx([4 * LAT + 1e8 / (B / 4), 2 * LAT + 2e8 / B], rel=1e-12)


def test_a_batch_sharing_its_paths_is_bound_by_an_inner_link_too() -> None:
    """``batch_links="paths"``: the two messages crossing leaf0's one uplink (capacity B) share it,
    as in flow mode; the third, inside leaf1, shares only h3's ejection link with the second."""
    topo = fat_tree(hosts=4, hosts_per_leaf=2, bandwidth=B, latency=LAT, oversubscription=2.0, spines=1)
    batch = [("h0", "h2", 1e8), ("h1", "h3", 1e8), ("h2", "h3", 5e7)]
    _, paths = run_batch("analytic", batch, topo, batch_links="paths")
    assert paths == pytest.approx([4 * LAT + 2e8 / B] * 2 + [2 * LAT + 1.5e8 / B], rel=1e-12)
    with pytest.raises(ValueError, match="batch links"):
        Network(Simulation(), topo, "analytic", batch_links="spines")


def test_bottleneck_is_the_slowest_link() -> None:
    topo = fat_tree(hosts=8, hosts_per_leaf=4, bandwidth=B, latency=LAT, oversubscription=4.0)
    _, _, ends = run_transfers("analytic", [(0.0, "h0", "h5", 1e8)], topo)
    assert ends[0] == pytest.approx(4 * LAT + 1e8 / (B / 4))


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_zero_bytes_cost_latency_and_local_copies_are_free(mode: str) -> None:
    _, network, ends = run_transfers(mode, [(0.0, "h0", "h1", 0.0), (1.0, "h2", "h2", 1e9)])
    assert ends == pytest.approx([2 * LAT, 1.0])
    assert network.link_bytes.sum() == 0.0


def test_many_flows_finishing_together_complete_at_one_instant() -> None:
    transfers = [(0.0, "h0", "h1", 1e8)] * 5
    _sim, network, ends = run_transfers("flow", transfers)
    assert ends == pytest.approx([2 * LAT + 5e8 / B] * 5, rel=1e-12)
    assert network.stats()["flows"] == 5


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_link_bytes_equal_bytes_sent_over_them(mode: str) -> None:
    topo = fat_tree(hosts=8, hosts_per_leaf=4, bandwidth=B, latency=LAT)
    rng = np.random.default_rng(3)
    transfers = []
    for _ in range(40):
        src, dst = rng.choice(8, size=2, replace=False)
        transfers.append((float(rng.uniform(0, 1e-3)), f"h{src}", f"h{dst}", float(rng.integers(1, 10**7))))
    sim, network, _ = run_transfers(mode, transfers, topo)
    expected = np.zeros(len(topo.links))
    for _, src, dst, nbytes in transfers:
        expected[list(topo.path(src, dst))] += nbytes
    assert np.array_equal(network.link_bytes, expected)
    stats = network.stats()
    assert stats["bytes"] == sum(t[3] for t in transfers)
    assert stats["transfers"] == 40
    top = stats["busiest_links"][0]
    assert top["bytes"] == expected.max()
    assert top["bandwidth_utilisation"] > 0
    if mode == "flow":  # analytic mode ignores contention: its utilisation may exceed 1
        assert network.link_utilisation().max() <= 1 + 1e-9
    assert network.link_utilisation(sim.now) == pytest.approx(expected / (topo.capacities * sim.now))


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_link_tracks_hold_merged_non_overlapping_busy_spans(mode: str) -> None:
    transfers = [(0.0, "h0", "h1", 1e8), (0.0, "h0", "h2", 1e8), (0.5, "h0", "h1", 1e8)]
    sim, _network, ends = run_transfers(mode, transfers)
    tracks = {track.thread: track for track in sim.trace.tracks if track.process == "network"}
    assert set(tracks) == {"h0->switch", "switch->h1", "switch->h2"}
    uplink = tracks["h0->switch"].spans
    assert len(uplink) == 2  # the two overlapping transfers merge; the late one stands alone
    assert all(a.end <= b.start for a, b in itertools.pairwise(uplink))
    assert uplink[0].end == pytest.approx(max(ends[:2]))
    assert uplink[1].end == pytest.approx(ends[2])


def test_flow_mode_samples_link_utilisation() -> None:
    sim, _, ends = run_transfers("flow", [(0.0, "h0", "h1", 1e8), (0.0, "h2", "h1", 1e8)])
    series = {s.name: s for s in sim.trace.counters if s.process == "network"}
    down = series["switch->h1"]
    assert down.values[0] == {"utilisation": pytest.approx(1.0)}
    assert down.values[-1] == {"utilisation": 0.0}
    assert down.times[-1] == pytest.approx(ends[0])
    assert series["h0->switch"].values[0] == {"utilisation": pytest.approx(0.5)}


def test_recording_can_be_switched_off() -> None:
    sim, network, _ = run_transfers("flow", [(0.0, "h0", "h1", 1e8)], record_links=False)
    assert not sim.trace.tracks and not sim.trace.counters
    assert network.link_bytes.sum() == 2e8


def test_a_run_without_a_trace_skips_the_utilisation_counters_and_nothing_else() -> None:
    """Only trace.json shows the links' utilisation counters: a run that writes no trace records
    none, with the same summary and the same link spans (metrics.csv's utilisation)."""
    from simhpc.runner import simulate
    from simhpc.scenario.loader import load_scenario
    from tests.conftest import ROOT

    runs = {trace: simulate(load_scenario(ROOT / "scenarios" / "alltoall_fat_tree.yaml", [f"outputs.trace={trace}"]))
            for trace in ("true", "false")}
    network = {trace: [s for s in run.sim.trace.counters if s.process == "network"] for trace, run in runs.items()}
    assert network["true"] and not network["false"]
    assert runs["true"].summary == runs["false"].summary
    spans = {trace: [(t.label, [(s.start, s.end) for s in t.spans]) for t in run.sim.trace.tracks]
             for trace, run in runs.items()}
    assert spans["true"] == spans["false"]


@pytest.mark.parametrize(("scenario", "overrides"), [
    ("alltoall_fat_tree.yaml", []),  # flow mode
    ("allreduce_two_nodes.yaml", ["network.mode=analytic"]),
    ("moe_demo.yaml", ["outputs.max_time=2.5"]),  # stopped early: the links' last spans cut
])
def test_a_run_that_draws_nothing_tallies_its_link_spans_with_the_same_metrics(scenario: str,
                                                                              overrides: list[str]) -> None:
    """Without trace.json and timeline.png nothing draws the links' busy spans: each link keeps
    their count and time only, and metrics.csv and the summary come out the same to the bit."""
    from simhpc.network.accounting import LinkSpanTally
    from simhpc.report.metrics import track_metrics
    from simhpc.runner import simulate
    from simhpc.scenario.loader import load_scenario
    from tests.conftest import ROOT

    runs = {drawn: simulate(load_scenario(ROOT / "scenarios" / scenario,
                                          [*overrides, f"outputs.trace={drawn}", f"outputs.timeline={drawn}"]),
                            link_spans=drawn == "true")
            for drawn in ("true", "false")}
    assert runs["true"].summary == runs["false"].summary
    assert track_metrics(runs["true"].sim) == track_metrics(runs["false"].sim)
    links = [track for track in runs["false"].sim.trace.tracks if track.process == "network"]
    assert links and all(isinstance(track.spans, LinkSpanTally) for track in links)
    assert sum(len(track.spans) for track in links) > len(links)  # links busy more than once
    with pytest.raises(TypeError, match="keeps only its last span"):
        list(links[0].spans)
    assert not any(isinstance(track.spans, LinkSpanTally) for track in runs["true"].sim.trace.tracks)


def test_simhpc_run_tallies_the_link_spans_only_when_it_draws_nothing(tmp_path) -> None:
    """``simhpc run`` with ``outputs: {trace: false, timeline: false}`` writes the metrics.csv and
    summary.json of the run that draws both; the Python API keeps every span unless told (in
    arrays where it writes no trace, handed out as spans)."""
    from click.testing import CliRunner

    from simhpc.cli import main
    from simhpc.network.accounting import LinkSpanTally
    from simhpc.runner import simulate
    from simhpc.scenario.loader import load_scenario
    from tests.conftest import ROOT

    scenario = ROOT / "scenarios" / "alltoall_fat_tree.yaml"
    for drawn in ("true", "false"):
        result = CliRunner().invoke(main, ["run", str(scenario), "-q", "-o", str(tmp_path / drawn),
                                           "--set", f"outputs.trace={drawn}", "--set", f"outputs.timeline={drawn}"])
        assert result.exit_code == 0, result.output
    for name in ("metrics.csv", "summary.json"):
        assert (tmp_path / "true" / name).read_bytes() == (tmp_path / "false" / name).read_bytes()
    assert not (tmp_path / "false" / "trace.json").exists()
    undrawn = simulate(load_scenario(scenario, ["outputs.trace=false", "outputs.timeline=false"]))
    traced = simulate(load_scenario(scenario, ["outputs.trace=true", "outputs.timeline=false"]))
    assert any(isinstance(track.spans, LinkSpanTally) for track in undrawn.sim.trace.tracks)
    assert not any(isinstance(track.spans, LinkSpanTally) for track in traced.sim.trace.tracks)
    for kept, listed in zip(undrawn.sim.trace.tracks, traced.sim.trace.tracks, strict=True):
        assert list(kept.spans) == listed.spans
        assert len(listed.spans) < 2 or kept.spans[0] == listed.spans[0]


def test_rejects_bad_input() -> None:
    sim = Simulation()
    topo = single_switch(2, B, LAT)
    with pytest.raises(ValueError, match="mode"):
        Network(sim, topo, "packet")
    network = Network(sim, topo, "flow")
    with pytest.raises(ValueError, match="nbytes"):
        network.transfer("h0", "h1", -1.0)
    with pytest.raises(ValueError, match="unknown node"):
        network.transfer("h0", "h9", 1.0)


def test_runs_are_byte_identical() -> None:
    def run() -> str:
        topo = fat_tree(hosts=16, hosts_per_leaf=4, bandwidth=B, latency=LAT, oversubscription=2.0)
        transfers = [(0.0, f"h{i}", f"h{(5 * i + 3) % 16}", 1e6 * (i + 1)) for i in range(16)]
        sim, network, ends = run_transfers("flow", transfers, topo)
        spans = [(t.label, [(s.start, s.end) for s in t.spans]) for t in sim.trace.tracks]
        counters = [(c.name, c.times, c.values) for c in sim.trace.counters]
        return json.dumps([ends, network.stats(), spans, counters])

    assert run() == run()


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1000).map(lambda us: us * 1e-6),
            st.integers(0, 7),
            st.integers(0, 7),
            st.integers(1, 10**7),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_no_link_is_ever_loaded_beyond_capacity(specs) -> None:
    topo = fat_tree(hosts=8, hosts_per_leaf=4, bandwidth=B, latency=LAT, oversubscription=2.0)
    transfers = [(start, f"h{a}", f"h{b}", float(n)) for start, a, b, n in specs]
    sim, network, ends = run_transfers("flow", transfers, topo)
    for series in sim.trace.counters:
        assert all(sample["utilisation"] <= 1 + 1e-9 for sample in series.values)
        assert series.values[-1]["utilisation"] == 0.0
    assert network.active_flows() == []
    for (start, src, dst, nbytes), end in zip(transfers, ends):
        route = network.route(src, dst)
        assert end >= start + route.latency + nbytes / route.bandwidth * (1 - 1e-9)


@pytest.mark.parametrize("mode", ["analytic", "flow"])
def test_a_run_stopped_mid_transfer_counts_only_completed_bytes(mode: str) -> None:
    """Stopped halfway through a 1 GB transfer, no link has carried its bytes, so no link's
    utilisation over the run exceeds 1 (analytic mode counted them when it was issued)."""
    sim = Simulation()
    network = Network(sim, single_switch(4, B, LAT), mode)

    def one():
        yield network.transfer("h0", "h1", 1e8, name="small")
        yield network.transfer("h0", "h1", 1e9, name="big")

    sim.process(one())
    halfway = 2 * LAT + 1e8 / B + 0.5e9 / B
    sim.run(until=halfway)
    assert network.link_bytes.max() == pytest.approx(1e8)
    assert network.link_utilisation(halfway).max() <= 1.0


def test_the_scenario_field_batch_links_makes_the_oversubscribed_all_to_all_spine_bound() -> None:
    """`alltoall_fat_tree.yaml` (2:1 spine): analytic mode with ``network.batch_links: paths`` takes
    flow mode's time, the spine's; with the default ``ends`` the host links' alone."""
    from simhpc.runner import simulate
    from simhpc.scenario.loader import load_scenario
    from tests.conftest import ROOT

    def mean(*overrides: str) -> float:
        scenario = load_scenario(ROOT / "scenarios" / "alltoall_fat_tree.yaml",
                                 ["outputs.trace=false", "outputs.timeline=false", *overrides])
        return simulate(scenario).summary["workload"]["mean_time_s"]

    flow = mean()
    assert mean("network.mode=analytic", "network.batch_links=paths") == pytest.approx(flow, rel=1e-9)
    assert mean("network.mode=analytic") < 0.6 * flow
