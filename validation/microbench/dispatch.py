"""The framework's own cost per op, as torch.profiler records it.

A profiled step holds, besides the ops' work, PyTorch's dispatch of every op (argument parsing,
the dispatcher, autograd's bookkeeping, the profiler's own record) and the time between the ops
a Python program calls. On a model of many small ops (a GRU cell's, a tiny MLP's) they are most
of the step. This loop runs kernel-free view ops (``t``, ``view``: ``aten::t`` ->
``aten::transpose`` -> ``aten::as_strided``) and tiny computing ones (``add``, ``relu`` ->
``clamp_min``) on 8 x 8 tensors from Python under ``torch.profiler`` with ``record_shapes=True``,
as the traces ``simhpc compare`` reads are recorded, and reads its own export back:

- ``no_kernel_op``: the median self time of an op that computes nothing (a view, a wrapper);
- ``call_gap``: the median time between one top-level op's end and the next one's start.

Skipped without torch.
"""

from __future__ import annotations

import statistics
import tempfile
from functools import cache
from itertools import pairwise
from pathlib import Path

from .gemm import torch_threads

CALLS = 2000
"""Iterations of the profiled loop (four top-level ops each)."""
WHAT = ("no_kernel_op", "call_gap")


@cache
def _profiled_costs() -> dict[str, list[float]]:
    """Self times of the loop's kernel-free ops and the gaps between its top-level ops (seconds)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from simhpc.trace.compare import FRAMEWORK_KINDS
    from simhpc.trace.readers import read_trace

    x, y = torch.randn(8, 8), torch.randn(8, 8)

    def step() -> None:
        x.t()
        z = torch.add(x, y)
        z.view(64)
        torch.relu(z)

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
    ops = [op for op in trace.ops if op.kind in FRAMEWORK_KINDS]
    top = sorted((op for op in ops if op.parent is None), key=lambda op: op.start)
    return {
        "no_kernel_op": [op.self_time for op in ops if op.kind == "view"],
        "call_gap": [max(0.0, b.start - a.end) for a, b in pairwise(top)],
    }


def measure_dispatch(what: str) -> dict:
    """One of ``WHAT``: its median over the profiled loop, with the spread (half the IQR)."""
    values = sorted(_profiled_costs()[what])
    quartiles = statistics.quantiles(values, n=4)
    return {"library": "torch", "what": what, "threads": 1, "time_s": statistics.median(values),
            "spread_s": (quartiles[2] - quartiles[0]) / 2, "samples": len(values)}
