"""How well a calibration times kernels at shapes it did not measure (needs torch).

Three families, each timed here with torch and printed beside what the cost model predicts for the
traced op (:func:`simhpc.costs.opmap.kernel_for`, then the calibration, warm caches):

- ``copies``: ``out.copy_(x)`` of channels-last ``[N, C, H, W]`` tensors made contiguous, at
  shapes the batched transposes (suite 21) were not measured at (other channel counts, image
  sizes and batches): predicted from the ``transpose`` points by the copy's block (C rows of
  H x W), and from the ``permute`` curve of run 1 by the tensor's size alone, as before suite 21.
- ``convs``: convolutions of the kinds suites 21 and 32 added points for, at shapes they did not
  measure: 3x3 with 2 to 32 groups, depthwise 3x3 and 7x7, 1x1 (pointwise), 3x3 to one or three
  channels, and 3x3 in bf16, forward and backward (both gradients); with ``--without`` another
  calibration's predictions beside (one without those points).
- ``vectors``: matrix-vector products (m = 1 or n = 1, suite 32) of linear layers at batch 1 and
  of layers with one output, forward and backward, at sizes the calibration did not measure, their
  layout read from their strides as in a trace; ``--without`` as for ``convs``.

    .venv/bin/python validation/calibration/unseen_shapes.py copies [--calibration FILE] [--threads 1,2]
    .venv/bin/python validation/calibration/unseen_shapes.py convs [--calibration FILE] [--without FILE]
    .venv/bin/python validation/calibration/unseen_shapes.py vectors [--calibration FILE] [--without FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import torch

from simhpc.costs.benchsuite import load_submodule
from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import load_calibration
from simhpc.costs.kernels import Copy, Kernel
from simhpc.costs.opmap import kernel_for
from simhpc.costs.product_surfaces import NATIVE_BACKENDS
from simhpc.hardware.host import default_calibration

COPIES = ((64, 64, 16), (64, 32, 32), (64, 128, 8), (64, 16, 32), (16, 64, 16), (256, 64, 16), (64, 3, 32),
          (64, 512, 4), (8, 256, 32), (32, 64, 56), (32, 128, 28), (32, 256, 14), (32, 512, 7), (32, 48, 56),
          (32, 96, 28), (32, 192, 14), (32, 384, 7), (64, 80, 16), (64, 64, 15), (64, 24, 32))
"""(N, C, H = W) of the copies: a small CNN's, ResNet's at 224 px (batch 32), and channel counts that
are not powers of two (48, 96, 192, 384, 80, 24) or odd image sizes."""
CONVS = ((32, 64, 64, 32, 4, 3), (32, 64, 64, 32, 8, 3), (32, 128, 128, 16, 4, 3), (32, 128, 128, 16, 2, 3),
         (16, 256, 256, 14, 32, 3), (32, 96, 96, 16, 3, 3), (32, 64, 64, 16, 16, 3), (16, 128, 128, 28, 8, 3),
         (32, 64, 64, 16, 64, 3), (16, 256, 256, 14, 256, 3), (64, 96, 96, 8, 96, 3), (32, 64, 64, 16, 64, 7),
         (16, 128, 128, 14, 128, 7), (32, 48, 48, 28, 48, 7), (32, 128, 64, 16, 1, 1), (16, 64, 128, 32, 1, 1),
         (32, 256, 128, 14, 1, 1), (32, 96, 384, 14, 1, 1), (64, 512, 128, 7, 1, 1), (16, 64, 1, 32, 1, 3),
         (32, 64, 3, 32, 1, 3), (8, 32, 3, 64, 1, 3), (16, 96, 1, 16, 1, 3), (16, 64, 1, 64, 1, 1),
         (8, 64, 1, 32, 1, 1), (32, 48, 3, 32, 1, 1))
"""(N, C_in, C_out, H = W, groups, kernel side) of the convolutions: grouped 3x3, depthwise 3x3 and
7x7, 1x1, 3x3 heads to one or three channels, and 1x1 heads (of 8 images torch runs natively on one
thread, of 16 and 32 through oneDNN)."""
HALF_CONVS = ((32, 64, 64, 32, 1, 3), (32, 128, 128, 16, 1, 3), (64, 32, 64, 32, 1, 3), (32, 256, 256, 8, 1, 3),
              (16, 64, 64, 56, 1, 3), (32, 3, 64, 56, 1, 3))
"""The same, in bf16 (``torch.autocast``'s convolutions)."""
VECTORS = ((1, 3072, 768), (1, 768, 3072), (1, 10, 784), (1, 512, 2048), (1, 1000, 2048), (1, 2048, 512),
           (64, 1, 512), (256, 1, 256), (2048, 1, 128), (32, 1, 4096), (512, 1, 64), (1, 256, 256))
"""(m, n, k) of the matrix-vector products: BERT-base's and a ResNet head's linear layers at batch 1,
an MLP's, and layers of one output (a regression head, a recommender's top layer)."""
CONV = load_submodule("conv")
TYPES = {"fp32": ("float", torch.float32), "bf16": ("c10::BFloat16", torch.bfloat16)}
FLOAT = "float"


def _median_s(call: Callable[[], object], seconds: float = 0.2) -> float:
    call()
    start = time.perf_counter()
    call()
    repeats = max(3, min(200, int(seconds / max(time.perf_counter() - start, 1e-9))))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _copies() -> Iterator[tuple[str, Callable[[], object], Kernel, Kernel | None]]:
    """(label, call, traced kernel, the same copy without its block) of every channels-last copy."""
    for n, c, side in COPIES:
        x = torch.randn(n, c, side, side).contiguous(memory_format=torch.channels_last)
        out = torch.empty(n, c, side, side)
        shape = [n, c, side, side]
        traced = kernel_for("aten::copy_", "elementwise", [shape, shape, []], [FLOAT, FLOAT, "Scalar"], [], False,
                            [list(out.stride()), list(x.stride()), []]).kernel
        assert isinstance(traced, Copy) and traced.rows == c
        yield (f"N{n} C{c} HW{side * side} {traced.nbytes / 2**20:.2f} MiB", lambda out=out, x=x: out.copy_(x),
               traced, Copy(nbytes=traced.nbytes, run=1))


def _convs() -> Iterator[tuple[str, Callable[[], object], Kernel, Kernel | None]]:
    """(label, call, traced kernel, None) of both passes of every convolution."""
    for dtype, shapes in (("fp32", CONVS), ("bf16", HALF_CONVS)):
        yield from _conv_passes(dtype, shapes)


def _vectors() -> Iterator[tuple[str, Callable[[], object], Kernel, Kernel | None]]:
    """(label, call, traced kernel, None) of every matrix-vector product: a linear layer's forward
    (``x @ W^T``) and the backward product that keeps the vector (``grad @ W`` for m = 1, the
    weight gradient ``grad^T @ x`` for n = 1)."""
    for m, n, k in VECTORS:
        x, w = torch.randn(m, k), torch.randn(n, k)
        grad = torch.randn(m, n)
        pairs = [("fwd", x, w.t())]
        pairs.append(("bwd", grad, w) if m == 1 else ("wgrad", grad.t(), x))
        for name, a, b in pairs:
            traced = kernel_for("aten::mm", "gemm", [list(a.shape), list(b.shape)], [FLOAT, FLOAT], [], False,
                                [list(a.stride()), list(b.stride())]).kernel
            yield (f"{a.shape[0]}x{b.shape[1]}x{a.shape[1]} {name} {traced.layout}",
                   lambda a=a, b=b: torch.mm(a, b), traced, None)


def _conv_passes(dtype: str, shapes: tuple[tuple[int, ...], ...]) -> Iterator[
        tuple[str, Callable[[], object], Kernel, Kernel | None]]:
    traced_type, kind = TYPES[dtype]
    for n, cin, cout, side, groups, kernel in shapes:
        pad = kernel // 2
        x, w = torch.randn(n, cin, side, side).to(kind), torch.randn(cout, cin // groups, kernel, kernel).to(kind)
        g = torch.randn(n, cout, side, side).to(kind)
        args = ["[1, 1]", f"[{pad}, {pad}]", "[1, 1]", "False", "[0, 0]", str(groups)]
        image, weight, out = [n, cin, side, side], [cout, cin // groups, kernel, kernel], [n, cout, side, side]
        forward = kernel_for("aten::convolution", "conv", [image, weight, []], [traced_type] * 2 + [""],
                             ["", "", "", *args], False).kernel
        backward = kernel_for("aten::convolution_backward", "conv", [out, image, weight, []],
                              [traced_type] * 3 + [""], ["", "", "", "", *args, "[True, True, False]"], False).kernel
        native = CONV.conv_backend(x, w, 1, pad, groups) in NATIVE_BACKENDS  # as the trace's op would say
        forward, backward = (replace(k, native=native) for k in (forward, backward))
        label = f"{dtype} N{n} C{cin}>{cout} HW{side * side} {kernel}x{kernel} g{groups}{' native' * native}"
        yield (f"{label} fwd", lambda x=x, w=w, groups=groups, pad=pad: torch.ops.aten.convolution(
            x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], groups), forward, None)
        yield (f"{label} bwd", lambda x=x, w=w, g=g, groups=groups, pad=pad: torch.ops.aten.convolution_backward(
            g, x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], groups, [True, True, False]), backward, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=("copies", "convs", "vectors"))
    parser.add_argument("--calibration", type=Path, default=None)
    parser.add_argument("--without", type=Path, default=None, help="convs, vectors: a calibration to predict beside")
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    cal = load_calibration(args.calibration or default_calibration())
    models = {"predicted": CalibratedEfficiency(cal, blas="torch", cache="warm")}
    if args.family == "copies":
        models["by size"] = models["predicted"]
    elif args.without:
        models["without"] = CalibratedEfficiency(load_calibration(args.without), blas="torch", cache="warm")
    print(f"{cal.source}: {args.family}, measured (median) and predicted")
    errors: dict[str, list[float]] = {name: [] for name in models}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for label, call, traced, unblocked in {"copies": _copies, "convs": _convs, "vectors": _vectors}[args.family]():
            measured = _median_s(call)
            line = f"{threads}t {label:34s} {measured * 1e3:8.3f} ms"
            for name, model in models.items():
                predicted = model.host_time(unblocked if name == "by size" else traced, threads)
                error = (predicted / measured - 1) * 100
                errors[name].append(abs(error))
                line += f" | {name} {predicted * 1e3:8.3f} ms {error:+7.1f} %"
            print(line)
    print("mean |error|: " + ", ".join(f"{name} {statistics.mean(e):.1f} %" for name, e in errors.items()))


if __name__ == "__main__":
    main()
