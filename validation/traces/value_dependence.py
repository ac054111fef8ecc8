"""How much an elementwise op's time depends on the values it reads (needs torch).

``simhpc compare`` predicts an op from its kind, shapes and dtype: a trace records no values, and
the calibration times its kernels over random operands. Some of torch's CPU kernels take a slower
path for special values. This script times ops over a 12.8 MB fp32 tensor (an Adam state of a
50 000 x 64 embedding table) holding random values in [0.1, 1.1), zeros, zeros but for 4 % of its
rows (what a sparse gradient leaves in an embedding's second moment), and subnormals (1e-40: a
second moment decayed by 0.999 a step for long enough), each into a preallocated output (no page
faults), and prints the medians (ms) and each against the random operand's time.

On the Zen 5 guest (session 44, ``validation/README.md``) torch's ``sqrt`` took 1.06 ms over random
values, 5.0 over zeros or mostly zeros and 33 over subnormals (the same ratios on 2 threads);
numpy's ``sqrt`` 0.8 ms over random values and zeros, 2.1 over subnormals; ``exp``, ``rsqrt`` and
``div`` 2-3x slower over subnormals only. A plain recommender's trace misses by -35 % mostly for
this: its AdamW ``sqrt`` over the embedding's second moment.

    .venv/bin/python validation/traces/value_dependence.py [--threads 1] [--calls 15]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
from idle_decay import median_us  # this folder's idle_decay.py (the script's folder is on sys.path)

ROWS, WIDTH = 50_000, 64
TOUCHED = 0.04
"""The share of an embedding's rows a sparse gradient reaches in the "mostly zero" operand."""


def operands() -> dict[str, torch.Tensor]:
    """The operand of each value kind, by name."""
    generator = torch.Generator().manual_seed(0)
    mostly = torch.zeros(ROWS, WIDTH)
    rows = torch.randperm(ROWS, generator=generator)[: int(TOUCHED * ROWS)]
    mostly[rows] = torch.rand(len(rows), WIDTH, generator=generator) + 0.1
    return {
        "random": torch.rand(ROWS, WIDTH, generator=generator) + 0.1,
        "zeros": torch.zeros(ROWS, WIDTH),
        "mostly zero": mostly,
        "subnormal": torch.full((ROWS, WIDTH), 1e-40),
    }


def kernels(x: torch.Tensor, out: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The ops timed over ``x``, each writing ``out``."""
    other = torch.rand(ROWS, WIDTH) + 0.5
    array, array_out = x.numpy(), out.numpy()
    return {
        "torch.sqrt": lambda: torch.sqrt(x, out=out),
        "torch.rsqrt": lambda: torch.rsqrt(x, out=out),
        "torch.div (scalar)": lambda: torch.div(x, 1.1, out=out),
        "torch.mul (scalar)": lambda: torch.mul(x, 0.999, out=out),
        "torch.exp": lambda: torch.exp(x, out=out),
        "torch.addcdiv": lambda: torch.addcdiv(other, x, other, value=-1e-3, out=out),  # x as the numerator
        "numpy.sqrt": lambda: np.sqrt(array, out=array_out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    values = operands()
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"{threads} thread(s): median ms over a {ROWS} x {WIDTH} fp32 tensor (x its time over random values)")
        names = list(values)
        print(f"{'op':20s}" + "".join(f"{name:>20s}" for name in names))
        out = torch.empty(ROWS, WIDTH)
        times = {name: {op: median_us(kernel, lambda: None, args.calls) / 1e3
                        for op, kernel in kernels(x, out).items()} for name, x in values.items()}
        for op in times["random"]:
            base = times["random"][op]
            print(f"{op:20s}" + "".join(f"{times[name][op]:9.2f} ({times[name][op] / base:5.1f}x)" for name in names))


if __name__ == "__main__":
    main()
