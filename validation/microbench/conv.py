"""2-D convolutions through torch (oneDNN on CPU), forward and backward, as implicit GEMMs.

A convolution is not a BLAS call: oneDNN's direct and Winograd kernels reach other fractions of
peak than ``torch.mm`` on the same implicit-GEMM dimensions, and its two gradients others again.
Each point is a 3x3 convolution (padding 1; 1x1 ones in ``POINTWISE``, grouped and depthwise ones
below) of a batch of square images, timed in one of three passes: ``forward``
(``aten::convolution``), ``backward_input`` and ``backward_weight``
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
of ResNet-like stages on small images; and heads to one or three channels (``NARROW_OUT``). A
strided convolution reads four times the input per output of a stride-1 one with the same
dimensions and runs 10-15 % slower here, so the cost model keeps the two apart.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial
from typing import Any

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

GRID = {  # stride: (input channels, output channels, image sizes)
    1: ((3, 32, 64, 128), (32, 64, 128), (8, 16, 32)),
    2: ((32, 64, 128), (64, 128), (16, 32)),
}
PASSES = ("forward", "backward_input", "backward_weight")
DEPTHWISE_2D = ((64, 32, 8), (64, 32, 32), (64, 128, 16), (32, 128, 32))
"""Depthwise 3x3 convolutions (MobileNet, ConvNeXt blocks): (batch, channels, image side). The last
one's 16 MiB images are past the effective cache (8-11 MiB on the Xeon reference): it ran 1.4x
(forward) to 1.7x (weight gradient) the time per output of the 8 MiB ones there, which the
interpolation from those could not tell."""
DEPTHWISE_1D = ((32, 64, 512), (32, 64, 2048))
"""Depthwise width-5 1-D convolutions (sequence mixing): (batch, channels, length)."""
DEPTHWISE_7X7 = ((16, 64, 32), (32, 96, 16), (64, 32, 8))
"""Depthwise 7x7 convolutions (ConvNeXt blocks): (batch, channels, image side). oneDNN's backward of
one ran 3-4x slower than the 3x3 points extrapolated to 49 taps say here, its forward 2x faster."""
POINTWISE = ((32, 64, 128, 16), (32, 128, 64, 16), (32, 64, 256, 8), (32, 256, 64, 8), (32, 256, 256, 8),
             (32, 32, 64, 32), (32, 128, 128, 16), (32, 128, 32, 32), (32, 32, 128, 32), (8, 32, 1, 64),
             (8, 64, 3, 64), (16, 32, 1, 64), (16, 64, 3, 64))
"""1x1 convolutions (bottleneck blocks, a depthwise block's pointwise layers): (batch, in channels,
out channels, image side), stride 1. oneDNN runs them as other kernels than the 3x3 ones of the
same implicit-GEMM dimensions (here, 1 thread, 128 -> 64 channels on 32 x 16 x 16: forward 1.4 ms
and backward 2.8 ms where the 3x3 points gave 0.9 and 2.2). The last two have 16 MiB images at
their 128-channel side, past the effective cache: few channels make little arithmetic per byte,
and 128 -> 32 channels on 32 x 32 x 32 took 4.9 ms forward and 12 ms backward here where the
smaller images' points gave 3.1 and 6.1. The last four are heads to one and three channels (a
U-Net's mask, an image-to-image net's RGB), far below the others' 16 output channels: a tiny U-Net's
32 -> 1 head on 8 x 64 x 64 took 0.58 ms forward and 1.35 ms backward at 2 threads where those
points gave 0.19 and 0.37. They come at 8 and at 16 images: on one thread torch runs a 1x1
convolution of under 16 images through its own kernels (a BLAS product per image), of more through
oneDNN, whose heads are 3-10x slower (64 -> 1 channel on 64 x 64 images, forward: 25 us an image
natively, 187 us through oneDNN here); each point records the ``backend`` torch picked."""
HALF_SHAPES = ((32, 3, 32, 32, 1), (32, 32, 32, 32, 1), (32, 32, 128, 16, 1), (32, 128, 32, 16, 1),
               (32, 128, 128, 16, 1), (32, 128, 128, 8, 1), (32, 64, 128, 32, 2))
"""bf16 3x3 convolutions, measured where the CPU has native bf16 (``torch.autocast`` runs a CNN's
convolutions in bf16): (batch, in channels, out channels, image size, stride). oneDNN's bf16
convolutions (AMX here) reach neither the fp32 convolutions' rate nor the bf16 products': 128 -> 128
channels on 32 x 16 x 16 images took 3.2 ms at 1 thread, where the products' points gave 1.5 ms and
the fp32 convolution 16 ms."""
GROUPED_2D = ((32, 64, 16, 2), (32, 64, 16, 4), (32, 64, 16, 8), (32, 128, 16, 32), (32, 32, 32, 4))
"""Grouped 3x3 convolutions wider than depthwise (ResNeXt, RegNet): (batch, channels, image side,
groups), as many output channels as input ones: 32, 16, 8, 4 and 8 channels a group. oneDNN runs
them far nearer the ungrouped rate than the depthwise one (here, 1 thread, batch 32: 128 channels
in 2 and 4 groups on 16 x 16 images took 6.9 and 3.8 ms, where the depthwise points gave 64.5 and
32.3 ms)."""
NARROW_OUT = ((16, 32, 1, 32), (16, 128, 3, 32), (32, 32, 3, 16), (8, 256, 1, 16))
"""3x3 convolutions to one or three channels (a segmentation mask, an image-to-image net's RGB output):
(batch, in channels, out channels, image side), stride 1. oneDNN runs them far below the grid's
32-128 output channels' rate: 64 -> 1 channel on 16 x 32 x 32 images took 3.7 ms forward here (5
GFLOP/s, 1 thread), where the grid's points gave 0.2 ms."""
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
    return found + [(*shape, 1) for shape in NARROW_OUT]


def _passes(x: Any, w: Any, stride: int, padding: int, groups: int = 1) -> dict[str, Callable[[], object]]:
    """The three passes of the convolution of ``x`` by ``w`` (1-D or 2-D, equal stride and padding)."""
    import torch

    dims = x.dim() - 2
    conv = partial(torch.ops.aten.convolution, x, w, None, [stride] * dims, [padding] * dims, [1] * dims, False,
                   [0] * dims, groups)
    grad = torch.randn(conv().shape, generator=torch.Generator().manual_seed(4)).to(x.dtype)
    passes: dict[str, Callable[[], object]] = {"forward": conv}
    for name, mask in _MASKS.items():
        passes[name] = partial(torch.ops.aten.convolution_backward, grad, x, w, None, [stride] * dims,
                               [padding] * dims, [1] * dims, False, [0] * dims, groups, mask)
    return passes


def _operands(shape: list[int], weight: list[int], dtype: str = "fp32") -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(3)
    kind = torch.bfloat16 if dtype == "bf16" else torch.float32
    return (torch.randn(*shape, generator=generator).to(kind), torch.randn(*weight, generator=generator).to(kind))


def available() -> bool:
    """Whether convolutions can be measured here (torch importable)."""
    return torch_available()


def half_shapes(quick: bool = False, native: bool = False) -> list[tuple[int, int, int, int, int]]:
    """(batch, in channels, out channels, image size, stride) of the bf16 convolutions: none unless
    the CPU computes bf16 natively."""
    return list(HALF_SHAPES) if native and not quick else []


def pointwise_shapes(quick: bool = False) -> list[tuple[int, int, int, int, int]]:
    """(batch, in channels, out channels, image size, stride) of every measured 1x1 convolution."""
    return [] if quick else [(*shape, 1) for shape in POINTWISE]


def measure_conv(
    batch: int, cin: int, cout: int, size: int, stride: int, direction: str, threads: int, budget: Budget,
    kernel: int = 3, dtype: str = "fp32",
) -> dict:
    """Time one pass (one of ``PASSES``) of a ``kernel`` x ``kernel`` convolution (3x3 or 1x1,
    padding keeping the size at stride 1) in ``dtype`` (fp32 or bf16); a record, with its ``taps``
    (k_h x k_w)."""
    out = (size - 1) // stride + 1
    x, w = _operands([batch, cin, size, size], [cout, cin, kernel, kernel], dtype)
    return _record(_passes(x, w, stride, kernel // 2)[direction], direction, threads, budget, batch * out * out, cout,
                   cin * kernel * kernel, dtype=dtype, backend=partial(conv_backend, x, w, stride, kernel // 2),
                   image=[batch, cin, size, size], stride=stride, taps=kernel * kernel)


def conv_backend(x: Any, w: Any, stride: int, padding: int, groups: int = 1) -> str | None:
    """The kernels torch picks for the convolution of ``x`` by ``w`` on its current thread count, by
    the name ``torch._C._select_conv_backend`` gives them (``Mkldnn``, ``Slow2d``, ...; None where
    this torch does not say). Its three passes take the same: a 1x1 convolution of under 16 images
    on one thread runs natively (``Slow2d``), on more threads or of more images through oneDNN."""
    import torch

    select = getattr(torch._C, "_select_conv_backend", None)
    if select is None:
        return None
    dims = x.dim() - 2
    try:
        chosen = select(x, w, None, [stride] * dims, [padding] * dims, [1] * dims, False, [0] * dims, groups, None)
    except (RuntimeError, TypeError):
        return None
    return str(chosen).rsplit(".", 1)[-1]


def _record(call: Callable[[], object], direction: str, threads: int, budget: Budget, m: int, n: int, k: int,
            groups: int = 1, dtype: str = "fp32", backend: Callable[[], str | None] | None = None,
            **identity: Any) -> dict:
    """Time one pass on ``threads`` torch threads; its record (``m``, ``n``, ``k`` per group), with
    the ``backend`` torch ran it through where ``backend()`` names it."""
    with torch_threads(threads):
        result = measure_python(call, budget)
        chosen = backend() if backend else None
    grouping = {"groups": groups} if groups > 1 else {}
    if chosen:
        identity["backend"] = chosen
    return {
        "library": "torch",
        "dtype": dtype,
        "threads": threads,
        "direction": direction,
        "m": m,
        "n": n,
        "k": k,
        "passes": 1,
        **grouping,
        **identity,
        **result.row(),
        "flops_per_s": 2.0 * m * n * k * groups / result.median_s,
    }


def grouped_shapes(quick: bool = False) -> list[tuple[int, int, int, int, int, int]]:
    """(batch, channels, spatial size, spatial dims, groups, kernel side) of every measured grouped
    convolution: the depthwise ones (groups = channels; 3x3 and 7x7, width 5 in 1-D), then the
    wider groups (3x3)."""
    if quick:
        return []
    return ([(*shape, 2, shape[1], 3) for shape in DEPTHWISE_2D] + [(*shape, 1, shape[1], 5) for shape in DEPTHWISE_1D]
            + [(*shape, 2, shape[1], 7) for shape in DEPTHWISE_7X7]
            + [(batch, channels, size, 2, groups, 3) for batch, channels, size, groups in GROUPED_2D])


def measure_grouped(batch: int, channels: int, size: int, dims: int, groups: int, kernel: int, direction: str,
                    threads: int, budget: Budget) -> dict:
    """Time one pass of a grouped convolution of ``channels`` in and out (a ``kernel``-wide kernel in
    each of ``dims`` dimensions, stride 1, same padding; depthwise with ``groups`` = channels); a
    record with the per-group implicit-GEMM dimensions ``m = N x spatial``, ``n = channels /
    groups``, ``k = n x`` the kernel's ``taps``, and ``groups``."""
    taps = [kernel] * dims
    per_group = channels // groups
    x, w = _operands([batch, channels, *[size] * dims], [channels, per_group, *taps])
    return _record(_passes(x, w, 1, kernel // 2, groups)[direction], direction, threads, budget,
                   batch * size**dims, per_group, per_group * math.prod(taps), groups,
                   backend=partial(conv_backend, x, w, 1, kernel // 2, groups),
                   image=[batch, channels, *[size] * dims], stride=1, taps=math.prod(taps))
