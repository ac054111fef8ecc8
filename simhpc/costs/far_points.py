"""Multi-thread product points measured while the host ran the cores far apart, taken at their near speed.

On the 2-core KVM guests the host runs the two vCPUs on near or on distant cores for seconds at a
time (:mod:`simhpc.trace.core_distance`). ``simhpc calibrate`` reads the cores' round trip before
every multi-thread point (``round_trip_s``) and measures the points read far again while its
deadline allows; the rest it keeps as measured: 10-180 of the ~700 2-thread torch products of each
calibration on the EPYC Zen 4 guest. A small product measured far took up to 2.7x its near time
there (64 x 512 x 16 ``nt``: 48.5 against 18.2 us; 64 x 4096 x 10 ``nn``: 274 against 119 us),
a large one about the same, and a classifier head's products measured far made up most of the
2-thread CNN captures' GEMM error.

So a far point is given the time the 1-thread point of its shape took, times the speed-up its
thread count reached at that shape with the cores near: the near points' efficiency surface over
the 1-thread points' (:class:`~simhpc.costs.interpolation.GemmSurface`, both smoothed alike), where
that is faster than what it measured. The speed-up changes smoothly with the shape where the time
does not (a layout's kernel choices show in the 1-thread point too). A far point without a 1-thread
point of its shape, or in a group (dtype, layout, thread count) with fewer than :data:`MIN_NEAR` near
points, is kept as measured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.interpolation import GemmSurface

MIN_NEAR = 12
"""Near points a group needs for its speed-up surface."""
FAR_RATIO = 2.0
"""A reading over this many times the fastest: far apart (``simhpc calibrate``'s own threshold)."""

Row = dict[str, Any]


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def far_round_trip(cal: Calibration, rows: list[Row]) -> float | None:
    """The round trip above which the cores were far apart while ``rows`` were measured: the fastest
    reading (of the rows, and of the run's ``round trip before points`` probe) times the probe's far
    threshold, or :data:`FAR_RATIO` where it has none (a merged file keeps its rows' readings, not
    the probe); None where no row records a reading."""
    readings = [row["round_trip_s"] for row in rows if _positive(row.get("round_trip_s"))]
    if not readings:
        return None
    probe = (cal.data.get("probes") or {}).get("round trip before points")
    probe = probe if isinstance(probe, dict) else {}
    fastest = min(readings + ([probe["fastest_s"]] if _positive(probe.get("fastest_s")) else []))
    return fastest * (probe["far_threshold"] if _positive(probe.get("far_threshold")) else FAR_RATIO)


def _group(row: Row) -> tuple[str, str, str]:
    return row["dtype"], row.get("layout", "nn"), row.get("interleaved", "")


def _shape(row: Row) -> tuple[int, int, int, int]:
    return row["m"], row["n"], row["k"], row.get("batch", 1)


def as_near(rows: list[Row], far_above: float | None, method: str, smoothing: float) -> tuple[list[Row], int]:
    """One BLAS's GEMM ``rows`` with each multi-thread row whose ``round_trip_s`` is over
    ``far_above`` timed at its near speed-up where that is faster (a copy), and how many were."""
    if far_above is None:
        return rows, 0
    single: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    multi: dict[tuple[tuple[str, str, str], int], list[Row]] = defaultdict(list)
    for row in rows:
        if row["threads"] == 1:
            single[_group(row)].append(row)
        else:
            multi[(_group(row), row["threads"])].append(row)
    estimated: dict[int, Row] = {}
    for (group, _threads), members in multi.items():
        far = [row for row in members if row.get("round_trip_s", 0.0) > far_above]
        near = [row for row in members if row not in far]
        ones = {_shape(row): row for row in single.get(group, [])}
        if not far or len(near) < MIN_NEAR or len(ones) < MIN_NEAR:
            continue
        near_surface = GemmSurface(near, 1.0, method, smoothing)
        one_surface = GemmSurface(list(ones.values()), 1.0, method, smoothing)
        for row in far:
            one = ones.get(_shape(row))
            if one is None:
                continue
            shape = _shape(row)
            seconds = one["time_s"] * one_surface.fraction(*shape) / near_surface.fraction(*shape)
            if seconds < row["time_s"]:
                estimated[id(row)] = {**row, "time_s": seconds, "measured_far_s": row["time_s"]}
    return [estimated.get(id(row), row) for row in rows], len(estimated)
