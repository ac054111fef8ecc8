"""The SimPy pipeline engine: same times as the closed form, dependencies, memory, OOM."""

from __future__ import annotations

import itertools

import pytest

from simhpc.engine import Simulation
from simhpc.errors import SimulatedOOM
from simhpc.hardware.devices import Device
from simhpc.policies.pipeline import Chimera, GPipe, Interleaved, OneFOneB, PipelinePlan, Prt, plan_timing
from simhpc.policies.pipeline.plan import FORWARD, Op
from simhpc.workloads.pipeline import PipelineExecutor, StageCosts


def execute(plan: PipelinePlan, costs: StageCosts, send=None, capacity: float = 1e15, iterations: int = 1,
            overhead: float = 0.0):
    sim = Simulation(0)
    devices = [Device(sim, f"gpu{d}", capacity) for d in range(plan.devices)]
    executor = PipelineExecutor(sim, plan, costs, devices, send, overhead=overhead)
    sim.process(executor.run(iterations))
    sim.run()
    return sim, executor, devices


def spans_by_op(sim: Simulation) -> dict[Op, tuple[float, float]]:
    result = {}
    for track in sim.trace.tracks:
        if track.thread != "compute":  # the "p2p wait" threads show waits, not ops
            continue
        for span in track.spans:
            op = Op(span.name[0], span.args["micro_batch"], span.args["stage"])
            assert op not in result, f"{op} ran twice"
            result[op] = (span.start, span.end)
    return result


@pytest.mark.parametrize(("schedule", "p", "m"), [
    (GPipe(GPipe.Params(kind="gpipe")), 4, 7),
    (OneFOneB(OneFOneB.Params(kind="1f1b")), 16, 64),
    (OneFOneB(OneFOneB.Params(kind="1f1b")), 8, 1),
    (Interleaved(Interleaved.Params(kind="interleaved", v=4)), 16, 64),
    (Interleaved(Interleaved.Params(kind="interleaved", v=2)), 8, 24),
    (Chimera(Chimera.Params(kind="chimera")), 8, 16),
    (Prt(Prt.Params(kind="prt", k=3, mapping="v_shape")), 4, 9),
    (Prt(Prt.Params(kind="prt", k=2, direction="bi")), 8, 8),
])
def test_simulated_bubble_equals_the_closed_form_and_formula(schedule, p, m):
    backward = 1.0 if isinstance(schedule, Chimera) else 2.0
    plan = schedule.plan(p, m, backward_cost=backward)
    v = plan.stages // p
    costs = StageCosts.uniform(plan.stages, forward=1.0 / v, backward=backward / v)
    sim, executor, _ = execute(plan, costs)
    reference = plan_timing(plan, lambda op: costs.forward_s[0] if op.kind == FORWARD else costs.backward_s[0])
    assert executor.iteration_times[0] == pytest.approx(reference.makespan, abs=1e-9)
    assert executor.bubble_fractions()[0] == pytest.approx(reference.bubble_fraction, abs=1e-9)
    formula = {GPipe: (p - 1) / (m + p - 1), OneFOneB: (p - 1) / (m + p - 1),
               Interleaved: (p - 1) / (v * m + p - 1), Chimera: (p - 2) / (2 * m + p - 2)}.get(type(schedule))
    if formula is not None:
        assert executor.bubble_fractions()[0] == pytest.approx(formula, abs=1e-9)
    ran = spans_by_op(sim)
    assert set(ran) == set(plan.expected_ops())
    for op, (start, _) in ran.items():
        for dep in plan.dependencies(op):
            assert ran[dep][1] <= start + 1e-12
    for track in sim.trace.tracks:  # one op at a time per device (Track.span also refuses overlap)
        for a, b in itertools.pairwise(track.spans):
            assert a.end <= b.start + 1e-12


def test_transfer_delays_match_the_closed_form():
    plan = Prt(Prt.Params(kind="prt", k=2, mapping="v_shape")).plan(4, 8)
    costs = StageCosts.uniform(plan.stages, forward=1.0, backward=2.0, boundary=1.0)
    sent = []

    def send(src, dst, nbytes, label):
        sent.append((src, dst))
        assert src != dst
        return sim_holder[0].timeout(0.25 * nbytes)

    sim_holder: list[Simulation] = []
    sim = Simulation(0)
    sim_holder.append(sim)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(4)]
    executor = PipelineExecutor(sim, plan, costs, devices, send)
    sim.process(executor.run(1))
    sim.run()
    reference = plan_timing(plan, lambda op: 1.0 if op.kind == FORWARD else 2.0, delay=lambda *_: 0.25)
    assert executor.iteration_times[0] == pytest.approx(reference.makespan, abs=1e-9)
    # V-shape: boundaries 3|4 stay on device 3, the other 6 of 7 cross devices, each way, per micro-batch.
    assert len(sent) == executor.transfers == 2 * 6 * 8
    assert len(sim.trace.arrows) == len(sent)


def test_memory_holds_weights_plus_live_activations_and_is_released():
    p, m = 4, 8
    plan = OneFOneB(OneFOneB.Params(kind="1f1b")).plan(p, m)
    costs = StageCosts.uniform(p, stash=10.0, state=100.0)
    _, executor, devices = execute(plan, costs, iterations=2)
    assert [device.memory.peak for device in devices] == [100.0 + 10.0 * (p - d) for d in range(p)]
    assert all(device.memory.used == 100.0 for device in devices)
    assert executor.iterations_done == 2
    gpipe = GPipe(GPipe.Params(kind="gpipe")).plan(p, m)
    _, _, devices = execute(gpipe, costs)
    assert [device.memory.peak for device in devices] == [100.0 + 10.0 * m] * p


def test_chimera_allocates_two_stage_copies_and_syncs_their_gradients():
    plan = Chimera(Chimera.Params(kind="chimera")).plan(4, 8)
    costs = StageCosts(forward_s=(1.0,) * 4, backward_s=(2.0,) * 4, state_bytes=(1.0, 2.0, 3.0, 4.0),
                       grad_bytes=(5.0,) * 4, stash_bytes=(0.0,) * 4, boundary_bytes=(0.0,) * 4)
    sim = Simulation(0)
    syncs = []

    def send(src, dst, nbytes, label):
        if label.startswith("grad sync"):
            syncs.append((src, dst, nbytes))
        return sim.timeout(0.0)

    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(4)]
    executor = PipelineExecutor(sim, plan, costs, devices, send)
    sim.process(executor.run(1))
    sim.run()
    assert [device.memory.used for device in devices] == [1.0 + 4.0, 2.0 + 3.0, 3.0 + 2.0, 4.0 + 1.0]
    assert sorted(syncs) == sorted((plan.stage_device[q][s], plan.stage_device[1 - q][s], 5.0)
                                   for q in (0, 1) for s in range(4))


def test_out_of_memory_names_the_device_and_the_op():
    plan = GPipe(GPipe.Params(kind="gpipe")).plan(2, 4)
    costs = StageCosts.uniform(2, stash=30.0, state=10.0)
    with pytest.raises(SimulatedOOM) as raised:
        execute(plan, costs, capacity=100.0)
    assert raised.value.device == "gpu0"
    assert "activations of F3@s0" in raised.value.what
    with pytest.raises(SimulatedOOM, match="weights"):
        execute(plan, StageCosts.uniform(2, state=200.0), capacity=100.0)


def test_overhead_is_added_to_every_op():
    plan = OneFOneB(OneFOneB.Params(kind="1f1b")).plan(2, 2)
    _, executor, _ = execute(plan, StageCosts.uniform(2), overhead=0.5)
    reference = plan_timing(plan, lambda op: 1.5 if op.kind == FORWARD else 2.5)
    assert executor.iteration_times[0] == pytest.approx(reference.makespan)
