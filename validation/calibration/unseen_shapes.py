"""How well a calibration times kernels at shapes it did not measure (needs torch).

Two families, each timed here with torch and printed beside what the cost model predicts for the
traced op (:func:`simhpc.costs.opmap.kernel_for`, then the calibration, warm caches):

- ``copies``: ``out.copy_(x)`` of channels-last ``[N, C, H, W]`` tensors made contiguous, at
  shapes the batched transposes (suite 21) were not measured at (other channel counts, image
  sizes and batches): predicted from the ``transpose`` points by the copy's block (C rows of
  H x W), and from the ``permute`` curve of run 1 by the tensor's size alone, as before suite 21.
- ``grouped``: 3x3 convolutions with 2 to 32 groups and depthwise ones, forward and backward
  (both gradients), at shapes the grouped points (suite 21) were not measured at; with
  ``--without`` another calibration's predictions beside (one without grouped points).

    .venv/bin/python validation/calibration/unseen_shapes.py copies [--calibration FILE] [--threads 1,2]
    .venv/bin/python validation/calibration/unseen_shapes.py grouped [--calibration FILE] [--without FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import load_calibration
from simhpc.costs.kernels import Copy, Kernel
from simhpc.costs.opmap import kernel_for
from simhpc.hardware.host import default_calibration

COPIES = ((64, 64, 16), (64, 32, 32), (64, 128, 8), (64, 16, 32), (16, 64, 16), (256, 64, 16), (64, 3, 32),
          (64, 512, 4), (8, 256, 32), (32, 64, 56), (32, 128, 28), (32, 256, 14), (32, 512, 7), (32, 48, 56),
          (32, 96, 28), (32, 192, 14), (32, 384, 7), (64, 80, 16), (64, 64, 15), (64, 24, 32))
"""(N, C, H = W) of the copies: a small CNN's, ResNet's at 224 px (batch 32), and channel counts that
are not powers of two (48, 96, 192, 384, 80, 24) or odd image sizes."""
GROUPED = ((32, 64, 32, 4), (32, 64, 32, 8), (32, 128, 16, 4), (32, 128, 16, 2), (16, 256, 14, 32),
           (32, 96, 16, 3), (32, 64, 16, 16), (16, 128, 28, 8), (32, 64, 16, 64), (16, 256, 14, 256),
           (64, 96, 8, 96))
"""(N, C, H = W, groups) of the grouped convolutions, as many channels out as in."""
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


def _grouped() -> Iterator[tuple[str, Callable[[], object], Kernel, Kernel | None]]:
    """(label, call, traced kernel, None) of both passes of every grouped convolution."""
    for n, c, side, groups in GROUPED:
        x, w, g = torch.randn(n, c, side, side), torch.randn(c, c // groups, 3, 3), torch.randn(n, c, side, side)
        args = ["[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", str(groups)]
        image, weight = [n, c, side, side], [c, c // groups, 3, 3]
        forward = kernel_for("aten::convolution", "conv", [image, weight, []], [FLOAT, FLOAT, ""],
                             ["", "", "", *args], False).kernel
        backward = kernel_for("aten::convolution_backward", "conv", [image, image, weight, []],
                              [FLOAT, FLOAT, FLOAT, ""], ["", "", "", "", *args, "[True, True, False]"], False).kernel
        label = f"N{n} C{c} HW{side * side} groups {groups}"
        yield (f"{label} forward", lambda x=x, w=w, groups=groups: torch.ops.aten.convolution(
            x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups), forward, None)
        yield (f"{label} backward", lambda x=x, w=w, g=g, groups=groups: torch.ops.aten.convolution_backward(
            g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups, [True, True, False]), backward, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=("copies", "grouped"))
    parser.add_argument("--calibration", type=Path, default=None)
    parser.add_argument("--without", type=Path, default=None, help="grouped: a calibration to predict beside")
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
        for label, call, traced, unblocked in (_copies() if args.family == "copies" else _grouped()):
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
