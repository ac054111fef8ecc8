"""2-D convolutions through torch (oneDNN on CPU), forward and backward, as implicit GEMMs.

A convolution is not a BLAS call: oneDNN's direct and Winograd kernels reach other fractions of
peak than ``torch.mm`` on the same implicit-GEMM dimensions, and its backward (input and weight
gradients) others again. Each point is a 3x3 convolution (padding 1) of a batch of square
images, timed forward (``aten::convolution``) and backward (``aten::convolution_backward``,
both gradients), recorded with its implicit-GEMM dimensions ``m = N x H_out x W_out``,
``n = C_out``, ``k = C_in x 9`` and ``passes`` (1 forward, 2 backward), like
:func:`simhpc.costs.opmap.kernel_for` describes a traced convolution. Skipped without torch.

Shapes: input channels 3, 32 and 128, output channels 32 and 128, 8 .. 32 pixels, stride 1 and 2, batch
64 (16 for the largest), at most 2^30 multiply-adds per pass: the layers of small CNNs and of
ResNet-like stages on small images.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

IN_CHANNELS = (3, 32, 128)
OUT_CHANNELS = (32, 128)
SIZES = (8, 32)
STRIDES = (1, 2)
MAX_MNK = 2**30
QUICK_SHAPES = ((8, 3, 32, 16, 1),)


def shapes(quick: bool = False) -> list[tuple[int, int, int, int, int]]:
    """(batch, in channels, out channels, image size, stride) of every measured convolution."""
    if quick:
        return list(QUICK_SHAPES)
    found = []
    for cin, cout, size, stride in itertools.product(IN_CHANNELS, OUT_CHANNELS, SIZES, STRIDES):
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
    return {
        "forward": lambda: torch.ops.aten.convolution(x, w, None, [stride] * 2, [1, 1], [1, 1], False, [0, 0], 1),
        "backward": lambda: torch.ops.aten.convolution_backward(
            grad, x, w, None, [stride] * 2, [1, 1], [1, 1], False, [0, 0], 1, [True, True, False]
        ),
    }


def available() -> bool:
    """Whether convolutions can be measured here (torch importable)."""
    return torch_available()


def measure_conv(
    batch: int, cin: int, cout: int, size: int, stride: int, direction: str, threads: int, budget: Budget
) -> dict:
    """Time one pass (``forward`` or ``backward``) of a 3x3 convolution; a record."""
    out = (size - 1) // stride + 1
    with torch_threads(threads):
        result = measure_python(_passes(batch, cin, cout, size, stride)[direction], budget)
    m, n, k = batch * out * out, cout, cin * 9
    passes = 2 if direction == "backward" else 1
    return {
        "library": "torch",
        "dtype": "fp32",
        "threads": threads,
        "direction": direction,
        "m": m,
        "n": n,
        "k": k,
        "passes": passes,
        "image": [batch, cin, size, size],
        "stride": stride,
        **result.row(),
        "flops_per_s": 2.0 * m * n * k * passes / result.median_s,
    }
