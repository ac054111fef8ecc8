"""The framework's own costs in a profiled step: dispatch of kernel-free ops, gaps between ops.

The calibration measures each cost twice (``validation/microbench/dispatch.py``): in a loop of
tiny ops, whose interpreter and dispatcher state stays in the core's private caches, and right
after a fill of 16 MiB (``_cold``), as after an op of a real step that moved megabytes (a traced
``aten::view`` took 2.5-3 us in the captures on the Xeon reference, 0.4 us warm, 5.2 us cold; a
gap between two Python-called ops 9-49 us, 1.5 us warm, 25 us cold). A cost is charged cold when the op before
it (the last op with a kernel, for a kernel-free op; the previous top-level op with everything
it ran, for a gap) moved at least a private cache's worth of bytes, else warm. Calibrations
without cold points charge the warm cost throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from simhpc.costs.model import CostModel
from simhpc.trace.readers import OpRecord, Trace


def overhead_of(model: CostModel) -> Callable[[str], float]:
    """The model's profiled framework cost by name (0 for a model without a calibration)."""
    return getattr(model.efficiency, "framework_overhead_s", lambda what: 0.0)


def private_cache(model: CostModel) -> float:
    """Bytes of one core's private cache on the calibrated host (infinite without a calibration:
    nothing is ever cold)."""
    return getattr(model.efficiency, "private_cache_bytes", math.inf)


def cost_after(model: CostModel, what: str, moved: float) -> float:
    """``what`` (``no_kernel_op``, ``call_gap``, ``engine_gap``) after an op that moved ``moved``
    bytes: its cold value when that is at least a private cache and the calibration has one."""
    overhead = overhead_of(model)
    if moved >= private_cache(model):
        return overhead(f"{what}_cold") or overhead(what)
    return overhead(what)


def subtree_bytes(trace: Trace, kernel_bytes: dict[int, float]) -> list[float]:
    """Bytes every op moved with everything below it, from its ops' kernels (by op index; the
    readers index a parent before its children, so one backward pass sums them)."""
    moved = [0.0] * len(trace.ops)
    for op in reversed(trace.ops):
        moved[op.index] = kernel_bytes.get(op.index, 0.0) + sum(moved[child] for child in op.children)
    return moved


def in_time_order(ops: Iterable[OpRecord]) -> list[OpRecord]:
    """``ops`` by start time (then index)."""
    return sorted(ops, key=lambda op: (op.start, op.index))
