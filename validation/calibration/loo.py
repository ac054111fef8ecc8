"""Leave-one-out error of the GEMM interpolation on a calibration file.

For each (dtype, threads) group of untransposed (``nn``) points and each of its points: fit the
surface on the other points, predict the held-out one, and report the mean and median relative
time error per method. This is how ``simhpc.costs.calibration.GEMM_METHOD`` and ``GEMM_SMOOTHING`` were chosen.

    .venv/bin/python validation/calibration/loo.py [validation/calibration/host.json [numpy|torch]]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from simhpc.costs.calibration_file import load_calibration
from simhpc.costs.interpolation import GemmSurface

METHODS = (("linear", 0.0), ("rbf", 0.0), ("rbf", 0.1), ("rbf", 0.3), ("rbf", 1.0))


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("host.json")
    cal = load_calibration(path)
    blas = sys.argv[2] if len(sys.argv) > 2 else "numpy"
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in cal.rows("gemm"):
        if row.get("blas", "numpy") == blas and row.get("layout", "nn") == "nn" and not row.get("interleaved"):
            groups[(row["dtype"], row["threads"])].append(row)
    print(f"{path} ({blas} GEMM points): leave-one-out relative error of GEMM time (mean / median)")
    totals: dict[tuple[str, float], list[float]] = defaultdict(list)
    for (dtype, threads), rows in sorted(groups.items()):
        peak = cal.peak_flops(dtype, threads)
        line = [f"{dtype} {threads}t ({len(rows)} points):"]
        for method, smoothing in METHODS:
            errors = []
            for i, row in enumerate(rows):
                surface = GemmSurface(rows[:i] + rows[i + 1 :], peak, method, smoothing)
                fraction = surface.fraction(row["m"], row["n"], row["k"], row["batch"])
                predicted = 2.0 * row["batch"] * row["m"] * row["n"] * row["k"] / (fraction * peak)
                errors.append(abs(predicted / row["time_s"] - 1))
            totals[(method, smoothing)].extend(errors)
            line.append(
                f"{method}/{smoothing}: {100 * statistics.fmean(errors):.1f}/{100 * statistics.median(errors):.1f} %"
            )
        print("  " + "  ".join(line))
    print(
        "  all: "
        + "  ".join(
            f"{m}/{s}: {100 * statistics.fmean(e):.1f}/{100 * statistics.median(e):.1f} %"
            for (m, s), e in totals.items()
        )
    )


if __name__ == "__main__":
    main()
