"""The host figures a CPU spec needs (clock, FMA units, bandwidths, latencies), derived from a
calibration's measured points (:func:`derive`; stored as the calibration file's ``derived``)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np

from simhpc.hardware.host import HostFacts
from simhpc.hardware.specs import DTYPE_BITS


def _median(values: list[float], default: float) -> float:
    return statistics.median(values) if values else default


def _past_caches(rows: list[dict[str, Any]], llc: float) -> list[dict[str, Any]]:
    """The rows measured at working sets of at least twice ``llc`` bytes, else those at the largest."""
    beyond = [row for row in rows if row["bytes"] >= 2 * llc]
    if beyond or not rows:
        return beyond
    largest = max(row["bytes"] for row in rows)
    return [row for row in rows if row["bytes"] == largest]


def _chase_latency_at(rows: list[dict[str, Any]], size: float) -> float:
    """The pointer-chase latency at ``size`` bytes (log-log interpolation, clamped)."""
    points = sorted((row["bytes"], row["latency_s"]) for row in rows)
    xs = np.log([p[0] for p in points])
    ys = np.log([p[1] for p in points])
    return float(np.exp(np.interp(np.log(size), xs, ys)))


def derive(host: HostFacts, kernels: Mapping[str, list[dict[str, Any]]], probes: Mapping[str, Any]) -> dict[str, Any]:
    """The host figures a CPU spec needs, from the measured points.

    Clock: the dependent-add probe (falls back to the OS's figure). FMA units: the vector FMA
    probe's FLOP/cycle over (lanes x 2), rounded, 1..4 (2 if the probe is missing: the usual
    count for AVX2 and AVX-512 server cores). DRAM bandwidth: median STREAM rate at working sets
    of at least twice the last-level cache, all threads (``core_bandwidth``: one thread), or at the
    largest measured one where the LLC the OS reports is the whole socket's (a 2-core guest of a
    480 MiB-L3 Xeon: its share is far smaller, and 256 MiB streams from DRAM). Latencies: the
    pointer chase at half of each cache's size and past twice the LLC (or its largest size). The
    outstanding-miss count is what makes one core's modelled bandwidth equal the measured one
    (Little's law: misses x 64 B / latency).
    """
    clock = float((probes.get("clock") or {}).get("clock_hz") or host.nominal_clock_hz or 2e9)
    fma = probes.get("fma") or {}
    vector_bits = int(fma.get("vector_bits") or host.simd_width_bits)
    lanes32 = vector_bits // 32
    fma_units = 2
    if fma.get("flops_per_s"):
        fma_units = min(4, max(1, round(fma["flops_per_s"] / (clock * lanes32 * 2))))
    llc = host.last_level_cache
    bandwidth = kernels.get("bandwidth", [])
    threads = max((row["threads"] for row in bandwidth), default=1)
    big = _past_caches(bandwidth, llc)
    memory_bandwidth = _median([r["bytes"] / r["time_s"] for r in big if r["threads"] == threads], 10e9)
    core_bandwidth = _median([r["bytes"] / r["time_s"] for r in big if r["threads"] == 1], memory_bandwidth)
    chase = kernels.get("latency", [])
    memory_latency = _median([r["latency_s"] for r in _past_caches(chase, llc)], 100e-9)
    cache_latency = {cache.name: _chase_latency_at(chase, cache.size / 2) for cache in host.caches} if chase else {}
    peaks = {
        dtype: clock * max(1, vector_bits // bits) * fma_units * 2
        for dtype, bits in DTYPE_BITS.items()
        if dtype in ("fp64", "fp32")
    }
    return {
        "clock_hz": clock,
        "vector_bits": vector_bits,
        "fma_units": fma_units,
        "peak_flops_per_core": peaks,
        "memory_bandwidth": memory_bandwidth,
        "core_bandwidth": core_bandwidth,
        "memory_latency": memory_latency,
        "max_outstanding_misses": max(1, round(core_bandwidth * memory_latency / 64)),
        "cache_latency": cache_latency,
    }
