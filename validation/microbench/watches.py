"""The probes a run takes before its points: the L1 probe (is another hardware thread sharing this
core?) and the cores' round trip (is the host running the two vCPUs far apart?), and which points
they flag to measure again (:func:`~.runner.run`)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from . import latency

SHARED_L1_SLOWDOWN = 1.3
"""An L1 probe reading this many times the run's fastest: another hardware thread shares the core's
L1 (:func:`~.latency.measure_l1_probe`) while the point after it is measured."""
SHARED_RETAKE_SHARE = 0.2
"""The share of a run's points read on a shared core up to which they are measured again (the
faster kept): the core was shared now and then, and the calibration is of its usual state (on the
EPYC Zen 4 guest 37-202 of about 2100 1-thread points, a median 0-17 % slower than the committed
file's, against 0-1.5 % for the others). Above it the core is shared most of the time, and the
points are kept as measured: re-measuring them and keeping the faster (the Xeon guest of session
14, about 60 % of the points flagged) gave a calibration of the core alone, which predicted
captures taken minutes later, mostly on a shared core, 5-25 % too fast."""


class Watch:
    """A probe read before points: the first-round points' readings and the fastest reading so far,
    and which points read over ``slowdown`` x that fastest."""

    slowdown: float

    def __init__(self) -> None:
        self.readings: dict[str, float] = {}
        """First-round label -> the reading before it."""
        self.fastest = math.inf
        """The fastest reading so far."""

    def _seen(self, reading: float) -> float:
        self.fastest = min(self.fastest, reading)
        return reading

    def is_slow(self, reading: float | None) -> bool:
        """Whether ``reading`` is over ``slowdown`` x the run's fastest so far."""
        return reading is not None and reading > self.slowdown * self.fastest

    def slow_labels(self) -> list[str]:
        """The first-round points whose reading was slow (:meth:`is_slow`)."""
        return [label for label, reading in self.readings.items() if self.is_slow(reading)]


class L1Watch(Watch):
    """The L1 probe before every first-round point of a run: which were measured on a shared core."""

    slowdown = SHARED_L1_SLOWDOWN

    def __init__(self, l1_bytes: int) -> None:
        super().__init__()
        self.l1_bytes = l1_bytes

    def probe(self, threads: int = 1) -> float:
        """The L1 probe's reading now: of the calling core, or for a point on ``threads`` > 1 the
        slowest of every core's (:func:`~.latency.measure_l1_probes`)."""
        probe = latency.measure_l1_probes if threads > 1 else latency.measure_l1_probe
        return self._seen(probe(self.l1_bytes))

    def retake_labels(self) -> list[str]:
        """The points read on a shared core where they are at most :data:`SHARED_RETAKE_SHARE` of
        the points, else none."""
        shared = self.slow_labels()
        return shared if len(shared) <= SHARED_RETAKE_SHARE * len(self.readings) else []

    def summary(self, retaken: int) -> dict[str, Any]:
        """The ``L1 probe`` entry of the calibration's probes: the first-round readings (``retaken``:
        the shared points measured again)."""
        ordered = sorted(self.readings.values())
        return {"fastest_s": ordered[0], "median_s": statistics.median(ordered),
                "p90_s": ordered[int(0.9 * (len(ordered) - 1))], "samples": len(ordered),
                "shared_points": len(self.slow_labels()), "retaken": retaken,
                "slowdown_threshold": SHARED_L1_SLOWDOWN}


FAR_CORES = 2.0
"""A round trip over this many times the run's fastest: the host ran the two vCPUs on distant cores
while the point after it was measured (:func:`~.latency.quick_round_trip`: 55-75 ns near, 310-340
ns far on the EPYC Zen 4 guest)."""


class PeerWatch(Watch):
    """The cores' round trip before every multi-thread point of a run: which were measured far apart."""

    slowdown = FAR_CORES

    def probe(self) -> float:
        """The round trip now."""
        return self._seen(latency.quick_round_trip())

    def summary(self, retaken: int, kept: list[float]) -> dict[str, Any]:
        """The ``round trip before points`` entry of the calibration's probes: ``retaken``, how many
        far points were measured again in time; ``kept``, the readings before the kept measurements."""
        ordered = sorted(self.readings.values())
        return {"fastest_s": ordered[0], "median_s": statistics.median(ordered), "samples": len(ordered),
                "far_points": len(self.slow_labels()), "retaken": retaken,
                "kept_far": sum(self.is_slow(reading) for reading in kept), "far_threshold": FAR_CORES}
