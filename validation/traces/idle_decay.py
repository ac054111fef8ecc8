"""How much a small kernel's second call costs after what a training step does between two calls.

The calibration times a product in a loop of calls and once more after a cache flush of its own
(``gemm_cold``). In a trace, a classifier head's product comes after milliseconds of other work. This
script times two small kernels (a 256 KiB numpy sum and a 32 x 64 x 100 ``torch.addmm``) once after
each of: nothing (the loop), a 64 MiB fill (the calibration's flush), busy-waiting 5 and 50 ms
(no memory traffic of this process), sleeping 50 ms, and a 3x3 convolution over 4 MiB. The median
of 21 calls of each, in microseconds, per torch thread count (needs torch, like ``capture.py``).

    .venv/bin/python validation/traces/idle_decay.py [--threads 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def median_us(kernel: Callable[[], object], before: Callable[[], object], calls: int = 21) -> float:
    """Median microseconds of ``kernel`` called once right after ``before``, ``calls`` times."""
    samples = []
    for _ in range(calls):
        before()
        start = time.perf_counter()
        kernel()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    vector = np.random.default_rng(0).random(256 * 1024 // 8)
    x, weight, bias = torch.randn(32, 64), torch.randn(100, 64), torch.randn(100)
    flush = torch.empty(64 << 20 >> 2)
    image, conv = torch.randn(16, 16, 64, 64), torch.nn.Conv2d(16, 16, 3, padding=1)
    kernels = {"numpy sum 256 KiB": vector.sum, "addmm 32x64x100": lambda: torch.addmm(bias, x, weight.t())}
    before = {"nothing (loop)": lambda: None, "64 MiB fill": lambda: flush.fill_(1.0),
              "busy 5 ms": lambda: _spin(0.005), "busy 50 ms": lambda: _spin(0.05),
              "sleep 50 ms": lambda: time.sleep(0.05), "3x3 conv, 4 MiB": lambda: conv(image)}
    with torch.no_grad():
        for threads in args.threads:
            torch.set_num_threads(threads)
            for kernel in kernels.values():
                for _ in range(100):
                    kernel()
            print(f"{threads} thread(s)     " + "".join(f"{name:>22}" for name in kernels))
            for what, call in before.items():
                row = "".join(f"{median_us(kernel, call):>19.1f} us" for kernel in kernels.values())
                print(f"  after {what:<16}{row}")


if __name__ == "__main__":
    main()
