"""The framework's own costs in a profiled step: dispatch of kernel-free ops, gaps between ops.

The calibration measures each cost twice (``validation/microbench/dispatch.py``): in a loop of
tiny ops, whose interpreter and dispatcher state stays in the core's private caches, and right
after a fill of 16 MiB (``_cold``), as after an op of a real step that moved megabytes (a traced
``aten::view`` took 2.5-3 us in the captures on the Xeon reference, 0.4 us warm, 5.2 us cold; a
gap between two Python-called ops 9-49 us, 1.5 us warm, 25 us cold). A cost is charged cold when the op before
it moved at least a private cache's worth of bytes (the last op with a kernel, for a kernel-free
op), or touched that much in distinct tensors (:class:`Footprint`; the previous top-level op with
everything it ran, for a gap), else warm. (By the bytes moved, a GRU's backward nodes, which add
into the same three 196 KiB weight gradients every time step, were each followed by a cold 46 us
gap instead of a warm 8 us one: the GRU capture's step +27.7 -> +20.0 %.) Calibrations
without cold points charge the warm cost throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from simhpc.costs.kernels import Kernel, dtype_bytes
from simhpc.costs.model import CostModel
from simhpc.costs.op_arguments import is_shape
from simhpc.trace.readers import OpRecord, Trace


def overhead_of(model: CostModel) -> Callable[[str], float]:
    """The model's profiled framework cost by name (0 for a model without a calibration)."""
    return getattr(model.efficiency, "framework_overhead_s", lambda what: 0.0)


def private_cache(model: CostModel) -> float:
    """Bytes of one core's private cache on the calibrated host (infinite without a calibration:
    nothing is ever cold)."""
    return getattr(model.efficiency, "private_cache_bytes", math.inf)


def cost_after(model: CostModel, what: str, moved: float) -> float:
    """``what`` (``no_kernel_op``, ``call_gap``, ``engine_gap``) after an op that moved (or
    touched) ``moved`` bytes: its cold value when that is at least a private cache and the
    calibration has one."""
    overhead = overhead_of(model)
    if moved >= private_cache(model):
        return overhead(f"{what}_cold") or overhead(what)
    return overhead(what)


def last_level_cache(model: CostModel) -> float:
    """Bytes of the calibrated host's last-level cache (infinite without a calibration)."""
    calibration = getattr(model.efficiency, "calibration", None)
    return float(calibration.host.last_level_cache) if calibration is not None else math.inf


def tensor_bytes(op: OpRecord, kernel: Kernel) -> dict[tuple[int, ...], float]:
    """Per input shape of ``op`` (carrying ``kernel``), the bytes of its inputs of that shape at
    the kernel's element width; empty for an op without recorded shapes."""
    shapes = [tuple(s) for s in op.shapes if s and is_shape(s)]
    width = dtype_bytes(kernel.dtype)
    return {shape: shapes.count(shape) * math.prod(shape) * width for shape in set(shapes)}


class Footprint:
    """Bytes of distinct tensors a run of ops touched: per tensor shape, as many of that shape as
    one op read. A temporary freed moments before comes back at the same address from the
    allocator, so a recurrent cell's dozen ops on a few small tensors touch a few of them, not a
    dozen. An op without recorded shapes adds the bytes it moves."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[int, ...], float] = {}
        self._loose = 0.0

    def add(self, op: OpRecord, kernel: Kernel) -> None:
        """Count what ``op`` (carrying ``kernel``) touched."""
        tensors = tensor_bytes(op, kernel)
        if not tensors:
            self._loose += kernel.bytes()
        for shape, nbytes in tensors.items():
            self._shapes[shape] = max(self._shapes.get(shape, 0.0), nbytes)

    @property
    def bytes(self) -> float:
        """The bytes touched so far."""
        return self._loose + sum(self._shapes.values())


def subtree_footprint(trace: Trace, kernels: dict[int, Kernel], tops: Iterable[OpRecord]) -> dict[int, float]:
    """The :class:`Footprint` of each op of ``tops`` with everything below it (``kernels``: the
    ops with a kernel, by op index)."""
    result: dict[int, float] = {}
    for top in tops:
        footprint = Footprint()
        stack = [top.index]
        while stack:
            op = trace.ops[stack.pop()]
            stack.extend(op.children)
            if op.index in kernels:
                footprint.add(op, kernels[op.index])
        result[top.index] = footprint.bytes
    return result


def in_time_order(ops: Iterable[OpRecord]) -> list[OpRecord]:
    """``ops`` by start time (then index)."""
    return sorted(ops, key=lambda op: (op.start, op.index))
