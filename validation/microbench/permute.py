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
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

RUNS = (1, 4, 16, 64, 256)
TENSOR_BYTES = (1 << 19, 1 << 22, 1 << 24)  # 512 KiB, 4 MiB, 16 MiB per tensor
QUICK_RUNS = (1, 64)
QUICK_TENSOR_BYTES = (1 << 20,)
MIDDLE = 32
"""Size of the swapped middle dimension (channels, heads)."""


def _copier(src: np.ndarray, dst: np.ndarray) -> tuple[str, Callable[[], object]]:
    if torch_available():
        import torch

        source, target = torch.from_numpy(src).clone().permute(1, 0, 2), torch.empty(dst.shape)  # torch's allocator
        return "torch", lambda: target.copy_(source)
    view = src.transpose(1, 0, 2)
    return "numpy", lambda: np.copyto(dst, view)


def measure_permute(run: int, tensor_bytes: int, threads: int, budget: Budget) -> dict:
    """Copy a ``(rows, 32, run)`` fp32 tensor of ``tensor_bytes`` into ``(32, rows, run)``; a record."""
    rows = max(1, tensor_bytes // (4 * MIDDLE * run))
    src = np.random.default_rng(2).standard_normal((rows, MIDDLE, run)).astype(np.float32)
    dst = np.empty((MIDDLE, rows, run), dtype=np.float32)
    library, call = _copier(src, dst)
    if library == "torch":
        with torch_threads(threads):
            result = measure_python(call, budget)
    else:
        result = measure_python(call, budget)
    moved = 2 * src.nbytes
    return {
        "library": library,
        "dtype": "fp32",
        "threads": threads,
        "run": run,
        "rows": rows,
        "bytes": moved,
        **result.row(),
        "bytes_per_s": moved / result.median_s,
    }
