"""Pipeline schedules (policies, no SimPy): the bubble formulas of validation/papers/prt.md, exactly.

Convention: bubble fraction = 1 - busy / (devices x makespan), with every stage's forward
taking 1 and backward ``b`` and no communication (the closed-form timing of
:func:`plan_timing`; ``test_pipeline_engine.py`` checks the SimPy engine gives the same times).

Domains of the formulas (outside them the schedules still run, with more bubble):
GPipe/1F1B any ``m``; interleaved ``m >= p`` for ``v > 1`` (Megatron-LM first required a
multiple of ``p``; a remainder joins the last micro-batch group here); Chimera ``m``
micro-batches in total (``m/2`` per direction), ``m`` even and ``>= p``, backward = forward
(the paper's bubble count treats every slot alike).
"""

from __future__ import annotations

import itertools
import random

import pytest

from simhpc.policies.pipeline import (
    Chimera,
    GPipe,
    Interleaved,
    OneFOneB,
    PipelinePlan,
    PlanError,
    PlanTiming,
    Prt,
    plan_timing,
)
from simhpc.policies.pipeline.mapping import custom, round_robin, v_shape
from simhpc.policies.pipeline.partition import balanced_partition, even_partition, smoothest_partition
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op
from simhpc.registry import lookup, names

P_GRID = (2, 4, 8, 16)
M_GRID = range(1, 65)


def unit(backward: float, scale: float = 1.0):
    """Durations: forward ``scale``, backward ``backward x scale``."""
    return lambda op: scale if op.kind == FORWARD else backward * scale


def gpipe_formula(p: int, m: int) -> float:
    return (p - 1) / (m + p - 1)


def check_invariants(plan: PipelinePlan, timing: PlanTiming | None = None) -> None:
    """Every op exactly once, on its stage's device, after its dependencies, one at a time
    (under ``timing``; default: unit forwards, backwards twice as long)."""
    plan.validate()
    timing = timing or plan_timing(plan, unit(2.0))
    for op, start in timing.start.items():
        for dep in plan.dependencies(op):
            assert timing.end[dep] <= start + 1e-12, (op, dep)
    for ops in plan.ops:
        for before, after in itertools.pairwise(ops):
            assert timing.end[before] <= timing.start[after] + 1e-12


def test_registry_lists_every_schedule():
    assert {"gpipe", "1f1b", "interleaved", "chimera", "prt"} <= set(names("pipeline"))
    assert lookup("pipeline", "prt") is Prt


@pytest.mark.parametrize("params", [
    {"kind": "gpipe"}, {"kind": "1f1b"}, {"kind": "zb-h1"}, {"kind": "interleaved", "v": 3}, {"kind": "chimera"},
    {"kind": "prt", "k": 2}, {"kind": "prt", "k": 3, "direction": "bi"}, {"kind": "prt", "k": 2, "mapping": "v_shape"},
    {"kind": "prt", "k": 2, "direction": "bi", "groups": 2},
    {"kind": "prt", "k": 2, "mapping": [3, 2, 1, 0, 0, 1, 2, 3]},
], ids=lambda params: "-".join(str(value) for value in params.values()))
def test_a_schedule_knows_its_stage_maps_before_it_plans(params):
    """What the cut is priced with (``stage_maps``) is the plan's own ``stage_device``."""
    cls = lookup("pipeline", params["kind"])
    schedule = cls(cls.Params(**params))
    for devices in (4,) if isinstance(params.get("mapping"), list) else (4, 8):
        assert schedule.stage_maps(devices) == schedule.plan(devices, 8).stage_device, devices


def test_gpipe_and_1f1b_bubble_formula_exact_on_the_grid():
    for p, m in itertools.product(P_GRID, M_GRID):
        backward = 1.0 if m % 5 == 0 else 2.0
        for schedule in (GPipe(GPipe.Params(kind="gpipe")), OneFOneB(OneFOneB.Params(kind="1f1b"))):
            timing = plan_timing(schedule.plan(p, m), unit(backward))
            assert timing.bubble_fraction == pytest.approx(gpipe_formula(p, m), abs=1e-9), (p, m)


def test_interleaved_bubble_formula_exact_on_the_grid():
    for p, v in itertools.product(P_GRID, (1, 2, 4)):
        schedule = Interleaved(Interleaved.Params(kind="interleaved", v=v))
        for m in M_GRID:
            if v > 1 and m % p:
                continue
            plan = schedule.plan(p, m, backward_cost=2.0)
            timing = plan_timing(plan, unit(2.0, 1 / v))
            assert timing.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9), (p, v, m)


@pytest.mark.parametrize("p", [3, 5, 6, 7, 12])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_formula_holds_when_m_is_not_a_multiple_of_p(p, v):
    """A remainder of ``m mod p`` micro-batches joins the last group: the formula holds for all
    ``m >= p`` (with groups of ``p`` and a short last group it did only for multiples of ``p``)."""
    schedule = Interleaved(Interleaved.Params(kind="interleaved", v=v))
    for m in (p + 1, 2 * p - 1, 2 * p + 1, 3 * p - 1):
        for forward, backward in ((1.0, 1.0), (1.0, 2.0), (0.7, 1.9)):
            plan = schedule.plan(p, m, backward_cost=backward / forward)
            timing = plan_timing(plan, lambda op, f=forward, b=backward: (f if op.kind == FORWARD else b) / v)
            assert timing.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9), (m, forward, backward)


def test_interleaved_outside_the_formula_domain_runs_with_more_bubble():
    for p, v, m in [(4, 2, 3), (8, 2, 5), (8, 4, 12), (16, 4, 1), (16, 2, 17)]:
        plan = Interleaved(Interleaved.Params(kind="interleaved", v=v)).plan(p, m)
        check_invariants(plan)
        timing = plan_timing(plan, unit(2.0, 1 / v))
        assert timing.bubble_fraction >= (p - 1) / (v * m + p - 1) - 1e-9


def test_chimera_bubble_formula_exact_with_equal_forward_and_backward():
    schedule = Chimera(Chimera.Params(kind="chimera"))
    for p in P_GRID:
        for m in range(p, 65, 2):
            timing = plan_timing(schedule.plan(p, m, backward_cost=1.0), unit(1.0))
            assert timing.bubble_fraction == pytest.approx((p - 2) / (2 * m + p - 2), abs=1e-9), (p, m)


def test_chimera_with_slower_backward_is_between_its_formula_and_1f1b():
    schedule = Chimera(Chimera.Params(kind="chimera"))
    for p, m in [(4, 4), (8, 8), (8, 16), (16, 32)]:
        bubble = plan_timing(schedule.plan(p, m, backward_cost=2.0), unit(2.0)).bubble_fraction
        assert (p - 2) / (2 * m + p - 2) - 1e-9 <= bubble < gpipe_formula(p, m)


def _chimera_optimum(p: int, m: int, backward: float) -> float:
    """The least makespan of any order of Chimera's ops (stage s of the down pipeline on device s,
    of the up one on device p-1-s, m/2 micro-batches each, forward 1, no communication): branch
    and bound over every per-device order (semi-active schedules include an optimal one)."""
    ops = [(up, s, j, b) for up in (0, 1) for s in range(p) for j in range(m // 2) for b in (0, 1)]
    device = {o: p - 1 - o[1] if o[0] else o[1] for o in ops}
    duration = {o: backward if o[3] else 1.0 for o in ops}
    deps = {o: [(o[0], o[1] - 1, o[2], 0)] if not o[3] and o[1] else
            [] if not o[3] else [(o[0], o[1], o[2], 0)] + ([(o[0], o[1] + 1, o[2], 1)] if o[1] < p - 1 else [])
            for o in ops}
    best = [sum(duration.values())]
    seen: set = set()

    def search(done: dict, free: tuple, left: tuple) -> None:
        if len(done) == len(ops):
            best[0] = min(best[0], max(free))
            return
        key = (frozenset(done.items()), free)
        if max(f + r for f, r in zip(free, left)) >= best[0] or key in seen:
            return
        seen.add(key)
        ready = sorted((max([free[device[o]]] + [done[q] for q in deps[o]]), o) for o in ops
                       if o not in done and all(q in done for q in deps[o]))
        for start, o in ready:
            d = device[o]
            done[o] = start + duration[o]
            search(done, (*free[:d], done[o], *free[d + 1:]), (*left[:d], left[d] - duration[o], *left[d + 1:]))
            del done[o]

    search({}, (0.0,) * p, tuple(m * (1 + backward) for _ in range(p)))
    return best[0]


def test_chimera_with_a_backward_twice_a_forward_is_optimal_where_its_formula_is_not_reachable():
    """(p-2)/(2m+p-2) counts every slot alike (backward = forward). With a backward twice a forward
    no order of Chimera's ops reaches it at p = m = 4 (exhaustive search: makespan 16, bubble 0.25,
    against 15 and 0.20), and the planner's order is that optimum."""
    optimum = _chimera_optimum(4, 4, 2.0)
    assert optimum == 16.0
    timing = plan_timing(Chimera(Chimera.Params(kind="chimera")).plan(4, 4, backward_cost=2.0), unit(2.0))
    assert timing.makespan == pytest.approx(optimum) and timing.bubble_fraction == pytest.approx(0.25)
    assert _chimera_optimum(4, 4, 1.0) == 10.0  # backward = forward: the formula's 0.20


def test_chimera_holds_two_copies_of_each_stage():
    plan = Chimera(Chimera.Params(kind="chimera")).plan(4, 8)
    assert plan.pipelines == 2
    assert plan.stage_device == ((0, 1, 2, 3), (3, 2, 1, 0))
    assert plan.hosted_stages(0) == [(0, 0), (1, 3)]
    with pytest.raises(ValueError, match="even"):
        Chimera(Chimera.Params(kind="chimera")).plan(3, 8)


@pytest.mark.parametrize("mapping", ["round_robin", "v_shape", [0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3]])
@pytest.mark.parametrize("direction", ["uni", "bi"])
def test_prt_plans_are_valid(mapping, direction):
    schedule = Prt(Prt.Params(kind="prt", k=3, mapping=mapping, direction=direction))
    for m in (1, 2, 5, 8, 12):
        if direction == "bi" and m < 2:
            continue
        plan = schedule.plan(4, m)
        assert plan.stages == 12 and plan.pipelines == (2 if direction == "bi" else 1)
        check_invariants(plan)


@pytest.mark.parametrize("p", [4, 8])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_v_shaped_prt_bubble_never_above_1f1b(p, k):
    """A backward twice a forward, no communication: the V-shaped map's greedy order stays under
    1F1B's bubble at every m from p to 64 (the backwards-first rule alone left 0.185 against 0.045
    at p = 4, k = 2, m = 64: 1F1B's per-stage limits throttled it), and holds at most ``D - s``
    activations on stage ``s``."""
    schedule = Prt(Prt.Params(kind="prt", k=k, mapping="v_shape"))
    for m in (p, 2 * p, 4 * p, 64):
        plan = schedule.plan(p, m, backward_cost=2.0)
        timing = plan_timing(plan, unit(2.0, 1 / k))
        assert timing.bubble_fraction <= gpipe_formula(p, m) + 1e-9, m
        changes = sorted((timing.start[op], 1, op.stage) if op.kind == FORWARD else (timing.end[op], -1, op.stage)
                         for ops in plan.ops for op in ops)  # a slot freed at t is free for a forward at t
        held = [0] * plan.stages
        for _, change, stage in changes:
            held[stage] += change
            assert held[stage] <= plan.stages - stage, (m, stage)


def test_prt_round_robin_unidirectional_is_megatron_interleaving():
    for p, k, m in [(4, 2, 8), (8, 4, 16), (8, 3, 5)]:
        prt = Prt(Prt.Params(kind="prt", k=k)).plan(p, m)
        interleaved = Interleaved(Interleaved.Params(kind="interleaved", v=k)).plan(p, m)
        assert prt.ops == interleaved.ops


def test_deeper_pipeline_shrinks_the_bubble():
    for direction in ("uni", "bi"):
        bubbles = []
        for k in (1, 2, 4):
            plan = Prt(Prt.Params(kind="prt", k=k, direction=direction)).plan(8, 8)
            timing = plan_timing(plan, unit(2.0, 1 / k))
            bubbles.append(timing.bubble_fraction)
        assert bubbles[0] > bubbles[1] > bubbles[2], (direction, bubbles)


def test_stage_maps():
    assert round_robin(4, 8) == (0, 1, 2, 3, 0, 1, 2, 3)
    assert v_shape(4, 12) == (0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3)
    with pytest.raises(ValueError, match="without a stage"):
        custom([0, 0, 1, 1], 3, 4)
    with pytest.raises(ValueError, match="entries"):
        custom([0, 1, 2], 3, 4)
    with pytest.raises(ValueError, match="without a stage"):
        Prt(Prt.Params(kind="prt", k=2, mapping=[0, 0, 1, 1, 2, 2, 0, 1])).plan(4, 4)


@pytest.mark.parametrize(("devices", "k", "groups"), [(4, 2, 2), (8, 3, 2), (16, 2, 4), (6, 3, 3)])
def test_grouped_round_robin_goes_round_each_group_in_turn(devices, k, groups):
    """Each group of devices (a node's GPUs) gets one consecutive part of the stages, gone round
    ``k`` times: every device holds ``k`` stages, and the pipeline crosses between groups
    ``groups - 1`` times, where the plain round-robin map crosses at every turn."""
    size = devices // groups
    mapping = round_robin(devices, k * devices, groups)
    assert all(mapping.count(d) == k for d in range(devices))
    assert all(a != b for a, b in itertools.pairwise(mapping))
    crossings = sum(a // size != b // size for a, b in itertools.pairwise(mapping))
    assert crossings == groups - 1
    plain = round_robin(devices, k * devices)
    assert sum(a // size != b // size for a, b in itertools.pairwise(plain)) == k * groups - 1
    for direction in ("uni", "bi"):
        plan = Prt(Prt.Params(kind="prt", k=k, groups=groups, direction=direction)).plan(devices, 2 * devices)
        assert plan.stage_device[0] == mapping
        check_invariants(plan)


def test_grouped_round_robin_refuses_what_does_not_split():
    assert round_robin(4, 8, 2) == (0, 1, 0, 1, 2, 3, 2, 3)
    with pytest.raises(ValueError, match="do not split into 3 groups"):
        round_robin(8, 16, 3)
    with pytest.raises(ValueError, match="only the round_robin map"):
        Prt(Prt.Params(kind="prt", k=2, mapping="v_shape", groups=2)).plan(4, 4)


def test_validate_rejects_missing_duplicate_misplaced_and_deadlocked_plans():
    good = OneFOneB(OneFOneB.Params(kind="1f1b")).plan(2, 2)
    ops = [list(device_ops) for device_ops in good.ops]
    broken = [
        [ops[0][:-1], ops[1]],
        [ops[0] + [ops[0][0]], ops[1]],
        [ops[0] + [ops[1][0]], ops[1][1:]],
        [list(reversed(ops[0])), ops[1]],
    ]
    for lists, message in zip(broken, ["missing", "twice", "device", "deadlock"]):
        plan = PipelinePlan("x", 2, 2, 2, good.stage_device, good.micro_batch_pipeline,
                            tuple(tuple(o) for o in lists))
        with pytest.raises(PlanError, match=message):
            plan.validate()


def test_op_dependencies():
    plan = GPipe(GPipe.Params(kind="gpipe")).plan(3, 2)
    assert plan.dependencies(Op(FORWARD, 1, 0)) == []
    assert plan.dependencies(Op(FORWARD, 1, 2)) == [Op(FORWARD, 1, 1)]
    assert plan.dependencies(Op(BACKWARD, 0, 2)) == [Op(FORWARD, 0, 2)]
    assert plan.dependencies(Op(BACKWARD, 0, 1)) == [Op(FORWARD, 0, 1), Op(BACKWARD, 0, 2)]


def test_balanced_partition_is_optimal_and_even_partition_counts():
    costs = [5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 2.0]
    bounds = balanced_partition(costs, 3)
    worst = max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds))
    best = min(max(sum(costs[a:b]) for a, b in itertools.pairwise((0, *cut, len(costs))))
               for cut in itertools.combinations(range(1, len(costs)), 2))
    assert worst == best
    assert balanced_partition([1.0] * 6, 6) == (0, 1, 2, 3, 4, 5, 6)
    assert even_partition(10, 4) == (0, 3, 6, 8, 10)
    with pytest.raises(ValueError, match="cannot cut"):
        balanced_partition([1.0, 2.0], 3)


def _stage_sums(costs: list[float], bounds: tuple[int, ...], cuts: list[float] | None = None) -> list[float]:
    return [sum(costs[a:b]) + (cuts[b - 1] if cuts and b < len(costs) else 0.0) for a, b in itertools.pairwise(bounds)]


def test_smoothest_partition_keeps_the_slowest_stage_and_evens_the_rest():
    """Exhaustively on small random cases (with and without cut costs): no stage above
    balanced_partition's slowest, and the least sum of squares of all such cuts. The min-max cut
    alone can leave a stage nearly empty."""
    generator = random.Random(7)
    for _ in range(60):
        n, stages = generator.randint(3, 9), generator.randint(2, 5)
        if stages > n:
            continue
        costs = [generator.choice((0.5, 1.0, 1.5, 3.0)) * generator.random() for _ in range(n)]
        cuts = [0.2 * generator.random() for _ in range(n)] if generator.random() < 0.5 else None
        worst = max(_stage_sums(costs, balanced_partition(costs, stages, cuts), cuts))
        ours = _stage_sums(costs, smoothest_partition(costs, stages, cuts), cuts)
        assert len(ours) == stages and max(ours) <= worst * (1 + 1e-9)
        feasible = [sum(x * x for x in sums) for cut in itertools.combinations(range(1, n), stages - 1)
                    if max(sums := _stage_sums(costs, (0, *cut, n), cuts)) <= worst * (1 + 1e-9)]
        assert sum(x * x for x in ours) == pytest.approx(min(feasible), rel=1e-9)
    costs = [4.0] + [1.0] * 8  # the min-max cut is set by the first layer alone
    assert min(_stage_sums(costs, balanced_partition(costs, 5))) == 1.0
    assert _stage_sums(costs, smoothest_partition(costs, 5)) == [4.0, 2.0, 2.0, 2.0, 2.0]


def _boundary_costs(costs: list[float], bounds: tuple[int, ...], rows: list[list[float]],
                    overlap: bool) -> list[float]:
    stage = [(sum(costs[a:b]), rows[i][b - 1] if b < len(costs) else 0.0)
             for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    return [max(layers, cut) if overlap else layers + cut for layers, cut in stage]


@pytest.mark.parametrize("overlap", [False, True])
def test_partitions_with_a_cut_cost_per_boundary_are_optimal(overlap: bool):
    """Cut costs that differ per boundary (a pipeline crossing nodes at some boundaries only),
    added to a stage or (``overlap``, PipeDream's objective) the larger of the two: exhaustively on
    small random cases, balanced_partition's slowest stage is the least any cut has, and
    smoothest_partition keeps it with the least sum of squares. One row repeated for every
    boundary gives the single-row cut."""
    generator = random.Random(11)
    for _ in range(60):
        n, stages = generator.randint(3, 9), generator.randint(2, 5)
        if stages > n:
            continue
        costs = [generator.random() for _ in range(n)]
        rows = [[generator.choice((0.0, 0.05, 2.0)) * generator.random() for _ in range(n)] for _ in range(stages - 1)]
        cuts = [(0, *cut, n) for cut in itertools.combinations(range(1, n), stages - 1)]
        best = min(max(_boundary_costs(costs, bounds, rows, overlap)) for bounds in cuts)
        balanced = balanced_partition(costs, stages, rows, overlap)
        assert max(_boundary_costs(costs, balanced, rows, overlap)) == pytest.approx(best, rel=1e-12)
        ours = _boundary_costs(costs, smoothest_partition(costs, stages, rows, overlap), rows, overlap)
        assert max(ours) <= best * (1 + 1e-9)
        squares = min(sum(x * x for x in sums) for bounds in cuts
                      if max(sums := _boundary_costs(costs, bounds, rows, overlap)) <= best * (1 + 1e-9))
        assert sum(x * x for x in ours) == pytest.approx(squares, rel=1e-9)
        row = rows[0]
        assert (smoothest_partition(costs, stages, [row] * (stages - 1), overlap)
                == smoothest_partition(costs, stages, row, overlap))
    # six layers of 1 into 3 stages: (0, 2, 4, 6) with free cuts; boundary 1 dear but after layer 3
    dear = [[0.0] * 6, [5.0, 5.0, 0.0, 5.0, 5.0, 5.0]]
    assert balanced_partition([1.0] * 6, 3) == (0, 2, 4, 6)
    assert balanced_partition([1.0] * 6, 3, dear)[2] == 3
    with pytest.raises(ValueError, match="3 rows for 2 boundaries"):
        balanced_partition([1.0] * 6, 3, [[0.0] * 6] * 3)
