"""Pipeline bubble formulas off the usual grid: any ``p`` (odd ones too), ``m`` below, between and
above multiples of ``p``, non-unit and unequal forward/backward times.

In time units the formulas read (``F``, ``B`` a stage's forward and backward, ``W`` ZB-H1's
weight-gradient part, no communication, uniform stages):

* GPipe, 1F1B: makespan ``(m + p - 1)(F + B)``, bubble ``(p-1)/(m+p-1)``, any ``m``;
* interleaved (``v`` chunks of ``F/v``, ``B/v``): ``(p-1)/(v*m+p-1)`` for ``m >= p``; with
  ``m < p`` no schedule reaches it (a device runs out of work before its first micro-batch comes
  back round): the last micro-batch enters after ``m-1`` first chunks and then crosses the whole
  model, makespan ``(p + (m-1)/v)(F + B)``. Over 1F1B's ``(m+p-1)(F+B)`` the gain is then
  ``(m+p-1)/(p+(m-1)/v)``, which grows with ``m`` up to ``m = p`` and falls after it: PRT's
  round-robin map gains most at ``m = p``;
* ZB-H1: makespan ``m(F+B+W) + (p-1)(F+B-W)`` for ``m >= p`` and ``W <= min(F, B)``, so
  ``(p-1)/(3m+p-1)`` with ``F = B = W``;
* Chimera (even ``p``; ``m`` even, ``>= p``; ``F = B``): ``(p-2)/(2m+p-2)``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simhpc.engine import Simulation
from simhpc.hardware.devices import Device
from simhpc.policies.pipeline import (
    Chimera,
    GPipe,
    Interleaved,
    OneFOneB,
    PipelinePlan,
    PlanTiming,
    Prt,
    ZeroBubbleH1,
    plan_timing,
)
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT
from simhpc.workloads.pipeline import PipelineExecutor, StageCosts
from tests.test_pipeline_schedules import check_invariants

GPIPE = GPipe(GPipe.Params(kind="gpipe"))
ONE_F_ONE_B = OneFOneB(OneFOneB.Params(kind="1f1b"))
ZB = ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1"))
CHIMERA = Chimera(Chimera.Params(kind="chimera"))
# Times drawn from integers (some test modules switch the CPU to flush-to-zero, which st.floats rejects).
TIME = st.integers(1, 40).map(lambda k: k / 8)


def durations(forward: float, backward: float, weight: float = 0.0, scale: float = 1.0):
    """Op -> seconds: ``F`` forward, ``B`` backward (its input-gradient part if ``weight``), ``W``."""
    table = {FORWARD: forward * scale, BACKWARD: backward * scale, WEIGHT: weight * scale}
    return lambda op: table[op.kind]


def assert_valid(plan: PipelinePlan, timing: PlanTiming) -> None:
    """Every op once, after its dependencies, one at a time per device."""
    assert set(timing.start) == set(plan.expected_ops())
    check_invariants(plan, timing)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 40), m=st.integers(1, 80), forward=TIME, backward=TIME)
def test_gpipe_and_1f1b_for_any_p_m_and_times(p: int, m: int, forward: float, backward: float) -> None:
    for schedule in (GPIPE, ONE_F_ONE_B):
        plan = schedule.plan(p, m, backward_cost=backward / forward)
        timing = plan_timing(plan, durations(forward, backward))
        assert timing.makespan == pytest.approx((m + p - 1) * (forward + backward), rel=1e-12)
        assert timing.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
        assert_valid(plan, timing)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 16), v=st.integers(1, 4), extra=st.integers(0, 3 * 16), forward=TIME, backward=TIME)
def test_interleaved_for_any_m_at_least_p(p: int, v: int, extra: int, forward: float, backward: float) -> None:
    m = p + extra % (3 * p)
    plan = Interleaved(Interleaved.Params(kind="interleaved", v=v)).plan(p, m, backward_cost=backward / forward)
    timing = plan_timing(plan, durations(forward, backward, scale=1 / v))
    assert timing.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9), (p, v, m)
    assert_valid(plan, timing)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 16), v=st.integers(1, 4), fewer=st.integers(1, 15), forward=TIME, backward=TIME)
def test_interleaved_with_fewer_micro_batches_than_devices(p: int, v: int, fewer: int, forward: float,
                                                           backward: float) -> None:
    """m <= p: the last micro-batch's whole chain after the first chunks of the others."""
    m = 1 + (fewer - 1) % p
    plan = Interleaved(Interleaved.Params(kind="interleaved", v=v)).plan(p, m, backward_cost=backward / forward)
    timing = plan_timing(plan, durations(forward, backward, scale=1 / v))
    assert_valid(plan, timing)
    assert timing.makespan == pytest.approx((p + (m - 1) / v) * (forward + backward), rel=1e-12), (p, v, m)
    if m < p and v > 1:
        assert timing.bubble_fraction > (p - 1) / (v * m + p - 1)


@pytest.mark.parametrize("p", [3, 5, 6, 7, 12])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_prt_round_robin_is_interleaved_off_the_grid(p: int, k: int) -> None:
    for m in (1, p - 1, p, p + 1, 2 * p + 1, 3 * p):
        prt = Prt(Prt.Params(kind="prt", k=k)).plan(p, m)
        interleaved = Interleaved(Interleaved.Params(kind="interleaved", v=k)).plan(p, m)
        assert prt.ops == interleaved.ops and prt.stage_device == interleaved.stage_device


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 16), extra=st.integers(0, 40), unit=TIME,
       passes=st.tuples(TIME, TIME, TIME).filter(lambda t: t[2] <= min(t[0], t[1])))
def test_zb_h1_for_any_p_and_m_at_least_p(p: int, extra: int, unit: float, passes) -> None:
    m = p + extra
    plan = ZB.plan(p, m)
    timing = plan_timing(plan, durations(unit, unit, unit))
    assert timing.bubble_fraction == pytest.approx((p - 1) / (3 * m + p - 1), abs=1e-9), (p, m)
    assert_valid(plan, timing)
    f, b, w = passes
    makespan = plan_timing(plan, durations(f, b, w)).makespan
    assert makespan == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - w), rel=1e-12)


@pytest.mark.parametrize(("p", "m"), [(3, 1), (3, 2), (5, 4), (7, 3)])
def test_zb_h1_with_fewer_micro_batches_than_devices_has_more_bubble(p: int, m: int) -> None:
    """The formula is out of reach for m < p (an exact time-indexed search finds no such schedule)."""
    plan = ZB.plan(p, m)
    timing = plan_timing(plan, durations(1.0, 1.0, 1.0))
    assert_valid(plan, timing)
    assert timing.bubble_fraction > (p - 1) / (3 * m + p - 1)


@settings(max_examples=40, deadline=None)
@given(half_p=st.integers(1, 8), extra=st.integers(0, 24), unit=TIME)
def test_chimera_for_any_even_p_and_even_m_at_least_p(half_p: int, extra: int, unit: float) -> None:
    p = 2 * half_p
    m = p + 2 * extra
    plan = CHIMERA.plan(p, m, backward_cost=1.0)
    timing = plan_timing(plan, durations(unit, unit))
    assert timing.bubble_fraction == pytest.approx((p - 2) / (2 * m + p - 2), abs=1e-9), (p, m)
    assert_valid(plan, timing)


@pytest.mark.parametrize("p", [3, 5, 7, 9])
def test_chimera_refuses_an_odd_device_count_and_too_few_micro_batches(p: int) -> None:
    with pytest.raises(ValueError, match="even number of devices"):
        CHIMERA.plan(p, 2 * p)
    with pytest.raises(ValueError, match="at least 2 micro-batches"):
        CHIMERA.plan(p + 1, 1)


@pytest.mark.parametrize(("schedule", "p", "m"), [
    (GPIPE, 7, 5),
    (ONE_F_ONE_B, 5, 13),
    (Interleaved(Interleaved.Params(kind="interleaved", v=3)), 5, 7),
    (ZB, 6, 9),
    (CHIMERA, 6, 10),
    (Prt(Prt.Params(kind="prt", k=2, direction="bi")), 6, 7),
])
def test_engine_runs_off_grid_plans_at_their_closed_form_times(schedule, p: int, m: int) -> None:
    forward, backward, weight = 0.3, 0.9, 0.2
    plan = schedule.plan(p, m, backward_cost=backward / forward)
    v = plan.stages // p
    costs = StageCosts.uniform(plan.stages, forward=forward / v, backward=backward / v, weight_grad=weight / v)
    sim = Simulation(0)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(p)]
    executor = PipelineExecutor(sim, plan, costs, devices)
    sim.process(executor.run(1))
    sim.run()
    b = backward - weight if plan.split_backward else backward
    reference = plan_timing(plan, durations(forward, b, weight, scale=1 / v))
    assert executor.iteration_times[0] == pytest.approx(reference.makespan, abs=1e-9)
    assert executor.bubble_fractions()[0] == pytest.approx(reference.bubble_fraction, abs=1e-9)
    if isinstance(schedule, (GPipe, OneFOneB, Interleaved)):
        assert executor.bubble_fractions()[0] == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9)


def run_with_latency(plan: PipelinePlan, costs: StageCosts, latency: float) -> PipelineExecutor:
    """One iteration of ``plan`` whose transfers take ``latency`` each (no contention)."""
    sim = Simulation(0)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(plan.devices)]
    executor = PipelineExecutor(sim, plan, costs, devices, lambda src, dst, nbytes, label: sim.env.timeout(latency))
    sim.process(executor.run(1))
    sim.run()
    return executor


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 12), m=st.integers(1, 24), forward=TIME, backward=TIME, latency=TIME)
def test_gpipe_waits_for_one_transfer_per_device_and_direction(p: int, m: int, forward: float, backward: float,
                                                                latency: float) -> None:
    """GPipe with identical stages and transfers of ``latency``: each later micro-batch's input
    arrives as the device finishes the previous one, so only the first forward and the first
    backward of a device wait for bytes in flight: ``latency`` on the end devices, twice that
    between, whatever p, m and the op times."""
    executor = run_with_latency(GPIPE.plan(p, m), StageCosts.uniform(p, forward=forward, backward=backward), latency)
    waits = executor.transfer_waits[0]
    assert waits == pytest.approx([latency, *[2 * latency] * (p - 2), latency], abs=1e-9)
    iteration = executor.iteration_times[0]
    assert iteration == pytest.approx((m + p - 1) * (forward + backward) + 2 * (p - 1) * latency, rel=1e-12)
    assert executor.transfer_wait_fractions()[0] == pytest.approx(2 * (p - 1) * latency / (p * iteration))


@settings(max_examples=30, deadline=None)
@given(p=st.sampled_from([2, 4, 6]), m=st.integers(2, 12), latency=st.sampled_from([0.0, 0.1, 0.5, 2.0]),
       schedule=st.sampled_from([ONE_F_ONE_B, ZB, CHIMERA, Interleaved(Interleaved.Params(kind="interleaved", v=2)),
                                 Prt(Prt.Params(kind="prt", k=2, direction="bi"))]))
def test_transfer_waits_fit_in_the_idle_time(p: int, m: int, latency: float, schedule) -> None:
    """Busy time and transfer waits never exceed a device's iteration, and free transfers leave no
    wait."""
    plan = schedule.plan(p, m)
    executor = run_with_latency(plan, StageCosts.uniform(plan.stages, forward=0.5, backward=1.0), latency)
    iteration = executor.iteration_times[0]
    for busy, wait in zip(executor.busy[0], executor.transfer_waits[0]):
        assert wait >= 0.0 and busy + wait <= iteration * (1 + 1e-12)
    if latency == 0.0:
        assert executor.transfer_waits[0] == [0.0] * p
