"""``schedule: {kind: explicit}``: a plan written out op by op runs exactly as written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.policies.pipeline import Chimera, Explicit, GPipe, OneFOneB, Prt, ZeroBubbleH1
from simhpc.policies.pipeline.explicit import written_out
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from tests.conftest import ROOT

UNIFORM = ROOT / "scenarios" / "pipeline_uniform.yaml"

SCHEDULES = {
    "gpipe": GPipe(GPipe.Params(kind="gpipe")),
    "1f1b": OneFOneB(OneFOneB.Params(kind="1f1b")),
    "prt-v": Prt(Prt.Params(kind="prt", k=2, mapping="v_shape")),
    "prt-bi": Prt(Prt.Params(kind="prt", k=2, direction="bi")),
    "chimera": Chimera(Chimera.Params(kind="chimera")),
    "zb-h1": ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1")),
}


def flow(section: dict) -> str:
    """A schedule section as one ``--set`` value."""
    return f"workload.schedule={yaml.safe_dump(section, default_flow_style=True, width=10**6).strip()}"


@pytest.mark.parametrize("name", SCHEDULES)
def test_a_written_out_plan_is_the_plan(name: str) -> None:
    plan = SCHEDULES[name].plan(4, 8)
    again = Explicit(Explicit.Params(**written_out(plan))).plan(4, 8)
    assert (again.ops, again.stage_device, again.micro_batch_pipeline, again.split_backward) == (
        plan.ops, plan.stage_device, plan.micro_batch_pipeline, plan.split_backward)


def workload(*overrides: str) -> dict:
    return simulate(load_scenario(UNIFORM, list(overrides))).summary["workload"]


@pytest.mark.parametrize("kind", ["1f1b", "zb-h1"])
def test_a_scenario_runs_a_written_out_plan_as_its_schedule(kind: str) -> None:
    planned = workload(f"workload.schedule={{kind: {kind}}}")
    plan = SCHEDULES[kind].plan(8, 8)
    replayed = workload(flow(written_out(plan)))
    for key in ("iteration_time_s", "bubble_fraction", "peak_memory_bytes", "p2p_transfers"):
        assert replayed[key] == planned[key]
    assert replayed["stages"] == 8


def one_device_per_stage(ops: list[list[str]]) -> str:
    return flow({"kind": "explicit", "ops": ops, "stage_device": [[0, 1]]})


GOOD = [["F0@s0", "B0@s0"], ["F0@s1", "B0@s1"]]


@pytest.mark.parametrize(("ops", "message"), [
    ([["F0@s0", "B0@s0"], ["F0@s1", "back"]], "'back' is not an op label"),
    ([["F0@s0", "B0@s0"], ["F0@s1"]], "missing B0@s1"),
    ([["F0@s0", "B0@s0", "F0@s0"], ["F0@s1", "B0@s1"]], "F0@s0 appears twice"),
    ([["F0@s0", "B0@s1"], ["F0@s1", "B0@s0"]], "B0@s1 listed on device 0, its stage lives on device 1"),
    ([["B0@s0", "F0@s0"], ["F0@s1", "B0@s1"]], "deadlock"),
    ([["F0@s0", "B0@s0"], ["F0@s1", "B0@s1"], []], "3 op lists for 2 devices"),
])
def test_a_bad_plan_is_an_input_error_naming_the_schedule(tmp_path: Path, ops, message: str) -> None:
    result = CliRunner().invoke(main, ["run", str(UNIFORM), "-o", str(tmp_path / "out"), "--set", "workload.devices=2",
                                       "--set", "workload.micro_batches=1", "--set", one_device_per_stage(ops)])
    assert result.exit_code == 2, result.output
    assert "workload.schedule" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_good_two_device_plan_runs(tmp_path: Path) -> None:
    summary = workload("workload.devices=2", "workload.micro_batches=1", one_device_per_stage(GOOD))
    assert summary["iteration_time_s"] == pytest.approx(32 * 3e-3)


@pytest.mark.parametrize(("scenario", "overrides"), [
    ("pipeline_uniform.yaml", ["workload.schedule={kind: chimera}", "workload.micro_batches=4", "workload.devices=4"]),
    ("pipeline_uniform.yaml", ["workload.schedule={kind: prt, k: 2, direction: bi}", "workload.micro_batches=13"]),
    ("pipeline_uniform.yaml", ["workload.schedule={kind: zb-h1}", "workload.partition=[5, 3, 4, 4, 4, 4, 4, 4]"]),
    ("pipeline_bert_large.yaml", ["workload.schedule={kind: prt, k: 2, mapping: v_shape}", "workload.iterations=1"]),
], ids=["chimera", "prt-bi", "zb-h1-uneven", "bert-prt-v"])
def test_a_runs_plan_file_replays_it(tmp_path: Path, scenario: str, overrides: list[str]) -> None:
    """``simhpc run`` writes each pipeline run's plan.yaml: its op orders as an ``explicit`` schedule
    and its cut as a ``partition`` list. Run with those two fields the same scenario runs the same
    plan on the same stages: every summary figure equal (a greedy order is then kept as it was, and
    no cut chosen anew)."""
    first = CliRunner().invoke(main, ["run", str(ROOT / "scenarios" / scenario), "-o", str(tmp_path / "a"),
                                      *(arg for value in overrides for arg in ("--set", value))])
    assert first.exit_code == 0, first.output
    written = yaml.safe_load((tmp_path / "a" / "plan.yaml").read_text())
    assert written["schedule"]["kind"] == "explicit" and set(written) == {"schedule", "partition"}
    replay = [*overrides, flow(written["schedule"]),
              f"workload.partition={yaml.safe_dump(written['partition'], default_flow_style=True).strip()}"]
    again = simulate(load_scenario(ROOT / "scenarios" / scenario, replay), scenario).summary["workload"]
    before = yaml.safe_load((tmp_path / "a" / "summary.json").read_text())["workload"]
    assert {k: v for k, v in again.items() if k != "schedule"} == {k: v for k, v in before.items() if k != "schedule"}
    assert before["stage_layer_counts"] == written["partition"]


def test_a_cut_given_as_layer_counts_is_run_or_refused_naming_the_field(tmp_path: Path) -> None:
    """``partition: [layers of each stage]`` cuts the model so; a stage slower than the others sets
    1F1B's pace (11 of 32 identical layers on the first of 8 GPUs: it is never idle, 8 x 11 x 3 ms);
    counts that do not add up to the model's layers or match the schedule's stages exit 2."""
    cut = [11, 3, 3, 3, 3, 3, 3, 3]
    summary = simulate(load_scenario(UNIFORM, [f"workload.partition={cut}"]), "uniform").summary["workload"]
    assert summary["stage_layer_counts"] == cut
    assert summary["iteration_time_s"] == pytest.approx(8 * 11 * 3e-3)
    for bad in ("[4, 4, 4, 4, 4, 4, 4, 3]", "[16, 16]", "[0, 32]"):
        result = CliRunner().invoke(main, ["run", str(UNIFORM), "-o", str(tmp_path),
                                           "--set", f"workload.partition={bad}"])
        assert result.exit_code == 2 and "workload.partition" in result.output and "Traceback" not in result.output
