"""What a traced elementwise op or reduction fetches from memory inside a training step.

With ``cache="cold"`` (what ``compare`` uses) a memory-bound op is no faster than the cold ``add``
points give the bytes it fetches (its inputs, and its outputs unless it writes in place): single
calls after a cache flush, as if every input came from DRAM. Inside a step many do not: a ReLU
reads the image the convolution before it has just written, the gradient of that ReLU the image
the pooling's backward has just written. The lines of a tensor written ``d`` bytes of traffic ago
are still in a cache of ``C`` bytes (the calibration's effective cache,
:meth:`~simhpc.costs.calibration_file.Calibration.effective_cache_bytes`) where least-recently used
lines leave first: a tensor of ``s`` bytes, written line after line, has ``min(1, (C - d) / s)`` of
them left. That share of the op's inputs is cached, and the op takes that share of its warm (loop)
time plus the rest of its fetched bytes at the cold rate
(:meth:`~simhpc.costs.stream_curves.StreamCurves.stream_time`).

The trace does not say which tensor an op reads, only its shape and dtype. An input is taken to be
a tensor an earlier op wrote when it has the same shape and dtype (the same element count where the
write's shape is not in the trace: a product's, a reduction's, a pooling's output). Each write
matches one input at most, the most recent first: a ReLU's gradient reads the gradient just written
and its forward's output, of the same shape but written long before. An op's writes are the new
tensors it makes (its outputs) and the tensor ``copy_``, ``fill_`` or ``zero_`` overwrites; an op
nested in another that writes a tensor of the same size writes that one (the ``zero_`` that clears
a pooling backward's gradient before the backward fills it). An in-place update (``x.mul_(y)``) is
not a write here: it updates a tensor that exists, an optimizer's state or a parameter, of which a
model has one per layer of the same shape, so the next layer's update would be matched to this
one's. Counting them took eighteen plain captures' (AdamW, one update chain per parameter) mean
absolute step error from 12.1 to 16.0 % (14.4 % without them); not counting them misses the second
op of a chain of updates of one tensor.

Outputs are fetched before they are written (their blocks were mostly freed long before: counting
them cached took the Zen 4 guest's elementwise totals 10-35 points lower, to -9..-47 %).

Measured on the EPYC Zen 4 guest (``validation/traces/reuse_chain.py``, 1 thread): a ``mul`` of two
2 MiB tensors just written, into a block written long before, took 192-241 us, against 65 us in a
loop on the same arrays and 334-339 us after a 128 MiB fill (modelled 126, 70 and 240 us). In the
fresh checks' CNN (``accuracy59``, 1 thread) the first ReLU (8 MiB in, 8 MiB out, its input the
convolution's output) took 276 us, charged 690 us from DRAM before and 446 us now; its gradient
633 us, 1066 before and 823 now. Over fifteen fresh checks the elementwise ops' MAPE went
55.2 -> 43.6 % (``validation/README.md``, session 41).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from simhpc.costs.kernels import Copy, Elementwise, FrameworkOp, Gemm, Kernel, Reduction, dtype_bytes
from simhpc.costs.model import CostModel
from simhpc.costs.op_arguments import dtype_of, tensors_of
from simhpc.costs.opmap import OVERWRITTEN
from simhpc.costs.opnames import base_name, in_place

Tensor = tuple[int, str, tuple[int, ...] | None]
"""A tensor as the trace knows it: its element count, dtype and shape (None where the trace does
not say: a product's, a reduction's or a pooling's output)."""


def charge_streams(predictions: Sequence[Any], model: CostModel, threads: int) -> None:
    """Re-time every elementwise op and reduction of ``predictions`` (``OpPrediction``s, any order)
    by the share of its inputs that earlier ops wrote recently (see the module docstring); nothing
    changes unless the model reads its calibration cold."""
    efficiency = model.efficiency
    in_step = getattr(efficiency, "stream_in_step_s", None)
    if in_step is None or getattr(efficiency, "cache", None) != "cold":
        return
    cache = efficiency.calibration.effective_cache_bytes()
    writes: list[tuple[float, Counter[Tensor]]] = []  # (bytes moved when a writer ended, tensors it wrote)
    running: list[tuple[float, Counter[Tensor], Counter[Tensor]]] = []  # (end, writes, new ones) of kernel
    # ops not yet ended: a parent ends after its children, and its writes are as recent as its end
    moved = 0.0
    for p in sorted(predictions, key=lambda p: (p.op.start, p.op.index)):
        kernel = p.kernel
        if kernel is None:
            continue
        ended = sorted((r for r in running if r[0] <= p.op.start), key=lambda r: r[0])
        writes += [(moved, new) for _, _, new in ended]
        running = [r for r in running if r[0] > p.op.start]
        tensors = _tensors(p.op)
        if isinstance(kernel, (Elementwise, Reduction)):
            cached = _cached_bytes(Counter(tensors[1:] if _overwrites(p.op) else tensors), writes, moved, cache)
            if cached > 0:
                seconds = in_step(kernel, threads, cached)
                if seconds is not None:
                    p.predicted_s = seconds
        moved += kernel.bytes()
        written = _written(p.op, kernel, tensors)
        outer = {t[:2] for _, around, _ in running for t in around}
        running.append((p.op.end, written, Counter({t: c for t, c in written.items() if t[:2] not in outer})))


def _tensors(op: Any) -> list[Tensor]:
    """The tensor arguments of a traced op, in order."""
    return [(math.prod(shape), dtype_of(kind), tuple(shape)) for shape, kind in tensors_of(op.shapes, op.dtypes)
            if shape and math.prod(shape) > 0]


def _overwrites(op: Any) -> bool:
    """Whether an op writes its first argument without reading it (``copy_``, ``fill_``, ``zero_``)."""
    return in_place(op.name) and base_name(op.name) in OVERWRITTEN


def _written(op: Any, kernel: Kernel, tensors: list[Tensor]) -> Counter[Tensor]:
    """The tensors an op writes (see the module docstring)."""
    if in_place(op.name) and isinstance(kernel, Elementwise):
        return Counter(tensors[:1]) if _overwrites(op) else Counter()  # an in-place update: not counted
    if isinstance(kernel, Elementwise):  # its output has the shape of its largest input
        shape = next((t[2] for t in tensors if t[0] == kernel.n), None)
        return Counter({(kernel.n, kernel.dtype, shape): kernel.outputs})
    if isinstance(kernel, Gemm):
        elements = kernel.outputs()
    elif isinstance(kernel, (Reduction, FrameworkOp)):
        elements = kernel.outputs
    elif isinstance(kernel, Copy):
        elements = int(kernel.nbytes) // dtype_bytes(kernel.dtype)
    else:
        return Counter()
    return Counter([(elements, kernel.dtype, None)]) if elements else Counter()


def _cached_bytes(reads: Counter[Tensor], writes: list[tuple[float, Counter[Tensor]]], moved: float,
                  cache: float) -> float:
    """Bytes of the tensors ``reads`` still in a ``cache``-byte LRU cache after ``moved`` bytes of
    traffic, each matched to one recent write of it (its shape, or where the write's is not known
    its size, and its dtype), the most recent first."""
    cached = 0.0
    for tensor, count in reads.items():
        size = tensor[0] * dtype_bytes(tensor[1])
        shares: list[float] = []
        for written_at, written in reversed(writes):
            since = moved - written_at
            if since >= cache or len(shares) >= count:
                break
            matches = written.get(tensor, 0) + written.get((*tensor[:2], None), 0)
            shares += [min(1.0, (cache - since) / size)] * min(matches, count - len(shares))
        cached += size * sum(shares)
    return cached
