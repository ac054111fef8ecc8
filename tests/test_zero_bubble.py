"""ZB-H1 (zero-bubble, Qi et al. 2024): op order, the bubble formula, memory, engine and workload.

Formula checked (``p`` stages, ``m >= p`` micro-batches, no communication, uniform stages,
``W <= min(F, B)``): the iteration takes ``m (F + B + W) + (p-1)(F + B - W)``, so with
``F = B = W`` the bubble fraction is ``(p-1)/(3m+p-1)`` — bubble time ``(p-1)/(3m)`` of the
ideal compute, a third of 1F1B's ``(p-1)(F + B + W)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from simhpc.engine import Simulation
from simhpc.hardware.devices import Device
from simhpc.policies.pipeline import OneFOneB, PipelinePlan, ZeroBubbleH1, plan_timing
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op
from simhpc.registry import lookup, names
from simhpc.report.gantt import draw_gantt, pipeline_spans
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from simhpc.workloads.pipeline import PipelineExecutor, StageCosts

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
ZB = ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1"))
ONE_F_ONE_B = OneFOneB(OneFOneB.Params(kind="1f1b"))


def _by_kind(durations: dict[str, float]) -> Callable[[Op], float]:
    """Op -> duration of its pass."""
    return lambda op: durations[op.kind]


def zb_formula(p: int, m: int) -> float:
    """ZB-H1's bubble fraction with F = B = W."""
    return (p - 1) / (3 * m + p - 1)


def execute(plan: PipelinePlan, costs: StageCosts) -> tuple[Simulation, PipelineExecutor, list[Device]]:
    sim = Simulation(0)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(plan.devices)]
    executor = PipelineExecutor(sim, plan, costs, devices)
    sim.process(executor.run(1))
    sim.run()
    return sim, executor, devices


def inflight_peak(ops: tuple[Op, ...], release: str = WEIGHT) -> int:
    """Most micro-batches a device holds at once: from the start of F to the end of ``release``."""
    held = peak = 0
    for op in ops:
        if op.kind == FORWARD:
            held += 1
            peak = max(peak, held)
        elif op.kind == release:
            held -= 1
    return peak


def test_registered_and_accepted_by_the_scenario_schema():
    assert "zb-h1" in names("pipeline")
    assert lookup("pipeline", "zb-h1") is ZeroBubbleH1
    scenario = load_scenario(SCENARIOS / "pipeline_bert_large.yaml", ["workload.schedule={kind: zb-h1}"])
    assert scenario.workload.schedule.kind == "zb-h1"


def test_plans_are_valid_and_keep_1f1b_activation_bound():
    for p, m in itertools.product((2, 4, 8, 16), range(1, 65)):
        plan = ZB.plan(p, m)
        plan.validate()
        assert plan.split_backward and plan.stages == p
        assert set(itertools.chain.from_iterable(plan.ops)) == set(plan.expected_ops())
        peaks = [inflight_peak(ops) for ops in plan.ops]
        assert peaks[0] == inflight_peak(ONE_F_ONE_B.plan(p, m).ops[0], BACKWARD) == min(p, m)
        assert max(peaks) <= p, (p, m, peaks)


def test_op_order_follows_the_handcrafted_schedule():
    plan = ZB.plan(4, 6)
    text = [" ".join(f"{op.kind}{op.micro_batch}" for op in ops) for ops in plan.ops]
    assert text == [
        "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5",
        "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5",
        "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 B5 W3 W4 W5",
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5",
    ]


def test_simulated_bubble_equals_the_zb_h1_formula_exactly():
    for p in (2, 4, 8):
        for m in range(p, 33):
            plan = ZB.plan(p, m)
            _, executor, _ = execute(plan, StageCosts.uniform(p, forward=1.0, backward=2.0, weight_grad=1.0))
            assert executor.iteration_times[0] == pytest.approx(3 * m + p - 1, abs=1e-9), (p, m)
            assert executor.bubble_fractions()[0] == pytest.approx(zb_formula(p, m), abs=1e-9), (p, m)
            assert executor.busy[0] == [3.0 * m] * p


def test_closed_form_makespan_for_unequal_passes():
    """``m (F+B+W) + (p-1)(F+B-W)`` whenever ``W <= min(F, B)``; larger W costs more."""
    for (f, b, w), p in itertools.product([(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (1.0, 2.0, 1.0), (2.0, 1.0, 0.5)],
                                          (2, 4, 8)):
        durations = {FORWARD: f, BACKWARD: b, WEIGHT: w}
        for m in (p, p + 3, 4 * p):
            timing = plan_timing(ZB.plan(p, m), _by_kind(durations))
            assert timing.makespan == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - w), abs=1e-9)
    durations = {FORWARD: 1.0, BACKWARD: 1.0, WEIGHT: 1.5}
    timing = plan_timing(ZB.plan(4, 8), _by_kind(durations))
    assert timing.makespan > 8 * 3.5 + 3 * 0.5


def test_every_op_runs_once_after_its_dependencies_one_at_a_time():
    for p, m in [(4, 4), (8, 8), (8, 21), (4, 2)]:
        plan = ZB.plan(p, m)
        sim, _, _ = execute(plan, StageCosts.uniform(p, forward=1.0, backward=2.0, weight_grad=1.0))
        ran: dict[Op, tuple[float, float]] = {}
        for track in sim.trace.tracks:
            if track.thread != "compute":
                continue
            for span in track.spans:
                op = Op(span.name[0], span.args["micro_batch"], span.args["stage"])
                assert op not in ran, f"{op} ran twice"
                ran[op] = (span.start, span.end)
                assert span.category == {"F": "forward", "B": "backward", "W": "weight"}[op.kind]
            for a, b in itertools.pairwise(track.spans):
                assert a.end <= b.start + 1e-12
        assert set(ran) == set(plan.expected_ops())
        for op, (start, _) in ran.items():
            for dep in plan.dependencies(op):
                assert ran[dep][1] <= start + 1e-12, (op, dep)


def test_bubble_is_below_1f1b():
    for p, m in itertools.product((2, 4, 8), (1, 3, 8, 16, 32)):
        costs = StageCosts.uniform(p, forward=1.0, backward=2.0, weight_grad=1.0)
        _, zb, _ = execute(ZB.plan(p, m), costs)
        _, baseline, _ = execute(ONE_F_ONE_B.plan(p, m), costs)
        assert zb.bubble_fractions()[0] < baseline.bubble_fractions()[0], (p, m)
        if m >= p:  # a third of 1F1B's bubble time
            assert zb.iteration_times[0] - 3 * m == pytest.approx((baseline.iteration_times[0] - 3 * m) / 3)


def test_peak_activation_memory_matches_1f1b():
    """The stash lives from F to W: each device holds at most p micro-batches, like 1F1B's first."""
    for p, m in [(4, 8), (8, 8), (8, 20)]:
        costs = StageCosts.uniform(p, stash=10.0, state=100.0)
        _, _, zb_devices = execute(ZB.plan(p, m), costs)
        _, _, devices = execute(ONE_F_ONE_B.plan(p, m), costs)
        zb_peaks = [device.memory.peak for device in zb_devices]
        peaks = [device.memory.peak for device in devices]
        assert max(zb_peaks) == max(peaks) == 100.0 + 10.0 * p
        assert zb_peaks[0] == peaks[0]
        assert all(device.memory.used == 100.0 for device in zb_devices)


def test_split_plans_need_weight_gradient_costs():
    plan = ZB.plan(2, 2)
    costs = StageCosts(forward_s=(1.0,) * 2, backward_s=(2.0,) * 2, state_bytes=(0.0,) * 2,
                       grad_bytes=(0.0,) * 2, stash_bytes=(0.0,) * 2, boundary_bytes=(0.0,) * 2)
    with pytest.raises(ValueError, match="weight_grad_s"):
        PipelineExecutor(Simulation(0), plan, costs, [Device(Simulation(0), f"g{d}", 1.0) for d in range(2)])
    with pytest.raises(ValueError, match="weight_grad_s"):
        StageCosts.uniform(2, backward=1.0, weight_grad=2.0)


def test_gantt_draws_weight_ops_distinctly():
    sim, _, _ = execute(ZB.plan(4, 4), StageCosts.uniform(4))
    rows = pipeline_spans(sim.trace)
    assert sum(span.category == "weight" for row in rows.values() for span in row) == 16
    figure, axes = plt.subplots()
    draw_gantt(axes, rows)
    hatches = [bar.get_hatch() for bar in axes.patches]
    plt.close(figure)
    assert hatches.count("....") == 16 and hatches.count(None) == 32


def test_bert_large_workload_zb_h1_beats_1f1b():
    results = {}
    for kind in ("1f1b", "zb-h1"):
        scenario = load_scenario(SCENARIOS / "pipeline_bert_large.yaml", [
            "network.mode=analytic", "workload.iterations=1", f"workload.schedule={{kind: {kind}}}",
            "outputs.trace=false", "outputs.timeline=false"])
        summary = simulate(scenario, "test").summary
        assert summary["status"] == "ok"
        results[kind] = summary["workload"]
    zb, baseline = results["zb-h1"], results["1f1b"]
    assert zb["throughput_samples_per_second"] > baseline["throughput_samples_per_second"]
    assert zb["bubble_fraction"] < baseline["bubble_fraction"]
    weight, backward = zb["stage_weight_grad_s"], zb["stage_backward_s"]
    assert all(0 < w < b for w, b in zip(weight, backward))
