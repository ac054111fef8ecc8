"""Fused attention timed through torch: ATen's CPU flash-attention kernel, forward and backward.

``aten::_scaled_dot_product_flash_attention_for_cpu`` (what ``scaled_dot_product_attention`` runs
on a CPU without dropout or mask) and its backward, fp32, on ``[1, heads, L, E]`` queries, keys
and values viewed from ``[L, heads, E]`` arrays, as ``nn.MultiheadAttention`` hands them over (a
row of every head's ``E`` values per position): heads x sequences 16 and 64, sequence lengths 64
to 512, head sizes 32 and 64. The
kernel cuts the queries into blocks of 32-256 rows and multiplies each block by the keys with one
small BLAS call, then runs an online softmax over it; a trace's fused attention took twice what
its products as one batched GEMM and its exponentials predicted here. ``simhpc compare`` times a
traced one from these points (its FLOPs at the interpolated fraction of peak). Skipped without
torch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

HEADS = (16, 64)
LENGTHS = (64, 128, 256, 512)
HEAD_SIZES = (32, 64)
QUICK_SHAPES = ((16, 64, 32),)


def available() -> bool:
    """Whether torch (and so its flash-attention kernel) is importable."""
    return torch_available()


def shapes(quick: bool = False) -> list[tuple[int, int, int]]:
    """(heads x sequences, sequence length, head size) of every point."""
    return list(QUICK_SHAPES) if quick else list(itertools.product(HEADS, LENGTHS, HEAD_SIZES))


def _call(heads: int, length: int, e: int, backward: bool) -> Callable[[], object]:
    import torch

    aten = torch.ops.aten
    generator = torch.Generator().manual_seed(0)
    def sequence_major() -> torch.Tensor:  # [1, heads, L, E] viewed from [L, heads, E], as MHA lays them out
        return torch.randn(length, heads, e, generator=generator).transpose(0, 1).unsqueeze(0)

    q, k, v = sequence_major(), sequence_major(), sequence_major()
    if not backward:
        return lambda: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
    grad = sequence_major()
    return lambda: aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, logsumexp,
                                                                            0.0, False)


def measure_attention(heads: int, length: int, e: int, backward: bool, threads: int, budget: Budget) -> dict:
    """Time the fused attention (or its backward) over ``heads`` heads of ``length`` x ``e``; a record."""
    call = _call(heads, length, e, backward)
    with torch_threads(threads):
        result = measure_python(call, budget)
    return {"library": "torch", "dtype": "fp32", "threads": threads, "backward": backward, "batch": heads,
            "lq": length, "lk": length, "e": e, **result.row()}
