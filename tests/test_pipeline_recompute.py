"""``recompute: auto`` (:mod:`simhpc.workloads.pipeline.recompute`): each device's peak memory from
its op list alone, and the fewest stages recomputing that fit the devices."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simhpc.engine import Simulation
from simhpc.hardware.devices import Device
from simhpc.policies.pipeline import Chimera, GPipe, Interleaved, OneFOneB, Prt, ZeroBubbleH1
from simhpc.workloads.pipeline import PipelineExecutor, StageCosts
from simhpc.workloads.pipeline.recompute import fit_memory, peak_memory
from tests.test_uniform_model import summary

SCHEDULES = [GPipe(GPipe.Params(kind="gpipe")), OneFOneB(OneFOneB.Params(kind="1f1b")),
             ZeroBubbleH1(ZeroBubbleH1.Params(kind="zb-h1")), Chimera(Chimera.Params(kind="chimera")),
             Interleaved(Interleaved.Params(kind="interleaved", v=2)), Prt(Prt.Params(kind="prt", k=2, direction="bi"))]


def flagged_costs(stages: int, flags: tuple[bool, ...], seed: int) -> StageCosts:
    """Uneven stages (stash, inputs, states differ by stage) with the given stages recomputing."""
    stash = [(1 + (seed * 7 + s * 3) % 5) * 100.0 for s in range(stages)]
    inputs = [0.0, *[(1 + (seed + s) % 3) * 10.0 for s in range(1, stages)]]
    return StageCosts(forward_s=(1.0,) * stages, backward_s=tuple(3.0 if again else 2.0 for again in flags),
                      state_bytes=tuple(1000.0 + s for s in range(stages)), grad_bytes=(0.0,) * stages,
                      stash_bytes=tuple(i if again else x for i, x, again in zip(inputs, stash, flags)),
                      boundary_bytes=(*inputs[1:], 0.0), weight_grad_s=(0.5,) * stages,
                      recompute_bytes=tuple(x if again else 0.0 for x, again in zip(stash, flags)))


@settings(max_examples=40, deadline=None)
@given(schedule=st.sampled_from(SCHEDULES), p=st.sampled_from([2, 4, 6]), m=st.integers(2, 10),
       seed=st.integers(0, 20), pattern=st.integers(0, 2**12 - 1))
def test_the_peak_from_the_op_lists_is_the_engines(schedule, p: int, m: int, seed: int, pattern: int) -> None:
    plan = schedule.plan(p, m)
    flags = tuple(bool(pattern >> s & 1) for s in range(plan.stages))
    costs = flagged_costs(plan.stages, flags, seed)
    sim = Simulation(0)
    devices = [Device(sim, f"gpu{d}", 1e15) for d in range(p)]
    executor = PipelineExecutor(sim, plan, costs, devices)
    sim.process(executor.run(2))
    sim.run()
    assert peak_memory(plan, costs) == pytest.approx([device.memory.peak for device in devices], rel=1e-12)


def test_fit_memory_recomputes_where_a_device_is_over_the_most_bytes_per_second_first() -> None:
    """1F1B on 4 devices: device d holds p - d stashes; at 2,500 bytes device 0 (4 x 1,000 + state)
    and device 1 (3,000 + state) are over. Stage 1's stash frees more per second of rerun, so it
    recomputes first; device 0 is still over, so stage 0 follows; devices 2 and 3 keep theirs."""
    plan = OneFOneB(OneFOneB.Params(kind="1f1b")).plan(4, 8)

    def costs_with(flags: tuple[bool, ...]) -> StageCosts:
        stash, forward = (1000.0, 1000.0, 600.0, 500.0), (1.0, 0.5, 1.0, 1.0)
        return StageCosts(forward_s=forward, backward_s=tuple(2 * f + (f if again else 0) for f, again in
                                                               zip(forward, flags)),
                          state_bytes=(100.0,) * 4, grad_bytes=(0.0,) * 4,
                          stash_bytes=tuple(10.0 if again else x for x, again in zip(stash, flags)),
                          boundary_bytes=(10.0, 10.0, 10.0, 0.0),
                          recompute_bytes=tuple(x if again else 0.0 for x, again in zip(stash, flags)))

    assert peak_memory(plan, costs_with((False,) * 4)) == [4100.0, 3100.0, 1300.0, 600.0]
    assert fit_memory(plan, costs_with, 2500.0, (False,) * 4) == (True, True, False, False)
    assert fit_memory(plan, costs_with, 5000.0, (False,) * 4) == (False,) * 4
    assert fit_memory(plan, costs_with, 500.0, (False,) * 4) == (True,) * 4  # all, and still over


@pytest.mark.parametrize("capacity_mib", [8000, 5000, 2500])
def test_auto_recomputes_the_first_stages_of_1f1b_that_do_not_fit(capacity_mib: int) -> None:
    """Identical stages of 2400 MiB of activations: under 1F1B device d holds p - d = 4 - d of them,
    so exactly the devices with (4 - d) x 2400 MiB above the capacity recompute (keeping 10 MiB
    inputs and one rebuilt stage), and each recomputing stage adds a forward to its backwards."""
    run = summary("workload.schedule={kind: 1f1b}", "workload.devices=4", "workload.micro_batches=6",
                  "workload.model.stash=100 MiB", "workload.model.boundary=10 MiB", "workload.recompute=auto",
                  f"workload.memory_capacity={capacity_mib} MiB")
    over = [d for d in range(4) if (4 - d) * 2400 > capacity_mib]
    assert run["recomputed_stages"] == over
    mib = 2**20
    expected = [(2400 + 10 * (4 - d) * (d > 0) if d in over else 2400 * (4 - d)) * mib for d in range(4)]
    assert run["peak_memory_bytes"] == pytest.approx(expected, rel=1e-12)
    assert max(run["peak_memory_bytes"]) <= capacity_mib * mib
    assert run["stage_backward_s"] == pytest.approx([0.072 if d in over else 0.048 for d in range(4)], rel=1e-12)
