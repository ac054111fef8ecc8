"""Multi-thread product points measured with the cores near or far apart, taken in one state.

On the 2-core KVM guests the host runs the two vCPUs on near or on distant cores for seconds at a
time (:mod:`simhpc.trace.core_distance`). ``simhpc calibrate`` reads the cores' round trip before
every multi-thread point (``round_trip_s``) and measures the points read far again while its
deadline allows; the rest it keeps as measured: 10-620 of the ~1360 multi-thread products of each
calibration on the EPYC Zen 4 guest. A small product measured far took up to 2.7x its near time
there (64 x 512 x 16 ``nt``: 48.5 against 18.2 us; 64 x 4096 x 10 ``nn``: 274 against 119 us),
a large one about the same, and a classifier head's products measured far made up most of the
2-thread CNN captures' GEMM error.

So for a trace whose cores were near (or that does not say), a far point is given the time the
1-thread point of its shape took, times the speed-up its thread count reached at that shape with
the cores near: the near points' efficiency surface over the 1-thread points'
(:class:`~simhpc.costs.interpolation.GemmSurface`, both smoothed alike), where that is faster than
what it measured. The speed-up changes smoothly with the shape where the time does not (a
layout's kernel choices show in the 1-thread point too). It is taken no higher than the thread
count: the two smoothed surfaces dip apart where a layout's narrow products run unlike their
neighbours (on a Zen 5 guest at 4.5 GHz, 87 of its 107 2-thread ``nt`` products read far, their
ratio gave a 64 x 4 x 4096 ``nt`` product 3.7x its 1-thread speed on 2 cores: 10.5 us against
39 us on one and 21-24 us measured in a loop on two). For a trace captured with the cores far
apart, the other way round: a near point at the far speed-up, where that is slower. A point
without a 1-thread point of its shape, outside the range of work (FLOPs) of the points in the state
asked for, or in a group (dtype, layout, thread count) with fewer than :data:`MIN_POINTS` of them,
is kept as measured: a far spell of ``calibrate`` may cover only its small products, and the
speed-up they give does not hold for large ones. So is a matrix-vector or outer product
(:func:`~simhpc.costs.kernels.vector_side`): BLAS runs it on one thread whatever the
thread count, and where its cores are does not move it. Estimated from its group's products, a
1 x 1024 x 1024 ``nt`` product read far (46 us on 2 threads, 51.6 on one) came out at 25.8 us on
the Zen 5 guest at 4.5 GHz, 17 of its 89 far 2-thread matrix-vector points alike, and a batch-1
MLP's 2-thread inference (48-53 us a product measured) was predicted at half its time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.interpolation import GemmSurface
from simhpc.costs.kernels import vector_side

MIN_POINTS = 12
"""Points a group needs in the state asked for (and at 1 thread) for its speed-up surface."""
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
    readings = [row["round_trip_s"] for row in rows if "round_trip_s" in row]  # checked when the file was read
    if not readings:
        return None
    probe = (cal.data.get("probes") or {}).get("round trip before points")
    probe = probe if isinstance(probe, dict) else {}
    fastest = min(readings + ([probe["fastest_s"]] if _positive(probe.get("fastest_s")) else []))
    return fastest * (probe["far_threshold"] if _positive(probe.get("far_threshold")) else FAR_RATIO)


def cores_during(readings: list[float] | None, cal: Calibration) -> str:
    """``"far"`` where every round trip a capture read (``readings``) is over the far threshold of
    ``cal``'s products (:func:`far_round_trip`): its multi-thread ops ran with the cores far apart;
    else ``"near"`` (also for a trace that read none)."""
    threshold = far_round_trip(cal, cal.rows("gemm"))
    return "far" if readings and threshold is not None and min(readings) > threshold else "near"


def _group(row: Row) -> tuple[str, str, str]:
    return row["dtype"], row.get("layout", "nn"), row.get("interleaved", "")


def _flops(row: Row) -> int:
    m, n, k, batch = _shape(row)
    return 2 * m * n * k * batch


def _shape(row: Row) -> tuple[int, int, int, int]:
    return row["m"], row["n"], row["k"], row.get("batch", 1)


def at_distance(rows: list[Row], far_above: float | None, cores: str, method: str,
                smoothing: float) -> tuple[list[Row], int]:
    """One BLAS's GEMM ``rows`` with each multi-thread row read in the other state than ``cores``
    (``"near"`` or ``"far"``; far: its ``round_trip_s`` over ``far_above``) timed at its 1-thread
    point's time over the speed-up the rows read in state ``cores`` reach at its shape, where that
    moves it that way (faster for ``"near"``, slower for ``"far"``; as a copy), and how many were."""
    if cores not in ("near", "far"):
        raise ValueError(f"cores must be 'near' or 'far', got {cores!r}")
    if far_above is None:
        return rows, 0
    single: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    multi: dict[tuple[tuple[str, str, str], int], list[Row]] = defaultdict(list)
    for row in rows:
        if vector_side(row["m"], row["n"], row["k"], row.get("batch", 1)):
            continue  # one thread runs it (see the module docstring)
        if row["threads"] == 1:
            single[_group(row)].append(row)
        else:
            multi[(_group(row), row["threads"])].append(row)
    sign = 1.0 if cores == "near" else -1.0  # estimates must come out faster (near) or slower (far)
    estimated: dict[int, Row] = {}
    for (group, _threads), members in multi.items():
        far = [row for row in members if row.get("round_trip_s", 0.0) > far_above]
        near = [row for row in members if row.get("round_trip_s", 0.0) <= far_above]
        wanted, other = (near, far) if cores == "near" else (far, near)
        ones = {_shape(row): row for row in single.get(group, [])}
        if not other or len(wanted) < MIN_POINTS or len(ones) < MIN_POINTS:
            continue
        wanted_surface = GemmSurface(wanted, 1.0, method, smoothing)
        one_surface = GemmSurface(list(ones.values()), 1.0, method, smoothing)
        least, most = min(map(_flops, wanted)), max(map(_flops, wanted))
        for row in other:
            one = ones.get(_shape(row))
            if one is None or not least <= _flops(row) <= most:  # no speed-up extrapolated past the sizes seen
                continue
            shape = _shape(row)
            speedup = min(wanted_surface.fraction(*shape) / one_surface.fraction(*shape), row["threads"])
            seconds = one["time_s"] / speedup
            if sign * (row["time_s"] - seconds) > 0:
                estimated[id(row)] = {**row, "time_s": seconds, "measured_s": row["time_s"]}
    return [estimated.get(id(row), row) for row in rows], len(estimated)
