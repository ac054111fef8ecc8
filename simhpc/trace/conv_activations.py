"""What a traced convolution pays in a training step over the calibration's loop: its activations
come from memory.

The calibration times each convolution pass in a loop of repeated calls on the same arrays, which
stay in the caches when they fit (the Xeon reference's effective cache is 8-11 MiB, its
``effective_cache_bytes``). In a training step every other op's traffic passes between two calls of
a convolution, so the images it reads and writes, and the blocked copies oneDNN reorders an NCHW
image into and out of, come from DRAM. A convolution is therefore charged its activation bytes at
the roofline's memory bandwidth, at most the effective cache's worth (a loop over larger images
already streamed the rest):

- a forward: its input and output images;
- a backward: the output gradient and the input, and the input gradient when it computes one
  (``output_mask``).

A channels-last (NHWC) convolution is not charged: oneDNN runs it on the tensors as they are,
without reorders, and in the reference's captures its passes were no slower in a step than in
the loop (the channels-last ResNet-ish net's convolutions were over-predicted by 5-13 % without
the charge, 16-25 % with it). Neither is a transposed convolution's forward (its output's size is
not in the trace).

Measured on the Xeon reference (1 thread; the same process, so the same host state): the first
convolution of the CNN capture took 1.4 ms forward and 1.6 ms backward in a loop, 1.5 and 2.3 ms in
its training step; its 32 -> 64 channel layer 4.0 and 4.8 ms. After a 64 MiB fill the loop's
backward took 2.1 ms, and reading its two operands again after the fill won back only a third of
that. On a fresh calibration and captures (``validation/README.md``) the charge took the CNN's
step error from -6.7 / -6.7 % (1 / 2 threads) to +0.3 / -0.2 %, a 1-D convolutional net's from
-18.2 / -15.8 % to -8.1 / -9.2 %, a ResNet-ish net's from -4.2 / -7.2 % to +3.1 / -0.3 %, and
moved the EPYC guests' CNN captures 1-4 points the other way (the in-step cost was not measured
apart there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from simhpc.costs.kernels import Gemm, dtype_bytes
from simhpc.costs.model import CostModel
from simhpc.costs.op_arguments import channels_last, is_shape
from simhpc.costs.opnames import base_name
from simhpc.costs.product_ops import BACKWARD_CONV_ARGS


def activation_bytes(op: Any, kernel: Gemm) -> float:
    """Bytes of the images a convolution pass reads and writes (see the module docstring); 0 for
    a channels-last convolution, a transposed one's forward, or an op without image shapes."""
    images = [shape for shape in op.shapes if is_shape(shape) and len(shape) >= 3]
    if not images:
        return 0.0
    strides = op.args.get("Input Strides")
    backward = base_name(op.name) in BACKWARD_CONV_ARGS
    source = 1 if backward else 0  # the convolution's input image among the op's tensors
    if len(images) <= source or (isinstance(strides, list) and len(strides) > source
                                 and channels_last(images[source], strides[source])):
        return 0.0
    size = dtype_bytes(kernel.dtype)
    image = math.prod(images[source]) * size
    if backward:
        return math.prod(images[0]) * size + image * (2 if kernel.conv == "backward" else 1)
    if kernel.conv != "forward":  # a transposed convolution's forward, priced as its adjoint
        return 0.0
    return image + kernel.m * kernel.n * kernel.groups * size


def charge_convolutions(predictions: Sequence[Any], model: CostModel, threads: int) -> None:
    """Add to every convolution of ``predictions`` (``OpPrediction``s) its activation bytes, at
    most the effective cache's worth (what its loop found there), at the memory bandwidth of
    ``threads`` cores; nothing without a calibration read cold (``cache="cold"``, as ``compare``
    reads it)."""
    efficiency = model.efficiency
    if getattr(efficiency, "cache", None) != "cold":
        return
    calibration = efficiency.calibration
    held = calibration.effective_cache_bytes()
    bandwidth = calibration.model_bandwidth(threads)
    for p in predictions:
        kernel = p.kernel
        if not isinstance(kernel, Gemm) or not kernel.conv:
            continue
        moved = activation_bytes(p.op, kernel)
        if moved > 0:
            p.activations_s = min(moved, held) / bandwidth
            p.predicted_s += p.activations_s
