"""Run simhpc's pipeline plans on this CPU, and hold the simulator to what they measure.

Two worker processes, each pinned to a core of its own with one torch thread, stand for the two
GPUs of a pipeline. They run the op lists simhpc's schedules plan (:data:`SCHEDULES`: GPipe, 1F1B,
interleaved, PRT round-robin at k = 2 and 4 and V-shaped) on a real model of identical layers
(``Linear(h, h)`` then ``tanh``, fp32), at m = 2, 4 and 8, and record when every op starts and
ends. An op's output goes to the other process through shared memory (:class:`Mailboxes`: the
producer copies it in, the consumer spins until it is there). The producer's copy takes nearly all
of a transfer's one-way time (measured beside the runs: ``post_s`` against ``one_way_s``), so the
sender waits for its transfer while the receiver computes on: the simulation's ``p2p: blocking``.
Every stage computes its input's gradient, the first one too, so that the stages are identical as
in the simulator's uniform model. The plans run round by round (every plan once, then again), so
the host's drift falls on all of them alike.

What the simulator is given (:func:`model_figures`), and nothing else of the runs:

- per-layer forward and backward time and a per-op fixed cost: a least-squares line through the
  median op times by stage size (8, 4 and 2 layers), over every run (the schedules differ in the
  order of their ops, not in the ops; stand-alone timings of a stage, taken first to plan with,
  ran 5-20 % slower: both cores ran the same op at once);
- the link: one-way times of 4 bytes to a boundary's 256 KiB between the two processes, the
  receiver waiting as a pipeline's consumer does, a line through them (latency, bandwidth), the
  sender busy for all of it (``p2p: blocking``);
- for the varied simulation, the op times' spread within an iteration (:func:`op_time_variation`).

The plans are simhpc's own, made with the stand-alone stage times (which decide the order of
the V-shaped map's greedy plan). Each run is then simulated as a scenario (:func:`scenario_for`:
model ``{kind: uniform}``, a node of two "GPUs" joined by the measured link, ``stage_overhead``
the fixed cost, schedule ``explicit``: the plan that ran, op for op), once with every op at its
median time and once with ``op_time_variation`` over 31 iterations, and the script prints
measured and simulated iteration time (median over rounds), bubble fraction and gain over 1F1B.

Three sources of noise of this host are kept out of the runs, because they depend on the
schedule's memory pattern rather than on its order of ops: glibc gives activations from the heap
and keeps freed memory (:data:`QUIET_MALLOC`), gradients are zeroed in place rather than freed
(a fresh 4 MiB gradient costs its first backward 1024 page faults, ~14 ms here), and Python's
collector runs between rounds only.

    .venv/bin/python validation/traces/pipeline_capture.py            # measure (~1.5 min), write, compare
    .venv/bin/python validation/traces/pipeline_capture.py --report   # compare the written capture only
    .venv/bin/python validation/traces/pipeline_capture.py --hidden 128 --batch 1024   # transfers weigh more

The capture goes to ``pipeline_captures/<this machine's calibration>.json.gz`` (``--out`` to
change it; ``--export DIR`` also writes each run's measured median round as a Chrome trace and
the scenario that simulates it); ``tests/test_pipeline_capture.py`` simulates the committed one.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import math
import os
import platform
import queue
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from simhpc.policies.pipeline.explicit import written_out
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op, PipelinePlan
from simhpc.runner import RunResult, simulate

HERE = Path(__file__).resolve().parent
DEVICES = 2

QUIET_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**32),
                "MALLOC_TOP_PAD_": str(2**28)}
"""glibc settings for the workers: activations from the heap, not fresh mappings, and freed memory
kept, so that ops do not pay page faults whose number depends on the schedule's memory pattern
(``heap_trims.py``, ``trim_cost.py``)."""

PRE_TOUCHED_BYTES = 768 * 2**20
"""Heap each worker touches before it starts: where the ops' tensors then come from, with no page
to fault (a 4 MiB weight gradient, fresh, costs its backward 1024 faults, ~14 ms here)."""

MAX_COPY_BANDWIDTH = 100e9
"""Bytes/s: a ceiling on the fitted link bandwidth (a boundary's copy can take less time than the
one-way times' noise, and the fitted slope come out near 0 or below)."""

SCHEDULES: tuple[dict[str, Any], ...] = (
    {"kind": "gpipe"},
    {"kind": "1f1b"},
    {"kind": "interleaved", "v": 2},
    {"kind": "prt", "k": 2},
    {"kind": "prt", "k": 4},
    {"kind": "prt", "k": 2, "mapping": "v_shape"},
)
"""The schedules run and simulated (scenario ``workload.schedule`` values)."""


@dataclass(frozen=True)
class Setup:
    """The real model and the runs."""

    hidden: int = 1024
    """Width ``h`` of every layer."""
    batch: int = 64
    """Samples per micro-batch."""
    layers: int = 16
    """Identical layers of the model."""
    micro_batches: tuple[int, ...] = (2, 4, 8)
    iterations: int = 9
    """Rounds timed (after one not timed): iterations of every plan."""

    @property
    def boundary_bytes(self) -> int:
        """fp32 activations crossing a stage boundary, per micro-batch."""
        return 4 * self.batch * self.hidden

    @property
    def message_sizes(self) -> tuple[int, ...]:
        """Bytes whose one-way time is measured: 4, then a quarter, half and all of a boundary's."""
        return (4, self.boundary_bytes // 4, self.boundary_bytes // 2, self.boundary_bytes)


# --- the worker processes ---------------------------------------------------------------------


def _stage(setup: Setup, layers: int, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(setup.hidden, setup.hidden), torch.nn.Tanh()]
    return torch.nn.Sequential(*blocks)


def _stage_times(setup: Setup, repeats: int) -> list[dict[str, float]]:
    """Forward and backward seconds of a stage of 1, 2, 4, ... layers (medians of ``repeats``
    forward-backward pairs, after one): the figures to plan the runs with."""
    import torch

    points = []
    layers = 1
    while layers <= setup.layers // DEVICES:
        stage = _stage(setup, layers, seed=layers)
        x = torch.randn(setup.batch, setup.hidden)
        grad = torch.full((setup.batch, setup.hidden), 1e-3)
        forward, backward = [], []
        for _ in range(1 + repeats):
            started = time.perf_counter()
            out = stage(x.detach().requires_grad_())
            middle = time.perf_counter()
            torch.autograd.backward(out, grad)
            ended = time.perf_counter()
            forward.append(middle - started)
            backward.append(ended - middle)
        points.append({"layers": layers, "forward_s": statistics.median(forward[1:]),
                       "backward_s": statistics.median(backward[1:])})
        layers *= 2
    return points


class Mailboxes:
    """Slots in shared memory through which the two processes pass tensors: a buffer and a stamp
    each. :meth:`post` copies a tensor in, then stamps the slot; :meth:`take` spins until the slot
    bears the stamp it expects. There is no helper thread to share a core with the compute and no
    sleep to wake from (a guest's core, woken, computes slower for a while: ``idle_decay.py``), so a
    transfer costs the sender one copy (with torch's calls around it, 50-130 us here, nearly all of
    the one-way time) and overlaps the receiver's compute; a socket transport (gloo) needs both
    cores' time to move its bytes."""

    def __init__(self, slots: int, shape: tuple[int, ...]) -> None:
        import torch

        self.buffers = [torch.zeros(shape).share_memory_() for _ in range(slots)]  # one version counter each
        self.stamps = torch.zeros(slots, dtype=torch.int64).share_memory_()

    def post(self, slot: int, tensor: Any, stamp: int) -> None:
        """Copy ``tensor`` into ``slot`` (a prefix of it if smaller), then stamp the slot."""
        self.buffers[slot].view(-1)[:tensor.numel()].copy_(tensor.reshape(-1))
        self.stamps[slot] = stamp

    def take(self, slot: int, stamp: int) -> Any:
        """Wait for ``slot`` to bear ``stamp``; return its buffer (not a copy)."""
        stamps = self.stamps
        while int(stamps[slot]) != stamp:
            pass
        return self.buffers[slot]


def _transfer_stamps(rank: int, nbytes: int, mail: Mailboxes, barrier: Any, stamp: int,
                     repeats: int, posts: list[float]) -> list[float]:
    """Timestamps of one-way transfers of ``nbytes``, each way in turn: the sender's just before
    its post, the receiver's once its take returns. The receiver waits while the sender computes
    for about 3 ms first, as a pipeline's consumer waits for its producer; both
    processes read the same clock (``CLOCK_MONOTONIC``). The seconds each of this rank's posts took
    go to ``posts``."""
    import torch

    message = torch.ones(max(nbytes // 4, 1))
    work = torch.randn(128, 128)
    stamps = []
    for i in range(2 * repeats):
        sender = i % 2
        barrier.wait()
        if rank == sender:
            for _ in range(120):  # about 3 ms of compute
                work = torch.tanh(work @ work)
            stamps.append(time.perf_counter())
            mail.post(sender, message, stamp + i)
            posts.append(time.perf_counter() - stamps[-1])
        else:
            mail.take(sender, stamp + i)
            stamps.append(time.perf_counter())
    return stamps


def _slot(op: Op, stages: int) -> int:
    """The mailbox slot of the transfer that feeds ``op``."""
    kind, j, s = op
    return 2 * (j * stages + s) + (kind == BACKWARD)


def _run_plan(plan: PipelinePlan, rank: int, stages: dict[int, Any], inputs: list[Any], grad: Any,
              mail: Mailboxes, stamp: int) -> list[tuple[str, float, float]]:
    """Run ``rank``'s op list once; return (label, start, end) per op (``time.perf_counter``)."""
    import torch

    last = plan.stages - 1
    device = {(q, s): d for q, devices in enumerate(plan.stage_device) for s, d in enumerate(devices)}

    def device_of(j: int, s: int) -> int:
        return device[(plan.micro_batch_pipeline[j], s)]

    handed: dict[Op, Any] = {}
    stash: dict[tuple[int, int], tuple[Any, Any]] = {}
    record = []
    for op in plan.ops[rank]:
        kind, j, s = op
        if (kind == FORWARD and s == 0) or (kind == BACKWARD and s == last):
            tensor = inputs[j] if kind == FORWARD else grad
        elif op in handed:
            tensor = handed.pop(op)
        else:
            tensor = mail.take(_slot(op, plan.stages), stamp)
        started = time.perf_counter()
        if kind == FORWARD:
            inp = tensor.detach().requires_grad_()
            out = stages[s](inp)
            stash[(j, s)] = (inp, out)
            result, consumer = out.detach(), Op(FORWARD, j, s + 1)
        else:
            inp, out = stash.pop((j, s))
            torch.autograd.backward(out, tensor)
            result, consumer = inp.grad, Op(BACKWARD, j, s - 1)
        ended = time.perf_counter()
        record.append((op.label(), started, ended))
        if 0 <= consumer.stage <= last:
            if device_of(j, consumer.stage) == rank:
                handed[consumer] = result
            else:
                mail.post(_slot(consumer, plan.stages), result, stamp)
    return record


def _measure_transfers(rank: int, setup: Setup, mail: Mailboxes, barrier: Any, stamp: int, repeats: int,
                       out: dict[str, Any]) -> int:
    """Append ``repeats`` transfer stamps each way per message size to ``out``; return the next stamp."""
    stamps, posts = out.setdefault("transfer_stamps", {}), out.setdefault("post_seconds", {})
    for nbytes in setup.message_sizes:
        barrier.wait()
        stamps.setdefault(str(nbytes), []).extend(
            _transfer_stamps(rank, nbytes, mail, barrier, stamp, repeats, posts.setdefault(str(nbytes), [])))
        stamp += 2 * repeats
    return stamp


def _worker(rank: int, setup: Setup, plans: list[PipelinePlan] | None, mail: Mailboxes, barrier: Any,
            results: Any) -> None:
    """One process: measure stage times and transfers (``plans`` None: the figures to plan with), or
    run every plan ``setup.iterations + 1`` times, round by round, each round measuring the
    transfers first (so that the host's drift hits every plan and the figures alike)."""
    import torch

    os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    torch.set_num_threads(1)
    torch.ones(PRE_TOUCHED_BYTES // 4)  # touched, then freed to a heap that keeps it (QUIET_MALLOC)
    out: dict[str, Any] = {}
    if plans is None:
        out["stage_times"] = _stage_times(setup, 10)
        _measure_transfers(rank, setup, mail, barrier, 1, 10, out)
        results.put((rank, out))
        return
    torch.manual_seed(0)
    inputs = [torch.randn(setup.batch, setup.hidden) for _ in range(max(plan.micro_batches for plan in plans))]
    grad = torch.full((setup.batch, setup.hidden), 1e-3)
    stages = [{s: _stage(setup, setup.layers // plan.stages, seed=100 + s) for _, s in plan.hosted_stages(rank)}
              for plan in plans]  # only this device's, as a pipeline's worker holds
    out["runs"] = [[] for _ in plans]
    stamp = 1
    gc.disable()  # a collection pauses whichever op it falls in; between rounds instead
    for iteration in range(setup.iterations + 1):
        gc.collect()
        if iteration:  # the first round warms up
            stamp = _measure_transfers(rank, setup, mail, barrier, stamp, 3, out)
        for plan, plan_stages, iterations in zip(plans, stages, out["runs"]):
            for stage in plan_stages.values():  # zeroed in place: a fresh gradient would cost its pages' faults
                stage.zero_grad(set_to_none=False)  # (1024 of 4 KiB, ~14 ms here) in whichever backward allocates it
            barrier.wait()
            record = _run_plan(plan, rank, plan_stages, inputs, grad, mail, stamp)
            stamp += 1
            if iteration:
                iterations.append(record)
    results.put((rank, out))


def _on_workers(setup: Setup, plans: list[PipelinePlan] | None) -> dict[int, dict[str, Any]]:
    """Start the two pinned processes on one task; return each rank's results."""
    import torch.multiprocessing

    if str(HERE) not in sys.path:  # the workers take this path, and import this module by name
        sys.path.append(str(HERE))  # when a test, not the script, starts them
    context = torch.multiprocessing.get_context("spawn")
    results = context.Queue()
    barrier = context.Barrier(DEVICES)
    slots = max([2 * plan.micro_batches * plan.stages for plan in plans or []] + [DEVICES])
    mail = Mailboxes(slots, (setup.batch, setup.hidden))
    workers = [context.Process(target=_worker, args=(rank, setup, plans, mail, barrier, results))
               for rank in range(DEVICES)]
    saved = {name: os.environ.get(name) for name in QUIET_MALLOC}
    os.environ.update(QUIET_MALLOC)  # read by the workers' C library when they start
    try:
        for worker in workers:
            worker.start()
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    outs: dict[int, dict[str, Any]] = {}
    while len(outs) < DEVICES:
        try:
            rank, out = results.get(timeout=2)
            outs[rank] = out
        except queue.Empty:
            if any(worker.exitcode for worker in workers):  # the other one would wait for it forever
                for worker in workers:
                    worker.terminate()
                raise RuntimeError("a pipeline worker failed (its traceback is above)") from None
    for worker in workers:
        worker.join()
        if worker.exitcode:
            raise RuntimeError(f"a pipeline worker exited with status {worker.exitcode}")
    return outs


# --- the figures the simulator is given -------------------------------------------------------


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope of ``y = a + b x``, neither negative: a time per layer
    or per byte and a fixed cost. Tiny stages on a busy host can make the free fit's slope
    negative (a backward of -6.8 us per layer), which no scenario can take."""
    x = np.array([x for x, _ in points], dtype=float)
    y = np.array([y for _, y in points], dtype=float)
    scale = max(float(np.abs(x).max()), 1.0)  # x in bytes reaches 1e7: keep the columns comparable
    (intercept, slope), _ = nnls(np.column_stack([np.ones_like(x), x / scale]), y)
    return float(intercept), float(slope) / scale


def _one_way_seconds(outs: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Median one-way time per message size, from both workers' transfer stamps."""
    one_way = {}
    for nbytes, stamps in outs[0]["transfer_stamps"].items():
        other = outs[1]["transfer_stamps"][nbytes]
        # even i: rank 0 sends (its stamp first), odd i: rank 1 sends
        one_way[nbytes] = statistics.median(
            (other[i] - stamps[i]) if i % 2 == 0 else (stamps[i] - other[i]) for i in range(len(stamps)))
    return one_way


def _post_seconds(outs: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Median time of the sender's post (its copy and stamp) per message size, both workers'."""
    return {nbytes: statistics.median(seconds + outs[1]["post_seconds"][nbytes])
            for nbytes, seconds in outs[0]["post_seconds"].items()}


def _op_seconds(iteration: list[list[list[Any]]]) -> dict[str, list[float]]:
    """One measured iteration's op durations by pass (``F``, ``B``), every device's."""
    seconds: dict[str, list[float]] = {}
    for record in iteration:
        for label, start, end in record:
            seconds.setdefault(label[0], []).append(end - start)
    return seconds


def op_durations(capture: dict[str, Any]) -> dict[tuple[int, str], float]:
    """Median duration of the runs' ops by stage size (layers) and pass (``F``, ``B``), over every
    schedule and round."""
    durations: dict[tuple[int, str], list[float]] = {}
    for run in capture["runs"]:
        layers = capture["setup"]["layers"] // run["stages"]
        for iteration in run["iterations"]:
            for kind, seconds in _op_seconds(iteration).items():
                durations.setdefault((layers, kind), []).extend(seconds)
    return {key: statistics.median(values) for key, values in sorted(durations.items())}


def model_figures(capture: dict[str, Any]) -> dict[str, float]:
    """What the simulator is given: per-layer forward and backward seconds and the per-op fixed
    cost (a line through the runs' median op durations by stage size; before any run, through the
    stand-alone stage times), and the link's latency and bandwidth (a line through the one-way
    times by size)."""
    if "runs" in capture:
        durations = op_durations(capture)
        sizes = sorted({layers for layers, _ in durations})
        points = [{"layers": n, "forward_s": durations[(n, FORWARD)], "backward_s": durations[(n, BACKWARD)]}
                  for n in sizes]
    else:
        points = [point for rank in capture["stage_times"].values() for point in rank]
    forward_fixed, forward = _line([(p["layers"], p["forward_s"]) for p in points])
    backward_fixed, backward = _line([(p["layers"], p["backward_s"]) for p in points])
    latency, per_byte = _line([(float(nbytes), seconds) for nbytes, seconds in capture["one_way_s"].items()])
    return {"forward_s": forward, "backward_s": backward, "overhead_s": max((forward_fixed + backward_fixed) / 2, 0.0),
            "latency_s": max(latency, 0.0), "bandwidth": 1 / max(per_byte, 1 / MAX_COPY_BANDWIDTH)}


def op_time_variation(capture: dict[str, Any]) -> float:
    """The coefficient of variation of the runs' op times: each op's time over the median of its
    stage size and pass in the same iteration (so that the host's drift from one round to the next
    does not count), as a lognormal's (from the spread of the logarithms)."""
    logs = []
    for run in capture["runs"]:
        for iteration in run["iterations"]:
            for times in _op_seconds(iteration).values():
                middle = statistics.median(times)
                logs += [math.log(t / middle) for t in times]
    return math.sqrt(math.expm1(statistics.pstdev(logs) ** 2))


def scenario_for(capture: dict[str, Any], schedule: dict[str, Any], micro_batches: int,
                 variation: float = 0.0, iterations: int = 1, p2p: str = "blocking") -> dict[str, Any]:
    """The scenario that simulates one run of ``capture`` with its measured figures (and ops whose
    times vary by ``variation``, over ``iterations``). ``p2p``: the senders wait for their transfers,
    as the runs' do (their post takes nearly all of a transfer's time, ``post_s``), or not."""
    setup, figures = capture["setup"], model_figures(capture)
    hidden, batch = setup["hidden"], setup["batch"]
    return {
        "name": "pipeline-cpu-pair",
        "seed": 0,
        "hardware": {"nodes": {"cpu-pair": {
            "cpu": "epyc-7742", "host_memory": "64 GiB", "gpu": "a100", "gpus": DEVICES,
            # a GPU-to-GPU transfer crosses two hops (GPU, the node's switch, GPU), each the link's latency
            "gpu_link": {"bandwidth": f"{figures['bandwidth']:.6g} B/s",
                         "latency": f"{figures['latency_s'] / 2:.6g} s"},
            "pcie": {"bandwidth": "25 GB/s", "latency": "2 us"}, "nics": 1,
            "nic": {"bandwidth": "100 Gb/s", "latency": "2 us"}}}},
        "network": {"mode": "flow", "topology": {"kind": "gpu_cluster", "node": "cpu-pair", "nodes": 1}},
        "workload": {
            "kind": "pipeline_training", "dtype": "fp32", "optimizer": "sgd", "iterations": iterations,
            "op_time_variation": round(variation, 4), "p2p": p2p,
            "model": {"kind": "uniform", "layers": setup["layers"], "forward": f"{figures['forward_s']:.6g} s",
                      "backward": f"{figures['backward_s']:.6g} s", "params": hidden * hidden + hidden,
                      "stash": f"{8 * batch * hidden} B", "boundary": f"{setup['boundary_bytes']} B"},
            "micro_batch_size": batch, "micro_batches": micro_batches,
            "stage_overhead": f"{figures['overhead_s']:.6g} s", "schedule": schedule},
        "outputs": {"trace": False, "timeline": False},
    }


def simulate_run(capture: dict[str, Any], schedule: dict[str, Any], micro_batches: int,
                 variation: float = 0.0, iterations: int = 1, p2p: str = "blocking") -> RunResult:
    """Simulate one run of ``capture`` (its plan: ``result.workload.plan``; its trace: ``result.sim.trace``)."""
    from simhpc.scenario.loader import scenario_from_dict

    source = "pipeline_capture"
    data = scenario_for(capture, schedule, micro_batches, variation, iterations, p2p)
    return simulate(scenario_from_dict(data, source), source)


# --- measuring, comparing ---------------------------------------------------------------------


def measure(setup: Setup, schedules: Sequence[dict[str, Any]] = SCHEDULES) -> dict[str, Any]:
    """Measure stand-alone stage times and transfers, plan every run as the simulator does with
    them, run the plans (measuring the transfers again in every round); return the capture."""
    first = _on_workers(setup, None)
    capture: dict[str, Any] = {
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
        "setup": {"hidden": setup.hidden, "batch": setup.batch, "layers": setup.layers,
                  "iterations": setup.iterations, "boundary_bytes": setup.boundary_bytes},
        "stage_times": {str(rank): first[rank]["stage_times"] for rank in range(DEVICES)},
        "one_way_s": _one_way_seconds(first),
        "post_s": _post_seconds(first),
    }
    runs = [{"schedule": schedule, "micro_batches": m} for m in setup.micro_batches for schedule in schedules]
    plans = [simulate_run(capture, run["schedule"], run["micro_batches"]).workload.plan  # type: ignore[attr-defined]
             for run in runs]
    outs = _on_workers(setup, plans)
    capture["one_way_s"] = _one_way_seconds(outs)
    capture["post_s"] = _post_seconds(outs)
    for index, (run, plan) in enumerate(zip(runs, plans)):
        run["stages"] = plan.stages
        run["plan"] = written_out(plan)
        run["iterations"] = []
        for records in zip(*(outs[rank]["runs"][index] for rank in range(DEVICES))):
            origin = min(start for record in records for _, start, _ in record)
            run["iterations"].append([[[label, round(start - origin, 7), round(end - origin, 7)]
                                       for label, start, end in record] for record in records])
    capture["runs"] = runs
    return capture


def measured_iteration(iteration: list[list[list[Any]]]) -> tuple[float, float]:
    """Makespan and bubble fraction of one measured iteration."""
    makespan = max(end for record in iteration for _, _, end in record)
    busy = sum(end - start for record in iteration for _, start, end in record)
    return makespan, 1 - busy / (len(iteration) * makespan)


SIMULATED_ITERATIONS = 31
"""Iterations simulated with varying op times (their median iteration is compared)."""


def compare(capture: dict[str, Any]) -> list[dict[str, Any]]:
    """Per run: the measured iteration time (median over rounds), the simulated one with every op
    at its median time and with the measured op-time variation (median over
    :data:`SIMULATED_ITERATIONS`), bubble fractions, and the gain over 1F1B at the same m
    (measured: the median over rounds of the two runs of a round)."""
    variation = op_time_variation(capture)
    rows = []
    for run in capture["runs"]:
        summary = simulate_run(capture, run["plan"], run["micro_batches"]).summary["workload"]
        varied = simulate_run(capture, run["plan"], run["micro_batches"], variation,
                              SIMULATED_ITERATIONS).summary["workload"]
        rounds = [measured_iteration(iteration) for iteration in run["iterations"]]
        rows.append({"schedule": run["schedule"], "micro_batches": run["micro_batches"], "stages": run["stages"],
                     "rounds": [makespan for makespan, _ in rounds],
                     "measured_s": statistics.median(makespan for makespan, _ in rounds),
                     "measured_bubble": statistics.median(bubble for _, bubble in rounds),
                     "simulated_s": summary["iteration_time_s"], "simulated_bubble": summary["bubble_fraction"],
                     "varied_s": statistics.median(varied["iteration_times_s"])})
    baseline = {row["micro_batches"]: row for row in rows if row["schedule"] == {"kind": "1f1b"}}
    for row in rows:
        base = baseline[row["micro_batches"]]
        row["measured_gain"] = statistics.median(b / t - 1 for b, t in zip(base["rounds"], row["rounds"]))
        row["simulated_gain"] = base["simulated_s"] / row["simulated_s"] - 1
        row["varied_gain"] = base["varied_s"] / row["varied_s"] - 1
    return rows


def schedule_name(schedule: dict[str, Any]) -> str:
    """``prt k=2 v_shape`` and the like."""
    return " ".join([schedule["kind"]] + [f"{key}={value}" if key != "mapping" else str(value)
                                         for key, value in schedule.items() if key != "kind"])


def report(capture: dict[str, Any]) -> None:
    """Print the comparison table."""
    figures = model_figures(capture)
    print(f"per layer: forward {figures['forward_s'] * 1e3:.3f} ms, backward {figures['backward_s'] * 1e3:.3f} ms; "
          f"per op {figures['overhead_s'] * 1e6:.0f} us; link {figures['latency_s'] * 1e6:.0f} us + "
          f"{figures['bandwidth'] / 1e9:.2f} GB/s")
    print(f"op time variation (coefficient, within an iteration): {op_time_variation(capture):.3f}")
    if "post_s" in capture:  # captures before session 59 did not time the posts
        print("sender's post / one-way time by message size: " + ", ".join(
            f"{int(nbytes)} B {capture['post_s'][nbytes] * 1e6:.0f} / {seconds * 1e6:.0f} us"
            for nbytes, seconds in capture["one_way_s"].items()))
    rows = compare(capture)
    print(f"{'':30} {'iteration ms':^31} | {'bubble':^13} | {'gain over 1F1B':^23}")
    print(f"{'schedule':22} {'m':>3} {'D':>3} {'measured':>9} {'median':>10} {'varied':>10} | "
          f"{'meas':>6} {'sim':>6} | {'meas':>7} {'median':>7} {'varied':>7}")
    for row in rows:
        versus = {key: f"{row[key] / row['measured_s'] - 1:+.1%}" for key in ("simulated_s", "varied_s")}
        print(f"{schedule_name(row['schedule']):22} {row['micro_batches']:3} {row['stages']:3} "
              f"{row['measured_s'] * 1e3:9.1f} {versus['simulated_s']:>10} {versus['varied_s']:>10} | "
              f"{row['measured_bubble']:6.3f} {row['simulated_bubble']:6.3f} | "
              f"{row['measured_gain']:+7.1%} {row['simulated_gain']:+7.1%} {row['varied_gain']:+7.1%}")


def default_capture(setup: Setup) -> Path:
    """This machine's capture file: ``pipeline_captures/<its calibration's name>.json.gz`` (apart
    from ``captures/``, whose files are torch.profiler traces), ``-h<hidden>-b<batch>-l<layers>``
    before the suffix for another model than :class:`Setup`'s."""
    from simhpc.hardware.host import default_calibration

    model = "" if setup == Setup() else f"-h{setup.hidden}-b{setup.batch}-l{setup.layers}"
    return HERE / "pipeline_captures" / f"{default_calibration().stem}{model}.json.gz"


def read_capture(path: Path) -> dict[str, Any]:
    """A capture file (gzip-compressed JSON)."""
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return json.load(stream)


def write_capture(capture: dict[str, Any], path: Path) -> None:
    """Write ``capture`` compactly (no timestamp in the gzip header: the same capture, the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as stream:
        stream.write(json.dumps(capture, separators=(",", ":")).encode("utf-8"))


def export(capture: dict[str, Any], folder: Path) -> None:
    """Per run, its median round as a Chrome trace (``<run>.measured.json``, a track per device)
    and the scenario that simulates it (``<run>.yaml``: ``simhpc run`` it for the simulated trace)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    for run in capture["runs"]:
        name = f"{schedule_name(run['schedule']).replace(' ', '_').replace('=', '')}_m{run['micro_batches']}"
        rounds = sorted(run["iterations"], key=lambda iteration: measured_iteration(iteration)[0])
        events = [{"name": label, "cat": "forward" if label[0] == FORWARD else "backward", "ph": "X",
                   "ts": start * 1e6, "dur": (end - start) * 1e6, "pid": "measured", "tid": f"device {device}"}
                  for device, record in enumerate(rounds[len(rounds) // 2]) for label, start, end in record]
        (folder / f"{name}.measured.json").write_text(json.dumps({"traceEvents": events}))
        scenario = scenario_for(capture, run["plan"], run["micro_batches"])
        scenario["outputs"] = {"trace": True, "timeline": True}
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    print(f"wrote {2 * len(capture['runs'])} files to {folder}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="capture file (default: pipeline_captures/<machine>.json.gz)")
    parser.add_argument("--hidden", type=int, default=Setup.hidden, help="width of the layers")
    parser.add_argument("--batch", type=int, default=Setup.batch, help="samples per micro-batch")
    parser.add_argument("--layers", type=int, default=Setup.layers, help="layers (a multiple of 8: depth 2 to 8)")
    parser.add_argument("--report", action="store_true", help="compare the capture file only, measure nothing")
    parser.add_argument("--export", type=Path, metavar="DIR",
                        help="also write each run's measured trace and its scenario to DIR")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--report | head` ends quietly
    setup = Setup(hidden=args.hidden, batch=args.batch, layers=args.layers)
    if min(setup.hidden, setup.batch) < 1 or setup.layers < 8 or setup.layers % 8:
        parser.error("--hidden and --batch take positive numbers, --layers a multiple of 8")
    path = args.out or default_capture(setup)
    if args.report:
        capture = read_capture(path)
    else:
        capture = measure(setup)
        write_capture(capture, path)
        print(f"wrote {path}")
    report(capture)
    if args.export:
        export(capture, args.export)


if __name__ == "__main__":
    main()
