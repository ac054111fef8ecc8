"""The framework's own cost per op, as torch.profiler records it.

A profiled step holds, besides the ops' work, PyTorch's dispatch of every op (argument parsing,
the dispatcher, autograd's bookkeeping, the profiler's own record) and the time between ops: the
Python program's between the ops it calls, the autograd engine's between the backward ops it runs.
On a model of many small ops (a GRU cell's, a tiny MLP's) they are most of the step. This loop
runs, from Python under ``torch.profiler`` with ``record_shapes=True`` (as the traces
``simhpc compare`` reads are recorded), kernel-free view ops (``t``, ``view``: ``aten::t`` ->
``aten::transpose`` -> ``aten::as_strided``) and a chain of tiny ops on an 8 x 8 tensor that
requires its gradient (``mul``, ``relu``), then its backward, and reads its own export back:

- ``no_kernel_op``: the median self time of an op that computes nothing (a view, a wrapper);
- ``call_gap``: the median time between two top-level ops the Python program calls;
- ``engine_gap``: the median time between two top-level ops the autograd engine calls (each in
  its ``autograd::engine::evaluate_function`` node);
- the same three ``_cold``: right after a fill of ``SWEEP_BYTES``, as after an op of a real step
  that moved megabytes and so pushed the interpreter's and the dispatcher's state out of the
  core's private caches (on the Xeon reference 5.2, 25 and 48 us against 0.4, 1.5 and 3.9).

A training step also holds three transitions, each once a step: its start (the profiler's step
mark to its first op: the loop's own code, ``zero_grad``), the backward's entry (``loss.backward()``
to the first op the autograd engine runs) and its exit (the engine's last op to the next op Python
calls: the graph's release and the optimizer's code before its first op). Their code runs once a
step, so the whole step's traffic has evicted it, and they grow with what the step moved: in an
MLP training loop of four layers on the Xeon reference from 36 / 27 / 71 us at width 64 to
177 / 131 / 424 us at width 2048. They also do work per parameter tensor (``zero_grad``, the
optimizer's set-up) or per autograd node (the engine's set-up): at width 64, 128 layers take
466 / 271 / 1162 us. ``measure_transition`` profiles such loops (``TRAINING_WIDTHS`` at
``TRAINING_LAYERS``, ``TRAINING_DEPTHS`` at the narrowest width) and keeps, per transition and
loop, the median and a step's work as ``simhpc compare`` counts it (``step_bytes``,
``graph_nodes``, ``parameters``: :class:`simhpc.trace.step_ops.StepWork`).

And ``evicted_call`` (:func:`measure_evicted_call`): what a tiny ATen call takes over its time in a
loop when a training step ran since its last call, as for an op called once a step (a
classifier's ``addmm``, the loss), whose code and predictor state the step's traffic and code
evict from the last-level cache (``simhpc/trace/evicted_code.py`` charges it).

Skipped without torch.
"""

from __future__ import annotations

import bisect
import statistics
import tempfile
from collections.abc import Callable
from functools import cache
from itertools import pairwise
from pathlib import Path

from .gemm import torch_threads

CALLS = 500
"""Iterations of the profiled loop (two view ops, a six-op chain and its backward each)."""
SWEEP_BYTES = 16 << 20
"""Filled between the ops of the cold loop: 8x the 2 MiB private L2 of the Xeon reference."""
WHAT = ("no_kernel_op", "call_gap", "engine_gap", "no_kernel_op_cold", "call_gap_cold", "engine_gap_cold")
TRANSITIONS = ("step_start", "backward_entry", "backward_exit")
TRAINING_WIDTHS = (64, 512, 2048)
"""Widths of the profiled MLP training loop (four ``Linear(w, w)`` + ReLU, batch ``TRAINING_BATCH``,
SGD): steps touching about 2 MB, 26 MB and 290 MB."""
TRAINING_LAYERS = 4
TRAINING_DEPTHS = (16, 64, 128)
"""Layer counts of the depth sweep, at the narrowest width: 32 to 256 parameter tensors, whose
``zero_grad``, engine set-up and optimizer set-up visit each (the width sweep has ``TRAINING_LAYERS``)."""
TRAINING_BATCH = 128
TRAINING_STEPS = 12
"""Profiled steps per width (after three unprofiled steps and the profiler's warm-up one)."""


@cache
def _profiled_costs(cold: bool) -> dict[str, list[float]]:
    """Self times of the loop's kernel-free ops and the gaps between its top-level ops (seconds).

    ``cold``: every op follows a fill of ``SWEEP_BYTES`` (in the backward, a node whose backward
    fills), as in a step whose ops move megabytes: the interpreter's and the dispatcher's state is
    then out of the core's private caches, and only the costs right after a fill are kept."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from simhpc.trace.readers import read_trace
    from simhpc.trace.step_ops import FRAMEWORK_KINDS, engine_called, outermost

    x = torch.randn(8, 8)
    w = torch.randn(8, 8, requires_grad=True)
    sweep = torch.empty(SWEEP_BYTES // 4)

    class Sweep(torch.autograd.Function):
        """The identity, whose forward and backward both fill the sweep buffer."""

        @staticmethod
        def forward(ctx: object, y: torch.Tensor) -> torch.Tensor:
            sweep.fill_(1.0)
            return y.view_as(y)

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            sweep.fill_(1.0)
            return grad

    def evict() -> None:
        if cold:
            sweep.fill_(1.0)

    def step() -> None:
        evict()
        x.t()
        evict()
        x.view(64)
        y = w
        for _ in range(3):
            y = torch.relu(y * 1.01)
            if cold:
                y = Sweep.apply(y)
        y.sum().backward()

    with torch_threads(1):
        for _ in range(CALLS // 10):
            step()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(CALLS):
                step()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "dispatch.json"
            prof.export_chrome_trace(str(path))
            trace = read_trace(path)
    ops = sorted((op for op in trace.ops if op.kind in FRAMEWORK_KINDS), key=lambda op: op.start)

    def swept(op: object) -> bool:  # a fill of the sweep buffer, or an op that ran one inside
        return not cold or any(trace.ops[i].name == "aten::fill_" for i in _subtree(trace, op))

    top = [op for op in ops if outermost(trace, op)]
    gaps: dict[bool, list[float]] = {False: [], True: []}
    for a, b in pairwise(top):
        by_engine = engine_called(trace, a)
        if by_engine == engine_called(trace, b) and swept(a):
            gaps[by_engine].append(max(0.0, b.start - a.end))
    views = [b.self_time for a, b in pairwise(ops) if b.kind == "view" and (not cold or a.name == "aten::fill_")]
    return {"no_kernel_op": views, "call_gap": gaps[False], "engine_gap": gaps[True]}


def _subtree(trace: object, op: object) -> list[int]:
    """``op`` and every op below it, by index."""
    found, stack = [], [op.index]
    while stack:
        index = stack.pop()
        found.append(index)
        stack.extend(trace.ops[index].children)
    return found


def measure_dispatch(what: str) -> dict:
    """One of ``WHAT``: its median over the profiled loop, with the spread (half the IQR)."""
    values = sorted(_profiled_costs(what.endswith("_cold"))[what.removesuffix("_cold")])
    quartiles = statistics.quantiles(values, n=4)
    return {"library": "torch", "what": what, "threads": 1, "time_s": statistics.median(values),
            "spread_s": (quartiles[2] - quartiles[0]) / 2, "samples": len(values)}


@cache
def _profiled_transitions(width: int, layers: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(a step's median work: ``step_bytes``, ``graph_nodes``, ``parameters``; transition -> its
    gaps in seconds) of an MLP training loop of ``layers`` layers of ``width``, profiled as
    ``validation/traces/capture.py`` profiles its models."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule

    from simhpc.trace.framework_costs import subtree_footprint
    from simhpc.trace.op_predictions import traced_kernel
    from simhpc.trace.readers import read_trace
    from simhpc.trace.step_ops import FRAMEWORK_KINDS, step_work, top_level_ops, transition_before

    torch.manual_seed(0)
    model = nn.Sequential(*[layer for _ in range(layers) for layer in (nn.Linear(width, width), nn.ReLU())])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(TRAINING_BATCH, width), torch.randn(TRAINING_BATCH, width)

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    with torch_threads(1):
        for _ in range(2):
            step()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                     schedule=schedule(wait=1, warmup=1, active=TRAINING_STEPS, repeat=1)) as prof:
            for _ in range(TRAINING_STEPS + 2):
                step()
                prof.step()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "training.json"
            prof.export_chrome_trace(str(path))
            trace = read_trace(path)
    kernels = {}
    for op in trace.ops:
        if op.kind in FRAMEWORK_KINDS and op.step is not None:
            kernel = traced_kernel(trace, op).kernel
            if kernel is not None:
                kernels[op.index] = kernel
    top = top_level_ops(trace)
    starts = {step.number: step.start for step in trace.steps}
    gaps: dict[str, list[float]] = {what: [] for what in TRANSITIONS}
    previous = None
    for op in top:
        what = transition_before(trace, previous, op)
        if what is not None:
            gaps[what].append(op.start - (starts[op.step] if what == "step_start" else previous.end))
        previous = op
    work = list(step_work(trace, top, subtree_footprint(trace, kernels, top)).values())
    median = {"step_bytes": statistics.median(w.touched_bytes for w in work),
              "graph_nodes": statistics.median(w.graph_nodes for w in work),
              "parameters": statistics.median(w.parameters for w in work)}
    return median, gaps


def measure_transition(what: str, width: int, layers: int = TRAINING_LAYERS) -> dict:
    """One of ``TRANSITIONS`` in the training loop of ``layers`` layers of ``width``: its median
    over the profiled steps, with the spread (half the IQR) and a step's work (bytes touched,
    autograd nodes, parameter tensors)."""
    work, gaps = _profiled_transitions(width, layers)
    values = sorted(gaps[what])
    quartiles = statistics.quantiles(values, n=4)
    return {"library": "torch", "what": what, "threads": 1, "width": width, "layers": layers, **work,
            "time_s": statistics.median(values), "spread_s": (quartiles[2] - quartiles[0]) / 2,
            "samples": len(values)}


EVICTED_CALLS = 40
"""Probe calls of :func:`measure_evicted_call`, each after a training step of ``_evicting_step``."""
EVICTING_FILL_BYTES = 128 << 20
"""Filled in each evicting step after the network's: past the last-level cache of the machines
simhpc is calibrated on (32 MiB on the EPYC guests), whatever the network moved."""


def _evicting_step(with_fill: bool = True) -> Callable[[], None]:
    """A training step of a small CNN (two 3 x 3 convolutions, ReLU, max pooling, a mean over
    the image, cross-entropy, SGD) and, ``with_fill``, a fill of ``EVICTING_FILL_BYTES``: its own
    code and data, as the rest of a real training step runs between two calls of a once-a-step op."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    images, labels = torch.randn(32, 3, 32, 32), torch.randint(0, 64, (32,))
    fill = torch.empty(EVICTING_FILL_BYTES // 4 if with_fill else 0)

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(images).mean((2, 3)), labels).backward()
        optimizer.step()
        fill.fill_(1.0)

    return step


def _probe() -> Callable[[], None]:
    """The ops timed by :func:`measure_evicted_call`: a tiny linear layer whose weight needs its
    gradient (``linear``, ``t``, ``addmm`` and the bias's ``expand`` and ``copy_``) and three tiny
    elementwise ops and a sum on its output, all on 8 x 8 tensors, so that a call's time is its
    code's and not its data's."""
    import torch
    from torch import nn

    x, weight, bias = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True), torch.randn(8)

    def probe() -> None:
        y = nn.functional.linear(x, weight, bias)
        torch.sigmoid(torch.tanh(y).exp()).sum()

    return probe


@cache
def _probe_self_times(evict: bool, fill: bool = True) -> tuple[list[str], list[list[float]], set[str]]:
    """(the probe's ops by name, in call order; per op, its self times over the calls; the names
    of the ops run outside the probe) of ``EVICTED_CALLS`` profiled probe calls, each after an
    evicting step (``evict``; with its fill or not, ``fill``) or right after the one before."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from simhpc.trace.readers import read_trace
    from simhpc.trace.step_ops import FRAMEWORK_KINDS

    probe = _probe()
    evicting = _evicting_step(fill) if evict else (lambda: None)
    with torch_threads(1):
        for _ in range(3):
            evicting()
            probe()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(EVICTED_CALLS):
                evicting()
                with torch.profiler.record_function("probe"):
                    probe()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "evicted.json"
            prof.export_chrome_trace(str(path))
            trace = read_trace(path)
    windows = sorted((op.start, op.end) for op in trace.ops if op.name == "probe")
    starts = [start for start, _ in windows]
    calls: list[list[object]] = [[] for _ in windows]
    outside: set[str] = set()
    for op in sorted((op for op in trace.ops if op.kind in FRAMEWORK_KINDS), key=lambda op: (op.start, op.index)):
        window = bisect.bisect_right(starts, op.start) - 1
        if window >= 0 and op.start < windows[window][1]:
            calls[window].append(op)
        else:
            outside.add(op.name)
    names = [op.name for op in calls[0]]
    same = [call for call in calls if [op.name for op in call] == names]
    return names, [[call[i].self_time for call in same] for i in range(len(names))], outside


PROBE_PRODUCT = "aten::addmm"
"""The probe's BLAS product: its own extra is the ``product_extra_s`` of ``evicted_call``."""


def measure_evicted_call() -> dict:
    """``evicted_call``: what an ATen call whose code a training step evicted takes over the same
    call repeated (its self time: its dispatch, autograd's bookkeeping, the profiler's record and
    the start of its kernel): the mean over the probe's ops of their median differences, with
    their spread (half the IQR of the differences) and the ops it was taken over (``probe_ops``:
    those the evicting step does not run too; the others' code it leaves in cache). And
    ``product_extra_s``, the probe's product's own difference after the network's step alone (no
    fill): the first BLAS call after the other kernels of a step fetches the library's code as
    well as its own (on the EPYC Zen 5 guest a tiny ``addmm`` 29-40 us over its 2 us repeated,
    54-58 us after the fill too, where the probe ops' mean is 9-10 / 14-15 us; a real step's
    classifier head after convolutions paid 25-35 us more than after a tiny product,
    ``validation/README.md``, session 52)."""
    names, cold, outside = _probe_self_times(True)
    warm_names, warm, _ = _probe_self_times(False)
    if names != warm_names:
        raise RuntimeError(f"the probe ran {names} after an evicting step, {warm_names} in a row")
    kept = [i for i, name in enumerate(names) if name not in outside]
    extras = [statistics.median(cold[i]) - statistics.median(warm[i]) for i in kept]
    quartiles = statistics.quantiles(extras, n=4) if len(extras) > 1 else [0.0, 0.0, 0.0]
    row = {"library": "torch", "what": "evicted_call", "threads": 1, "time_s": max(0.0, statistics.mean(extras)),
           "spread_s": (quartiles[2] - quartiles[0]) / 2, "samples": len(cold[0]) if cold else 0,
           "probe_ops": [names[i] for i in kept]}
    if PROBE_PRODUCT in row["probe_ops"]:
        step_names, step_cold, _ = _probe_self_times(True, fill=False)
        if step_names == names:
            at = names.index(PROBE_PRODUCT)
            row["product_extra_s"] = max(0.0, statistics.median(step_cold[at]) - statistics.median(warm[at]))
    return row
