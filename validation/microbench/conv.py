"""2-D convolutions through torch (oneDNN on CPU), forward and backward, as implicit GEMMs.

A convolution is not a BLAS call: oneDNN's direct and Winograd kernels reach other fractions of
peak than ``torch.mm`` on the same implicit-GEMM dimensions, and its two gradients others again.
Each point is a 3x3 convolution (padding 1) of a batch of square images, timed in one of three
passes: ``forward`` (``aten::convolution``), ``backward_input`` and ``backward_weight``
(``aten::convolution_backward`` with ``output_mask`` asking for that gradient alone: oneDNN
runs each gradient as its own primitive, and a network's first convolution never computes the
input gradient, which for 3 input channels costs 2-3x the weight gradient here). Each record
carries the forward's implicit-GEMM dimensions ``m = N x H_out x W_out``, ``n = C_out``,
``k = C_in x 9`` (one pass, the same multiply-adds each), like
:func:`simhpc.costs.opmap.kernel_for` describes a traced convolution, and its ``stride``.
Skipped without torch.

Shapes, batch 64 (16 where a pass would exceed 2^30 multiply-adds): stride 1 with input
channels 3, 32, 64, 128, output channels 32, 64, 128 and 8, 16, 32 pixels; stride 2 with input
channels 32, 64, 128, output channels 64, 128 and 16, 32 pixels: the layers of small CNNs and
of ResNet-like stages on small images. A strided convolution reads four times the input per
output of a stride-1 one with the same dimensions and runs 10-15 % slower here, so the cost
model keeps the two apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

GRID = {  # stride: (input channels, output channels, image sizes)
    1: ((3, 32, 64, 128), (32, 64, 128), (8, 16, 32)),
    2: ((32, 64, 128), (64, 128), (16, 32)),
}
PASSES = ("forward", "backward_input", "backward_weight")
MAX_MNK = 2**30
QUICK_SHAPES = ((8, 3, 32, 16, 1),)
_MASKS = {"backward_input": [True, False, False], "backward_weight": [False, True, False]}


def shapes(quick: bool = False) -> list[tuple[int, int, int, int, int]]:
    """(batch, in channels, out channels, image size, stride) of every measured convolution."""
    if quick:
        return list(QUICK_SHAPES)
    found = []
    for stride, (ins, outs, sizes) in GRID.items():
        for cin, cout, size in itertools.product(ins, outs, sizes):
            out = (size - 1) // stride + 1
            for batch in (64, 16):
                if batch * out * out * cout * cin * 9 <= MAX_MNK:
                    found.append((batch, cin, cout, size, stride))
                    break
    return found


def _passes(batch: int, cin: int, cout: int, size: int, stride: int) -> dict[str, Callable[[], object]]:
    import torch

    generator = torch.Generator().manual_seed(3)
    x = torch.randn(batch, cin, size, size, generator=generator)
    w = torch.randn(cout, cin, 3, 3, generator=generator)
    y = torch.ops.aten.convolution(x, w, None, [stride] * 2, [1, 1], [1, 1], False, [0, 0], 1)
    grad = torch.randn(y.shape, generator=generator)
    passes: dict[str, Callable[[], object]] = {
        "forward": lambda: torch.ops.aten.convolution(x, w, None, [stride] * 2, [1, 1], [1, 1], False, [0, 0], 1),
    }
    for name, mask in _MASKS.items():
        passes[name] = partial(torch.ops.aten.convolution_backward, grad, x, w, None, [stride] * 2, [1, 1], [1, 1],
                               False, [0, 0], 1, mask)
    return passes


def available() -> bool:
    """Whether convolutions can be measured here (torch importable)."""
    return torch_available()


def measure_conv(
    batch: int, cin: int, cout: int, size: int, stride: int, direction: str, threads: int, budget: Budget
) -> dict:
    """Time one pass (one of ``PASSES``) of a 3x3 convolution; a record."""
    out = (size - 1) // stride + 1
    with torch_threads(threads):
        result = measure_python(_passes(batch, cin, cout, size, stride)[direction], budget)
    m, n, k = batch * out * out, cout, cin * 9
    return {
        "library": "torch",
        "dtype": "fp32",
        "threads": threads,
        "direction": direction,
        "m": m,
        "n": n,
        "k": k,
        "passes": 1,
        "image": [batch, cin, size, size],
        "stride": stride,
        **result.row(),
        "flops_per_s": 2.0 * m * n * k / result.median_s,
    }
