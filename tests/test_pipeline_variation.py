"""``op_time_variation``: every op's time times an independent lognormal factor of median 1.

What must hold: the factors have the coefficient of variation asked for and median 1; a pipeline's
iteration, a max-plus function of its op times (convex in them), takes on average at least the
iteration of every op at its mean time (Jensen); the draws come from the scenario's seed alone;
0 changes nothing.
"""

from __future__ import annotations

import math
import statistics

import pytest
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.engine import Simulation
from simhpc.hardware.devices import Device
from simhpc.policies.pipeline import GPipe, OneFOneB, Prt
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from simhpc.workloads.pipeline import PipelineExecutor, StageCosts
from tests.conftest import ROOT

FORWARD_S, BACKWARD_S = 1.0, 2.0


def run(schedule, p: int, m: int, variation: float, iterations: int) -> tuple[PipelineExecutor, Simulation]:
    """``iterations`` of ``schedule`` on identical stages with free transfers."""
    plan = schedule.plan(p, m)
    v = plan.stages // p
    costs = StageCosts.uniform(plan.stages, forward=FORWARD_S / v, backward=BACKWARD_S / v)
    sim = Simulation(0)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(p)]
    executor = PipelineExecutor(sim, plan, costs, devices, variation=variation)
    sim.process(executor.run(iterations))
    sim.run()
    return executor, sim


def factors(sim: Simulation, v: int) -> list[float]:
    """Each op's time over its nominal one, from the trace."""
    nominal = {"forward": FORWARD_S / v, "backward": BACKWARD_S / v}
    return [span.duration / nominal[span.category] for track in sim.trace.tracks
            if track.thread == "compute" for span in track.spans]


ONE_F_ONE_B = OneFOneB(OneFOneB.Params(kind="1f1b"))


@pytest.mark.parametrize("variation", [0.1, 0.3, 0.8])
def test_op_times_have_the_coefficient_of_variation_and_median_one(variation: float) -> None:
    _, sim = run(ONE_F_ONE_B, 4, 8, variation, iterations=100)
    drawn = factors(sim, 1)
    assert len(drawn) == 100 * 2 * 8 * 4
    assert statistics.median(drawn) == pytest.approx(1.0, abs=0.03 * (1 + variation))
    assert statistics.pstdev(drawn) / statistics.fmean(drawn) == pytest.approx(variation, rel=0.12)
    sigma = math.sqrt(math.log1p(variation**2))
    assert statistics.pstdev(math.log(f) for f in drawn) == pytest.approx(sigma, rel=0.05)


@pytest.mark.parametrize("schedule", [GPipe(GPipe.Params(kind="gpipe")), ONE_F_ONE_B,
                                      Prt(Prt.Params(kind="prt", k=4))], ids=["gpipe", "1f1b", "prt-k4"])
def test_a_varied_iteration_takes_at_least_the_mean_ops_iteration(schedule) -> None:
    variation = 0.3
    exact, _ = run(schedule, 4, 8, 0.0, iterations=1)
    varied, _ = run(schedule, 4, 8, variation, iterations=300)
    mean_factor = math.sqrt(1 + variation**2)  # a lognormal of median 1
    assert statistics.fmean(varied.iteration_times) > exact.iteration_times[0] * mean_factor
    assert all(busy > 0 for iteration in varied.busy for busy in iteration)


def test_no_variation_draws_nothing_and_changes_nothing() -> None:
    exact, sim = run(ONE_F_ONE_B, 4, 8, 0.0, iterations=3)
    assert exact.iteration_times == [pytest.approx(11 * 3.0)] * 3
    assert factors(sim, 1) == pytest.approx([1.0] * 3 * 2 * 8 * 4)
    assert not sim._rngs


def scenario_run(*overrides: str) -> dict:
    scenario = load_scenario(ROOT / "scenarios" / "pipeline_uniform.yaml", list(overrides))
    return simulate(scenario).summary["workload"]


def test_the_seed_alone_decides_the_draws() -> None:
    args = ("workload.op_time_variation=0.2", "workload.iterations=5")
    first, again = scenario_run(*args), scenario_run(*args)
    other = scenario_run(*args, "seed=1")
    assert first["iteration_times_s"] == again["iteration_times_s"]
    assert first["iteration_times_s"] != other["iteration_times_s"]
    assert first["op_time_variation"] == 0.2
    assert scenario_run("workload.op_time_variation=0")["iteration_time_s"] == pytest.approx(0.180)


@pytest.mark.parametrize("value", ["-0.1", "2.5", "nan", "lots"])
def test_a_bad_variation_is_an_input_error(tmp_path, value: str) -> None:
    result = CliRunner().invoke(main, ["run", str(ROOT / "scenarios" / "pipeline_uniform.yaml"), "-o",
                                       str(tmp_path / "out"), "--set", f"workload.op_time_variation={value}"])
    assert result.exit_code == 2, result.output
    assert "workload.op_time_variation" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_deeper_pipeline_loses_more_of_its_gain_as_op_times_vary() -> None:
    """PRT's gain over 1F1B (p = m = 8, identical stages, free transfers) falls as op times vary,
    and k = 4 loses more of it than k = 2: one more reason depth cannot grow for ever on a noisy
    machine (at coefficients 0 / 0.2 / 0.4: +53.8 / +46.2 / +41.0 % at k = 4, +30.4 / +27.7 / +25.8 % at k = 2)."""
    prt = {k: Prt(Prt.Params(kind="prt", k=k)) for k in (2, 4)}
    variations = (0.0, 0.2, 0.4)

    def mean_iteration(schedule, variation: float) -> float:
        result, _ = run(schedule, 8, 8, variation, iterations=200 if variation else 1)  # no variation: all alike
        return statistics.fmean(result.iteration_times)

    base = {variation: mean_iteration(ONE_F_ONE_B, variation) for variation in variations}
    gains = {k: [base[variation] / mean_iteration(schedule, variation) - 1 for variation in variations]
             for k, schedule in prt.items()}
    assert gains[4][0] == pytest.approx(15 / (8 + 7 / 4) - 1)
    assert gains[4][0] > gains[4][1] > gains[4][2]
    assert gains[4][0] - gains[4][2] > gains[2][0] - gains[2][2] > 0
