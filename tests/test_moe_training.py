"""MoE training with checkpoint policies, end to end on a tiny cluster: the mechanism checks.

Two nodes of four A100s (100 Gb/s NICs; PCIe at 50 GB/s so that the NICs bound the checkpoint
traffic), a two-layer GPT-MoE: each run takes about a second.
"""

import copy
import json
from functools import cache

import pytest

from simhpc.engine import Simulation
from simhpc.errors import ScenarioError
from simhpc.hardware.specs import StorageSpec
from simhpc.runner import simulate
from simhpc.scenario.loader import scenario_from_dict
from simhpc.workloads.moe.storage import Storage

QUAD_NODE = {
    "cpu": "epyc-7742", "host_memory": "1 TiB", "gpu": "a100", "gpus": 4,
    "gpu_link": {"bandwidth": "300 GB/s", "latency": "2 us"},
    "pcie": {"bandwidth": "50 GB/s", "latency": "2 us"},
    "nics": 4, "nic": {"bandwidth": "100 Gb/s", "latency": "1.5 us"}, "storage": "nvme-raid",
}
BASE = {
    "name": "tiny-moe",
    "seed": 3,
    "hardware": {
        "nodes": {"quad-a100": QUAD_NODE},
        "storage": {"slow-pfs": {"bandwidth": "2 GB/s", "latency": "1 ms", "capacity": "1 PB"}},
    },
    "network": {"mode": "flow", "topology": {"kind": "gpu_cluster", "node": "quad-a100", "nodes": 2}},
    "outputs": {"trace": False, "timeline": False},
    "workload": {
        "kind": "moe_training",
        "model": {"layers": 2, "hidden": 2048, "ffn_hidden": 8192, "heads": 16, "experts": 8, "top_k": 2,
                  "sequence_length": 2048},
        "global_batch": 96,
        "iterations": 10,
        "warmup": 3,
        "dynamicity": 0.1,
        "loads": {"skew": 0.6, "start": "uniform"},
        "checkpoint": {"policy": "capricorn", "replicas": 2, "buffer": "256 MiB", "storage": "slow-pfs"},
    },
}


def scenario(**changes):
    """BASE with dotted-path changes, e.g. ``**{"workload.dynamicity": 0}``."""
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return data


@cache
def _run(frozen: str) -> dict:
    return simulate(scenario_from_dict(json.loads(frozen), "<test>")).summary


def run(policy: str = "capricorn", **changes) -> dict:
    changes["workload.checkpoint.policy"] = policy
    if policy == "checkfreq":
        changes.setdefault("workload.checkpoint.options", {"adaptive": False})
    return _run(json.dumps(scenario(**changes), sort_keys=True))


def mean(summary: dict) -> float:
    assert summary["status"] == "ok", summary.get("error")
    return summary["workload"]["mean_iteration_time_s"]


def test_per_iteration_ordering_capricorn_gemini_torchsnapshot():
    times = {p: mean(run(p)) for p in ("none", "capricorn", "gemini", "torchsnapshot")}
    assert times["none"] <= times["capricorn"] < times["gemini"] < times["torchsnapshot"]


@pytest.mark.parametrize("start", ["uniform", "stationary"])
def test_static_loads_make_gemini_and_capricorn_equal(start):
    static = {"workload.dynamicity": 0.0, "workload.loads": {"skew": 0.6, "start": start}}
    gemini, capricorn = (mean(run(p, **static)) for p in ("gemini", "capricorn"))
    assert gemini == pytest.approx(capricorn, rel=0.03)


def test_stationary_loads_capricorn_no_worse_than_gemini():
    # Loads skewed from the start: Gemini's early profile is as skewed as the later loads, and
    # only the drift differs. A current per-layer profile must not lose to a frozen one
    # (state sized so that the gaps hold it with a little slack).
    drift = {"workload.dynamicity": 0.2, "workload.checkpoint.bytes_per_param": 8,
             "workload.loads": {"skew": 0.6, "start": "stationary"}}
    overhead = {p: 0.0 for p in ("gemini", "capricorn")}
    for seed in (1, 2, 3):
        base = mean(run("none", seed=seed, **drift))
        for policy in overhead:
            overhead[policy] += mean(run(policy, seed=seed, **drift)) / base - 1
    assert overhead["capricorn"] <= overhead["gemini"]


@pytest.mark.parametrize("policy", ["torchsnapshot", "checkfreq", "gemini", "capricorn"])
def test_zero_byte_checkpoint_costs_nothing(policy):
    """Nothing to save: no copy, and no profiling of the phases to place the copies in."""
    empty = {"workload.checkpoint.bytes_per_param": 0}
    summary = run(policy, **empty)["workload"]
    assert mean(run(policy, **empty)) == pytest.approx(mean(run("none", **empty)), rel=1e-9)
    assert summary["profile_s"] == 0.0 and summary["stall_s"] == 0.0


def test_faster_nics_shrink_the_gemini_capricorn_gap():
    fast = {"network.topology.nic_bandwidth": "1000 Gb/s"}
    gap = mean(run("gemini")) / mean(run("capricorn")) - 1
    fast_gap = mean(run("gemini", **fast)) / mean(run("capricorn", **fast)) - 1
    assert gap > 0.05
    assert fast_gap < 0.5 * gap
    assert mean(run("gemini", **fast)) - mean(run("capricorn", **fast)) < mean(run("gemini")) - mean(run("capricorn"))


def test_speculative_profiling_is_cheaper_at_similar_iteration_time():
    speculative = run("capricorn")
    every = run("capricorn", **{"workload.checkpoint.options": {"speculative": False}})
    assert speculative["workload"]["profile_s"] < 0.8 * every["workload"]["profile_s"]
    assert mean(speculative) == pytest.approx(mean(every), rel=0.03)


@pytest.mark.parametrize("policy", ["gemini", "capricorn", "torchsnapshot", "checkfreq"])
def test_buffers_host_memory_and_bytes_are_accounted(policy):
    summary = run(policy, **{"workload.checkpoint.buffer": "64 MiB"})
    assert summary["status"] == "ok"
    work = summary["workload"]
    ckpt = work["checkpoint"]
    assert 0 < ckpt["buffer_peak_bytes"] <= ckpt["buffer_bytes"]
    assert ckpt["host_peak_bytes"] <= ckpt["host_memory_bytes"]
    gpus, state = 8, ckpt["state_bytes_per_gpu"]
    versions = ckpt["versions"]
    assert len(versions) == work["iterations_done"] - 1  # every iteration but the first saves one
    copies = sum(v["copies"] for v in versions)
    if policy in ("gemini", "capricorn"):
        assert all(v["copies"] == 2 for v in versions)
        assert ckpt["pcie_bytes"] + ckpt["peer_bytes"] == pytest.approx(copies * gpus * state, rel=1e-9)
        assert ckpt["peer_bytes"] == pytest.approx(len(versions) * gpus * state, rel=1e-9)
    else:
        assert ckpt["pcie_bytes"] == pytest.approx(len(versions) * gpus * state, rel=1e-9)
        assert ckpt["storage_bytes"] == pytest.approx(len(versions) * gpus * state, rel=1e-9)


def test_host_memory_too_small_is_a_simulated_oom():
    small = copy.deepcopy(QUAD_NODE)
    small["host_memory"] = "4 GiB"
    summary = run("gemini", **{"hardware.nodes": {"quad-a100": small}})
    assert summary["status"] == "oom"
    assert ".host" in summary["error"]["device"]


def test_a_stall_appears_in_the_trace():
    data = scenario(**{"workload.checkpoint.policy": "torchsnapshot", "workload.iterations": 4})
    result = simulate(scenario_from_dict(data, "<test>"))
    stalls = [s for t in result.sim.trace.tracks for s in t.spans if s.category == "stall"]
    assert stalls and all(s.duration > 0 for s in stalls)
    chunks = [s for t in result.sim.trace.tracks for s in t.spans if s.category == "checkpoint"]
    assert chunks


def test_dense_layers_add_compute_but_no_all_to_all():
    """Layers without experts: a dense FFN over every token, no all-to-all; Capricorn times
    them once and re-profiles only the MoE layers."""
    changes = {"workload.model.layers": 4, "workload.iterations": 5}
    data = scenario(**changes, **{"workload.model.moe_every": 2})
    result = simulate(scenario_from_dict(data, "<test>"))
    names = {s.name for t in result.sim.trace.tracks for s in t.spans}
    assert {"fwd.0.ffn", "bwd.2.ffn", "fwd.1.expert", "fwd.3.expert"} <= names
    assert not {"fwd.0.expert", "fwd.2.expert"} & names
    alternating = result.summary["workload"]
    every = run(**changes)["workload"]
    assert alternating["model"]["expert_params"] == every["model"]["expert_params"] / 2
    assert alternating["checkpoint"]["policy"]["reprofiled_layers"] <= 2 * 4  # two layers at most, four times


def test_runs_are_deterministic():
    data = scenario(**{"workload.iterations": 5})
    a = simulate(scenario_from_dict(data, "<a>")).summary
    b = simulate(scenario_from_dict(data, "<b>")).summary
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize(("path", "value", "where"), [
    ("workload.checkpoint.policy", "magic", "workload.checkpoint.policy"),
    ("workload.checkpoint.options", {"treshold": 0.1}, "workload.checkpoint.options.treshold"),
    ("workload.node", "dgx-a100", "workload.node"),
    ("workload.model.experts", 6, "workload.model.experts"),
    ("workload.checkpoint.storage", "tape", "workload.checkpoint.storage"),
])
def test_bad_references_name_their_field(path, value, where):
    with pytest.raises(ScenarioError) as error:
        scenario_from_dict(scenario(**{path: value}), "tiny.yaml")
    assert error.value.path == where


@pytest.mark.parametrize("policy", ["torchsnapshot", "checkfreq"])
def test_storage_holds_the_newest_complete_version_and_the_one_being_written(policy):
    """A version is deleted once a newer one is complete: a node's storage never holds more than two
    of its snapshots, and at least one whole one."""
    ckpt = run(policy)["workload"]["checkpoint"]
    snapshot = 4 * ckpt["state_bytes_per_gpu"]  # a node's 4 GPUs, on its own storage server
    assert ckpt["versions_persisted"] >= 3
    assert snapshot <= ckpt["storage_peak_bytes"] <= 2 * snapshot * (1 + 1e-12)


@pytest.mark.parametrize("requests", [1, 3, 7])
def test_requests_issued_together_finish_as_with_fair_sharing(requests):
    """k writes issued at once end at latency + total bytes / bandwidth (each pays the latency
    once, in parallel); the first at latency + its bytes / bandwidth."""
    spec = StorageSpec(name="pfs", bandwidth=1.3e9, latency=1e-3, capacity=1e15, shared=True)
    sim = Simulation(0)
    storage = Storage(sim, "pfs", spec)
    sizes = [3 * 2**20 + 7 + 1000 * i for i in range(requests)]
    ends: list[float] = []

    def write(nbytes):
        ends.append((yield from storage.write(nbytes, 1)))

    for nbytes in sizes:
        sim.process(write(nbytes))
    sim.run()
    assert ends[0] == pytest.approx(spec.latency + sizes[0] / spec.bandwidth, rel=1e-12)
    assert max(ends) == pytest.approx(spec.latency + sum(sizes) / spec.bandwidth, rel=1e-12)


def test_storage_too_small_for_a_snapshot_is_a_simulated_oom():
    small = {"bandwidth": "2 GB/s", "latency": "1 ms", "capacity": "1 GiB"}
    summary = run("torchsnapshot", **{"hardware.storage": {"slow-pfs": small}})
    assert summary["status"] == "oom"
    assert summary["error"]["device"] == "storage.n0.slow-pfs"



def _cluster(nodes: int, gpus: int, ep: int):
    """(simulation, workload) of BASE on ``nodes`` x ``gpus`` with expert-parallel groups of ``ep``."""
    from simhpc.runner import build

    data = scenario(**{"hardware.nodes": {"quad-a100": {**QUAD_NODE, "gpus": gpus, "nics": gpus}},
                       "network.topology.nodes": nodes, "network.mode": "analytic",
                       "workload.parallelism": {"expert_parallel": ep}, "workload.global_batch": 8 * nodes * gpus,
                       "workload.checkpoint": {"policy": "none"}})
    return build(scenario_from_dict(data, "<test>"))


def _seconds(sim, event) -> float:
    start = sim.now
    sim.env.run(until=event)
    return sim.now - start


def test_expert_gradients_are_reduced_over_the_copies_of_each_expert():
    """A GPU's expert gradients are all-reduced among the GPUs holding the same experts: over
    NVLink when expert-parallel groups sit inside a node (1 node x 4 GPUs, groups of 2: each expert
    twice on the node), over a ring of the groups' copies when a group spans nodes (4 nodes x 2
    GPUs, groups of 2 nodes: each expert on nodes 0 and 2, or 1 and 3), not over every node."""
    from simhpc.network import Communicator

    expert, nvlink_bw, nvlink_lat = 64e6, 300e9, 2e-6
    sim, workload = _cluster(1, 4, 4)  # one copy of each expert: the NVLink latency only
    assert _seconds(sim, workload.comm.all_reduce(0.0, expert)) == pytest.approx(2 * nvlink_lat, rel=1e-12)
    sim, workload = _cluster(1, 4, 2)
    assert _seconds(sim, workload.comm.all_reduce(0.0, expert)) == pytest.approx(
        2 * (nvlink_lat + expert / 2 / nvlink_bw), rel=1e-12)
    sim, workload = _cluster(4, 2, 4)
    assert sorted(len(ring.ranks) for ring in workload.comm.replica_rails) == [2, 2, 2, 2]
    spanning = _seconds(sim, workload.comm.all_reduce(0.0, expert))
    copies = Communicator(workload.comm.network, ["n0.gpu0", "n2.gpu0"], "probe")
    pair = _seconds(sim, copies.all_reduce(expert, "ring"))
    assert spanning == pytest.approx(2 * nvlink_lat + pair, rel=1e-9)
