"""How well a calibration times channels-last activations made contiguous (needs torch).

Times ``out.copy_(x)`` for channels-last ``[N, C, H, W]`` tensors of CNN-like shapes (shapes the
calibration's batched transposes were not measured at: other channel counts, image sizes and
batches) and prints each beside what the cost model predicts for the traced op: from the
``transpose`` points by the copy's block (C rows of H x W), and from the ``permute`` curve of run 1
by the tensor's size alone, as before suite 21.

    .venv/bin/python validation/calibration/blocks_check.py [CALIBRATION] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import load_calibration
from simhpc.costs.kernels import Copy
from simhpc.costs.opmap import kernel_for
from simhpc.hardware.host import default_calibration

SHAPES = ((64, 64, 16), (64, 32, 32), (64, 128, 8), (64, 16, 32), (16, 64, 16), (256, 64, 16), (64, 3, 32),
          (64, 512, 4), (8, 256, 32), (32, 64, 56), (32, 128, 28), (32, 256, 14), (32, 512, 7), (32, 48, 56),
          (32, 96, 28), (32, 192, 14), (32, 384, 7), (64, 80, 16), (64, 64, 15), (64, 24, 32))
"""(N, C, H = W) of the copies: a small CNN's, ResNet's at 224 px (batch 32), and channel counts that
are not powers of two (48, 96, 192, 384, 80, 24) or odd image sizes."""


def _median_s(call, seconds: float = 0.2) -> float:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibration", nargs="?", type=Path, default=None)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    cal = load_calibration(args.calibration or default_calibration())
    model = CalibratedEfficiency(cal, blas="torch", cache="warm")
    print(f"{cal.source}: channels-last -> contiguous copies, measured (median) and predicted")
    print("threads  N    C    HW   tensor | measured | by block   error | by size    error")
    errors: dict[str, list[float]] = {"block": [], "size": []}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for n, c, side in SHAPES:
            x = torch.randn(n, c, side, side).contiguous(memory_format=torch.channels_last)
            out = torch.empty(n, c, side, side)
            measured = _median_s(lambda out=out, x=x: out.copy_(x))
            shape = [n, c, side, side]
            traced = kernel_for("aten::copy_", "elementwise", [shape, shape, []], ["float", "float", "Scalar"], [],
                                False, [list(out.stride()), list(x.stride()), []]).kernel
            assert isinstance(traced, Copy) and traced.rows == c
            by_block = model.host_time(traced, threads)
            by_size = model.host_time(Copy(nbytes=traced.nbytes, run=1), threads)
            line = (f"{threads:7d} {n:4d} {c:4d} {side * side:5d} {traced.nbytes / 2**20:5.2f} MiB | "
                    f"{measured * 1e6:6.0f} us |")
            for name, predicted in (("block", by_block), ("size", by_size)):
                error = (predicted / measured - 1) * 100
                errors[name].append(abs(error))
                line += f" {predicted * 1e6:6.0f} us {error:+6.1f} % |"
            print(line.rstrip(" |"))
    block, size = (statistics.mean(errors[name]) for name in ("block", "size"))
    print(f"mean |error|: by block {block:.1f} %, by size {size:.1f} %")


if __name__ == "__main__":
    main()
