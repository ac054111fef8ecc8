"""How a product's cold-call cost drifts with time: the calibration's ``gemm_cold`` measurement
(single calls after a 128 MiB fill, less the loop time) repeated every few seconds.

    .venv/bin/python validation/traces/cold_drift.py [--seconds 180] [--every 4]

Prints one line per round: the excess over the loop time, in us, of the CNN classifier's forward
shape (64 x 16 x 4096, ``nt``) at 2 and 1 threads and of a 32 x 32 x 32 product at 1 thread (almost
all code and BLAS state, hardly any operand bytes). ``validation/README.md`` (session 29) has what
it showed: the excess stays at one level over minutes but moved by a factor of two between
sessions, more than a training step's products did.
"""

from __future__ import annotations

import argparse
import time

from validation.microbench.gemm import measure_gemm_cold
from validation.microbench.timing import Budget

SHAPES = ((64, 16, 4096, "nt", 2), (64, 16, 4096, "nt", 1), (32, 32, 32, "nn", 1))
"""(m, n, k, layout, threads) of the products timed each round."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=180.0, help="how long to keep measuring")
    parser.add_argument("--every", type=float, default=4.0, help="pause between rounds (s)")
    args = parser.parse_args()
    budget = Budget()
    print("elapsed  " + "  ".join(f"{m}x{n}x{k} {layout} t{t}" for m, n, k, layout, t in SHAPES))
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        excess = []
        for m, n, k, layout, threads in SHAPES:
            row = measure_gemm_cold(m, n, k, layout, threads, budget)
            excess.append((row["time_s"] - row["warm_s"]) * 1e6)
        print(f"{time.perf_counter() - start:6.1f}s  " + "  ".join(f"{e:19.1f}" for e in excess), flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    main()
