"""Layout-changing copies: ``dst = src.permute(1, 0, 2)`` made contiguous, through torch (else numpy).

Framework traces are full of them: channels-last to channels-first activations
(``[N, C, H, W]`` from an ``[N, H, W, C]`` buffer), attention heads split and merged
(``[B, S, H, D] <-> [B, H, S, D]``). What sets their speed is the *run*: how many elements the
source holds contiguously in the destination's order (1 for a transpose, the head dimension
``D`` for a head permute). The kernel: ``src`` of shape ``(rows, 32, run)``, contiguous, copied to
``dst`` of shape ``(32, rows, run)``, for runs 1 .. 256 elements and several sizes; ``bytes`` counts
the read and the write (as the STREAM copy does).

Torch (``Tensor.copy_``, its TensorIterator loops; what the traces time) when it is importable,
else numpy (``np.copyto``); the ``library`` field says which.

**Batched transposes** (:func:`measure_transpose`, section ``transpose``): a run of one element
whose transposed block is small, as in a channels-last activation made contiguous (``[N, C, H, W]``
from ``[N, H, W, C]``: ``batch`` N blocks, each ``rows`` C by ``length`` H x W). Their speed is set by
the block's shape, not by the tensor's size: the loop over a destination row reads ``length``
elements ``rows`` apart, so the cache lines it touches come back for the next row while they are
still in the L1 or L2, or not (measured here, 1 thread, 4 MiB tensors: 64 x 256 blocks 8.4 GB/s,
64 x 64 blocks 16 GB/s, against 2.3 GB/s for the whole tensor transposed as one 32-row block).
The rows are powers of two and not: a source row stride of an even number of cache lines (32, 64,
96 or 256 channels of fp32) maps the lines of a destination row to half the L1's sets or fewer,
and their conflicts made such copies 2.1-2.6x as slow as ones of 48, 80 or 240 channels in
destination rows of 256 elements or more.
"""

from __future__ import annotations

import numpy as np

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

RUNS = (1, 4, 16, 64, 256)
TENSOR_BYTES = (1 << 19, 1 << 22, 1 << 24)  # 512 KiB, 4 MiB, 16 MiB per tensor
QUICK_RUNS = (1, 64)
QUICK_TENSOR_BYTES = (1 << 20,)
TRANSPOSE_ROWS = (4, 12, 16, 32, 48, 64, 80, 240, 256, 1024)
TRANSPOSE_LENGTHS = (16, 64, 256, 1024, 4096)
TRANSPOSE_BYTES = 1 << 22
"""The batched transposes: destination rows and row lengths of a block, and the tensor's size (4
MiB: a CNN's activations; a larger tensor streams through the caches and is bounded by the copy
curve, see :meth:`~simhpc.costs.calibration.CalibratedEfficiency.stream_time`)."""
QUICK_TRANSPOSES = tuple((rows, length) for rows in (12, 48, 64, 256) for length in (64, 256))
"""The quick profile's: two by two blocks of either kind of row stride (the grids need both)."""
MIDDLE = 32
"""Size of the swapped middle dimension (channels, heads)."""


def _timed_copy(src: np.ndarray, axes: tuple[int, ...], threads: int, budget: Budget) -> tuple[str, dict]:
    """Time ``src`` permuted by ``axes`` copied into a contiguous tensor (torch's ``copy_`` on
    ``threads`` threads, else numpy's ``copyto``): the library and the measurement's fields."""
    if torch_available():
        import torch

        source = torch.from_numpy(src).clone().permute(*axes)  # torch's allocator
        target = torch.empty(source.shape)
        with torch_threads(threads):
            return "torch", measure_python(lambda: target.copy_(source), budget).row()
    view = src.transpose(*axes)
    dst = np.empty(view.shape, dtype=src.dtype)
    return "numpy", measure_python(lambda: np.copyto(dst, view), budget).row()


def measure_permute(run: int, tensor_bytes: int, threads: int, budget: Budget) -> dict:
    """Copy a ``(rows, 32, run)`` fp32 tensor of ``tensor_bytes`` into ``(32, rows, run)``; a record."""
    rows = max(1, tensor_bytes // (4 * MIDDLE * run))
    src = np.random.default_rng(2).standard_normal((rows, MIDDLE, run)).astype(np.float32)
    library, result = _timed_copy(src, (1, 0, 2), threads, budget)
    moved = 2 * src.nbytes
    return {"library": library, "dtype": "fp32", "threads": threads, "run": run, "rows": rows, "bytes": moved,
            **result, "bytes_per_s": moved / result["time_s"]}


def measure_transpose(rows: int, length: int, threads: int, budget: Budget) -> dict:
    """Copy a contiguous ``(batch, length, rows)`` fp32 tensor of about 4 MiB into ``(batch, rows,
    length)``: ``batch`` transposes of a ``rows`` x ``length`` block (the destination's shape); a record."""
    batch = max(1, TRANSPOSE_BYTES // (4 * rows * length))
    src = np.random.default_rng(3).standard_normal((batch, length, rows)).astype(np.float32)
    library, result = _timed_copy(src, (0, 2, 1), threads, budget)
    moved = 2 * src.nbytes
    return {"library": library, "dtype": "fp32", "threads": threads, "rows": rows, "length": length,
            "batch": batch, "bytes": moved, **result, "bytes_per_s": moved / result["time_s"]}
