"""The simulator against pipelines measured on a CPU (``validation/traces/pipeline_capture.py``).

The committed captures ran simhpc's plans (GPipe, 1F1B, interleaved, PRT round-robin at k = 2 and
4, V-shaped PRT; m = 2, 4, 8) on two pinned processes of a 2-core AMD EPYC Zen 3 guest: the
default model (16 x ``Linear(1024, 1024)``, micro-batches of 64: ops of 2-35 ms) and a narrow one
whose transfers weigh more (``Linear(128, 128)``, micro-batches of 1024: 0.5 MiB per transfer
against ops of 1-8 ms), each captured twice: in session 58 and, on a busier host, in session 59
(these also time the sender's post of each transfer). Each run is simulated here, op for op, with
the figures the capture measured: per-layer op times and a per-op cost (a line through the runs'
median op times), the shared-memory link's latency and bandwidth with the sender busy for the whole
transfer (``p2p: blocking``: its post takes nearly all of the one-way time), and the op times'
spread. The measured iteration is the median of 9 rounds on a noisy host.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from tests.conftest import ROOT

SCRIPT = ROOT / "validation" / "traces" / "pipeline_capture.py"
CAPTURES = ROOT / "validation" / "traces" / "pipeline_captures"
CAPTURE = CAPTURES / "epyc-zen3.json.gz"
NARROW = CAPTURES / "epyc-zen3-h128-b1024-l16.json.gz"
AGAIN = CAPTURES / "epyc-zen3-session59.json.gz"
NARROW_AGAIN = CAPTURES / "epyc-zen3-h128-b1024-l16-session59.json.gz"
ALL = [CAPTURE, NARROW, AGAIN, NARROW_AGAIN]
NAMES = ["default", "narrow", "default-59", "narrow-59"]


@cache
def script() -> Any:
    spec = importlib.util.spec_from_file_location("pipeline_capture", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@cache
def rows(capture: Path = CAPTURE) -> tuple[dict[str, Any], ...]:
    return tuple(script().compare(script().read_capture(capture)))


def row(kind: str, m: int, **params: Any) -> dict[str, Any]:
    return next(r for r in rows() if r["schedule"] == {"kind": kind, **params} and r["micro_batches"] == m)


@pytest.mark.parametrize("path", ALL, ids=NAMES)
def test_the_capture_holds_every_plan_it_ran(path: Path) -> None:
    capture = script().read_capture(path)
    assert len(capture["runs"]) == len(script().SCHEDULES) * 3
    for run in capture["runs"]:
        assert len(run["iterations"]) == capture["setup"]["iterations"] == 9
        for iteration in run["iterations"]:
            labels = [[label for label, _, _ in record] for record in iteration]
            assert labels == run["plan"]["ops"]  # each device ran its op list, in order
            for record in iteration:
                assert all(end > start for _, start, end in record)
                assert all(later[1] >= earlier[2] for earlier, later in pairwise(record))


@pytest.mark.parametrize(("path", "bias"), [(CAPTURE, 0.03), (NARROW, 0.05), (AGAIN, 0.04), (NARROW_AGAIN, 0.03)],
                         ids=NAMES)
def test_every_simulated_iteration_is_within_10_percent_of_the_measured_one(path: Path, bias: float) -> None:
    """Within 10 % each; the median error, a few % fast on three of the four: the op times' tail (the
    mean op 2 % over the median, the fitted lognormal's 0.4 %) and more that is not modelled."""
    errors = {(script().schedule_name(r["schedule"]), r["micro_batches"]): r["varied_s"] / r["measured_s"] - 1
              for r in rows(path)}
    assert all(abs(error) < 0.10 for error in errors.values()), errors
    assert abs(statistics.median(errors.values())) < bias


@pytest.mark.parametrize(("path", "within"), [(CAPTURE, 0.02), (NARROW, 0.025), (AGAIN, 0.035), (NARROW_AGAIN, 0.04)],
                         ids=NAMES)
def test_the_simulated_bubbles_are_the_measured_ones(path: Path, within: float) -> None:
    for r in rows(path):
        assert r["simulated_bubble"] == pytest.approx(r["measured_bubble"], abs=within)


def test_deeper_pipelines_gain_as_measured() -> None:
    """PRT's gain over 1F1B peaks at m = p and falls as m grows, measured and simulated; at m = p = 2
    the deeper pipeline (k = 4) gains more than k = 2, as it did on the machine."""
    for gain in ("measured_gain", "simulated_gain"):
        for k in (2, 4):
            assert row("prt", 2, k=k)[gain] > row("prt", 4, k=k)[gain] > 0
        assert row("prt", 2, k=4)[gain] > row("prt", 2, k=2)[gain] > 0.1
    for r in rows():
        assert r["simulated_gain"] == pytest.approx(r["measured_gain"], abs=0.07)


@pytest.mark.parametrize("path", [AGAIN, NARROW_AGAIN], ids=NAMES[2:])
def test_the_sender_is_busy_for_nearly_all_of_a_transfer(path: Path) -> None:
    """Why the runs are simulated with ``p2p: blocking``: the sender's post (its copy into shared
    memory and the stamp) takes over 85 % of the one-way time, for every message size."""
    capture = script().read_capture(path)
    assert capture["post_s"].keys() == capture["one_way_s"].keys()
    for nbytes, seconds in capture["one_way_s"].items():
        assert 0.85 * seconds < capture["post_s"][nbytes] <= seconds


@pytest.mark.parametrize("path", ALL, ids=NAMES)
def test_waiting_senders_describe_the_runs_better_than_overlapped_transfers(path: Path) -> None:
    """Simulated with every op at its median time, the runs' iterations and bubbles come out closer
    to the measured ones when the senders wait for their transfers, as they did."""
    capture = script().read_capture(path)
    misses = {}
    for p2p in ("overlapped", "blocking"):
        errors, bubbles = [], []
        for run in capture["runs"]:
            summary = script().simulate_run(capture, run["plan"], run["micro_batches"], p2p=p2p).summary["workload"]
            rounds = [script().measured_iteration(iteration) for iteration in run["iterations"]]
            errors.append(abs(summary["iteration_time_s"] / statistics.median(t for t, _ in rounds) - 1))
            bubbles.append(abs(summary["bubble_fraction"] - statistics.median(b for _, b in rounds)))
        misses[p2p] = (statistics.median(errors), max(bubbles))
    assert misses["blocking"][0] < misses["overlapped"][0]
    assert misses["blocking"][1] < misses["overlapped"][1]


def test_varying_op_times_slow_the_simulation_toward_the_measurement() -> None:
    assert 0.05 < script().op_time_variation(script().read_capture(CAPTURE)) < 0.2
    slower = [r["varied_s"] >= r["simulated_s"] for r in rows()]
    assert sum(slower) >= len(slower) - 2
    assert statistics.median(abs(r["varied_s"] / r["measured_s"] - 1) for r in rows()) <= statistics.median(
        abs(r["simulated_s"] / r["measured_s"] - 1) for r in rows())


def test_export_writes_a_measured_trace_and_its_scenario(tmp_path: Path) -> None:
    script().export(script().read_capture(CAPTURE), tmp_path)
    assert len(list(tmp_path.glob("*.measured.json"))) == len(list(tmp_path.glob("*.yaml"))) == len(rows())
    events = json.loads((tmp_path / "1f1b_m2.measured.json").read_text())["traceEvents"]
    assert {event["tid"] for event in events} == {"device 0", "device 1"} and len(events) == 2 * 2 * 2
    summary = simulate(load_scenario(tmp_path / "1f1b_m2.yaml")).summary["workload"]
    assert summary["iteration_time_s"] == pytest.approx(row("1f1b", 2)["simulated_s"])


def test_the_harness_runs_plans_on_two_processes_and_reports(capsys) -> None:
    """A small capture end to end (no timing asserted: the suite may share the cores)."""
    pytest.importorskip("torch")
    setup = script().Setup(hidden=64, batch=4, layers=4, micro_batches=(2,), iterations=2)
    capture = script().measure(setup, ({"kind": "1f1b"}, {"kind": "prt", "k": 2}))
    assert [run["stages"] for run in capture["runs"]] == [2, 4]
    for run in capture["runs"]:
        assert [[label for label, _, _ in record] for record in run["iterations"][0]] == run["plan"]["ops"]
    assert set(capture["one_way_s"]) == {str(size) for size in setup.message_sizes}
    script().report(capture)
    assert "prt k=2" in capsys.readouterr().out


def test_the_simulated_link_is_the_measured_one() -> None:
    """One way between the two "GPUs" (two hops: GPU, switch, GPU) costs what the capture measured."""
    from simhpc.runner import build
    from simhpc.scenario.loader import scenario_from_dict

    capture = script().read_capture(CAPTURE)
    figures = script().model_figures(capture)
    _, workload = build(scenario_from_dict(script().scenario_for(capture, {"kind": "1f1b"}, 2), "capture"), "capture")
    topology = workload.ctx.network.topology
    path = topology.path("n0.gpu0", "n0.gpu1")
    assert topology.path_latency(path) == pytest.approx(figures["latency_s"], rel=1e-5)
    assert topology.path_bandwidth(path) == pytest.approx(figures["bandwidth"], rel=1e-5)


def test_a_noisy_fit_gives_no_negative_time() -> None:
    """The capture's lines (time per layer or per byte, and a fixed cost) are least squares with
    neither part below 0: a falling trend of tiny stages on a busy host (the harness's own test once
    fitted -6.8 us of backward per layer, and its scenario was refused) gives the flat mean, an
    intercept below 0 the line through the origin; a fit already non-negative is the free one."""
    line = script()._line
    assert line([(1, 30e-6), (2, 25e-6), (4, 20e-6)]) == pytest.approx((25e-6, 0.0))
    intercept, slope = line([(1, 1.0), (2, 3.0), (3, 5.0)])  # free fit: -1 + 2x
    assert intercept == 0.0 and slope == pytest.approx((1 * 1 + 2 * 3 + 3 * 5) / (1 + 4 + 9))
    assert line([(1, 3.0), (2, 5.0), (4, 9.0)]) == pytest.approx((1.0, 2.0))
    assert line([(1e3, 1e-5), (1e6, 1e-4), (1e7, 1e-3)])[1] > 0  # bytes: columns of very different scale
