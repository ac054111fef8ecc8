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
