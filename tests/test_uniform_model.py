"""``workload.model: {kind: uniform}``: identical layers with given times, so a scenario file run
with ``simhpc run`` meets the textbook bubble formulas exactly (scenarios/pipeline_uniform.yaml),
on one node or across several."""

from __future__ import annotations

from pathlib import Path

import pytest

from simhpc.errors import ScenarioError
from simhpc.runner import build, simulate
from simhpc.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "pipeline_uniform.yaml"
LAYERS = 96  # divisible by every stage count below (up to 16 devices x 2 chunks)


def summary(*overrides: str) -> dict:
    """The workload summary of the scenario with ``LAYERS`` layers, 16 GPUs to use, and no parameters
    or activations unless ``overrides`` give them (Chimera's replicas would exchange gradients)."""
    scenario = load_scenario(SCENARIO, ["outputs={trace: false, timeline: false}",
                                        "hardware.nodes.free-link-node.gpus=16", f"workload.model.layers={LAYERS}",
                                        "workload.model.params=0", "workload.model.stash=0 B", *overrides])
    result = simulate(scenario, str(SCENARIO)).summary
    assert result["status"] == "ok", result.get("error")
    return result["workload"]


def bubble(schedule: str, p: int, m: int, *overrides: str) -> float:
    return summary(f"workload.schedule={schedule}", f"workload.devices={p}", f"workload.micro_batches={m}",
                   *overrides)["bubble_fraction"]


@pytest.mark.parametrize("p", [2, 4, 8, 16])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_gpipe_and_1f1b_meet_their_formula_and_iteration_time(p: int, m: int) -> None:
    for schedule in ("{kind: gpipe}", "{kind: 1f1b}"):
        run = summary(f"workload.schedule={schedule}", f"workload.devices={p}", f"workload.micro_batches={m}")
        assert run["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
        stage_s = LAYERS // p * (1e-3 + 2e-3)  # forward + backward of a stage
        assert run["iteration_time_s"] == pytest.approx((m + p - 1) * stage_s, rel=1e-9)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 5), (8, 8), (8, 16), (16, 16)])
@pytest.mark.parametrize("v", [2, 3])
def test_interleaved_and_round_robin_prt_meet_the_interleaved_formula(p: int, m: int, v: int) -> None:
    expected = (p - 1) / (v * m + p - 1)
    assert bubble(f"{{kind: interleaved, v: {v}}}", p, m) == pytest.approx(expected, abs=1e-9)
    assert bubble(f"{{kind: prt, k: {v}}}", p, m) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)])
def test_chimera_meets_its_formula_with_equal_forward_and_backward(p: int, m: int) -> None:
    assert bubble("{kind: chimera}", p, m, "workload.model.backward=1 ms") == pytest.approx(
        (p - 2) / (2 * m + p - 2), abs=1e-9)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 4), (8, 8), (8, 24), (16, 16)])
def test_zero_bubble_h1_meets_its_formula_with_equal_f_b_w(p: int, m: int) -> None:
    # backward 2 ms with half of it the weight gradient: F = B = W = 1 ms a layer
    assert bubble("{kind: zb-h1}", p, m) == pytest.approx((p - 1) / (3 * m + p - 1), abs=1e-9)


def test_memory_is_the_stage_state_plus_the_micro_batches_in_flight() -> None:
    p, m, per_stage = 8, 12, LAYERS // 8
    run = summary("workload.devices=8", f"workload.micro_batches={m}", "workload.model.params=1000",
                  "workload.model.stash=1 MiB", "workload.optimizer=adam", "workload.dtype=fp16")
    state = per_stage * 1000 * 16  # fp16 weights and gradients, fp32 master weights, Adam's two moments
    stash = per_stage * 2**20
    in_flight = [min(p - device, m) for device in range(p)]  # 1F1B: p on the first stage, 1 on the last
    assert run["peak_memory_bytes"] == pytest.approx([state + n * stash for n in in_flight], rel=1e-12)


FREE_NODE = "hardware.nodes.free-link-node"


def test_a_pipeline_across_free_nodes_meets_the_formula() -> None:
    """16 devices over two 8-GPU nodes whose every link (NVLink, PCIe, NIC) is free."""
    free = [f"{FREE_NODE}.gpus=8", "network.topology.nodes=2", f"{FREE_NODE}.pcie={{bandwidth: 1 PB/s, latency: 0 s}}",
            f"{FREE_NODE}.nic={{bandwidth: 1 PB/s, latency: 0 s}}"]
    run = summary(*free, "workload.devices=16", "workload.micro_batches=8")
    assert run["devices"] == 16
    assert run["bubble_fraction"] == pytest.approx(15 / 23, abs=1e-9)


def test_the_boundary_between_nodes_costs_the_nic_path() -> None:
    """Two DGX-A100s (NVLink 300 GB/s; PCIe and NICs 25 GB/s) against one node of 16 such GPUs: the
    one stage boundary that crosses nodes moves its 64 MiB at 25 GB/s, not 300, and lies on 1F1B's
    critical path twice: the first micro-batch's activation (fill), the last one's gradient (drain)."""
    shared = ["workload.devices=16", "workload.micro_batches=8", "workload.model.boundary=64 MiB"]
    two_nodes = summary(*shared, "network.topology.node=dgx-a100", "network.topology.nodes=2")
    one_node = summary(*shared, f"{FREE_NODE}.gpu_link={{bandwidth: 300 GB/s, latency: 2 us}}")
    extra = 2**26 / 25e9 - 2**26 / 300e9  # one crossing, over PCIe and the NIC instead of NVLink
    assert two_nodes["iteration_time_s"] - one_node["iteration_time_s"] == pytest.approx(2 * extra, rel=0.02)


@pytest.mark.parametrize("p,m", [(2, 1), (4, 3), (8, 8), (16, 5)])
def test_gpipe_leaves_one_transfer_per_device_and_direction_exposed(p: int, m: int) -> None:
    """Identical stages, 64 MiB boundaries, transfers t shorter than an op: under GPipe a device
    waits for the bytes of its first forward input and its first backward input only (the others
    arrive while it computes), so the transfer waits are t on the first and last device, 2t on the
    others, 2(p-1)t in all, and the iteration (m+p-1)(F+B) + 2(p-1)t. Free links expose nothing."""
    link = f"{FREE_NODE}.gpu_link={{bandwidth: 100 GB/s, latency: 10 us}}"
    shared = ["workload.schedule={kind: gpipe}", f"workload.devices={p}", f"workload.micro_batches={m}",
              "workload.model.boundary=64 MiB"]
    scenario = load_scenario(SCENARIO, [f"{FREE_NODE}.gpus=16", link, *shared])
    topology = build(scenario, "test")[1].ctx.network.topology
    path = topology.path("n0.gpu0", "n0.gpu1")
    transfer = topology.path_latency(path) + 2**26 / topology.path_bandwidth(path)
    run = summary(link, *shared)
    assert run["device_transfer_wait_s"] == pytest.approx([transfer, *[2 * transfer] * (p - 2), transfer], rel=1e-9)
    stage = LAYERS // p * 3e-3  # forward + backward of a stage
    assert run["iteration_time_s"] == pytest.approx((m + p - 1) * stage + 2 * (p - 1) * transfer, rel=1e-9)
    assert run["transfer_wait_fraction"] == pytest.approx(2 * (p - 1) * transfer / (p * run["iteration_time_s"]))
    assert run["transfer_wait_fraction"] < run["bubble_fraction"]
    free = summary(*shared[:-1])  # no boundary bytes over the free links
    assert free["transfer_wait_fraction"] == 0.0 and free["device_transfer_wait_s"] == [0.0] * p


def test_one_f_one_b_exposes_more_of_its_transfers_than_gpipe() -> None:
    """1F1B alternates a forward and a backward, each waiting on the other end of the pipeline:
    in its steady state transfers lie on the critical path that GPipe's all-forwards-then-all-
    backwards order keeps hidden (p = m = 8: 0.98 % of the devices' time against 0.22 %), and it
    runs slower though both have the same bubble formula (558.0 against 549.7 ms)."""
    shared = [f"{FREE_NODE}.gpu_link={{bandwidth: 100 GB/s, latency: 10 us}}", "workload.devices=8",
              "workload.micro_batches=8", "workload.model.boundary=64 MiB"]
    gpipe, one_f_one_b = (summary(f"workload.schedule={{kind: {kind}}}", *shared) for kind in ("gpipe", "1f1b"))
    assert one_f_one_b["transfer_wait_fraction"] > 3 * gpipe["transfer_wait_fraction"]
    assert one_f_one_b["iteration_time_s"] > gpipe["iteration_time_s"]
    for run in (gpipe, one_f_one_b):
        for busy, wait in zip(run["device_busy_s"], run["device_transfer_wait_s"]):
            assert busy + wait <= run["iteration_time_s"] * (1 + 1e-12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (4, 6), (8, 8)])
def test_recomputation_reruns_each_forward_and_keeps_only_stage_inputs(schedule: str, p: int, m: int) -> None:
    """``recompute: full``: every backward reruns its stage's forward, so the iteration is
    (m+p-1)(2F+B) and the bubble formula holds; a stage keeps only its input (the boundary bytes;
    nothing on the first stage) per micro-batch in flight, plus the one stage's activations a
    backward rebuilds: GPipe's m micro-batches in flight everywhere, 1F1B's p - d on device d."""
    stash, boundary = 100 * 2**20, 10 * 2**20
    run = summary(f"workload.schedule={{kind: {schedule}}}", f"workload.devices={p}", f"workload.micro_batches={m}",
                  "workload.model.stash=100 MiB", "workload.model.boundary=10 MiB", "workload.recompute=full")
    forward, backward = LAYERS // p * 1e-3, LAYERS // p * 2e-3
    assert run["iteration_time_s"] == pytest.approx((m + p - 1) * (2 * forward + backward), rel=1e-6)
    assert run["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), abs=1e-6)
    in_flight = [m if schedule == "gpipe" else min(p - d, m) for d in range(p)]
    rebuilt = LAYERS // p * stash
    expected = [rebuilt + (boundary * held if d else 0) for d, held in enumerate(in_flight)]
    assert run["peak_memory_bytes"] == pytest.approx(expected, rel=1e-12)
    assert run["recompute"] == "full"
    kept = summary(f"workload.schedule={{kind: {schedule}}}", f"workload.devices={p}", f"workload.micro_batches={m}",
                   "workload.model.stash=100 MiB", "workload.model.boundary=10 MiB")
    assert kept["peak_memory_bytes"] == pytest.approx([rebuilt * held for held in in_flight], rel=1e-12)


@pytest.mark.parametrize("overrides,message", [
    (["workload.seq_len=128"], "workload.seq_len: the uniform model takes no input"),
    (["workload.model.weight_grad=3 ms"], "workload.model.weight_grad: the weight-gradient part of backward"),
    (["workload.model.forward=0 s"], "workload.model.forward: a layer's forward must take some time"),
    (["workload.model.kind=uniformm"], "workload.model.kind: Input should be 'uniform'"),
    (["workload.model.layers=4"], "workload.schedule: 8 stages for the uniform model, which has only 4 layers"),
    (["workload.model=uniform"], "workload.model: the uniform model takes its layers' figures"),
    (["workload.devices=9"], "workload.devices: 9 devices requested, the cluster has 8 GPUs"),
])
def test_a_bad_uniform_model_is_refused_naming_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")):
        scenario = load_scenario(SCENARIO, overrides)
        simulate(scenario, str(SCENARIO))
