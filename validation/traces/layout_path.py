"""What a linear layer's product pays for its layout's kernels right after another product (needs torch).

A training step runs a linear layer's three products one after another: its forward (``nt``),
input gradient (``nn``) and weight gradient (``tn``). Each finds the BLAS's common code warm from
the one before, and its own layout's kernels cold. The calibration's ``gemm_cold`` rows with
``after`` time that part (``validation/microbench/gemm.py``, ``measure_gemm_path``): up to suite
39 a 32 x 16 x 256 product after a 128 MiB fill and a product of another layout, its operands left
cold; since suite 40 a small classifier head's product (batch 32, 64 inputs, 10 outputs) with its
operands read first. This script times, for each ordered pair of layouts and each of the two
shapes, the product as a single call after the fill and the other layout's product on other
operands, with its own operands read first or left cold, against the same call repeated; every
state's calls interleaved, round by round.

On the EPYC Zen 5 guest (session 50, ``validation/README.md``; 1 thread): the 32 x 16 x 256
products 4.4-5.8 us over their repeated call with their operands cold, 1.1-1.6 with them read; the
head's products 2.9-5.4 and 2.3-4.3 us. In the plain captures' steps the heads' weight gradients
paid 2.6-2.9 us over their loop time.

    .venv/bin/python validation/traces/layout_path.py [--threads 1 2] [--rounds 30]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable

import torch

LAYOUTS = ("nt", "nn", "tn")
FLUSH_BYTES = 128 << 20
BATCH, INPUTS, OUTPUTS = 32, 64, 10


def shapes(name: str, layout: str) -> tuple[int, int, int]:
    """(m, n, k) of the ``head`` layer's product of ``layout``, or the old ``32x16x256`` point."""
    if name == "32x16x256":
        return 32, 16, 256
    return {"nt": (BATCH, OUTPUTS, INPUTS), "nn": (BATCH, INPUTS, OUTPUTS), "tn": (OUTPUTS, INPUTS, BATCH)}[layout]


def product(m: int, n: int, k: int, layout: str) -> tuple[tuple[torch.Tensor, torch.Tensor], Callable[[], object]]:
    """The operands of an ``m x n x k`` product of ``layout`` (a ``t`` one a transposed view) and its call."""
    a = torch.randn(k, m).t() if layout[0] == "t" else torch.randn(m, k)
    b = torch.randn(n, k).t() if layout[1] == "t" else torch.randn(k, n)
    out = torch.empty(m, n)
    return (a, b), lambda: torch.mm(a, b, out=out)


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    flush = torch.empty(FLUSH_BYTES // 4)
    for threads in args.threads:
        torch.set_num_threads(threads)
        cases = []
        for name, (first, then) in itertools.product(("head", "32x16x256"), itertools.permutations(LAYOUTS, 2)):
            operands, call = product(*shapes(name, then), then)
            _, before = product(*shapes(name, first), first)
            cases.append((name, first, then, operands, call, before, {"repeated": [], "cold": [], "read": []}))
        for _ in range(args.rounds):
            for _name, _first, _then, operands, call, before, samples in cases:
                for _ in range(3):
                    call()
                samples["repeated"].append(timed(call))
                flush.fill_(1.0)
                before()
                samples["cold"].append(timed(call))
                flush.fill_(1.0)
                for operand in operands:
                    operand.sum()
                before()
                samples["read"].append(timed(call))
        print(f"{threads} thread(s): us over the repeated call (median of {args.rounds})")
        header = ("product", "layout", "after", "repeated", "operands cold", "operands read")
        print("".join(f"{h:>{w}s}" for h, w in zip(header, (12, 8, 7, 10, 15, 15), strict=True)))
        for name, first, then, _operands, _call, _before, samples in cases:
            repeated, cold, read = (statistics.median(samples[key]) * 1e6 for key in ("repeated", "cold", "read"))
            print(f"{name:12s}{then:>8s}{first:>7s}{repeated:10.2f}{cold - repeated:+15.2f}{read - repeated:+15.2f}")


if __name__ == "__main__":
    main()
