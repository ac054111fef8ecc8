"""``p2p``: transfers overlapped with compute, waited for by their senders, or met at a rendezvous.

What must hold: the SimPy engine gives the closed form's times under every mode; GPipe's iteration
follows its textbook cost, each transfer on the fill and drain only when overlapped and on every
step when the sender waits ((m+p-1)(F+B) + 2(m+p-2)c); with free transfers a waiting sender costs
nothing, and GPipe and 1F1B (Megatron's non-interleaved order) lose nothing to a rendezvous either;
a plan whose sends wait for receives posted too late deadlocks, and the scenario says so; on random
plans the deadlock check is exact and each mode's waits only add to the last's.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.engine import Simulation
from simhpc.hardware.devices import Device
from simhpc.policies.pipeline import (
    Chimera,
    GPipe,
    Interleaved,
    OneFOneB,
    PipelinePlan,
    PlanError,
    Prt,
    ZeroBubbleH1,
    plan_timing,
)
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from simhpc.workloads.pipeline import PipelineExecutor, StageCosts
from tests.conftest import ROOT

MODES = ("overlapped", "blocking", "rendezvous")
GPIPE = GPipe(GPipe.Params(kind="gpipe"))
ONE_F_ONE_B = OneFOneB(OneFOneB.Params(kind="1f1b"))
UNIFORM = ROOT / "scenarios" / "pipeline_uniform.yaml"


def execute(plan: PipelinePlan, mode: str, seconds_per_byte: float) -> tuple[Simulation, PipelineExecutor]:
    """One iteration with F = 1, B = 2 (B = W = 1 split), boundaries of 1 byte at ``seconds_per_byte``."""
    sim = Simulation(0)
    split = plan.split_backward
    costs = StageCosts.uniform(plan.stages, forward=1.0, backward=2.0, boundary=1.0, weight_grad=1.0 if split else 0.0)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(plan.devices)]
    executor = PipelineExecutor(sim, plan, costs, devices,
                                lambda src, dst, nbytes, label: sim.env.timeout(seconds_per_byte * nbytes), p2p=mode)
    sim.process(executor.run(1))
    sim.run()
    return sim, executor


def durations(plan: PipelinePlan):
    seconds = {FORWARD: 1.0, BACKWARD: 1.0 if plan.split_backward else 2.0, WEIGHT: 1.0}
    return lambda op: seconds[op.kind]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("schedule", "p", "m"), [
    (GPIPE, 4, 7),
    (ONE_F_ONE_B, 8, 16),
    (Interleaved(Interleaved.Params(kind="interleaved", v=2)), 4, 4),
    (Chimera(Chimera.Params(kind="chimera")), 8, 16),
    (Prt(Prt.Params(kind="prt", k=2, direction="bi")), 8, 8),
    (Prt(Prt.Params(kind="prt", k=3, mapping="v_shape")), 4, 3),
    (ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1")), 4, 8),
])
def test_the_engine_gives_the_closed_form_times(schedule, p: int, m: int, mode: str) -> None:
    plan = schedule.plan(p, m)
    sim, executor = execute(plan, mode, 0.25)
    reference = plan_timing(plan, durations(plan), lambda *_: 0.25, p2p=mode)
    assert executor.iteration_times[0] == pytest.approx(reference.makespan, abs=1e-9)
    assert executor.bubble_fractions()[0] == pytest.approx(reference.bubble_fraction, abs=1e-9)
    starts = {Op(span.name[0], span.args["micro_batch"], span.args["stage"]): span.start
              for track in sim.trace.tracks if track.thread == "compute" for span in track.spans}
    assert starts.keys() == reference.start.keys()
    assert all(starts[op] == pytest.approx(reference.start[op], abs=1e-9) for op in starts)
    assert 0 < executor.transfer_wait_fractions()[0] < executor.bubble_fractions()[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seconds_per_byte", [0.0, 0.25])
@pytest.mark.parametrize(("schedule", "p", "m"), [
    (GPIPE, 4, 7),
    (ONE_F_ONE_B, 8, 16),
    (Chimera(Chimera.Params(kind="chimera")), 4, 8),
    (Prt(Prt.Params(kind="prt", k=2, direction="bi")), 4, 4),
    (ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1")), 4, 8),
])
def test_the_trace_shows_every_wait_between_a_devices_ops(schedule, p: int, m: int, seconds_per_byte: float,
                                                          mode: str) -> None:
    """Each device's ``compute`` and ``p2p wait`` threads tile its time from the iteration's start to
    its last op's end (and with waiting senders, its last send's arrival): an op starts late only
    for a transfer, so every gap is a wait; the waits' in-flight parts add up to its transfer wait."""
    plan = schedule.plan(p, m)
    sim, executor = execute(plan, mode, seconds_per_byte)
    threads: dict[str, dict[str, list]] = {}
    for track in sim.trace.tracks:
        threads.setdefault(track.process, {})[track.thread] = track.spans
    assert len(threads) == p
    for d in range(p):
        spans = threads[f"gpu{d}"]
        assert set(spans) <= {"compute", "p2p wait"}
        waits = spans.get("p2p wait", [])
        assert {span.category for span in waits} <= {"p2p_dependency", "p2p_transfer"}
        timeline = sorted(spans["compute"] + waits, key=lambda span: span.start)
        assert timeline[0].start == 0.0
        for before, after in itertools.pairwise(timeline):
            assert after.start == pytest.approx(before.end, abs=1e-12), (d, before, after)
        in_flight = sum(span.duration for span in waits if span.category == "p2p_transfer")
        assert in_flight == pytest.approx(executor.transfer_waits[0][d], abs=1e-12)
        if seconds_per_byte == 0:
            assert in_flight == 0
    received = [span for process in threads.values() for span in process.get("p2p wait", [])
                if span.name.startswith("wait: recv")]
    assert received, "some op waits for its input's producer"
    if mode != "overlapped" and seconds_per_byte > 0:
        assert any("send to" in span.name and span.category == "p2p_transfer"
                   for process in threads.values() for span in process.get("p2p wait", []))


@pytest.mark.parametrize(("p", "m", "forward", "backward", "transfer"), [
    (p, m, f, b, c) for p, m in itertools.product((2, 4, 8, 16), (1, 3, 8, 33))
    for f, b, c in ((1.0, 2.0, 0.25), (0.7, 1.3, 2.5))])
def test_gpipe_pays_each_transfer_on_every_step_when_its_senders_wait(p: int, m: int, forward: float,
                                                                      backward: float, transfer: float) -> None:
    plan = GPIPE.plan(p, m)

    def seconds(op):
        return forward if op.kind == FORWARD else backward

    compute = (m + p - 1) * (forward + backward)
    expected = {"overlapped": compute + 2 * (p - 1) * transfer, "blocking": compute + 2 * (m + p - 2) * transfer,
                "rendezvous": compute + 2 * (m + p - 2) * transfer}
    for mode, makespan in expected.items():
        assert plan_timing(plan, seconds, lambda *_: transfer, p2p=mode).makespan == pytest.approx(makespan, abs=1e-9)


@pytest.mark.parametrize(("schedule", "p", "m"), [
    (schedule, p, m) for schedule in (GPIPE, ONE_F_ONE_B, Interleaved(Interleaved.Params(kind="interleaved", v=2)),
                                      Chimera(Chimera.Params(kind="chimera")), Prt(Prt.Params(kind="prt", k=2)),
                                      ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1")))
    for p, m in ((4, 4), (4, 8), (8, 16))])
def test_a_waiting_sender_costs_nothing_when_transfers_are_free(schedule, p: int, m: int) -> None:
    plan = schedule.plan(p, m)
    overlapped = plan_timing(plan, durations(plan)).makespan
    assert plan_timing(plan, durations(plan), p2p="blocking").makespan == overlapped
    if isinstance(schedule, (GPipe, OneFOneB)):  # each receive is posted before its sender gets there
        assert plan_timing(plan, durations(plan), p2p="rendezvous").makespan == overlapped


@pytest.mark.parametrize("p", [2, 4, 8])
def test_megatrons_interleaved_order_needs_receives_posted_ahead(p: int) -> None:
    plan = Interleaved(Interleaved.Params(kind="interleaved", v=2)).plan(p, 2 * p)
    plan_timing(plan, durations(plan), p2p="blocking")
    with pytest.raises(PlanError, match=f"deadlock with rendezvous .* devices wait at F{2 * p - 1}@s0"):
        plan_timing(plan, durations(plan), p2p="rendezvous")


def uniform(*overrides: str) -> dict:
    """The uniform scenario's workload summary, 64 MiB boundaries over a DGX A100's NVLink."""
    scenario = load_scenario(UNIFORM, ["workload.model.boundary=64 MiB", "network.topology.node=dgx-a100",
                                       *overrides])
    return simulate(scenario).summary["workload"]


def test_a_scenario_waits_as_the_closed_form_says() -> None:
    """End to end: GPipe's overlapped iteration gives the transfer time c, and the senders that wait
    pay 2(m-1)c more; PRT, with more boundaries, loses more of its gain over 1F1B when they wait."""
    p = m = 8
    compute = (m + p - 1) * (4e-3 + 8e-3)
    overlapped = uniform("workload.schedule={kind: gpipe}")
    transfer = (overlapped["iteration_time_s"] - compute) / (2 * (p - 1))
    assert overlapped["iteration_time_s"] == pytest.approx(183.2e-3, abs=0.05e-3)  # the scenario's comment
    for mode in ("blocking", "rendezvous"):
        waited = uniform("workload.schedule={kind: gpipe}", f"workload.p2p={mode}")
        assert waited["p2p"] == mode
        assert waited["iteration_time_s"] == pytest.approx(compute + 2 * (m + p - 2) * transfer, rel=1e-9)
        assert waited["iteration_time_s"] == pytest.approx(186.4e-3, abs=0.05e-3)
        assert waited["transfer_wait_fraction"] > overlapped["transfer_wait_fraction"]
    gains = {}
    for mode in MODES:
        base = uniform(f"workload.p2p={mode}")["iteration_time_s"]
        prt = uniform("workload.schedule={kind: prt, k: 2}", f"workload.p2p={mode}")["iteration_time_s"]
        gains[mode] = base / prt - 1
    assert gains["overlapped"] > gains["blocking"] > gains["rendezvous"]


def test_a_plan_that_deadlocks_at_a_rendezvous_is_an_input_error(tmp_path: Path) -> None:
    crossed = ("workload.schedule={kind: explicit, ops: [[F0@s0, F1@s0, B0@s0, B1@s0], "
               "[F1@s1, F0@s1, B0@s1, B1@s1]], stage_device: [[0, 1]]}")
    common = ["run", str(UNIFORM), "-o", str(tmp_path / "out"), "--set", "workload.devices=2",
              "--set", "workload.micro_batches=2", "--set", crossed]
    assert CliRunner().invoke(main, [*common, "--set", "workload.p2p=blocking"]).exit_code == 0
    result = CliRunner().invoke(main, [*common, "--set", "workload.p2p=rendezvous"])
    assert result.exit_code == 2, result.output
    assert "workload.p2p" in result.stderr and "devices wait at F1@s0, F1@s1" in result.stderr
    assert "Traceback" not in result.stderr


def random_plan(rng: random.Random, p: int, stages: int, m: int) -> PipelinePlan:
    """A plan of ``m`` micro-batches through ``stages`` stages on ``p`` devices (a random map) whose
    device lists follow a random order of the ops that respects their dependencies."""
    mapping = tuple(rng.randrange(p) for _ in range(stages))
    ready = {Op(FORWARD, j, 0) for j in range(m)}
    lists: list[list[Op]] = [[] for _ in range(p)]
    done: set[Op] = set()
    while ready:
        op = rng.choice(sorted(ready))
        ready.remove(op)
        done.add(op)
        lists[mapping[op.stage]].append(op)
        kind, j, s = op
        following = [Op(FORWARD, j, s + 1)] if kind == FORWARD and s + 1 < stages else []
        following += [Op(BACKWARD, j, s)] if kind == FORWARD and s + 1 == stages else []
        following += [Op(BACKWARD, j, s - 1)] if kind == BACKWARD and s > 0 else []
        ready.update(following)
    plan = PipelinePlan("random", p, stages, m, (mapping,), (0,) * m, tuple(map(tuple, lists)))
    plan.validate()
    return plan


@pytest.mark.parametrize("seed", range(40))
def test_the_deadlock_check_is_exact(seed: int) -> None:
    """On random plans (valid when overlapped: about half deadlock at a rendezvous) the rendezvous
    check passes exactly when the engine runs every op; where it runs, under every mode, the
    engine's times are the closed form's, and each mode's waits only add: overlapped <= blocking
    <= rendezvous."""
    rng = random.Random(seed)
    plan = random_plan(rng, rng.choice((2, 3, 4)), rng.randrange(2, 7), rng.randrange(1, 6))
    makespans = []
    for mode in MODES:
        _, executor = execute(plan, mode, 0.25)
        try:
            reference = plan_timing(plan, durations(plan), lambda *_: 0.25, p2p=mode)
        except PlanError:
            assert mode == "rendezvous" and executor.iterations_done == 0
            continue
        assert executor.iterations_done == 1
        assert executor.iteration_times[0] == pytest.approx(reference.makespan, abs=1e-9)
        makespans.append(reference.makespan)
    assert makespans == sorted(makespans)
