"""The calibration file: what ``simhpc calibrate`` writes and the calibrated cost model reads.

A JSON object::

    {"schema": "simhpc-calibration", "schema_version": 2, "simhpc_version": "...",
     "created": "2026-01-01T00:00:00Z",
     "microbench": {"suite_version": 1, "source_hash": "...", "profile": "full", "wall_time_s": 95.0,
                    "load_average": [0.1, 0.2, 0.3]},
     "host": {...HostFacts...}, "fingerprint": {"cpu_model", "cores", "isa_flags"},
     "probes": {"clock": {...}, "fma": {...}},
     "derived": {"clock_hz", "vector_bits", "fma_units", "peak_flops_per_core": {dtype: FLOP/s},
                 "memory_bandwidth", "core_bandwidth", "memory_latency", "max_outstanding_misses",
                 "cache_latency": {"L1D": s, ...}},
     "kernels": {"gemm": [rows], "gemm_cold": [...], "attention": [...], "recurrent": [...], "elementwise": [...],
                 "reduction": [...], "bandwidth": [...],
                 "permute": [...], "transpose": [...], "conv": [...], "framework": [...], "latency": [...],
                 "stencil": [...], "hash_probe": [...], "rewrite": [...]}}

Every row is one measured point: its shape and the median time (``time_s``, per call; per
lookup for ``hash_probe``; ``latency_s`` per load for ``latency``) with its spread. All
quantities are SI (bytes, seconds, bytes/s, FLOP/s, Hz).

Version 2 adds the ``blas`` field of GEMM rows: the library that multiplied (``numpy``: numpy's
OpenBLAS; ``torch``: PyTorch's MKL / oneDNN). Version 1 files still load; their GEMM rows are
``numpy`` ones. The ``permute`` (layout-changing copies, by contiguous run), ``transpose``
(batched transposes, by block shape) and ``conv`` (torch convolutions as implicit GEMMs, forward
and backward) sections are optional: without them such copies are not covered (without
``transpose``, timed from ``permute`` alone) and convolutions use the GEMM points; so is ``framework`` (torch pooling
and random fills, by bytes moved): without it those ops are not covered. A GEMM row may carry ``layout``
(``nn`` when absent; ``nt``, ``tn``: operands stored transposed).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simhpc import __version__
from simhpc.costs.host_figures import derive
from simhpc.costs.kernels import INTERLEAVED, LAYOUTS
from simhpc.errors import SimhpcError
from simhpc.hardware.catalog import Catalog, CatalogError
from simhpc.hardware.host import (
    CALIBRATION_ENV,
    HostFacts,
    HostFactsError,
    catalog_entries,
    default_calibration,
    native_half_types,
)
from simhpc.hardware.specs import DTYPE_BITS, HALF_TYPES, CpuSpec, NodeSpec
from simhpc.jsonfile import load_json_file
from simhpc.units import format_size

SCHEMA = "simhpc-calibration"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions this simhpc reads: version 1 had no ``blas`` field (its GEMM points are numpy's)."""
GEMM_BACKENDS = ("numpy", "torch")

REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "gemm": {"dtype": str, "threads": int, "batch": int, "m": int, "n": int, "k": int, "time_s": float},
    "elementwise": {"op": str, "dtype": str, "threads": int, "bytes": int, "time_s": float},
    "reduction": {"op": str, "dtype": str, "threads": int, "bytes": int, "time_s": float},
    "bandwidth": {"op": str, "threads": int, "bytes": int, "time_s": float},
    "permute": {"dtype": str, "threads": int, "run": int, "bytes": int, "time_s": float},
    "transpose": {"dtype": str, "threads": int, "rows": int, "length": int, "bytes": int, "time_s": float},
    "attention": {"dtype": str, "threads": int, "batch": int, "lq": int, "lk": int, "e": int, "time_s": float},
    "recurrent": {"dtype": str, "threads": int, "length": int, "batch": int, "width": int, "hidden": int,
                  "gates": int, "time_s": float},
    "gemm_cold": {"dtype": str, "threads": int, "m": int, "n": int, "k": int, "time_s": float, "warm_s": float},
    "conv": {"dtype": str, "threads": int, "direction": str, "m": int, "n": int, "k": int, "passes": int,
             "time_s": float},
    "framework": {"op": str, "dtype": str, "threads": int, "bytes": int, "time_s": float},
    "latency": {"bytes": int, "latency_s": float},
    "stencil": {"threads": int, "cells": int, "working_set": int, "time_s": float},
    "hash_probe": {"variant": str, "table_bytes": int, "lines_per_probe": float, "time_s": float},
    "first_touch": {"threads": int, "pages": int, "page_bytes": int, "time_s": float},
    "unmap": {"threads": int, "pages": int, "page_bytes": int, "time_s": float},
    "rewrite": {"threads": int, "bytes": int, "time_s": float},
    "dispatch": {"what": str, "threads": int, "time_s": float},
}
"""Fields every row of each kernel section must have (numbers > 0)."""

DERIVED_NUMBERS = (
    "clock_hz",
    "vector_bits",
    "fma_units",
    "memory_bandwidth",
    "core_bandwidth",
    "memory_latency",
    "max_outstanding_misses",
)
DERIVED_TABLES = ("peak_flops_per_core", "cache_latency")
"""Derived objects of name -> number (optional: files written before them lack them)."""


class CalibrationError(SimhpcError):
    """A calibration file is missing, malformed, or of another schema version."""


@dataclass(frozen=True)
class Calibration:
    """A validated calibration: the JSON object, where it came from, and its host facts."""

    data: dict[str, Any]
    source: str
    host: HostFacts

    @property
    def derived(self) -> dict[str, Any]:
        return self.data["derived"]

    def rows(self, section: str) -> list[dict[str, Any]]:
        """Measured points of one kernel section ([] if it was not measured)."""
        return self.data["kernels"].get(section, [])

    def peak_flops(self, dtype: str, threads: int) -> float:
        """The host's peak FLOP/s for ``dtype`` on ``threads`` cores (clock x lanes x FMA x 2); a
        16-bit float at the fp32 lanes unless the host's flags give it native arithmetic."""
        derived = self.derived
        if dtype in HALF_TYPES and dtype not in native_half_types(self.host.isa_flags):
            dtype = "fp32"
        lanes = max(1, int(derived["vector_bits"]) // DTYPE_BITS.get(dtype, 32))
        return threads * derived["clock_hz"] * lanes * derived["fma_units"] * 2

    def model_bandwidth(self, threads: int) -> float:
        """The bandwidth the roofline model gives ``threads`` cores of the host (as CostModel does)."""
        derived = self.derived
        per_core = derived["max_outstanding_misses"] * 64 / derived["memory_latency"]
        return min(derived["memory_bandwidth"], threads * per_core)

    def effective_cache_bytes(self) -> float:
        """The largest working set the pointer chase read at under half the DRAM latency: what
        this host's caches hold for one program (the EPYC guests' 8 MiB of a 16-32 MiB L3; the
        Xeon guest's 16-64 MiB of the 480 MiB socket L3 it reports). The last-level cache's size
        without latency points."""
        latency = self.derived["memory_latency"]
        held = [row["bytes"] for row in self.rows("latency") if row["latency_s"] < latency / 2]
        return float(max(held)) if held else float(self.host.last_level_cache)

    def last_level_latency_share(self, private_bytes: float) -> float:
        """The pointer chase's median latency over working sets past ``private_bytes`` (a core's
        private caches) and within :meth:`effective_cache_bytes`, as a share of the memory latency:
        what a line costs from the last-level cache against from memory. 1 without such points."""
        window = self.effective_cache_bytes()
        held = sorted(row["latency_s"] for row in self.rows("latency") if private_bytes < row["bytes"] <= window)
        return min(1.0, held[len(held) // 2] / self.derived["memory_latency"]) if held else 1.0

    def rewrite_memory_share(self, distance: float) -> float | None:
        """The share of a write's lines fetched from memory when they were last written
        ``distance`` bytes of traffic before, from the ``rewrite`` points
        (``validation/microbench/rewrite.py``; one thread's, where lines stay does not depend on
        how many write them): 0 up to the farthest point still under half way from the nearest
        point's time to the farthest's (the lines are cached there, at whatever level: a product
        writing them hides a last-level cache's latency, not memory's), then where the time lies
        between that point's and the farthest's, interpolated over the logarithm of the distance
        and never falling. None without the points."""
        rows = self.rows("rewrite")
        if not rows:
            return None
        fewest = min(int(row["threads"]) for row in rows)
        points = sorted((row.get("since_bytes", 0) + row["bytes"], row["time_s"] / row["bytes"])
                        for row in rows if int(row["threads"]) == fewest)
        times = np.maximum.accumulate([time for _, time in points])
        far = float(times[-1])
        cached = float(times[times < (times[0] + far) / 2][-1]) if times[0] < far else far
        if far <= cached:
            return 0.0
        at = float(np.interp(np.log(max(distance, 1.0)), [np.log(d) for d, _ in points], times))
        return min(1.0, max(0.0, (at - cached) / (far - cached)))

    def gemm_backends(self) -> list[str]:
        """GEMM backends measured (``blas`` of the GEMM rows; ``numpy`` where absent), in a fixed order."""
        found = {row.get("blas", "numpy") for row in self.rows("gemm")}
        return [b for b in GEMM_BACKENDS if b in found]

    def thread_counts(self, section: str) -> list[int]:
        """Thread counts measured in ``section``, ascending."""
        return sorted({int(row.get("threads", 1)) for row in self.rows(section)})


def _fail(source: str, path: str, message: str) -> CalibrationError:
    return CalibrationError(f"{source}: {path}: {message}" if path else f"{source}: {message}")


def _check_number(value: Any, source: str, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _fail(source, path, f"expected a number > 0, got {value!r}")


PROBE_NUMBERS = {"clock": "clock_hz", "fma": "flops_per_s"}
"""The reading of each probe that merging and :func:`derive` use."""


def _check_provenance(data: Mapping[str, Any], source: str) -> None:
    """The optional ``microbench``, ``probes`` and ``fingerprint`` objects, where present."""
    for key in ("microbench", "probes", "fingerprint"):
        if key in data and not isinstance(data[key], Mapping):
            raise _fail(source, key, f"expected an object, got {type(data[key]).__name__}")
    fingerprint = data.get("fingerprint") or {}
    if "cpu_model" in fingerprint and not isinstance(fingerprint["cpu_model"], str):
        raise _fail(source, "fingerprint.cpu_model", f"expected a string, got {fingerprint['cpu_model']!r}")
    cores = fingerprint.get("cores", 1)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise _fail(source, "fingerprint.cores", f"expected an integer >= 1, got {cores!r}")
    flags = fingerprint.get("isa_flags", [])
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        raise _fail(source, "fingerprint.isa_flags", f"expected a list of strings, got {flags!r}")
    microbench = data.get("microbench") or {}
    suite = microbench.get("suite_version")
    if suite is not None and (isinstance(suite, bool) or not isinstance(suite, int)):
        raise _fail(source, "microbench.suite_version", f"expected an integer, got {suite!r}")
    wall = microbench.get("wall_time_s")
    if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))
                             or not math.isfinite(wall) or wall < 0):
        raise _fail(source, "microbench.wall_time_s", f"expected seconds >= 0, got {wall!r}")
    probes = data.get("probes") or {}
    for name, reading in PROBE_NUMBERS.items():
        probe = probes.get(name)
        if probe is None:
            continue
        if not isinstance(probe, Mapping):
            raise _fail(source, f"probes.{name}", f"expected an object, got {type(probe).__name__}")
        if probe.get(reading) is not None:
            _check_number(probe[reading], source, f"probes.{name}.{reading}")


OPTIONAL_COUNTS = ("threads", "batch", "stride", "taps", "groups", "width", "layers")
"""Row fields the cost model reads where a row has them: integers from 1 to ``MAX_COUNT``."""
MAX_COUNT = 2**53


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_COUNT


def _positive_ints(value: Any) -> bool:
    return isinstance(value, list) and all(_count(item) for item in value)


def _check_optional_fields(row: Mapping[str, Any], section: str, source: str, where: str) -> None:
    """The fields a row may have that the cost model reads: its dtype, cache state and shapes."""
    for key in OPTIONAL_COUNTS:
        if key in row and not _count(row[key]):
            raise _fail(source, f"{where}.{key}", f"expected an integer from 1 to 2^53, got {row[key]!r}")
    for key in ("step_bytes", "round_trip_s", "l1_probe_s"):  # the probes: was a point measured far apart, shared
        if key in row:
            _check_number(row[key], source, f"{where}.{key}")
    for key in ("graph_nodes", "parameters", "product_extra_s"):  # a training loop's medians per step; a probe's
        value = row.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise _fail(source, f"{where}.{key}", f"expected a number >= 0, got {value!r}")
    if "dtype" in row and row["dtype"] not in DTYPE_BITS:
        raise _fail(source, f"{where}.dtype", f"unknown dtype {row['dtype']!r} (known: {', '.join(DTYPE_BITS)})")
    if "cache" in row and row["cache"] not in ("warm", "cold"):
        raise _fail(source, f"{where}.cache", f"expected 'warm' or 'cold', got {row['cache']!r}")
    if section == "conv" and "image" in row and not _positive_ints(row["image"]):
        raise _fail(source, f"{where}.image", f"expected a list of integers > 0, got {row['image']!r}")
    if section == "framework":
        shape, dims = row.get("input"), 2 if "window" in row else 1  # a pooled image's [..., H, W]
        if "input" in row and not (_positive_ints(shape) and len(shape) >= dims):
            raise _fail(source, f"{where}.input", f"expected a shape (integers > 0, at least {dims}), got {shape!r}")
        window = row.get("window")
        if "window" in row and not (
            isinstance(window, list) and len(window) == 3 and _positive_ints(window[:2])
            and (window[2] == 0 or _count(window[2]))
        ):
            raise _fail(source, f"{where}.window",
                        f"expected [window, stride, padding] (integers, padding >= 0), got {window!r}")
        if "window" in row and "input" not in row:
            raise _fail(source, f"{where}.input", "a pooling point with a window needs its input shape")


def validate(data: Any, source: str) -> Calibration:
    """Check a parsed calibration object; raises :class:`CalibrationError` naming the field."""
    if not isinstance(data, Mapping):
        raise _fail(source, "", f"not a simhpc calibration (expected a JSON object, got {type(data).__name__})")
    if data.get("schema") != SCHEMA:
        raise _fail(source, "schema", f"not a simhpc calibration (expected {SCHEMA!r}, got {data.get('schema')!r})")
    version = data.get("schema_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise _fail(
            source,
            "schema_version",
            f"calibration schema version {version!r}, this simhpc reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; re-run 'simhpc calibrate'",
        )
    try:
        host = HostFacts.from_dict(data.get("host"), "host")
    except HostFactsError as error:
        raise _fail(source, "", str(error)) from None
    _check_provenance(data, source)
    derived = data.get("derived")
    if not isinstance(derived, Mapping):
        raise _fail(source, "derived", "expected an object")
    for key in DERIVED_NUMBERS:
        _check_number(derived.get(key), source, f"derived.{key}")
    for key in DERIVED_TABLES:
        table = derived.get(key, {})
        if not isinstance(table, Mapping):
            raise _fail(source, f"derived.{key}", f"expected an object of numbers, got {table!r}")
        for name, value in table.items():
            _check_number(value, source, f"derived.{key}.{name}")
    kernels = data.get("kernels")
    if not isinstance(kernels, Mapping):
        raise _fail(source, "kernels", "expected an object of kernel sections")
    for section, rows in kernels.items():
        if section not in REQUIRED:
            raise _fail(source, f"kernels.{section}", f"unknown section (known: {', '.join(REQUIRED)})")
        if not isinstance(rows, list):
            raise _fail(source, f"kernels.{section}", "expected a list of measured points")
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise _fail(source, f"kernels.{section}.{i}", "expected an object")
            for key, kind in REQUIRED[section].items():
                if kind is str:
                    if not isinstance(row.get(key), str):
                        raise _fail(source, f"kernels.{section}.{i}.{key}", f"expected a string, got {row.get(key)!r}")
                else:
                    _check_number(row.get(key), source, f"kernels.{section}.{i}.{key}")
            _check_optional_fields(row, section, source, f"kernels.{section}.{i}")
            if section in ("gemm", "gemm_cold") and row.get("layout", "nn") not in LAYOUTS:
                raise _fail(
                    source,
                    f"kernels.{section}.{i}.layout",
                    f"unknown operand layout {row.get('layout')!r} (known: {', '.join(LAYOUTS)})",
                )
            if section == "gemm" and row.get("interleaved", "") not in INTERLEAVED:
                raise _fail(
                    source,
                    f"kernels.gemm.{i}.interleaved",
                    f"unknown interleaved operands {row.get('interleaved')!r} "
                    f"(known: {', '.join(map(repr, INTERLEAVED))})",
                )
            if section in ("gemm", "gemm_cold") and row.get("blas", "numpy") not in GEMM_BACKENDS:
                raise _fail(
                    source,
                    f"kernels.{section}.{i}.blas",
                    f"unknown GEMM backend {row.get('blas')!r} (known: {', '.join(GEMM_BACKENDS)})",
                )
    if not kernels.get("gemm"):
        raise _fail(source, "kernels.gemm", "no GEMM points: the calibration is incomplete")
    return Calibration(dict(data), source, host)


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Read and validate a calibration file, plain or gzipped (default:
    :func:`~simhpc.hardware.host.default_calibration`, the committed calibration of this kind of
    machine, or of the one most like it)."""
    source = Path(path) if path is not None else default_calibration()
    try:
        data = load_json_file(source, "calibration file", CalibrationError)
    except FileNotFoundError:
        hint = "" if path is not None else (
            f" (named by ${CALIBRATION_ENV})" if os.environ.get(CALIBRATION_ENV)
            else " (run 'simhpc calibrate -o FILE' and pass --calibration FILE)")
        raise CalibrationError(f"{source}: no such calibration file{hint}") from None
    return validate(data, str(source))


def host_warnings(calibration: Calibration, facts: HostFacts, suite_version: int | None = None) -> list[str]:
    """Why ``calibration`` may not describe ``facts``' machine (foreign host, stale suite); [] if none."""
    warnings = []
    theirs, ours = calibration.data.get("fingerprint") or calibration.host.fingerprint(), facts.fingerprint()
    if theirs != ours:
        differs = [key for key in ours if theirs.get(key) != ours[key]]
        warnings.append(
            f"{calibration.source} was measured on another machine ({theirs.get('cpu_model')!r}, "
            f"{theirs.get('cores')} cores, {' '.join(theirs.get('isa_flags') or [])}) than this one "
            f"({ours['cpu_model']!r}, {ours['cores']} cores, {' '.join(ours['isa_flags'])}); differs in "
            f"{', '.join(differs)}. Predictions describe that machine; run 'simhpc calibrate' for this one"
        )
    elif calibration.host.cache_sizes() != facts.cache_sizes():
        warnings.append(
            f"{calibration.source} was measured on another machine of the same model name: its caches "
            f"({_caches_text(calibration.host)}) differ from this one's ({_caches_text(facts)}). "
            "Predictions describe that machine; run 'simhpc calibrate' for this one"
        )
    measured = (calibration.data.get("microbench") or {}).get("suite_version")
    if suite_version is not None and measured != suite_version:
        warnings.append(
            f"{calibration.source} is stale: measured with microbenchmark suite version {measured}, "
            f"the current suite is version {suite_version}; re-run 'simhpc calibrate'"
        )
    return warnings


def _caches_text(facts: HostFacts) -> str:
    return ", ".join(f"{name} {format_size(size)}" for name, size in facts.cache_sizes())


def build_calibration(
    host: HostFacts,
    kernels: dict[str, list[dict[str, Any]]],
    probes: dict[str, Any],
    microbench: dict[str, Any],
    created: str,
) -> dict[str, Any]:
    """The calibration object for measured points (see the module docstring)."""
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "simhpc_version": __version__,
        "created": created,
        "microbench": microbench,
        "host": host.to_dict(),
        "fingerprint": host.fingerprint(),
        "probes": probes,
        "derived": derive(host, kernels, probes),
        "kernels": kernels,
    }


def write_calibration(data: dict[str, Any], path: str | Path) -> None:
    """Write a calibration object as indented JSON (one measured point per line)."""
    lines = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "kernels":
            lines.append('  "kernels": {')
            sections = list(value.items())
            for j, (section, rows) in enumerate(sections):
                lines.append(f"    {json.dumps(section)}: [")
                lines.extend(f"      {json.dumps(row)}{',' if r < len(rows) - 1 else ''}" for r, row in enumerate(rows))
                lines.append(f"    ]{',' if j < len(sections) - 1 else ''}")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def host_specs(calibration: Calibration) -> tuple[CpuSpec, NodeSpec]:
    """The calibrated host as catalog specs: CPU ``host`` and node ``host-node``."""
    try:
        catalog = Catalog(catalog_entries(calibration.data, calibration.source), calibration.source)
    except (HostFactsError, CatalogError) as error:
        raise CalibrationError(str(error)) from None
    return catalog.cpus["host"], catalog.nodes["host-node"]
