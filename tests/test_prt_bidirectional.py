"""Bidirectional PRT (two opposite pipelines of depth k x p): bubbles, limits, profiled orders.

Convention as in ``test_pipeline_schedules.py``: closed-form timing (:func:`plan_timing`),
uniform stages, a forward of ``1/k`` and a backward of ``b/k`` (the work per device does not
depend on ``k``), no communication unless a profile says otherwise.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from simhpc.policies.pipeline import Chimera, GPipe, OneFOneB, PipelinePlan, Prt, ZeroBubbleH1, plan_timing
from simhpc.policies.pipeline.chimera import forward_first, split_directions
from simhpc.policies.pipeline.greedy import list_schedule
from simhpc.policies.pipeline.mapping import mirror, round_robin
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op
from simhpc.policies.pipeline.profile import StageProfile
from tests.test_pipeline_schedules import check_invariants, unit


def chimera_bubble(p: int, m: int, backward: float = 1.0) -> float:
    plan = Chimera(Chimera.Params(kind="chimera")).plan(p, m, backward_cost=backward)
    return plan_timing(plan, unit(backward)).bubble_fraction


def prt_bi(k: int, **params) -> Prt:
    return Prt(Prt.Params(kind="prt", k=k, direction="bi", **params))


def bubble(plan: PipelinePlan, k: int, backward: float = 1.0) -> float:
    return plan_timing(plan, unit(backward, 1 / k)).bubble_fraction


@pytest.mark.parametrize("p", [4, 8, 16])
def test_k1_is_chimera_with_its_bubble(p):
    for m in range(p, 41, 2):
        plan = prt_bi(1).plan(p, m, backward_cost=1.0)
        assert bubble(plan, 1) == pytest.approx((p - 2) / (2 * m + p - 2), abs=1e-9), m
        assert plan.ops == Chimera(Chimera.Params(kind="chimera")).plan(p, m, backward_cost=1.0).ops


@pytest.mark.parametrize("p", [4, 8, 16])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_deeper_bidirectional_bubble_no_larger_than_chimeras(p, k):
    """Equal forward and backward: never above Chimera's bubble on the same devices, and exactly
    Chimera's formula with ``k`` times the ops, ``(p-2)/(2km+p-2)``, when ``m`` is a multiple of
    ``p/2`` (otherwise a direction's micro-batches do not fill the turns of the deeper pipeline)."""
    for m in range(p, 41, 2):
        plan = prt_bi(k).plan(p, m, backward_cost=1.0)
        check_invariants(plan)
        ours = bubble(plan, k)
        assert ours <= chimera_bubble(p, m) + 1e-9, m
        if m % (p // 2) == 0:
            assert ours == pytest.approx((p - 2) / (2 * k * m + p - 2), abs=1e-9), m


def test_backward_first_orders_are_candidates_of_the_bidirectional_planner():
    """With a backward twice a forward, Chimera's rule (forwards first) left the deeper pipeline
    0.063 at p = 4, k = 4, m = 16, more than Chimera's 0.059; the 1F1B rule (backwards first),
    also tried since, left 0.035 (0.015 with the deepest-backward-first candidate below), and in the grid of
    ``test_..._with_a_slower_backward`` cut the cases worse than Chimera from 24 to 19."""
    assert bubble(prt_bi(4).plan(4, 16, backward_cost=2.0), 4, 2.0) < 0.6 * chimera_bubble(4, 16, 2.0)


def test_device_activation_bounds_are_candidates_of_the_bidirectional_planner():
    """Bounding each device's activations of a direction (``max_inflight`` x its stages of that
    direction) instead of the micro-batches in flight lets more of a deep pipeline's forwards start
    under the same memory: p = 4, k = 2, m = 16, a backward twice a forward, 0.068 -> 0.030 against
    Chimera's 0.059 (the grid's cases worse than Chimera 19 -> 4)."""
    plan = prt_bi(2).plan(4, 16, backward_cost=2.0)
    check_invariants(plan)
    assert bubble(plan, 2, 2.0) < 0.6 * chimera_bubble(4, 16, 2.0)


def test_deeper_backwards_first_under_the_device_bound():
    """Under the device bound, running the deepest ready backward first (the one with the most
    backward stages still ahead of it) leaves p = 4, k = 3, m = 18 with a backward three times a
    forward 0.018 against Chimera's 0.053; the other rules left 0.057 (the grid's last 4 cases)."""
    plan = prt_bi(3).plan(4, 18, backward_cost=3.0)
    check_invariants(plan)
    assert bubble(plan, 3, 3.0) < 0.5 * chimera_bubble(4, 18, 3.0)


@pytest.mark.parametrize("backward", [2.0, 3.0])
@pytest.mark.parametrize("p", [4, 8])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_deeper_bidirectional_bubble_no_larger_than_chimeras_with_a_slower_backward(p, k, backward):
    """Even m from p to 32, a backward two or three times a forward: before the device-bound
    candidates 19 of these 168 cases were above Chimera's bubble, 4 before the deeper-backwards-first
    one (over p in {4, 6, 8, 12}, a backward 1 to 4 forwards: 34 of 795, now none)."""
    for m in range(p, 33, 2):
        ours = bubble(prt_bi(k).plan(p, m, backward_cost=backward), k, backward)
        assert ours <= chimera_bubble(p, m, backward) + 1e-9, m


@pytest.mark.parametrize("k, inflight", [(2, 1), (2, 3), (3, 8), (4, 2)])
def test_activations_of_each_direction_stay_within_max_inflight_micro_batches(k, inflight):
    """A device never holds more of a direction's activations than ``max_inflight`` micro-batches
    leave on its ``k`` stages of that direction: ``2 x k x max_inflight`` in all. Low limits
    throttle the pipeline but never stall it."""
    p, m = 4, 24
    plan = prt_bi(k, max_inflight=inflight).plan(p, m, backward_cost=2.0)
    check_invariants(plan)
    timing = plan_timing(plan, unit(2.0))
    for device, ops in enumerate(plan.ops):
        held = {0: 0, 1: 0}
        for op in sorted(ops, key=lambda o: timing.start[o]):
            held[plan.micro_batch_pipeline[op.micro_batch]] += 1 if op.kind == FORWARD else -1
            assert max(held.values()) <= k * inflight, (device, op)


def test_pipeline_limits_keep_micro_batches_in_flight_bounded():
    """Chimera's rule with ``pipeline_limits`` holds back a micro-batch's entry while that many of
    its direction are between their first forward and their last backward."""
    p, m, inflight = 4, 24, 3
    down = round_robin(p, 2 * p)
    plan = list_schedule("x", p, (down, mirror(down, p)), split_directions(m), forward_first,
                         pipeline_limits=(inflight, inflight))
    timing = plan_timing(plan, unit(2.0))
    spans = {j: (timing.start[(FORWARD, j, 0)], timing.end[(BACKWARD, j, 0)]) for j in range(m)}
    for q in (0, 1):
        mine = [spans[j] for j in range(m) if plan.micro_batch_pipeline[j] == q]
        for t, _ in mine:
            assert sum(start <= t < end for start, end in mine) <= inflight


@pytest.mark.parametrize("k", [2, 3, 4])
def test_bidirectional_gain_over_chimera_falls_as_micro_batches_grow(k):
    """p = 8, a backward twice a forward, no communication: the deeper pipeline's gain over Chimera
    with up to 16 micro-batches exceeds every gain from 24 on, and it never loses more than 1 %.
    (Chimera's greedy rule alone on the deeper pipeline gave -0.7 % at m = 12 against +30.6 % at
    m = 8, k = 3.)"""
    p, b = 8, 2.0

    def gain(m: int) -> float:
        prt = plan_timing(prt_bi(k).plan(p, m, backward_cost=b), unit(b, 1 / k)).makespan
        chimera = plan_timing(Chimera(Chimera.Params(kind="chimera")).plan(p, m, backward_cost=b), unit(b)).makespan
        return chimera / prt - 1.0

    gains = {m: gain(m) for m in range(8, 41, 2)}
    assert min(gains.values()) > -0.01
    assert min(g for m, g in gains.items() if m <= 16) > max(g for m, g in gains.items() if m >= 24)


def test_megatron_order_within_each_direction_beats_the_greedy_rule_where_it_stalls_forwards():
    """p = 8, k = 3, m = 10: Chimera's rule alone leaves a bubble of 0.274; a candidate with
    Megatron's order within each direction gets 0.135."""
    assert bubble(prt_bi(3).plan(8, 10, backward_cost=2.0), 3, 2.0) == pytest.approx(0.135, abs=1e-3)


def uniform_profile(stages: int, forward: float, backward: float, transfer: float) -> StageProfile:
    return StageProfile((forward,) * stages, (backward,) * stages, (transfer,) * stages)


@pytest.mark.parametrize("k, m", [(1, 8), (2, 8), (3, 16), (2, 32)])
def test_profiled_order_is_valid_and_never_estimated_slower(k, m):
    p = 8
    profile = uniform_profile(k * p, 1.0 / k, 2.0 / k, 0.4 / k)
    schedule = prt_bi(k)
    plan = schedule.plan_for(p, m, 2.0, profile)
    check_invariants(plan)
    unit_plan = schedule.plan(p, m, backward_cost=2.0)
    estimate = lambda candidate: plan_timing(candidate, profile.duration, profile.delay).makespan  # noqa: E731
    assert estimate(plan) <= estimate(unit_plan) + 1e-12
    assert prt_bi(k, dry_run="unit").plan_for(p, m, 2.0, profile).ops == unit_plan.ops


def test_a_dry_run_that_knows_the_transfers_fills_their_wait():
    """With transfers as long as a forward the profiled dry run finds a faster order than the
    unit-cost one (Chimera, 8 devices, 16 micro-batches)."""
    p, m = 8, 16
    profile = uniform_profile(p, 1.0, 2.0, 1.0)
    schedule = Chimera(Chimera.Params(kind="chimera"))
    estimate = lambda candidate: plan_timing(candidate, profile.duration, profile.delay).makespan  # noqa: E731
    assert estimate(schedule.plan(p, m, 2.0, profile)) < estimate(schedule.plan(p, m, backward_cost=2.0))


def test_stage_profile_rejects_bad_input_and_times_ops():
    profile = StageProfile((1.0, 2.0), (2.0, 4.0), (0.5, 0.0))
    assert profile.duration(Op(BACKWARD, 0, 1)) == 4.0
    assert profile.delay(Op(FORWARD, 0, 0), Op(FORWARD, 0, 1)) == 0.5
    assert profile.delay(Op(BACKWARD, 0, 1), Op(BACKWARD, 0, 0)) == 0.5
    assert profile.backward_ratio == 2.0
    for bad in [((1.0,), (1.0, 1.0), (0.0, 0.0)), ((1.0, -1.0), (1.0, 1.0), (0.0, 0.0)),
                ((0.0, 0.0), (1.0, 1.0), (0.0, 0.0))]:
        with pytest.raises(ValueError):
            StageProfile(*bad)
    split = ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1")).plan(2, 2)
    with pytest.raises(ValueError, match="needs weight-gradient times"):
        profile.op_seconds(split)
    assert profile.op_seconds(OneFOneB(OneFOneB.Params(kind="1f1b")).plan(2, 2)) == profile.duration
    both = dataclasses.replace(profile, input_grad=(1.5, 3.0), weight_grad=(0.5, 1.0))
    seconds = both.op_seconds(split)
    assert [seconds(Op(kind, 0, 1)) for kind in (FORWARD, BACKWARD, WEIGHT)] == [2.0, 3.0, 1.0]
    with pytest.raises(ValueError, match="one entry per stage"):
        dataclasses.replace(profile, input_grad=(1.0,), weight_grad=(1.0,))


def test_a_routed_profile_times_each_boundary_over_its_own_pair_of_devices():
    """Devices 0-1 and 2-3 share a node (1 us, 100 B/s); any other pair crosses the network
    (10 us, 10 B/s): a boundary's delay is its pair's latency plus its bytes over their bandwidth."""
    def route(source: int, target: int) -> tuple[float, float]:
        return (1.0, 100.0) if source // 2 == target // 2 else (10.0, 10.0)

    profile = StageProfile((1.0,) * 3, (2.0,) * 3, (0.5,) * 3, boundary_bytes=(200.0, 50.0, 0.0), route=route)
    assert profile.delay(Op(FORWARD, 0, 0), Op(FORWARD, 0, 1), 0, 1) == 1.0 + 2.0
    assert profile.delay(Op(FORWARD, 0, 0), Op(FORWARD, 0, 1), 1, 2) == 10.0 + 20.0
    assert profile.delay(Op(BACKWARD, 0, 2), Op(BACKWARD, 0, 1), 3, 0) == 10.0 + 5.0
    assert profile.delay(Op(FORWARD, 0, 1), Op(FORWARD, 0, 2)) == 0.5  # devices not given
    # GPipe over 3 devices, one micro-batch: every op waits for its boundary's transfer
    plan = GPipe(GPipe.Params(kind="gpipe")).plan(3, 1)
    crossings = 2 * (profile.delay(Op(FORWARD, 0, 0), Op(FORWARD, 0, 1), 0, 1)
                     + profile.delay(Op(FORWARD, 0, 1), Op(FORWARD, 0, 2), 1, 2))
    assert plan_timing(plan, profile.duration, profile.delay).makespan == pytest.approx(3 * 3.0 + crossings)
    with pytest.raises(ValueError, match="bytes of every boundary"):
        StageProfile((1.0,), (1.0,), (0.0,), route=route)


def test_every_device_hosts_2k_stages():
    plan = prt_bi(3).plan(4, 8)
    for device in range(4):
        assert len(plan.hosted_stages(device)) == 6
    assert all(a != b for a, b in itertools.pairwise(plan.stage_device[0]))


@pytest.mark.parametrize("mapping", ["round_robin", "v_shape", [0, 1, 2, 3, 3, 2, 1, 0]])
def test_the_second_pipeline_runs_on_the_mirrored_devices(mapping):
    """Opposite directions for any stage map: stage s of the up pipeline on device p-1-d(s), so no
    device holds both copies of a stage (a symmetric map reversed would give the same map back)."""
    plan = prt_bi(2, mapping=mapping).plan(4, 8)
    down, up = plan.stage_device
    assert up == tuple(3 - d for d in down)
    assert all(a != b for a, b in zip(down, up))


def test_bidirectional_prt_refuses_an_odd_number_of_devices():
    with pytest.raises(ValueError, match="even number of devices"):
        prt_bi(2).check(3, 8)


@pytest.mark.parametrize(("p", "m"), [(12, 13), (12, 14), (6, 7), (6, 14)])
def test_a_negligible_transfer_does_not_cost_chimera_its_formula(p, m):
    """Transfers of 1e-9 of a forward (what a scenario with a 1e30 B/s, 0 s link gives) must not
    leave Chimera a bubble well above ``(p-2)/(2m+p-2)``, which it reaches with free transfers:
    the planner also tries the profile's op times without the transfers."""
    profile = uniform_profile(p, 1.0, 1.0, 1e-9)
    plan = Chimera(Chimera.Params(kind="chimera")).plan_for(p, m, 2.0, profile)
    timing = plan_timing(plan, profile.duration, profile.delay)
    assert timing.makespan == pytest.approx(2 * m + p - 2, abs=1e-6)
