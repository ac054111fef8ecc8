"""Checkpoint policies as pure objects: facts and observations in, plans out (no SimPy)."""

import numpy as np
import pytest

from simhpc.policies.checkpoint import fit_to_gaps, replica_peers
from simhpc.policies.checkpoint.partition import gap_plan, hedge_gaps
from simhpc.registry import lookup, names
from simhpc.workloads.moe.plan import ClusterFacts, Observation, iteration_phases

LAYERS = 3


def facts(state: float = 1e9, every: int = 1, nodes: int = 4) -> ClusterFacts:
    return ClusterFacts(
        nodes=nodes, gpus_per_node=8, layers=LAYERS, phases=iteration_phases(LAYERS), state_bytes=state,
        buffer_bytes=256 * 2**20, replicas=2, pcie_rate=12.5e9, copy_rates=(12.5e9, 2.5e9, 1.4e9, 1e9),
        storage_rate=2e9, host_memory=2**41, every=every,
    )


def durations(f: ClusterFacts, expert: float = 0.01, other: float = 0.005) -> dict[int, float]:
    return {p.index: expert if p.part == "expert" else other for p in f.phases}


def observe(policy, iteration: int, f: ClusterFacts, loads: np.ndarray, measured: dict[int, float]) -> None:
    policy.observe(Observation(iteration, 1.0, loads, measured))


def test_registry_has_the_five_policies():
    assert {"none", "torchsnapshot", "checkfreq", "gemini", "capricorn"} <= set(names("checkpoint"))


def test_phases_cover_forward_backward_sync_and_step():
    phases = iteration_phases(2)
    assert len(phases) == 2 * 8 + 2
    assert phases[0].name == "fwd.0.attention" and phases[1].part == "dispatch"
    assert phases[8].name == "bwd.1.combine"
    assert [p.part for p in phases[-2:]] == ["allreduce", "optimizer"]
    assert all(p.index == i for i, p in enumerate(phases))


def test_fit_to_gaps_fills_in_order_and_puts_the_rest_last():
    chunks = fit_to_gaps([(1, 1.0), (3, 2.0), (5, 1.0)], nbytes=3.5, rate=1.0, last=5)
    assert [(c.release, c.nbytes) for c in chunks] == [(1, 1.0), (3, 2.0), (5, 0.5)]
    overflow = fit_to_gaps([(1, 1.0), (3, 1.0)], nbytes=5.0, rate=1.0, last=3)
    assert [(c.release, c.nbytes) for c in overflow] == [(1, 1.0), (3, 4.0)]
    assert sum(c.nbytes for c in overflow) == 5.0
    assert fit_to_gaps([(1, 1.0)], nbytes=0.0, rate=1.0, last=1) == ()


def test_gap_plan_uses_only_compute_phases_before_the_deadline():
    f = facts(state=1e8)
    chunks = gap_plan(f, durations(f), peers=1)
    kinds = {f.phases[c.release].kind for c in chunks}
    assert kinds == {"compute"}
    assert all(c.release < f.optimizer_phase for c in chunks)
    assert sum(c.nbytes for c in chunks) == pytest.approx(1e8)


def test_hedge_gaps_takes_the_slack_from_uncertain_gaps_at_one_quantile():
    gaps = [(0, 1.0), (2, 2.0), (4, 1.0), (6, 2.0)]
    spread = {2: 0.2, 6: 0.4}
    hedged = dict(hedge_gaps(gaps, spread, nbytes=5.0, rate=1.0))
    assert hedged[0] == 1.0 and hedged[4] == 1.0  # certain gaps keep their length
    assert sum(hedged.values()) == pytest.approx(5.0)
    shrink = {phase: 1 - hedged[phase] / 2.0 for phase in spread}
    assert shrink[6] == pytest.approx(2 * shrink[2])  # same z: shrink proportional to the spread
    # No slack: nothing shrinks; slack enough for the certain gaps alone: uncertain gaps empty.
    assert hedge_gaps(gaps, spread, nbytes=7.0, rate=1.0) == gaps
    assert dict(hedge_gaps(gaps, spread, nbytes=1.5, rate=1.0)) == {0: 1.0, 2: 0.0, 4: 1.0, 6: 0.0}
    assert hedge_gaps(gaps, {}, nbytes=1.0, rate=1.0) == gaps


def test_gap_plan_with_spread_leaves_the_slack_in_the_uncertain_gaps():
    f = facts(state=1e8)
    d = durations(f, expert=0.02, other=0.005)
    rate = f.memory_rate(1)
    experts = [p.index for p in f.phases if p.part == "expert"]
    plain = {c.release: c.nbytes for c in gap_plan(f, d, peers=1)}
    hedged = {c.release: c.nbytes for c in gap_plan(f, d, peers=1, spread={i: 0.3 for i in experts})}
    assert sum(hedged.values()) == pytest.approx(1e8)
    assert max(plain) < max(hedged)  # plain: greedy, the slack left after the last chunk
    assert all(hedged.get(i, 0.0) < 0.02 * rate for i in experts)


@pytest.mark.parametrize(("nodes", "replicas", "expected"), [
    (4, 2, ((1,), (0,), (3,), (2,))),
    (4, 4, ((1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2))),
    (3, 2, ((1,), (2,), (0,))),
    (2, 5, ((1,), (0,))),
    (3, 1, ((), (), ())),
])
def test_replica_placement(nodes, replicas, expected):
    assert replica_peers(nodes, replicas) == expected


def test_ring_placement_is_available():
    assert replica_peers(4, 2, "ring") == ((1,), (2,), (3,), (0,))
    with pytest.raises(ValueError):
        replica_peers(4, 2, "star")


def test_none_never_checkpoints():
    policy = lookup("checkpoint", "none")(facts())
    assert not any(policy.plan(i).take for i in range(5))


def test_torchsnapshot_blocks_and_writes_to_storage_every_interval():
    policy = lookup("checkpoint", "torchsnapshot")(facts(every=2))
    plans = [policy.plan(i) for i in range(5)]
    assert [p.take for p in plans] == [False, False, True, False, True]
    assert plans[2].target == "storage" and plans[2].blocking and plans[2].nbytes == 1e9


def test_checkfreq_picks_an_interval_that_bounds_the_overhead():
    f = facts(state=4e9)  # persist: 8 x 4 GB / 2 GB/s = 16 s per checkpoint
    policy = lookup("checkpoint", "checkfreq")(f)
    for i in range(2):
        assert not policy.plan(i).take
        policy.observe(Observation(i, 1.0, np.ones((LAYERS, 32))))
    policy.plan(2)
    snapshot, persist = 4e9 / 12.5e9, 8 * 4e9 / 2e9
    k = policy.interval
    assert max(0.0, snapshot + persist - k) <= 0.035 * k
    assert max(0.0, snapshot + persist - (k - 1)) > 0.035 * (k - 1)
    fixed = lookup("checkpoint", "checkfreq")(f, lookup("checkpoint", "checkfreq").Options(adaptive=False))
    assert fixed.plan(1).take and not fixed.plan(1).blocking


def test_gemini_profiles_once_then_keeps_its_plan():
    f = facts(state=2e8)
    policy = lookup("checkpoint", "gemini")(f)
    loads = np.ones((LAYERS, 32))
    first = policy.plan(0)
    assert first.profile == frozenset(range(len(f.phases)))
    observe(policy, 0, f, loads, durations(f))
    observe(policy, 1, f, loads, durations(f)) if policy.plan(1).profile else None
    plan = policy.plan(2)
    assert not plan.profile
    assert plan.take and plan.target == "memory" and plan.peers == ((1,), (0,), (3,), (2,))
    assert sum(c.nbytes for c in plan.chunks) == pytest.approx(2e8)
    # Loads and gaps change; Gemini's plan does not.
    observe(policy, 2, f, loads * 3, {})
    assert policy.plan(3).chunks == plan.chunks


def test_capricorn_reprofiles_only_layers_whose_predicted_load_changed():
    f = facts(state=2e8)
    policy = lookup("checkpoint", "capricorn")(f)
    loads = np.ones((LAYERS, 32))
    plan = policy.plan(0)
    assert plan.profile == frozenset(range(len(f.phases)))
    observe(policy, 0, f, loads, {i: durations(f)[i] for i in plan.profile})
    assert policy.plan(1).profile == frozenset()
    observe(policy, 1, f, loads, {})
    changed = loads.copy()
    changed[1] *= 1.5
    observe(policy, 2, f, changed, {})
    plan = policy.plan(3)
    assert plan.profile == frozenset(f.layer_phases(1))
    # The new profile of layer 1 (longer expert phases) moves bytes into its gaps.
    longer = {i: (0.05 if f.phases[i].part == "expert" else 0.005) for i in plan.profile}
    before = {c.release: c.nbytes for c in plan.chunks}
    observe(policy, 3, f, changed, longer)
    after = {c.release: c.nbytes for c in policy.plan(4).chunks}
    expert_1 = [p.index for p in f.phases if p.layer == 1 and p.part == "expert"]
    assert sum(after.get(i, 0) for i in expert_1) > sum(before.get(i, 0) for i in expert_1)


def test_capricorn_replans_at_the_predicted_load_before_reprofiling():
    f = facts(state=2e8)
    cls = lookup("checkpoint", "capricorn")
    policy = cls(f, cls.Options(hedge=False))
    loads = np.ones((LAYERS, 32))
    plan = policy.plan(0)
    observe(policy, 0, f, loads, {i: durations(f)[i] for i in plan.profile})
    before = policy.estimate()
    changed = loads.copy()
    changed[1] *= 2.0
    observe(policy, 1, f, changed, {})
    plan = policy.plan(2)
    assert plan.profile == frozenset(f.layer_phases(1))  # re-profiled during this iteration ...
    estimate = policy.estimate()  # ... and planned already at the predicted load
    for phase in f.phases:
        factor = 2.0 if phase.layer == 1 and phase.part == "expert" else 1.0
        assert estimate[phase.index] == pytest.approx(factor * before[phase.index])


def test_capricorn_hedges_by_the_error_of_its_load_prediction():
    f = facts(state=1e8)
    policy = lookup("checkpoint", "capricorn")(f)
    loads = np.ones((LAYERS, 32))
    plan = policy.plan(0)
    observe(policy, 0, f, loads, {i: durations(f, expert=0.02)[i] for i in plan.profile})
    assert policy.spread() == {}
    observe(policy, 1, f, loads, {})
    assert set(policy.spread().values()) == {0.0}  # predicted exactly: no headroom
    moved = loads * np.array([[1.0], [1.2], [1.0]])
    observe(policy, 2, f, moved, {})
    spread = policy.spread()
    expert_1 = [p.index for p in f.phases if p.layer == 1 and p.part == "expert"]
    assert all(spread[i] == pytest.approx(0.2 / np.sqrt(2)) for i in expert_1)
    assert {spread[p.index] for p in f.phases if p.part == "expert" and p.layer != 1} == {0.0}
    assert sum(c.nbytes for c in policy.plan(3).chunks) == pytest.approx(1e8)


def test_capricorn_without_speculation_profiles_every_layer_every_iteration():
    f = facts()
    cls = lookup("checkpoint", "capricorn")
    policy = cls(f, cls.Options(speculative=False))
    loads = np.ones((LAYERS, 32))
    for i in range(3):
        plan = policy.plan(i)
        assert {f.phases[p].layer for p in plan.profile} >= set(range(LAYERS))
        observe(policy, i, f, loads, {p: 0.01 for p in plan.profile})


def test_zero_state_plans_move_nothing():
    f = facts(state=0.0)
    for name in ("torchsnapshot", "gemini", "capricorn"):
        policy = lookup("checkpoint", name)(f)
        assert policy.plan(1).nbytes == 0
