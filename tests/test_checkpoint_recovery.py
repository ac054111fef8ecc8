"""Failures and rollback: what survives, what is lost, how long recovery takes."""

import pytest
from test_moe_training import run

from simhpc.runner import simulate
from simhpc.scenario.loader import scenario_from_dict


def failure_after_checkpoint(policy: str, k: int = 5) -> tuple[float, float, float]:
    """A time inside iteration ``k`` after its checkpoint (of the state entering ``k``) completed,
    with the start and end of iteration ``k`` (from a run without failures)."""
    base = run(policy)["workload"]
    times = base["iteration_times_s"]
    start = sum(times[:k])
    end = start + times[k]
    done = [v["end_s"] for v in base["checkpoint"]["versions"] if v["version"] == k]
    assert done and start < done[0] < end
    return (done[0] + end) / 2, start, end


@pytest.mark.parametrize("policy", ["gemini", "capricorn"])
def test_in_memory_checkpoint_loses_at_most_one_iteration(policy):
    at, start, end = failure_after_checkpoint(policy)
    summary = run(policy, **{"workload.failures": {"at": [{"time": at, "node": 1}], "restart_time": "2 s"}})
    work = summary["workload"]
    assert summary["status"] == "ok"
    assert work["iterations_done"] == 10
    [event] = work["failures"]["events"]
    assert event["recovered_from"] == "memory" and event["version"] == 5
    assert event["lost_iterations"] == 0
    assert event["lost_work_s"] == pytest.approx(at - start)
    assert event["lost_work_s"] <= end - start
    # Node 1's state comes back from node 0's host memory: restart time plus a reload.
    assert event["recovery_s"] > 2.0 and event["reload_s"] > 0


def test_storage_checkpoint_loses_the_work_since_the_last_persisted_snapshot():
    at, _, _ = failure_after_checkpoint("gemini")
    base = run("torchsnapshot")["workload"]
    persisted = [v for v in base["checkpoint"]["versions"] if v["end_s"] <= at]
    newest = max(v["version"] for v in persisted)
    produced = sum(base["iteration_times_s"][:newest])  # when the state of step `newest` existed
    summary = run("torchsnapshot", **{"workload.failures": {"at": [{"time": at, "node": 1}]}})
    [event] = summary["workload"]["failures"]["events"]
    assert event["recovered_from"] == "storage" and event["version"] == newest
    assert event["lost_work_s"] == pytest.approx(at - produced)
    memory = run("gemini", **{"workload.failures": {"at": [{"time": at, "node": 1}]}})
    assert event["lost_work_s"] > memory["workload"]["failures"]["events"][0]["lost_work_s"]
    assert summary["workload"]["iterations_done"] == 10


def test_a_failure_without_a_surviving_copy_is_reported_and_training_restarts():
    at, _, _ = failure_after_checkpoint("gemini")
    summary = run("gemini", **{"workload.checkpoint.replicas": 1,
                               "workload.failures": {"at": [{"time": at, "node": 0}]}})
    work = summary["workload"]
    [event] = work["failures"]["events"]
    assert not event["recoverable"] and event["recovered_from"] == "none"
    assert work["failures"]["unrecoverable"] == 1
    assert event["version"] == 0 and event["lost_work_s"] == pytest.approx(at)
    assert work["iterations_done"] == 10
    assert work["iterations_executed"] > 10


def test_no_checkpoint_policy_restarts_from_scratch():
    summary = run("none", **{"workload.failures": {"at": [{"time": 3.0, "node": 1}]}})
    [event] = summary["workload"]["failures"]["events"]
    assert event["recovered_from"] == "none" and event["lost_work_s"] == pytest.approx(3.0)


def test_mtbf_failures_are_drawn_from_the_seed():
    changes = {"workload.failures": {"mtbf": "3 s", "max_failures": 2, "restart_time": "0.5 s"}}
    first = run("capricorn", **changes)["workload"]
    assert first["failures"]["count"] == 2
    assert first["iterations_done"] == 10
    assert first["goodput"] < 1.0
    data = scenario_from_dict(__import__("test_moe_training").scenario(**{
        "workload.checkpoint.policy": "capricorn", **changes}), "<again>")
    again = simulate(data).summary["workload"]
    assert again["failures"] == first["failures"]


def test_a_failure_due_after_training_does_not_stretch_the_run():
    """The run ends with the training: a failure drawn or set for later is not waited for, so
    simulated time (and every utilisation over it) is the training's."""
    late = run("gemini", **{"workload.failures": {"at": [{"time": "1000 s", "node": 0}], "mtbf": "1000 s"}})
    assert late["workload"]["failures"]["count"] == 0
    assert late["simulated_time_s"] == pytest.approx(late["workload"]["makespan_s"])
    assert late["simulated_time_s"] == pytest.approx(run("gemini")["simulated_time_s"])


@pytest.mark.parametrize("restart", ["0 s", "5 s"])
def test_training_is_abandoned_when_failures_outpace_checkpoints(restart):
    """An MTBF far below an iteration: every failure restores the same state, so the run stops
    after ``give_up_after`` of them instead of rolling back forever, also when they strike
    during the recoveries (a restart slower than the MTBF)."""
    changes = {"workload.failures": {"mtbf": "0.05 s", "max_failures": 10000, "give_up_after": 4,
                                     "restart_time": restart}}
    work = run("gemini", **changes)["workload"]
    failures = work["failures"]
    assert failures["gave_up"] is True
    assert failures["count"] < 100
    versions = [0] + [event["version"] for event in failures["events"]]  # training starts from state 0
    assert all(later <= earlier for earlier, later in zip(versions[-5:], versions[-4:]))  # 4 without progress
    assert len(versions) >= 5
    accounted(work)


def accounted(work: dict) -> None:
    """Every second of the run is useful, lost or recovering."""
    failures = work["failures"]
    assert failures["lost_work_s"] + failures["recovery_s"] == pytest.approx(
        work["makespan_s"] - work["useful_time_s"], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("policy", ["gemini", "none"])
def test_two_failures_count_each_second_of_lost_work_once(policy):
    at, _, _ = failure_after_checkpoint("gemini")
    summary = run(policy, **{"workload.failures": {"at": [{"time": at, "node": 1}, {"time": at + 2.0, "node": 0}]}})
    work = summary["workload"]
    _, second = work["failures"]["events"]
    assert second["time_s"] == pytest.approx(at + 2.0)
    assert second["lost_work_s"] <= 2.0 + 1e-9  # only what ran since training resumed after the first
    accounted(work)
    assert work["iterations_done"] == 10


def test_a_failure_during_recovery_strikes_at_its_time_and_the_source_is_chosen_again():
    """Node 1 fails, and while it restarts node 0, which holds node 1's replica, fails too: the
    second failure happens at its own time, cuts the first recovery short, and no memory copy of
    node 1's state survives, so training restarts from storage or from scratch."""
    at, _, _ = failure_after_checkpoint("gemini")
    failures = {"at": [{"time": at, "node": 1}, {"time": at + 1.0, "node": 0}], "restart_time": "2 s"}
    work = run("gemini", **{"workload.failures": failures})["workload"]
    first, second = work["failures"]["events"]
    assert first["recovered_from"] == "memory" and first["interrupted"]
    assert first["recovery_s"] == pytest.approx(1.0)
    assert second["time_s"] == pytest.approx(at + 1.0) and not second["interrupted"]
    assert second["recovered_from"] != "memory" and second["version"] <= first["version"]
    assert second["recovery_s"] >= 2.0
    accounted(work)


def test_simultaneous_failures_of_a_node_and_its_replica_holder_are_unrecoverable_from_memory():
    at, _, _ = failure_after_checkpoint("gemini")
    both = {"at": [{"time": at, "node": 0}, {"time": at, "node": 1}]}
    work = run("gemini", **{"workload.failures": both})["workload"]
    first, second = work["failures"]["events"]
    assert first["interrupted"] and first["recovery_s"] == 0.0
    assert second["recovered_from"] != "memory"
    accounted(work)


def test_a_failure_stops_the_snapshots_still_being_written():
    """torchsnapshot's earlier snapshot is still being written when a node fails: the write
    stops (no recovery read queues behind it, no host memory stays reserved for it), and the
    bytes of completed versions stay state x GPUs each; the rest is counted as abandoned."""
    base = run("torchsnapshot")["workload"]
    writing = [(v["start_s"], v["end_s"]) for v in base["checkpoint"]["versions"]]
    start, end = writing[2]
    summary = run("torchsnapshot", **{"workload.failures": {"at": [{"time": (start + end) / 2, "node": 1}]}})
    work = summary["workload"]
    ckpt = work["checkpoint"]
    [event] = work["failures"]["events"]
    assert event["recovered_from"] == "storage"
    per_node = 4 * ckpt["state_bytes_per_gpu"]
    assert event["reload_s"] < 1.5 * per_node / 2e9  # a node's state read at the store's 2 GB/s, no queue
    assert ckpt["storage_bytes"] == pytest.approx(len(ckpt["versions"]) * 8 * ckpt["state_bytes_per_gpu"], rel=1e-9)
    assert ckpt["abandoned_bytes"] > 0
    accounted(work)


def test_a_failure_during_a_storage_reload_stops_its_reads():
    """torchsnapshot: a second failure in the middle of the first's reload from storage stops
    those reads, so the second reload takes as long as the first (no queue behind dead reads)."""
    at, _, _ = failure_after_checkpoint("gemini")
    [first] = run("torchsnapshot", **{"workload.failures": {"at": [{"time": at, "node": 1}]}})["workload"][
        "failures"]["events"]
    second_at = at + first["reload_s"] / 2
    work = run("torchsnapshot", **{"workload.failures": {"at": [{"time": at, "node": 1},
                                                                {"time": second_at, "node": 0}]}})["workload"]
    cut, again = work["failures"]["events"]
    assert cut["interrupted"] and again["recovered_from"] == "storage"
    assert again["reload_s"] == pytest.approx(first["reload_s"], rel=0.02)
    accounted(work)


def test_a_run_stopped_while_recovering_counts_the_recovery_so_far():
    at, _, _ = failure_after_checkpoint("gemini")
    summary = run("gemini", **{"workload.failures": {"at": [{"time": at, "node": 1}], "restart_time": "10 s"},
                               "outputs.max_time": at + 4.0})
    work = summary["workload"]
    [event] = work["failures"]["events"]
    assert event["in_progress"] and event["recovery_s"] == pytest.approx(4.0)
    accounted(work)


def test_goodput_leaves_checkpoint_stalls_out():
    """No failure: goodput is 1 without checkpoints, and per-iteration snapshots bound by storage
    (the iteration mostly waits) leave it at the share of time spent computing."""
    assert run("none")["workload"]["goodput"] == pytest.approx(1.0)
    work = run("torchsnapshot")["workload"]
    assert work["goodput"] == pytest.approx(1.0 - work["stall_s"] / work["makespan_s"], rel=1e-9)
    assert work["goodput"] < 0.5


def test_snapshots_on_a_node_local_device_are_lost_with_the_node():
    """The same store, node-local (``local: true``, as the catalog's NVMe): the failed node's part
    of every snapshot is gone, so training restarts from scratch instead of from storage."""
    at, _, _ = failure_after_checkpoint("gemini")
    failure = {"workload.failures": {"at": [{"time": at, "node": 1}]}}
    remote = run("torchsnapshot", **failure)["workload"]["failures"]["events"][0]
    local_store = {"bandwidth": "2 GB/s", "latency": "1 ms", "capacity": "1 PB", "local": True}
    local = run("torchsnapshot", **{**failure, "hardware.storage": {"slow-pfs": local_store}})["workload"]
    [event] = local["failures"]["events"]
    assert remote["recovered_from"] == "storage" and remote["version"] > 0
    assert event["recovered_from"] == "none" and not event["recoverable"]
    assert local["iterations_done"] == 10


def test_give_up_after_counts_from_the_first_failure_and_a_repeated_failure_is_one():
    """give_up_after: 1 and a failure before any checkpoint: it restores only the start state,
    no progress, so training is abandoned at once; the same node listed twice at one time fails once."""
    work = run("gemini", **{"workload.failures": {"at": [{"time": 0.5, "node": 1}, {"time": 0.5, "node": 1}],
                                                  "give_up_after": 1}})["workload"]
    assert work["failures"]["count"] == 1 and work["failures"]["gave_up"]
    assert work["failures"]["interrupted_recoveries"] == 0


def test_the_last_snapshot_may_persist_after_training():
    """Storage-bound snapshots: the last one is still being written when the last iteration ends;
    the run goes on until it persists, and the summary says when (``makespan_s`` is the training's)."""
    result = run("torchsnapshot")
    work = result["workload"]
    last = work["checkpoint"]["versions"][-1]
    assert work["last_checkpoint_end_s"] == last["end_s"] > work["makespan_s"]
    assert result["simulated_time_s"] == pytest.approx(last["end_s"])
    assert run("none")["workload"]["last_checkpoint_end_s"] is None
