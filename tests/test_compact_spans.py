"""Link spans kept compact (in a tally's arrays, for a run that draws timeline.png but writes no
trace.json) against the same spans kept as a list: the same spans, counts, busy times and figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simhpc.engine import Simulation
from simhpc.network import Network, accounting, fat_tree
from simhpc.network.accounting import LinkSpanTally
from simhpc.runner import simulate, write_outputs
from simhpc.scenario.loader import load_scenario
from tests.test_analytic_batch import run_all_to_all, uneven_matrix
from tests.test_analytic_ring import assert_same, link_records, run_ring, uneven_switches

ROOT = Path(__file__).resolve().parents[1]


def send_all(sim: Simulation, network: Network, plan: list[tuple[float, int, int, float]]) -> None:
    """Start each planned transfer (delay, source host, destination host, bytes)."""
    hosts = network.topology.endpoints

    def send(delay: float, src: int, dst: int, nbytes: float):
        yield sim.timeout(delay)
        yield network.transfer(hosts[src], hosts[dst], nbytes)

    for delay, src, dst, nbytes in plan:
        sim.process(send(delay, src, dst, nbytes))


@pytest.mark.parametrize("seed", range(3))
def test_a_ring_among_other_traffic_keeps_the_same_spans(seed: int) -> None:
    """The ring timed in advance (a step's spans at once) and transfer by transfer (one at a
    time), whole and stopped mid-way."""
    topo = uneven_switches(9, seed)
    ranks = list(np.random.default_rng(seed).permutation(topo.endpoints))
    for advance in (True, False):
        for until in (None, 2.5e-3):
            listed = run_ring(topo, ranks, 16, 3e5, advance=advance, traffic=30, seed=seed, until=until)
            compact = run_ring(topo, ranks, 16, 3e5, advance=advance, traffic=30, seed=seed, until=until,
                               compact=True)
            assert sum(len(spans) for spans in compact["busy"].values()) > len(compact["busy"])
            assert_same(compact, listed)


@pytest.mark.parametrize("links", ["ends", "paths"])
def test_all_to_alls_keep_the_same_spans(links: str) -> None:
    topo = fat_tree(hosts=12, hosts_per_leaf=4, bandwidth=1e10, latency=1e-6, oversubscription=2.0)
    matrices = [uneven_matrix(12, seed) for seed in range(3)]
    for advance in (True, False):
        listed = run_all_to_all(topo, matrices, advance=advance, traffic=20, links=links)
        compact = run_all_to_all(topo, matrices, advance=advance, traffic=20, links=links, compact=True)
        assert_same(compact, listed)


@pytest.mark.parametrize("seed", range(3))
def test_flow_mode_keeps_the_same_spans(seed: int) -> None:
    """Flow mode opens and closes spans as links' loads turn on and off (a link idle for no time
    goes on with its span), and the run's end closes those still open."""
    topo = fat_tree(hosts=8, hosts_per_leaf=4, bandwidth=1e9, latency=1e-6, oversubscription=2.0)
    rng = np.random.default_rng(seed)
    plan = [(float(rng.choice([0.0, 1e-4, 2e-4, rng.uniform(0, 3e-4)])), *rng.choice(8, 2, replace=False).tolist(),
             float(rng.choice([1e4, 1e5, 3e5]))) for _ in range(40)]

    def run(compact: bool) -> tuple[dict, list[float]]:
        sim = Simulation(seed)
        network = Network(sim, topo, "flow", utilisation_counters=False, compact_spans=compact)
        send_all(sim, network, plan)
        sim.run(until=4e-4)
        network.accounting.close(sim.now)
        tracks = [track for track in network.accounting._tracks if track is not None]
        return link_records(network, True), [track.busy_time() for track in tracks]

    compact, listed = run(True), run(False)
    assert compact == listed
    assert sum(len(spans) for spans in compact[0].values()) > len(compact[0])


def test_a_scenarios_timeline_and_metrics_are_the_same_bytes(tmp_path: Path) -> None:
    """A run drawing timeline.png without trace.json keeps its links' spans compact: the figure
    and metrics.csv are those of the run that keeps them as lists (as writing trace.json does)."""
    scenario = load_scenario(ROOT / "scenarios" / "allreduce_two_nodes.yaml")
    compact = simulate(scenario, trace=False)
    listed = simulate(scenario, trace=True)
    link_tracks = [track for track in compact.sim.trace.tracks if track.process == "network"]
    assert link_tracks and all(isinstance(track.spans, LinkSpanTally) for track in link_tracks)
    outputs = scenario.model_copy(update={"outputs": scenario.outputs.model_copy(update={"trace": False})})
    write_outputs(compact, tmp_path / "compact", outputs)
    write_outputs(listed, tmp_path / "listed", outputs)
    for name in ("timeline.png", "metrics.csv"):
        assert (tmp_path / "compact" / name).read_bytes() == (tmp_path / "listed" / name).read_bytes(), name


@pytest.mark.parametrize("block", [accounting.LOG_BLOCK, 7])
def test_spans_read_mid_run_then_at_its_end_are_those_of_the_list(block: int, monkeypatch) -> None:
    """A link's spans picked out of the log mid-run, then again after more have closed, in blocks
    of any size: those of the list, in order."""
    monkeypatch.setattr(accounting, "LOG_BLOCK", block)
    topo = uneven_switches(6, 3)
    rng = np.random.default_rng(3)
    plan = [(float(rng.uniform(0, 2e-3)), *rng.choice(6, 2, replace=False).tolist(), float(rng.uniform(1e3, 1e6)))
            for _ in range(60)]

    def run(compact: bool) -> list[dict]:
        sim = Simulation(0)
        network = Network(sim, topo, "analytic", compact_spans=compact)
        send_all(sim, network, plan)
        seen = []
        for until in (5e-4, 1e-3, None):
            sim.run(until)
            seen.append(link_records(network, True))
        return seen

    compact, listed = run(True), run(False)
    assert compact == listed and compact[0] != compact[-1]


@pytest.mark.parametrize("seed", range(4))
def test_a_batch_of_paths_is_recorded_as_one_transfer_after_another(seed: int) -> None:
    """``busy_from`` (a batch's paths at once, links repeated, a long transfer's span reaching past
    a later batch's) against ``busy`` one link at a time: the same spans, tallied, logged or listed."""
    topo = uneven_switches(5, seed)
    rng = np.random.default_rng(seed)
    calls, start = [], 0.0
    for _ in range(30):
        start += float(rng.choice([0.0, 1e-6, rng.uniform(0, 5e-6)]))
        links = rng.integers(0, 6, int(rng.integers(1, 12)))
        calls.append((start, links, start + rng.choice([0.0, 1e-6, 2e-5], links.size)))

    def record(batched: bool, spans: bool, compact: bool) -> dict:
        network = Network(Simulation(seed), topo, "analytic", link_spans=spans, compact_spans=compact)
        for start, links, ends in calls:
            if batched:
                network.accounting.busy_from(start, links, ends)
            else:
                for link, end in zip(links.tolist(), ends.tolist()):
                    network.accounting.busy((link,), start, end)
        return link_records(network, spans)

    listed = record(False, True, False)
    assert record(True, True, True) == listed
    assert record(True, False, False) == record(False, False, False)
