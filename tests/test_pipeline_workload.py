"""``pipeline_training`` end to end: scenarios, PRT's gains and their trends, memory, OOM.

Runs use the analytic (alpha-beta) network for speed; validation/reproduce/prt.py runs the
flow-level model and prints the full comparison with the paper.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simhpc.errors import ScenarioError
from simhpc.hardware import builtin_catalog
from simhpc.policies.pipeline import plan_timing
from simhpc.policies.pipeline.plan import FORWARD, Op
from simhpc.runner import build, simulate
from simhpc.scenario.loader import load_scenario, read_yaml, scenario_from_dict, with_overrides
from simhpc.workloads.pipeline.workload import PipelineTrainingWorkload, boundary_cut_costs

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
PAPER_GAIN = {"bert": {"uni": 0.5478, "bi": 0.3038}, "resnet": {"uni": 0.7659, "bi": 0.2645}}


@cache
def run(model_file: str, schedule: str, overrides: tuple[str, ...] = (), latency: str | None = None) -> dict:
    data: dict[str, Any] = read_yaml(SCENARIOS / model_file)
    data["network"]["mode"] = "analytic"
    data["outputs"] = {"trace": False, "timeline": False}
    if latency is not None:
        node = data["network"]["topology"]["node"]
        raw = copy.deepcopy(builtin_catalog().raw["nodes"][node])
        raw["gpu_link"]["latency"] = latency
        data["hardware"] = {"nodes": {node: raw}}
    data = with_overrides(data, ["workload.iterations=1", f"workload.schedule={schedule}", *overrides], "test")
    return simulate(scenario_from_dict(data, "test"), "test").summary


def gain(model_file: str, direction: str, k: int = 3, overrides: tuple[str, ...] = (),
         latency: str | None = None) -> float:
    baseline = "{kind: 1f1b}" if direction == "uni" else "{kind: chimera}"
    prt = f"{{kind: prt, k: {k}, direction: {direction}}}"
    ours = run(model_file, prt, overrides, latency)["workload"]["throughput_samples_per_second"]
    theirs = run(model_file, baseline, overrides, latency)["workload"]["throughput_samples_per_second"]
    return ours / theirs - 1.0


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("pipeline_*.yaml")), ids=lambda p: p.stem)
def test_pipeline_scenarios_run(path):
    scenario = load_scenario(path, ["network.mode=analytic", "workload.iterations=1"])
    summary = simulate(scenario, str(path)).summary
    workload = summary["workload"]
    assert summary["status"] == "ok"
    assert workload["throughput_samples_per_second"] > 0
    assert 0 < workload["bubble_fraction"] < 1
    assert workload["memory_imbalance"] >= 1


def test_prt_gains_on_bert_large_are_in_the_papers_range_unidirectional_above_bidirectional():
    uni, bi = gain("pipeline_bert_large.yaml", "uni"), gain("pipeline_bert_large.yaml", "bi")
    assert uni > bi > 0
    assert 0.5 * PAPER_GAIN["bert"]["uni"] < uni < 1.25 * PAPER_GAIN["bert"]["uni"]
    assert 0.5 * PAPER_GAIN["bert"]["bi"] < bi < 1.25 * PAPER_GAIN["bert"]["bi"]


def test_prt_gains_on_resnet_are_positive_unidirectional_above_bidirectional():
    uni, bi = gain("pipeline_resnet152.yaml", "uni"), gain("pipeline_resnet152.yaml", "bi")
    assert uni > bi > 0


@pytest.mark.xfail(strict=True, reason="at m = p = 8 the bubbles alone allow (m+p-1)/(m+(p-1)/k): +76.6% "
                   "needs k >= 15 with balanced stages, which ResNet-152's layers (the largest about 1 % of "
                   "the model) cannot give; with free links the best is +58% (k = 8), and the k-fold p2p "
                   "transfers of its large activations take more (validation/reproduce/README.md)")
def test_prt_unidirectional_gain_on_resnet_reaches_the_paper():
    best = max(gain("pipeline_resnet152.yaml", "uni", k) for k in (2, 3, 4))
    assert best > 0.75 * PAPER_GAIN["resnet"]["uni"]


@pytest.mark.parametrize("direction", ["uni", "bi"])
def test_gain_falls_as_micro_batches_grow(direction):
    """m = 12 included: bidirectional PRT ordered by Chimera's greedy rule alone gained +0.5 % there
    against +8.4 % at m = 16 (now +13.9 and +11.1 %)."""
    gains = [gain("pipeline_bert_large.yaml", direction, overrides=(f"workload.micro_batches={m}",))
             for m in (8, 12, 16, 32)]
    assert gains == sorted(gains, reverse=True) and gains[0] > gains[-1]


@pytest.mark.parametrize("direction", ["uni", "bi"])
def test_gain_falls_as_per_stage_overhead_grows(direction):
    gains = [gain("pipeline_bert_large.yaml", direction, overrides=(f"workload.stage_overhead={o}",))
             for o in ("0 us", "200 us", "1 ms")]
    assert gains[0] > gains[1] > gains[2]


def test_gain_falls_as_link_latency_grows():
    gains = [gain("pipeline_bert_large.yaml", "uni", latency=latency) for latency in ("2 us", "100 us", "500 us")]
    assert gains[0] > gains[1] > gains[2]


@pytest.mark.parametrize("model_file", ["pipeline_bert_large.yaml", "pipeline_resnet152.yaml"])
def test_prt_balances_memory_better_than_1f1b(model_file):
    baseline = run(model_file, "{kind: 1f1b}")["workload"]
    for schedule in ("{kind: prt, k: 3}", "{kind: prt, k: 3, direction: bi}", "{kind: prt, k: 2, mapping: v_shape}"):
        prt = run(model_file, schedule)["workload"]
        assert prt["memory_imbalance"] < baseline["memory_imbalance"], schedule


def test_out_of_memory_is_reported_with_device_and_op():
    summary = run("pipeline_bert_large.yaml", "{kind: gpipe}", ("workload.memory_capacity=3 GiB",))
    assert summary["status"] == "oom"
    error = summary["error"]
    assert error["device"].startswith("n0.gpu")
    assert error["what"].startswith("activations of F")
    assert error["device"] in error["message"]
    fits = run("pipeline_bert_large.yaml", "{kind: gpipe}", ("workload.memory_capacity=32 GiB",))
    assert fits["status"] == "ok"


def test_recomputation_trades_a_forward_for_the_activations():
    """GPipe holds all 32 micro-batches' activations of ResNet-152 on two V100 nodes and runs out of
    memory; with ``recompute: full`` it keeps only the stage inputs and runs. On one node 1F1B
    then runs at about (F + B) / (2F + B) of its speed (0.75 with a backward twice a forward) in
    a fraction of the memory; a device too small for the rebuilt activations names the backward."""
    assert run("pipeline_two_nodes.yaml", "{kind: gpipe}")["status"] == "oom"
    rebuilt = run("pipeline_two_nodes.yaml", "{kind: gpipe}", ("workload.recompute=full",))
    assert rebuilt["status"] == "ok"
    kept = run("pipeline_resnet152.yaml", "{kind: 1f1b}")["workload"]
    recomputed = run("pipeline_resnet152.yaml", "{kind: 1f1b}", ("workload.recompute=full",))["workload"]
    forward, backward = sum(kept["stage_forward_s"]), sum(kept["stage_backward_s"])
    speed = recomputed["throughput_samples_per_second"] / kept["throughput_samples_per_second"]
    assert speed == pytest.approx((forward + backward) / (2 * forward + backward), rel=0.03)
    assert sum(recomputed["stage_backward_s"]) == pytest.approx(forward + backward, rel=1e-9)
    assert recomputed["max_peak_memory_bytes"] < kept["max_peak_memory_bytes"] / 4
    tight = run("pipeline_resnet152.yaml", "{kind: 1f1b}", ("workload.recompute=full",
                                                            "workload.memory_capacity=2 GiB"))
    assert tight["status"] == "oom" and tight["error"]["what"].startswith("activations recomputed by B")


def test_auto_recomputation_fits_the_devices_with_the_fewest_stages():
    """ResNet-152 under 1F1B needs 20 GiB on its first GPU: on 12 GiB GPUs it runs out of memory,
    with every stage recomputing it runs at 412 samples/s, and with ``recompute: auto`` only the
    first stage recomputes, so it fits at 539 (analytic network)."""
    tight = ("workload.memory_capacity=12 GiB",)
    assert run("pipeline_resnet152.yaml", "{kind: 1f1b}", tight)["status"] == "oom"
    full = run("pipeline_resnet152.yaml", "{kind: 1f1b}", (*tight, "workload.recompute=full"))["workload"]
    auto = run("pipeline_resnet152.yaml", "{kind: 1f1b}", (*tight, "workload.recompute=auto"))["workload"]
    assert auto["recomputed_stages"] == [0] and full["recomputed_stages"] == list(range(8))
    assert auto["max_peak_memory_bytes"] <= 12 * 2**30
    assert auto["throughput_samples_per_second"] > 1.2 * full["throughput_samples_per_second"]
    roomy = run("pipeline_resnet152.yaml", "{kind: 1f1b}", ("workload.recompute=auto",))["workload"]
    assert roomy["recomputed_stages"] == []


def test_summary_reports_throughput_bubble_and_memory():
    workload = run("pipeline_bert_large.yaml", "{kind: prt, k: 2, direction: bi}")["workload"]
    assert workload["stages"] == 16 and workload["pipelines"] == 2
    assert len(workload["peak_memory_bytes"]) == 8
    assert workload["memory_imbalance"] == pytest.approx(
        workload["max_peak_memory_bytes"] / workload["min_peak_memory_bytes"])
    samples = workload["samples_per_iteration"]
    assert workload["throughput_samples_per_second"] == pytest.approx(samples / workload["iteration_time_s"])
    assert workload["p2p_transfers"] > 0


@pytest.mark.parametrize(("override", "field"), [
    ("workload.schedule={kind: prt, k: 8}", "workload.schedule"),
    ("workload.node=dgx-a100", "workload.node"),
    ("workload.devices=9", "workload.devices"),
    ("workload.schedule={kind: prt, k: 2, mapping: [0, 1]}", "workload.schedule"),
])
def test_bad_configurations_name_the_field(override, field):
    with pytest.raises(ScenarioError) as raised:
        load_scenario(SCENARIOS / "pipeline_bert_large.yaml", [override])
    assert raised.value.path == field


def test_parameter_partition_balances_parameters_not_time():
    """DeepSpeed's default cut (equal parameters) loads a CNN's first GPU with its wide, parameter-light
    early layers: the slowest stage is slower and throughput lower than with the time-balanced cut."""
    half = ("workload.dtype=fp16",)  # in fp32 the parameter cut's first GPU runs out of memory
    by_time = run("pipeline_resnet152.yaml", "{kind: 1f1b}", half)["workload"]
    by_params = run("pipeline_resnet152.yaml", "{kind: 1f1b}", (*half, "workload.partition=parameters"))["workload"]
    assert by_params["stage_layers"][0].split("..")[1].startswith("layer3")
    assert max(by_params["stage_forward_s"]) > 2 * max(by_time["stage_forward_s"])
    assert by_params["throughput_samples_per_second"] < by_time["throughput_samples_per_second"]


def test_a_time_cut_is_the_faster_of_the_min_max_and_the_most_even_one(monkeypatch):
    """BERT-large's 50 sub-layers into 32 stages: the min-max cut leaves a stage nearly empty and
    the devices' four stages summing unevenly; the workload runs the more even cut, which its
    schedule's estimate finds faster, and PRT gains more with it."""
    import simhpc.workloads.pipeline.workload as pipeline_workload
    from simhpc.policies.pipeline.partition import balanced_partition

    schedule = "{kind: prt, k: 4}"
    chosen = run("pipeline_bert_large.yaml", schedule)["workload"]
    monkeypatch.setattr(pipeline_workload, "smoothest_partition", balanced_partition)
    min_max = run.__wrapped__("pipeline_bert_large.yaml", schedule)["workload"]
    smallest = [min(w["stage_forward_s"]) / (sum(w["stage_forward_s"]) / 32) for w in (chosen, min_max)]
    assert smallest[1] < 0.1 < 0.5 < smallest[0]
    assert chosen["throughput_samples_per_second"] > 1.05 * min_max["throughput_samples_per_second"]


def test_a_grouped_order_that_deadlocks_on_a_custom_map_says_so():
    blocks = "[" + ", ".join(str(s // 2) for s in range(16)) + "]"
    with pytest.raises(ScenarioError, match=r"order: grouped deadlocks on this stage map.*order: greedy"):
        run("pipeline_bert_base.yaml", f"{{kind: prt, k: 2, order: grouped, mapping: {blocks}}}")


def test_a_sequence_longer_than_berts_positions_names_seq_len():
    with pytest.raises(ScenarioError, match=r"workload\.seq_len: .*512"):
        run("pipeline_bert_base.yaml", "{kind: 1f1b}", ("workload.seq_len=1000",))


@pytest.mark.parametrize(("model_file", "field", "other"), [("pipeline_resnet50.yaml", "seq_len", "image_size"),
                                                           ("pipeline_bert_base.yaml", "image_size", "seq_len")])
def test_an_input_size_the_model_does_not_take_is_refused(model_file: str, field: str, other: str):
    """A ResNet ignores seq_len and BERT image_size: setting one is a mistake, not a no-op."""
    with pytest.raises(ScenarioError, match=rf"workload\.{field}: .*remove {field} \({other} sets the input\)"):
        run(model_file, "{kind: 1f1b}", (f"workload.{field}=64",))


def test_across_two_nodes_the_planner_times_each_boundary_over_its_own_link(monkeypatch):
    """16 GPUs on two NVLink nodes: a boundary between the nodes crosses the NICs, 12 times
    slower than NVLink. The plan's dry run must charge it there: its estimate then matches the
    simulated iteration (analytic network: no contention), and bidirectional PRT's order leaves
    room for the crossings. Planned as if every boundary took NVLink's time, the same run is
    more than 10 % slower (28 % at this point)."""
    overrides = ["network.mode=analytic", "network.topology.nodes=2", "workload.micro_batches=32",
                 "workload.iterations=1", "workload.schedule={kind: prt, k: 3, direction: bi}"]
    scenario = load_scenario(SCENARIOS / "pipeline_resnet152.yaml", overrides)
    _, workload = build(scenario, "test")
    topology = workload.ctx.network.topology
    names = workload.device_names
    assert names[7] == "n0.gpu7" and names[8] == "n1.gpu0"
    forward, next_forward = Op(FORWARD, 0, 7), Op(FORWARD, 0, 8)
    nbytes = workload.costs.boundary_bytes[7]
    for a, b in [(7, 8), (6, 7)]:
        path = topology.path(names[a], names[b])
        expected = topology.path_latency(path) + nbytes / topology.path_bandwidth(path)
        assert workload.profile.delay(forward, next_forward, a, b) == pytest.approx(expected, rel=1e-12)
    assert workload.profile.delay(forward, next_forward, 7, 8) > 5 * workload.profile.delay(forward, next_forward, 6, 7)
    estimate = plan_timing(workload.plan, workload.profile.duration, workload.profile.delay).makespan
    routed = simulate(scenario, "test").summary["workload"]["iteration_time_s"]
    assert estimate == pytest.approx(routed, rel=1e-3)

    profile = PipelineTrainingWorkload._profile
    monkeypatch.setattr(PipelineTrainingWorkload, "_profile",
                        lambda self, *args: dataclasses.replace(profile(self, *args), route=None))
    flat = simulate(load_scenario(SCENARIOS / "pipeline_resnet152.yaml", overrides), "test").summary["workload"]
    assert flat["iteration_time_s"] > 1.1 * routed


def test_cut_costs_price_each_boundary_over_the_pair_it_joins():
    """A round trip ``2 (latency + bytes / bandwidth)`` per layer over the boundary's own pair; free
    where both stages share a device (a V-shaped map's turn); the mean of two pipelines' pairs."""
    routes = {(0, 1): (1.0, 10.0), (1, 0): (1.0, 10.0), (1, 2): (3.0, 1.0), (2, 1): (3.0, 1.0)}
    nbytes = np.array([10.0, 20.0])
    v_shape = ((0, 1, 2, 2, 1, 0),)
    rows = boundary_cut_costs(v_shape, nbytes, lambda a, b: routes[a, b])
    assert rows.tolist() == [[4.0, 6.0], [26.0, 46.0], [0.0, 0.0], [26.0, 46.0], [4.0, 6.0]]
    both = boundary_cut_costs(((0, 1, 2), (2, 1, 0)), nbytes, lambda a, b: routes[a, b])
    assert both.tolist() == [[15.0, 26.0], [15.0, 26.0]]


def test_a_transfer_aware_cut_prices_the_boundary_between_nodes_at_the_nics(monkeypatch):
    """1F1B over two 8-GPU nodes: boundary 7 crosses the NICs. With each cut priced over its own
    pair the partition finds a cut that runs 3 % faster than the time-balanced one (1271 -> 1309
    samples/s); priced as NVLink everywhere (the first two GPUs' path) it finds none (1272).
    ``time_and_transfer`` keeps the time cuts among its candidates, so it is never slower."""
    import simhpc.workloads.pipeline.workload as pipeline_workload

    throughput = "throughput_samples_per_second"
    by_time = run("pipeline_two_nodes.yaml", "{kind: 1f1b}")["workload"][throughput]
    routed = run("pipeline_two_nodes.yaml", "{kind: 1f1b}", ("workload.partition=time_and_transfer",))["workload"]
    assert routed[throughput] > 1.02 * by_time
    assert routed["stage_device"] == [list(range(16))]
    for schedule in ("{kind: prt, k: 2}", "{kind: prt, k: 2, direction: bi}"):
        aware = run("pipeline_two_nodes.yaml", schedule, ("workload.partition=time_and_transfer",))["workload"]
        assert aware[throughput] >= run("pipeline_two_nodes.yaml", schedule)["workload"][throughput]

    priced = pipeline_workload.boundary_cut_costs

    def as_nvlink(maps: Any, nbytes: Any, route: Any) -> Any:
        return priced(maps, nbytes, lambda source, target: route(0, 1))
    monkeypatch.setattr(pipeline_workload, "boundary_cut_costs", as_nvlink)
    flat = run.__wrapped__("pipeline_two_nodes.yaml", "{kind: 1f1b}", ("workload.partition=time_and_transfer",))
    assert flat["workload"][throughput] < 1.005 * by_time


@pytest.mark.parametrize("model_file", ["pipeline_resnet50.yaml", "pipeline_bert_base.yaml"])
def test_the_estimate_that_picks_a_zero_bubble_cut_times_its_split_backward(model_file: str):
    """ZB-H1 splits each backward into ``B`` (input gradient) and ``W`` (weight gradient): the
    estimate that chooses the cut must charge them so, and then equals the simulated iteration
    (analytic network). Charging each a whole backward overestimated ResNet-152's by 58 % and
    chose ResNet-50's slower cut (1843 against 1857 samples/s)."""
    overrides = ["network.mode=analytic", "workload.iterations=1", "workload.schedule={kind: zb-h1}"]
    _, workload = build(load_scenario(SCENARIOS / model_file, overrides), "test")
    profile, plan = workload.profile, workload.plan
    estimate = plan_timing(plan, profile.op_seconds(plan), profile.delay).makespan
    simulated = simulate(load_scenario(SCENARIOS / model_file, overrides), "test").summary["workload"]
    assert estimate == pytest.approx(simulated["iteration_time_s"], rel=1e-9)
    assert plan_timing(plan, profile.duration, profile.delay).makespan > 1.2 * estimate


def test_across_two_nodes_a_map_that_goes_round_each_node_in_turn_crosses_less_and_runs_faster():
    """Bidirectional PRT (k = 2) over two 8-GPU nodes: the plain round-robin map crosses between
    the nodes at every turn (3 times per micro-batch and direction), ``groups: 2`` once, so the
    slow NIC crossings weigh less (ResNet-152, m = 16: 1282 -> 1398 samples/s, analytic)."""
    m16 = ("workload.micro_batches=16",)
    plain = run("pipeline_two_nodes.yaml", "{kind: prt, k: 2, direction: bi}", m16)
    grouped = run("pipeline_two_nodes.yaml", "{kind: prt, k: 2, direction: bi, groups: 2}", m16)
    assert grouped["network"]["link_bytes"] < plain["network"]["link_bytes"]
    throughput = "throughput_samples_per_second"
    assert grouped["workload"][throughput] > 1.05 * plain["workload"][throughput]


def uniform_replicas(replicas: int, *overrides: str) -> Any:
    """The uniform scenario (F = 4 ms, B = 8 ms a stage, free links in a node) on ``replicas`` nodes,
    one replica of its 8-GPU pipeline on each."""
    return load_scenario(SCENARIOS / "pipeline_uniform.yaml", [
        f"network.topology.nodes={replicas}", f"workload.data_parallel={replicas}", *overrides])


@pytest.mark.parametrize("replicas", [2, 4])
def test_data_parallel_replicas_end_with_a_ring_all_reduce_of_the_last_stage_done(replicas):
    """1F1B over 8 GPUs per replica, one replica per node: stage 0's last backward ends the
    pipeline at (m+p-1)(F+B) = 180 ms, then its gradients' ring all-reduce among the replicas'
    GPUs 0 takes 2(n-1)/n S/B + 2(n-1) alpha over the path between nodes (analytic network; the
    other stages finish earlier and their all-reduces end before it)."""
    scenario = uniform_replicas(replicas)
    workload = simulate(scenario, "test").summary["workload"]
    _, built = build(scenario, "test")
    topology = built.ctx.network.topology
    path = topology.path("n0.gpu0", "n1.gpu0")
    nbytes = built.costs.grad_bytes[0]
    all_reduce = (2 * (replicas - 1) / replicas * nbytes / topology.path_bandwidth(path)
                  + 2 * (replicas - 1) * topology.path_latency(path))
    assert workload["iteration_time_s"] == pytest.approx(0.180 + all_reduce, rel=1e-9)
    assert workload["exposed_gradient_sync_s"] == pytest.approx(all_reduce, rel=1e-9)
    assert workload["devices"] == 8 * replicas and len(workload["peak_memory_bytes"]) == 8 * replicas
    assert workload["throughput_samples_per_second"] == pytest.approx(
        replicas * 8 * 8 / workload["iteration_time_s"])
    assert workload["gradient_all_reduces"] == 8 * workload["iterations_done"]
    # every GPU computes m (F + B) = 96 ms of the iteration
    assert workload["bubble_fraction"] == pytest.approx(1 - 8 * 12e-3 / workload["iteration_time_s"])


@pytest.mark.parametrize("sync", [True, False])
def test_bidirectional_replicas_reduce_both_directions_copies_together_or_apart(sync):
    """Chimera holds two copies of each stage per replica: with sync_replicas all four copies of two
    replicas share one all-reduce per stage, without it each direction's two copies have their own."""
    scenario = uniform_replicas(2, "workload.schedule={kind: chimera}", "workload.model.backward=1 ms",
                                f"workload.sync_replicas={str(sync).lower()}")
    workload = simulate(scenario, "test").summary["workload"]
    assert workload["gradient_all_reduces"] == (8 if sync else 16) * workload["iterations_done"]
    assert workload["throughput_samples_per_second"] > 0


def test_replicas_that_do_not_fit_the_cluster_are_refused():
    with pytest.raises(ScenarioError, match="devices: 3 replicas of 8 devices requested, the cluster has 16 GPUs"):
        simulate(uniform_replicas(2, "workload.data_parallel=3", "workload.devices=8"), "test")
    with pytest.raises(ScenarioError, match="data_parallel: 9 replicas of a pipeline of 2 or more GPUs need 18"):
        simulate(uniform_replicas(2, "workload.data_parallel=9"), "test")


def test_strided_replicas_run_their_pipelines_across_nodes_and_all_reduce_inside_them():
    """Eight 2-GPU replicas on two nodes: ``consecutive`` puts each pipeline inside a node and
    all-reduces between the nodes; ``strided`` (Megatron's order) gives replica r GPU r of each
    node, so its one boundary crosses the nodes and the all-reduces stay on a node's free links.
    Which wins depends on the bytes: with no activation bytes the crossing costs only latency and
    strided is faster (the 320 MB all-reduces cross no NIC); with 1 GiB activations it is slower
    (each crossing takes 43 ms over the NIC, while the consecutive pipeline's boundary is free)."""
    times = {}
    for boundary in ("0 B", "1 GiB"):
        for layout in ("consecutive", "strided"):
            scenario = uniform_replicas(2, "workload.data_parallel=8", f"workload.model.boundary={boundary}",
                                        f"workload.replica_layout={layout}")
            _, built = build(scenario, "test")
            pipelines = [[device.name for device in executor.devices] for executor in built.executors]
            ranks = [communicator.ranks for communicator in built.reduction.communicators.values()]
            if layout == "strided":
                assert pipelines[3] == ["n0.gpu3", "n1.gpu3"]
                assert all(len({rank[:2] for rank in group}) == 1 for group in ranks)
            else:
                assert pipelines[5] == ["n1.gpu2", "n1.gpu3"]
                assert all({rank[:2] for rank in group} == {"n0", "n1"} for group in ranks)
            workload = simulate(scenario, "test").summary["workload"]
            assert workload["devices"] == 16
            times[boundary, layout] = workload["iteration_time_s"]
    assert times["0 B", "strided"] < times["0 B", "consecutive"]
    assert times["1 GiB", "strided"] > times["1 GiB", "consecutive"]


@pytest.mark.parametrize("replicas", [2, 4])
def test_a_tree_all_reduce_of_the_replicas_gradients_takes_its_rounds_of_the_whole_buffer(replicas):
    """The binomial tree reduces, then broadcasts, the whole S bytes in ceil(log2 n) rounds each:
    the iteration ends 2 ceil(log2 n) (alpha + S/B) after the pipeline's 180 ms (analytic network)."""
    scenario = uniform_replicas(replicas, "workload.gradient_all_reduce=tree")
    workload = simulate(scenario, "test").summary["workload"]
    _, built = build(scenario, "test")
    topology = built.ctx.network.topology
    path = topology.path("n0.gpu0", "n1.gpu0")
    rounds = 2 * math.ceil(math.log2(replicas))
    step = topology.path_latency(path) + built.costs.grad_bytes[0] / topology.path_bandwidth(path)
    assert workload["iteration_time_s"] == pytest.approx(0.180 + rounds * step, rel=1e-9)


def test_a_hierarchical_all_reduce_needs_each_stage_spread_evenly_over_the_nodes():
    """Three 4-GPU replicas on two nodes put two copies of each stage on n0 and one on n1."""
    with pytest.raises(ScenarioError, match="gradient_all_reduce: hierarchical all-reduce needs as many copies"):
        simulate(uniform_replicas(2, "workload.data_parallel=3", "workload.devices=4",
                                  "workload.gradient_all_reduce=hierarchical"), "test")
    even = uniform_replicas(2, "workload.data_parallel=4", "workload.devices=4",
                            "workload.gradient_all_reduce=hierarchical")
    assert simulate(even, "test").summary["status"] == "ok"
