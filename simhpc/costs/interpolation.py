"""Interpolation of measured points: 1-D curves (log-log PCHIP), 2-D grids (log-log bilinear) and
GEMM efficiency surfaces (thin-plate RBF or piecewise-linear over log m, n, k, batch), clamped to
what was measured."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from scipy.interpolate import (
    LinearNDInterpolator,
    NearestNDInterpolator,
    PchipInterpolator,
    RBFInterpolator,
    RegularGridInterpolator,
)

Curve = Callable[[float], float]


def curve_1d(xs: Iterable[float], ys: Iterable[float]) -> Curve:
    """log-log PCHIP through (x, y), clamped to the measured x range; medians of repeated x."""
    grouped: dict[float, list[float]] = defaultdict(list)
    for x, y in zip(xs, ys, strict=True):
        grouped[float(x)].append(float(y))
    points = sorted((x, float(np.median(v))) for x, v in grouped.items())
    lx = np.log([p[0] for p in points])
    ly = np.log([p[1] for p in points])
    if len(points) == 1:
        return lambda x: float(np.exp(ly[0]))
    spline = PchipInterpolator(lx, ly, extrapolate=False)
    low, high = lx[0], lx[-1]
    return lambda x: float(np.exp(spline(min(max(math.log(x), low), high))))


def grid_2d(points: Iterable[tuple[float, float, float]]) -> Callable[[float, float], float] | None:
    """log-log bilinear interpolation of z over a full grid of measured (x, y, z), clamped to the
    grid's range; medians of repeated points. None unless every (x, y) of the grid was measured
    and it spans two values of each."""
    grouped: dict[tuple[float, float], list[float]] = defaultdict(list)
    for x, y, z in points:
        grouped[(float(x), float(y))].append(float(z))
    xs = sorted({x for x, _ in grouped})
    ys = sorted({y for _, y in grouped})
    if len(xs) < 2 or len(ys) < 2 or len(grouped) != len(xs) * len(ys):
        return None
    lz = np.log([[np.median(grouped[(x, y)]) for y in ys] for x in xs])
    lx, ly = np.log(xs), np.log(ys)
    grid = RegularGridInterpolator((lx, ly), lz)

    def value(x: float, y: float) -> float:
        at = (min(max(math.log(x), lx[0]), lx[-1]), min(max(math.log(y), ly[0]), ly[-1]))
        return float(np.exp(grid([at])[0]))

    return value


def thread_blend(counts: list[int], threads: int) -> list[tuple[int, float]]:
    """Measured thread counts (sorted) and the weights that stand for ``threads``: linear between
    the two measured counts around it, the nearest measured count outside them."""
    if not counts:
        return []
    if threads <= counts[0]:
        return [(counts[0], 1.0)]
    if threads >= counts[-1]:
        return [(counts[-1], 1.0)]
    high = bisect.bisect_left(counts, threads)
    low_t, high_t = counts[high - 1], counts[high]
    if high_t == threads:
        return [(threads, 1.0)]
    weight = (threads - low_t) / (high_t - low_t)
    return [(low_t, 1.0 - weight), (high_t, weight)]


class GemmSurface:
    """Fraction of peak over (log2 m, log2 n, log2 k, log2 batch) for one dtype and thread count.

    ``method`` ``"linear"``: piecewise-linear on the Delaunay triangulation of the measured points
    (exact at them), nearest measured point outside their hull. ``"rbf"``: a thin-plate-spline
    radial basis function with ``smoothing`` (it averages noisy neighbours and extrapolates
    smoothly). Either way the result is clamped to the measured fractions' range.
    """

    def __init__(self, rows: list[dict[str, Any]], peak: float, method: str, smoothing: float) -> None:
        points = np.array([self.features(r["m"], r["n"], r["k"], r["batch"]) for r in rows])
        flops = np.array([2.0 * r["batch"] * r["m"] * r["n"] * r["k"] for r in rows])
        values = np.log(flops / (np.array([r["time_s"] for r in rows]) * peak))
        self.low, self.high = float(values.min()), float(values.max())
        # Dimensions that never vary (no batched points) would make the problem degenerate.
        self.varying = [i for i in range(points.shape[1]) if np.ptp(points[:, i]) > 0]
        used = points[:, self.varying]
        # So would points on a hyperplane (a grouped convolution's k is 9 n): interpolate in its
        # own coordinates (principal axes), where the points span every dimension.
        self.axes: tuple[np.ndarray, np.ndarray] | None = None
        if len(self.varying) > 1:
            centre = used.mean(axis=0)
            _, singular, directions = np.linalg.svd(used - centre, full_matrices=False)
            rank = int(np.sum(singular > 1e-9 * max(singular[0], 1.0)))
            if rank < len(self.varying):
                self.axes = (centre, directions[:rank])
                used = self._project(used)
        self._cache: dict[tuple[int, int, int, int], float] = {}
        self.line: tuple[np.ndarray, np.ndarray] | None = None
        """Points varying along one dimension at most: piecewise-linear along it (scipy's
        N-D interpolators need two), clamped at its ends; none: their mean."""
        if used.shape[1] <= 1 or len(self.varying) <= 1:
            order = np.argsort(used[:, 0], kind="stable") if self.varying else np.arange(len(values))
            xs = used[order, 0] if self.varying else np.zeros(1)
            ys = values[order] if self.varying else np.array([values.mean()])
            self.line = (xs, ys)
            self.nearest = self.linear = self.rbf = None
            return
        enough = len(rows) > used.shape[1] + 2
        self.nearest = NearestNDInterpolator(used, values)
        self.linear = LinearNDInterpolator(used, values) if enough and method == "linear" else None
        self.rbf = (
            RBFInterpolator(used, values, kernel="thin_plate_spline", smoothing=smoothing, degree=1)
            if enough and method == "rbf"
            else None
        )

    def _project(self, points: np.ndarray) -> np.ndarray:
        """``points`` (in the varying dimensions) in the principal axes of the measured ones."""
        if self.axes is None:
            return points
        centre, directions = self.axes
        return (points - centre) @ directions.T

    @staticmethod
    def features(m: int, n: int, k: int, batch: int) -> tuple[float, float, float, float]:
        return (math.log2(max(m, 1)), math.log2(max(n, 1)), math.log2(max(k, 1)), math.log2(max(batch, 1)))

    def fraction(self, m: int, n: int, k: int, batch: int) -> float:
        key = (m, n, k, batch)
        if key not in self._cache:
            point = self._project(np.array([self.features(m, n, k, batch)])[:, self.varying])
            value = math.nan
            if self.line is not None:
                xs, ys = self.line
                value = float(np.interp(point[0, 0] if self.varying else 0.0, xs, ys))
            elif self.rbf is not None:
                value = float(self.rbf(point)[0])
            elif self.linear is not None:
                value = float(self.linear(point)[0])
            if math.isnan(value) and self.nearest is not None:
                value = float(self.nearest(point)[0])
            self._cache[key] = math.exp(min(max(value, self.low), self.high))
        return self._cache[key]


Surfaces = dict[tuple[str, int], GemmSurface]
"""GEMM surfaces by (dtype, thread count)."""
