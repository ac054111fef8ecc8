"""What a BLAS product called once, cold, takes over its repeated calls: fits to the calibration's
``gemm_cold`` points (:class:`~simhpc.costs.calibration.CalibratedEfficiency` charges them to a
traced product as :mod:`simhpc.trace.product_reuse` decides)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from scipy import optimize

from simhpc.costs.kernels import Gemm

SHARED_CORE = 1.3
"""An L1 probe reading over this many times the fastest of the points': another hardware thread
shared the core while the point was measured (``simhpc calibrate``'s own threshold)."""
SHARED_SHARE = 0.2
"""The share of the points read on a shared core up to which they are left out of the fits: above
it the core was shared most of the time, its usual state, and they are kept."""


def unshared(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` less those measured on a shared core (their ``l1_probe_s`` over :data:`SHARED_CORE`
    x the fastest of them), where those are at most :data:`SHARED_SHARE` of the rows. A single cold
    call pays the sharing whole where a loop's median of calls does not: on the EPYC Zen 4 guest a
    32 x 32 x 32 product took 67 us cold with the L1 probe at 1.61 ns, 25 us in the runs before at
    1.09 ns, and 16 of 92 such points lifted the 2-thread fit's constant from 20-36 us to 58 us."""
    readings = [row["l1_probe_s"] for row in rows if row.get("l1_probe_s", 0) > 0]
    if not readings:
        return rows
    shared = {id(row) for row in rows if row.get("l1_probe_s", 0) > SHARED_CORE * min(readings)}
    return rows if len(shared) > SHARED_SHARE * len(rows) else [row for row in rows if id(row) not in shared]


def cold_product_fits(rows: list[dict[str, Any]], blas: str) -> dict[int, tuple[float, float]]:
    """Threads -> (seconds, seconds per byte): the non-negative fit of ``seconds + bytes x seconds
    per byte`` to the ``gemm_cold`` points' cold-less-warm times (:func:`unshared`), in least squares
    of the log of their ratio, which weighs a fit twice a point's time as it does one half of it.

    Least squares of the relative error ``fit / measured - 1`` did not: it costs at most 1 where
    the fit is below a point, without bound where it is above, so the few points a flush barely
    slowed (6.6 us over the loop for a 512 x 4 x 512 product on the EPYC Zen 5 guest, against 20-170
    us for the other products of about 1 MB) held the fit under most of them: 4.3 us + 15 ps per
    byte there, under half of 31 of its 38 points (median fit-to-point ratio 0.29; 0.76-0.95 on the
    committed files; this way 0.88 and 0.97-1.06)."""
    points: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for row in unshared(rows):
        if row.get("blas", "torch") == blas and "after" not in row:
            product = Gemm(dtype=row["dtype"], m=row["m"], n=row["n"], k=row["k"], batch=row.get("batch", 1))
            points[row["threads"]].append((product.bytes(), row["time_s"] - row["warm_s"]))
    fits = {}
    for threads, measured in sorted(points.items()):
        kept = [(moved, extra) for moved, extra in measured if extra > 0]
        if len(kept) < 2:
            continue
        fits[threads] = _log_ratio_fit(*(np.array(column) for column in zip(*kept)))
    return fits


def path_constants(rows: list[dict[str, Any]], blas: str, layout: str | None = None) -> dict[int, float]:
    """Threads -> seconds: the median of what the ``gemm_cold`` rows with ``after`` (a small product
    right after a flush, a read of its operands and a product of another layout) took over their
    loop time, the part of a cold call that is the kernels of the product's own layout (0 where the
    call was faster); of the rows of ``layout`` only, where given. The layouts' kernels differ: on
    the EPYC Zen 4 guest (1 thread) a ``tn`` product (a weight gradient) paid 5.5-6.6 us, ``nn``
    8.4-9.8 us and ``nt`` 8.9-10.4 us, its operands cold. Rows that read the operands first (their
    ``operands`` field, suite 40) stand alone where a thread count has them: the others also hold
    the operands' fetch from memory, which a traced product pays by where they are (on the EPYC Zen
    5 guest, 1 thread, 3-4 us of a 32 x 16 x 256 product's 4.4-5.8)."""
    extras: dict[int, dict[bool, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in unshared(rows):
        if row.get("blas", "torch") == blas and "after" in row and layout in (None, row.get("layout", "nn")):
            extras[row["threads"]]["operands" in row].append(max(0.0, row["time_s"] - row["warm_s"]))
    return {threads: float(np.median(by_kind[True] or by_kind[False])) for threads, by_kind in sorted(extras.items())}


def _log_ratio_fit(moved: np.ndarray, extra: np.ndarray) -> tuple[float, float]:
    """Non-negative (a, b) of ``a + b x moved`` with the least squares of ``log(fit / extra)``."""
    start = np.array([np.median(extra), np.median(extra / moved)]) / 2.0
    fit = optimize.least_squares(lambda c: np.log(np.maximum(c[0] + c[1] * moved, 1e-15)) - np.log(extra),
                                 start, bounds=(0.0, np.inf), x_scale=start)
    return float(fit.x[0]), float(fit.x[1])
