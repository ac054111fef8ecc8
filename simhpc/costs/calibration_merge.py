"""Combining calibrations of one host (``simhpc calibrate --merge``, ``--repair``).

A shared or virtualised machine runs slower for seconds to minutes at a time (here: 20-30 % on
the same GEMM, minutes apart), so one ``simhpc calibrate`` samples each kernel in whatever state
the machine was in. Merging several runs keeps, per point, the run that measured it fastest: the
min-of-N estimate of the unperturbed machine that ``timeit`` and the trace captures use too.

Repairing keeps one run and replaces only its outliers: each point more than
:data:`OUTLIER_RATIO` from the median of the same point over all the runs takes the median run's
measurement. A run's other points keep the state of the machine its trace captures were taken
in, where a min-of-N file moves every point (a full per-point median also moves the cold-call
fit, whose constant and per-byte cost trade off between runs: ``validation/README.md``).
Derived figures (peak, bandwidth, latency) are recomputed from the points.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from simhpc.costs.calibration_file import PROBE_NUMBERS, Calibration, CalibrationError, build_calibration

MEASUREMENT_FIELDS = frozenset(
    {"time_s", "spread_s", "min_s", "samples", "calls_per_sample", "rounds", "latency_s", "steps", "warm_s",
     "l1_probe_s", "round_trip_s", "backend", "probe_ops", "product_extra_s"}
)
"""Row fields that are measurements, not the point's identity (nor are rates, ``*_per_s``): a
convolution's ``backend`` is what torch picked when it was timed, ``evicted_call``'s ``probe_ops``
the probe's ops its evicting step did not run (and its ``product_extra_s`` the probe's product's own cost)."""


def row_identity(row: dict[str, Any]) -> str:
    """What a row measured (its shape, op, threads...), as a canonical string."""
    return json.dumps(
        {key: value for key, value in row.items() if key not in MEASUREMENT_FIELDS and not key.endswith("_per_s")},
        sort_keys=True,
    )


def row_seconds(row: dict[str, Any]) -> float:
    """A row's measured seconds (``latency_s`` for pointer-chase rows, else ``time_s``)."""
    return float(row["latency_s"] if "latency_s" in row and "time_s" not in row else row["time_s"])


def reference_seconds(calibration: Calibration) -> Callable[[str, dict[str, Any]], float | None]:
    """A lookup of the seconds ``calibration`` measured for a row of a section (matched by what the
    row measured; None where it has no such point): ``simhpc calibrate``'s reference."""
    seconds = {(section, row_identity(row)): row_seconds(row)
               for section, rows in calibration.data["kernels"].items() for row in rows}
    return lambda section, row: seconds.get((section, row_identity(row)))


def fastest_rows(measurements: Iterable[Mapping[str, list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """Per section, one row per point: the fastest of the ``measurements`` (``kernels`` sections,
    in order; a point measured by only some keeps what it has, first-seen order)."""
    kernels: dict[str, list[dict[str, Any]]] = {}
    for sections in measurements:
        for section, rows in sections.items():
            fastest = kernels.setdefault(section, [])
            where = {row_identity(row): i for i, row in enumerate(fastest)}
            for row in rows:
                identity = row_identity(row)
                i = where.get(identity)
                if i is None:
                    where[identity] = len(fastest)
                    fastest.append(dict(row))
                elif row_seconds(row) < row_seconds(fastest[i]):
                    fastest[i] = dict(row)
    return kernels


def _fastest_probe(calibrations: Sequence[Calibration], name: str, reading: str) -> dict[str, Any]:
    """Probe ``name`` of the calibration whose ``reading`` of it is highest ({} if none has it)."""
    probes = [(c.data.get("probes") or {}).get(name) or {} for c in calibrations]
    return max(probes, key=lambda probe: probe.get(reading) or 0)


def merge_calibrations(calibrations: Sequence[Calibration], created: str | None = None) -> dict[str, Any]:
    """One calibration object from several of the same host and suite: per point the fastest row.

    Points measured by only some runs are kept as measured. The probes (clock, FMA rate) keep their
    fastest reading. Raises :class:`CalibrationError` naming the file that differs in host or
    microbenchmark suite from the first.
    """
    if not calibrations:
        raise CalibrationError("no calibrations to merge")
    first = calibrations[0]
    suite = (first.data.get("microbench") or {}).get("suite_version")
    for other in calibrations[1:]:
        if other.host.fingerprint() != first.host.fingerprint():
            raise CalibrationError(f"{other.source}: measured on another machine than {first.source}; not merged")
        if (other.data.get("microbench") or {}).get("suite_version") != suite:
            raise CalibrationError(
                f"{other.source}: microbenchmark suite version differs from {first.source}'s ({suite}); not merged"
            )
    kernels = fastest_rows(calibration.data["kernels"] for calibration in calibrations)
    probes = {name: _fastest_probe(calibrations, name, reading) for name, reading in PROBE_NUMBERS.items()}
    runs = [
        {"created": c.data.get("created", c.source), "wall_time_s": (c.data.get("microbench") or {}).get("wall_time_s")}
        for c in calibrations
    ]
    microbench = {
        **(first.data.get("microbench") or {}),
        "wall_time_s": max((run["wall_time_s"] or 0.0 for run in runs), default=0.0),  # the longest run
        "merged_from": runs,
    }
    when = created or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return build_calibration(first.host, kernels, probes, microbench, when)


OUTLIER_RATIO = 1.25
"""A repaired point is one whose time is more than this factor from its median over the runs."""
MIN_RUNS = 3
"""Runs that must have measured a point before its median can repair it."""


def repair_outliers(
    base: Calibration, others: Sequence[Calibration], ratio: float = OUTLIER_RATIO
) -> tuple[dict[str, Any], int]:
    """``base`` with each point more than ``ratio`` slower or faster than the median of the same
    point over ``base`` and ``others`` (measured by at least :data:`MIN_RUNS` of them) replaced by
    the median run's row; and how many points were replaced.

    The others may come from older microbenchmark suites (rows are matched by what they measured)
    but must be of the same host. Probes and the creation date stay ``base``'s; the repair is
    recorded under ``microbench.repaired``. Raises :class:`CalibrationError` naming a foreign file.
    """
    if ratio <= 1.0:
        raise CalibrationError(f"an outlier ratio must be above 1, got {ratio}")
    for other in others:
        if other.host.fingerprint() != base.host.fingerprint():
            raise CalibrationError(f"{other.source}: measured on another machine than {base.source}; not used")
    measured: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for calibration in (base, *others):
        for section, rows in calibration.data["kernels"].items():
            for row in rows:
                measured[(section, row_identity(row))].append(row)
    kernels: dict[str, list[dict[str, Any]]] = {}
    replaced = 0
    for section, rows in base.data["kernels"].items():
        kept = kernels.setdefault(section, [])
        for row in rows:
            same = sorted(measured[(section, row_identity(row))], key=row_seconds)
            median = same[(len(same) - 1) // 2]
            off = row_seconds(row) / row_seconds(median) if row_seconds(median) > 0 else 1.0
            if len(same) >= MIN_RUNS and not 1.0 / ratio <= off <= ratio:
                kept.append(dict(median))
                replaced += 1
            else:
                kept.append(dict(row))
    microbench = dict(base.data.get("microbench") or {})
    microbench["repaired"] = {
        "ratio": ratio,
        "points": replaced,
        "from": [other.data.get("created", other.source) for other in others],
    }
    probes = dict(base.data.get("probes") or {})
    return build_calibration(base.host, kernels, probes, microbench, base.data["created"]), replaced
