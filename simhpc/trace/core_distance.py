"""How far apart two cores were while a trace was captured, against while its calibration was measured.

On 2-core KVM guests the host runs the two vCPUs on near or on distant cores for seconds at a time:
a cache line's round trip between them read 55-75 ns or 310-340 ns on the EPYC Zen 4 guest, and a
2-thread product of a small classifier head (64 x 4096 x 10) took 125-150 us or 280-370 us with it,
while a 512^3 product moved 4 %. A trace cannot show this; ``validation/traces/capture.py`` records
the round trip before and after the profiled steps (``simhpc_capture.peer_round_trip_s``) and
``simhpc calibrate`` before every multi-thread point, so ``simhpc compare`` can say when a trace's
multi-thread ops ran with the cores farther apart than its calibration's did.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from simhpc.costs.calibration_file import Calibration
from simhpc.trace.readers import Trace, TraceError

FAR_RATIO = 2.0
"""A capture's round trip over this many times its calibration's: the cores were farther apart."""
MAX_ROUND_TRIP_S = 1e-3
"""Longest round trip a trace may record (a larger one is a corrupt file, not two cores)."""


def _round_trip(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value < MAX_ROUND_TRIP_S)


def capture_round_trips(trace: Trace) -> list[float] | None:
    """The cores' round trips (seconds) a capture recorded around its profiled steps, or None where
    it recorded none; a malformed record is a :class:`TraceError` naming the field."""
    capture = trace.metadata.get("simhpc_capture")
    if not isinstance(capture, dict) or "peer_round_trip_s" not in capture:
        return None
    readings = capture["peer_round_trip_s"]
    if not isinstance(readings, list) or not readings or not all(_round_trip(value) for value in readings):
        raise TraceError(f"{trace.source}: simhpc_capture.peer_round_trip_s: {readings!r} is not a list of "
                         f"round trips in seconds (each above 0 and under {MAX_ROUND_TRIP_S:g})")
    return [float(value) for value in readings]


def calibration_round_trip(cal: Calibration) -> float | None:
    """The cores' round trip while ``cal``'s multi-thread points were measured: the median of the
    readings its kept rows record (``round_trip_s``; a merged file keeps each point's own), else its
    probe at the start of the run; None where it has neither."""
    kept = [row["round_trip_s"] for rows in cal.data["kernels"].values() for row in rows
            if _round_trip(row.get("round_trip_s"))]
    if kept:
        return float(statistics.median(kept))
    probe = (cal.data.get("probes") or {}).get("peer round trip")
    if isinstance(probe, dict) and _round_trip(probe.get("round_trip_s")):
        return float(probe["round_trip_s"])
    return None


def distance_warning(capture: list[float] | None, calibration: float | None, threads: int) -> str | None:
    """Why a multi-thread trace's ops may run slower or faster than predicted: the cores were over
    :data:`FAR_RATIO` x farther apart during its capture than during its calibration, or the other
    way round; else None."""
    if threads < 2 or not capture or calibration is None:
        return None
    readings = " and ".join(f"{value * 1e9:.0f} ns" for value in capture)
    seen = (f"a cache line's round trip between two cores read {readings} around this capture, "
            f"{calibration * 1e9:.0f} ns while the calibration was measured: the host ran the vCPUs")
    if max(capture) > FAR_RATIO * calibration:
        return (f"{seen} farther apart during the capture, and multi-thread ops that hand data between the threads "
                "(small products most: up to 3x) take longer than predicted, but for the products timed at the "
                "speed-up of the calibration's points measured far apart")
    if calibration > FAR_RATIO * max(capture):
        return (f"{seen} farther apart during the calibration, and multi-thread ops that hand data between the "
                "threads (small products most: up to 3x) are predicted too slow, but for the products timed at the "
                "speed-up of the calibration's points measured near; calibrate again")
    return None
