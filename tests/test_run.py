"""End to end: `simhpc run` writes its outputs, deterministically, as a valid Chrome trace."""

import itertools
import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def run_cli(scenario: Path, outdir: Path, *args: str):
    result = CliRunner().invoke(main, ["run", str(scenario), "-o", str(outdir), *args])
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return result


def test_demo_writes_all_outputs_and_is_deterministic(tmp_path, scenarios_dir):
    demo = scenarios_dir / "allreduce_two_nodes.yaml"
    run_cli(demo, tmp_path / "a")
    run_cli(demo, tmp_path / "b")
    for name in ("summary.json", "trace.json", "metrics.csv", "timeline.png"):
        assert (tmp_path / "a" / name).stat().st_size > 0
    for name in ("summary.json", "trace.json", "metrics.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["status"] == "ok"
    assert summary["workload"]["iterations_done"] == 3


@pytest.mark.parametrize(("scenario", "override", "arrows"), [
    ("allreduce_two_nodes.yaml", "workload.collective=all_reduce", False),
    ("allreduce_two_nodes.yaml", "workload.collective=send_recv", True),
    ("pipeline_bert_base.yaml", "workload.iterations=1", True),
])
def test_trace_is_valid_chrome_json(tmp_path, scenarios_dir, scenario, override, arrows):
    run_cli(scenarios_dir / scenario, tmp_path, "--set", override)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    named_processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0
            assert (event["pid"], event["tid"]) in named_threads
            spans[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
        if event["ph"] in ("X", "C", "i", "s", "f"):
            assert event["pid"] in named_processes
    assert spans, "no busy spans"
    for track, intervals in spans.items():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end - 1e-6, f"overlapping spans on {track}"
    counters = [e for e in events if e["ph"] == "C"]
    assert any("utilisation" in e["args"] for e in counters)
    starts = {e["id"] for e in events if e["ph"] == "s"}
    finishes = {e["id"] for e in events if e["ph"] == "f"}
    assert starts == finishes
    if arrows:
        assert starts, "no flow arrow from send to receive"
    names = {(e["pid"], e["tid"], e["ts"], e["ts"] + e["dur"]): e["name"] for e in events if e["ph"] == "X"}
    ends = {}
    for event in events:  # Perfetto draws an arrow only between slices enclosing its ends
        if event["ph"] in ("s", "f"):
            (enclosing,) = [name for (pid, tid, start, end), name in names.items()
                            if (pid, tid) == (event["pid"], event["tid"]) and start < event["ts"] < end]
            ends.setdefault(event["id"], {})[event["ph"]] = (event["ts"], enclosing, event["name"])
    for arrow in ends.values():
        (sent, producer, label), (received, consumer, _) = arrow["s"], arrow["f"]
        assert received >= sent, label
        if "->" in label:  # a pipeline arrow "act F3@s4->F3@s5": from the producer's op to the consumer's
            assert label.split(" ", 1)[1] == f"{producer}->{consumer}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.stem for s in SCENARIOS])
def test_every_scenario_runs(scenario):
    """As ``simhpc run`` runs it: each link's busy spans kept only where a trace or timeline draws them."""
    config = load_scenario(scenario)
    result = simulate(config, str(scenario), link_spans=config.outputs.trace or config.outputs.timeline)
    assert result.summary["status"] in ("ok", "oom")
    assert result.summary["simulated_time_s"] > 0


def test_a_run_stopped_by_max_time_says_so(scenarios_dir):
    """outputs.max_time before the work is done leaves events undone, and the summary flags it."""
    path = scenarios_dir / "allreduce_two_nodes.yaml"
    stopped = simulate(load_scenario(path, ["outputs.max_time=1 us"])).summary
    assert stopped["stopped_at_max_time"] and stopped["simulated_time_s"] == pytest.approx(1e-6)
    assert not simulate(load_scenario(path, ["outputs.max_time=1000 s"])).summary["stopped_at_max_time"]
    assert "stopped_at_max_time" not in simulate(load_scenario(path)).summary


def test_override_changes_the_run(scenarios_dir):
    base = simulate(load_scenario(scenarios_dir / "allreduce_torus.yaml"))
    bigger = simulate(load_scenario(scenarios_dir / "allreduce_torus.yaml", ["workload.size=128 MiB"]))
    assert bigger.summary["workload"]["mean_time_s"] > 1.9 * base.summary["workload"]["mean_time_s"]



def test_output_folder_blocked_by_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder")
    scenario = next(path for path in SCENARIOS if path.name == "allreduce_single_node.yaml")
    for outdir in (blocker, blocker / "sub"):
        result = CliRunner().invoke(main, ["run", str(scenario), "-o", str(outdir)])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [f"error: {outdir}: a file is in the way of a folder to write"]


@pytest.mark.parametrize(("scenario", "stop"), [("allreduce_two_nodes.yaml", 2e-3), ("allreduce_torus.yaml", 1e-4)])
def test_a_run_stopped_by_max_time_ends_its_spans_there(scenarios_dir, scenario, stop):
    """Flow mode leaves busy links open, analytic mode records transfers ahead to their end: at
    the stop both end at it, so no span is empty or runs past it."""
    result = simulate(load_scenario(scenarios_dir / scenario, [f"outputs.max_time={stop} s"]))
    assert result.summary["stopped_at_max_time"]
    links = [track for track in result.sim.trace.tracks if track.process == "network" and track.spans]
    assert links
    assert all(span.end <= stop for track in links for span in track.spans)
    assert any(track.spans[-1].end == stop for track in links)
    assert all(span.end > span.start for track in links for span in track.spans)


def test_the_console_summary_shows_every_field(tmp_path, scenarios_dir):
    """A MoE run with a failure has over 40 fields; the failures section comes last and must show."""
    result = run_cli(scenarios_dir / "moe_demo.yaml", tmp_path, "--set", "workload.iterations=4",
                     "--set", "workload.failures={at: [{time: 1 s, node: 1}]}", "--set", "outputs.trace=false",
                     "--set", "outputs.timeline=false")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["workload"]["failures"]["count"] == 1
    assert "workload.failures.unrecoverable" in result.output and "workload.useful_time_s" in result.output


def test_a_name_in_a_script_the_font_lacks_draws_the_timeline_without_warnings(tmp_path):
    import warnings

    from simhpc.engine import Simulation
    from simhpc.report.timeline import plot_timeline

    sim = Simulation(0)
    sim.trace.track("h0", "comm").span("all_reduce", 0.0, 1e-3, "comm")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_timeline(sim.trace, tmp_path / "timeline.png", title="全对全-α∑🚀")
    assert (tmp_path / "timeline.png").stat().st_size > 0


def test_an_output_folder_that_cannot_be_made_fails_before_the_simulation(tmp_path, scenarios_dir, monkeypatch):
    """A long run must not end in 'a file is in the way' after minutes of simulating."""
    def not_called(*args, **kwargs):
        raise AssertionError("simulated before checking the output folder")

    monkeypatch.setattr("simhpc.cli.run_cmd.simulate", not_called)
    (tmp_path / "taken").write_text("")
    result = CliRunner().invoke(main, ["run", str(scenarios_dir / "allreduce_single_node.yaml"),
                                       "-o", str(tmp_path / "taken" / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {tmp_path / 'taken' / 'out'}: a file is in the way of a folder to write\n"


def test_a_rerun_without_trace_or_timeline_leaves_none_of_an_earlier_run(tmp_path, scenarios_dir):
    """The folder holds one run's outputs: an earlier run's trace.json would be read as this one's."""
    scenario = scenarios_dir / "allreduce_single_node.yaml"
    first = CliRunner().invoke(main, ["run", str(scenario), "-o", str(tmp_path), "-q"])
    assert first.exit_code == 0, first.output
    assert (tmp_path / "trace.json").is_file() and (tmp_path / "timeline.png").is_file()
    again = CliRunner().invoke(main, ["run", str(scenario), "-o", str(tmp_path), "-q", "--set", "outputs.trace=false",
                                      "--set", "outputs.timeline=false"])
    assert again.exit_code == 0, again.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["metrics.csv", "summary.json"]


def test_a_run_of_another_workload_leaves_no_plan_of_an_earlier_pipeline_run(tmp_path, scenarios_dir):
    """A pipeline run's plan.yaml (a workload's own file) goes when a collective run reuses the folder."""
    pipeline = CliRunner().invoke(main, ["run", str(scenarios_dir / "pipeline_uniform.yaml"), "-o", str(tmp_path),
                                         "-q", "--set", "outputs={trace: false, timeline: false}"])
    assert pipeline.exit_code == 0, pipeline.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["metrics.csv", "plan.yaml", "summary.json"]
    collective = CliRunner().invoke(main, ["run", str(scenarios_dir / "allreduce_single_node.yaml"), "-o",
                                           str(tmp_path), "-q", "--set", "outputs={trace: false, timeline: false}"])
    assert collective.exit_code == 0, collective.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["metrics.csv", "summary.json"]
