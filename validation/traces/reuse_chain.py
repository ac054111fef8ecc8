"""What a map costs on inputs an op has just written, against the loop and the flush, measured and modelled.

``compare`` times an elementwise op inside a training step from the calibration's cold points for
the bytes it fetches, but for the inputs a recent op wrote, which are still in cache
(``simhpc.trace.stream_reuse``). This script checks that on the host: ``torch.mul(a, b)`` of two
fp32 tensors of each size, timed (median of 31 calls, microseconds)

- in a loop on the same arrays (``loop``: what the calibration's warm points time);
- once after a 128 MiB fill (``flush``: its cold points);
- right after two ``torch.add`` wrote ``a`` and ``b`` (``chain``: a training step's producer and
  consumer; ``a`` was written one ``add`` before ``b``), its output written into one of a ring of
  buffers of 64 MiB in all, last written long before (in a step the allocator mostly hands an op
  a block freed long before; a block freed moments before is in cache, and the chain then takes
  its loop time);

each beside what the cost model predicts for it from a calibration (the chain through
``charge_streams`` itself). It runs with ``capture.py``'s malloc settings (freed memory kept):
under glibc's defaults the new tensors land on fresh pages now and then, and their page faults
(``compare`` charges them apart) swamp the caches' effect. Needs torch, like ``capture.py``:

    .venv/bin/python validation/traces/reuse_chain.py [--calibration FILE] [--threads 1 2] [--mib 2 8]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from capture import MALLOC_ENV

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import load_calibration
from simhpc.costs.kernels import Elementwise
from simhpc.costs.model import CostModel
from simhpc.trace.op_predictions import OpPrediction
from simhpc.trace.readers import OpRecord
from simhpc.trace.stream_reuse import charge_streams

DEFAULT_CALIBRATION = Path(__file__).resolve().parents[1] / "calibration" / "epyc-zen4.json"


def _median_us(call: Callable[[], float], samples: int = 31) -> float:
    return statistics.median(call() for _ in range(samples)) * 1e6


def measured(elements: int) -> dict[str, float]:
    """The three timings of ``mul`` over ``elements``-element tensors (see the module docstring)."""
    x, y = torch.randn(elements), torch.randn(elements)
    fill = torch.empty((128 << 20) // 4)

    ring = itertools.cycle([torch.zeros(elements) for _ in range(max(2, (64 << 20) // (4 * elements)))])

    def timed(before: Callable[[], tuple[torch.Tensor, torch.Tensor]], out: bool = False) -> float:
        a, b = before()
        into = next(ring) if out else None
        start = time.perf_counter()
        torch.mul(a, b, out=into)
        return time.perf_counter() - start

    def flushed() -> tuple[torch.Tensor, torch.Tensor]:
        fill.fill_(1.0)
        return x, y

    for _ in range(20):
        torch.mul(x, y)
    return {"loop": _median_us(lambda: timed(lambda: (x, y))),
            "flush": _median_us(lambda: timed(flushed)),
            "chain": _median_us(lambda: timed(lambda: (torch.add(x, 1.0), torch.add(y, 1.0)), out=True))}


def modelled(elements: int, calibration: Path, threads: int) -> dict[str, float]:
    """What the cost model predicts for the same three cases."""
    cal = load_calibration(calibration)
    cold = CalibratedEfficiency(cal, blas="torch", cache="cold")
    mul = Elementwise(dtype="fp32", n=elements, op="mul", inputs=2, outputs=1)
    add = Elementwise(dtype="fp32", n=elements, op="add", inputs=1, outputs=1)
    shape = [elements]
    ops = [("aten::add", add, [shape, []]), ("aten::add", add, [shape, []]), ("aten::mul", mul, [shape, shape])]
    chain = [OpPrediction(OpRecord(i, name, "elementwise", float(i), 0.5, "t", shapes=shapes,
                                   dtypes=["float"] * len(shapes)), kernel, 0.0,
                          cold.host_time(kernel, threads) or 0.0, True)
             for i, (name, kernel, shapes) in enumerate(ops)]
    charge_streams(chain, CostModel(cold), threads)
    warm = CalibratedEfficiency(cal, blas="torch", cache="warm")
    return {"loop": (warm.host_time(mul, threads) or 0.0) * 1e6,
            "flush": (cold.host_time(mul, threads) or 0.0) * 1e6,
            "chain": chain[-1].predicted_s * 1e6}


def main() -> None:
    if any(os.environ.get(key) != value for key, value in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_ENV})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--mib", type=int, nargs="+", default=[2, 8], help="size of each tensor")
    args = parser.parse_args()
    print(f"torch.mul(a, b), fp32; measured / modelled from {args.calibration.name}, us")
    print(f"{'threads':>7} {'tensor':>8} {'loop':>17} {'flush':>17} {'chain':>17}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for mib in args.mib:
            elements = (mib << 20) // 4
            have, model = measured(elements), modelled(elements, args.calibration, threads)
            cells = "".join(f"{have[k]:>8.0f} / {model[k]:<6.0f}" for k in ("loop", "flush", "chain"))
            print(f"{threads:>7} {mib:>5} MiB {cells}")


if __name__ == "__main__":
    main()
