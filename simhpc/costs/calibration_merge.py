"""Combining calibrations of one host: each point's fastest measurement (``simhpc calibrate --merge``).

A shared or virtualised machine runs slower for seconds to minutes at a time (here: 20-30 % on
the same GEMM, minutes apart), so one ``simhpc calibrate`` samples each kernel in whatever state
the machine was in. Merging several runs keeps, per point, the run that measured it fastest: the
min-of-N estimate of the unperturbed machine that ``timeit`` and the trace captures use too.
Derived figures (peak, bandwidth, latency) are recomputed from the merged points.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from simhpc.costs.calibration_file import PROBE_NUMBERS, Calibration, CalibrationError, build_calibration

MEASUREMENT_FIELDS = frozenset(
    {"time_s", "spread_s", "min_s", "samples", "calls_per_sample", "rounds", "latency_s", "steps", "warm_s",
     "l1_probe_s"}
)
"""Row fields that are measurements, not the point's identity (nor are rates, ``*_per_s``)."""


def row_identity(row: dict[str, Any]) -> str:
    """What a row measured (its shape, op, threads...), as a canonical string."""
    return json.dumps(
        {key: value for key, value in row.items() if key not in MEASUREMENT_FIELDS and not key.endswith("_per_s")},
        sort_keys=True,
    )


def row_seconds(row: dict[str, Any]) -> float:
    """A row's measured seconds (``latency_s`` for pointer-chase rows, else ``time_s``)."""
    return float(row["latency_s"] if "latency_s" in row and "time_s" not in row else row["time_s"])


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
