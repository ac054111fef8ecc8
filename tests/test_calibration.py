"""Calibration files, the calibrated efficiency model, host facts and the calibrate command."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import io
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli.main import main
from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import (
    SCHEMA_VERSION,
    CalibrationError,
    build_calibration,
    host_specs,
    host_warnings,
    load_calibration,
    validate,
    write_calibration,
)
from simhpc.costs.calibration_merge import merge_calibrations, repair_outliers
from simhpc.costs.interpolation import GemmSurface, grid_2d, thread_blend
from simhpc.costs.kernels import (
    Attention,
    Copy,
    Elementwise,
    FrameworkOp,
    Gemm,
    HashProbe,
    Recurrent,
    Reduction,
    Stencil,
    vector_side,
)
from simhpc.costs.model import ConstantEfficiency, CostModel
from simhpc.costs.opmap import kernel_for
from simhpc.hardware import builtin_catalog
from simhpc.hardware.host import (
    COMMITTED_CALIBRATION,
    CacheInfo,
    HostFacts,
    HostFactsError,
    detect_host,
    host_catalog_entries,
)

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "validation" / "calibration" / "host.json"
EPYC = ROOT / "validation" / "calibration" / "epyc-zen3.json"
"""The earlier reference machine's calibration (AVX2): the facts about ATen's slow kernels below were measured there."""

HOST = HostFacts(
    cpu_model="Test CPU 9000",
    vendor="GenuineIntel",
    architecture="x86_64",
    logical_cpus=4,
    cores=4,
    sockets=1,
    nominal_clock_hz=3e9,
    isa_flags=("avx", "avx2", "avx512f", "fma"),
    caches=(CacheInfo("L1D", 48 << 10), CacheInfo("L2", 2 << 20), CacheInfo("L3", 32 << 20, 4)),
    memory_bytes=64 << 30,
)
CLOCK = 3e9
PEAK32 = CLOCK * 16 * 2 * 2  # per core: 512-bit fp32 lanes x 2 FMA units x 2


def _gemm_eff(m: int, n: int, k: int) -> float:
    return 0.85 * (1 - math.exp(-min(m, n, k) / 48)) + 0.02


def _bandwidth(size: int, threads: int) -> float:
    return (200e9 if size < 1 << 20 else 60e9 if size < 32 << 20 else 12e9) * (1 + 0.6 * (threads - 1) / 3)


PERMUTE_RATES = {1: 1e9, 16: 4e9, 256: 16e9}
COLD_BANDWIDTH = 10e9
"""Bytes/s per thread of the synthetic cold add and sum (any size)."""
POOL_RATE = 0.6e9  # bytes/s of the synthetic max pooling (slower than the cold floor, like torch's)
CONV_FRACTION = {"forward": 0.2, "backward": 0.1}
"""Fraction of fp32 peak of the synthetic convolutions (shape-independent)."""
"""Bytes/s of layout-changing copies by contiguous run (size-independent)."""


def synthetic(threads: tuple[int, ...] = (1, 4)) -> dict:
    """A calibration whose every point follows a known formula."""
    kernels: dict[str, list[dict]] = {
        s: []
        for s in (
            "gemm", "conv", "elementwise", "reduction", "bandwidth", "permute", "framework", "latency", "stencil",
            "hash_probe",
        )
    }
    sizes = [4096 * 4**i for i in range(9)]
    for dtype, lanes in (("fp32", 16), ("fp64", 8)):
        for t in threads:
            for m in (16, 64, 256, 1024):
                for n in (16, 64, 256, 1024):
                    for k in (16, 64, 256, 1024):
                        for b in (1, 8) if m == n == k == 64 else (1,):
                            flops = 2.0 * b * m * n * k
                            time = flops / (_gemm_eff(m, n, k) * t * CLOCK * lanes * 4)
                            kernels["gemm"].append(
                                {
                                    "dtype": dtype,
                                    "threads": t,
                                    "batch": b,
                                    "m": m,
                                    "n": n,
                                    "k": k,
                                    "time_s": time,
                                    "spread_s": 0.0,
                                }
                            )
    for t in threads:
        for size in sizes:
            for op in ("add", "tanh"):
                kernels["elementwise"].append(
                    {
                        "op": op,
                        "dtype": "fp32",
                        "threads": t,
                        "bytes": size,
                        "time_s": size / _bandwidth(size, t) * (3 if op == "tanh" else 1),
                    }
                )
            kernels["reduction"].append(
                {
                    "op": "sum",
                    "dtype": "fp32",
                    "threads": t,
                    "bytes": size,
                    "time_s": size / _bandwidth(size, t),
                }
            )
            for family, op in (("elementwise", "add"), ("reduction", "sum")):
                kernels[family].append(
                    {"op": op, "dtype": "fp32", "threads": t, "bytes": size, "cache": "cold",
                     "time_s": size / (COLD_BANDWIDTH * t)}
                )
            for op in ("copy", "triad"):
                kernels["bandwidth"].append(
                    {"op": op, "threads": t, "bytes": size, "time_s": size / _bandwidth(size, t)}
                )
        for direction, passes in (("forward", 1), ("backward", 2)):
            for m in (4096, 65536):
                for n in (32, 128):
                    for k in (27, 288, 1152):
                        flops = 2.0 * m * n * k * passes
                        kernels["conv"].append({
                            "dtype": "fp32", "threads": t, "direction": direction, "m": m, "n": n, "k": k,
                            "passes": passes, "time_s": flops / (CONV_FRACTION[direction] * t * CLOCK * 16 * 4),
                        })
        for run, rate in PERMUTE_RATES.items():
            for size in (1 << 20, 32 << 20):
                kernels["permute"].append(
                    {"dtype": "fp32", "threads": t, "run": run, "bytes": size, "time_s": size / (rate * t)}
                )
        for blocks in (1, 64, 1024):
            cells = blocks * 4096
            kernels["stencil"].append(
                {
                    "threads": t,
                    "cells": cells,
                    "working_set": 2 * 8 * blocks * 18**3,
                    "time_s": cells * 2e-9 / t,
                }
            )
    for t in threads:
        for size in (1 << 20, 16 << 20):
            pooling = {"op": "max_pool2d_with_indices", "dtype": "fp32", "threads": t, "bytes": size}
            kernels["framework"].append({**pooling, "time_s": size / POOL_RATE})
    for size in (16 << 10, 1 << 20, 16 << 20, 64 << 20, 128 << 20):
        kernels["latency"].append(
            {"bytes": size, "latency_s": 1e-9 if size < 1 << 20 else 20e-9 if size < 64 << 20 else 100e-9}
        )
    for size in (32 << 10, 128 << 20):
        kernels["hash_probe"].append(
            {
                "variant": "linear",
                "table_bytes": size,
                "lines_per_probe": 1.25,
                "time_s": 5e-9 if size < 1 << 20 else 125e-9,
            }
        )
    probes = {"clock": {"clock_hz": CLOCK}, "fma": {"flops_per_s": PEAK32, "vector_bits": 512}}
    return build_calibration(HOST, kernels, probes, {"suite_version": 1}, "2026-01-01T00:00:00Z")


@pytest.fixture
def cal_path(tmp_path: Path) -> Path:
    path = tmp_path / "cal.json"
    write_calibration(synthetic(), path)
    return path


def test_derived_host_figures(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    derived = cal.derived
    assert derived["fma_units"] == 2 and derived["vector_bits"] == 512
    assert cal.peak_flops("fp32", 1) == pytest.approx(PEAK32)
    assert cal.peak_flops("fp64", 4) == pytest.approx(4 * PEAK32 / 2)
    assert derived["memory_bandwidth"] == pytest.approx(12e9 * 1.6)
    assert derived["core_bandwidth"] == pytest.approx(12e9)
    assert derived["memory_latency"] == pytest.approx(100e-9)
    assert 1e-9 <= derived["cache_latency"]["L1D"] < 2e-9 < derived["cache_latency"]["L2"]
    assert derived["cache_latency"]["L3"] == pytest.approx(20e-9)
    # one core's modelled bandwidth matches the measured one (Little's law)
    assert cal.model_bandwidth(1) == pytest.approx(12e9, rel=0.05)


def test_calibrated_model_reproduces_measured_points(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, node = host_specs(cal)
    assert cpu.simd.isa == "avx512" and cpu.cores == 4 and node.cpu is cpu
    model = CostModel(CalibratedEfficiency(cal, gemm_method="linear"))
    smooth = CostModel(CalibratedEfficiency(cal))  # the default RBF averages neighbours a little
    for row in cal.rows("gemm")[::7]:
        kernel = Gemm(dtype=row["dtype"], m=row["m"], n=row["n"], k=row["k"], batch=row["batch"])
        assert model.duration(kernel, cpu, row["threads"]) == pytest.approx(row["time_s"], rel=1e-6)
        assert smooth.duration(kernel, cpu, row["threads"]) == pytest.approx(row["time_s"], rel=0.15)
    cold = CostModel(CalibratedEfficiency(cal, gemm_method="linear", cache="cold"))
    streams = [(row, Elementwise(dtype="fp32", n=row["bytes"] // 12, op=row["op"], inputs=2, outputs=1))
               for row in cal.rows("elementwise")]
    streams += [(row, Reduction(dtype="fp32", n=row["bytes"] // 4 - 1, outputs=1)) for row in cal.rows("reduction")]
    for row, kernel in streams:
        warm = model.duration(kernel, cpu, row["threads"])
        if row.get("cache") == "cold":  # cold: the measured cold time, unless the warm curve is slower
            expected = max(row["time_s"], warm)
            assert cold.duration(kernel, cpu, row["threads"]) == pytest.approx(expected, rel=1e-3)
        else:
            assert warm == pytest.approx(row["time_s"], rel=1e-3)
    copy = next(r for r in cal.rows("bandwidth") if r["op"] == "copy" and r["threads"] == 1)
    assert model.duration(Copy(nbytes=copy["bytes"] / 2), cpu, 1) == pytest.approx(copy["time_s"], rel=1e-3)
    stencil = cal.rows("stencil")[1]
    assert model.duration(Stencil(dtype="fp64", cells=stencil["cells"]), cpu, stencil["threads"]) == pytest.approx(
        stencil["time_s"], rel=1e-2
    )
    probe = HashProbe(probes=1000, table_bytes=128 << 20, lines=1.25)
    assert model.duration(probe, cpu, 1) == pytest.approx(1000 * 125e-9, rel=1e-3)


def test_interpolation_between_points(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal))
    low = model.duration(Gemm(dtype="fp32", m=256, n=256, k=256), cpu, 1)
    high = model.duration(Gemm(dtype="fp32", m=1024, n=256, k=256), cpu, 1)
    middle = model.duration(Gemm(dtype="fp32", m=512, n=256, k=256), cpu, 1)
    assert low < middle < high
    # thread counts between measured ones blend the fractions of peak
    one = CalibratedEfficiency(cal).efficiency(Gemm(dtype="fp32", m=512, n=512, k=512), cpu, 1)[0]
    four = CalibratedEfficiency(cal).efficiency(Gemm(dtype="fp32", m=512, n=512, k=512), cpu, 4)[0]
    two = CalibratedEfficiency(cal).efficiency(Gemm(dtype="fp32", m=512, n=512, k=512), cpu, 2)[0]
    assert min(one, four) - 1e-12 <= two <= max(one, four) + 1e-12
    # transcendental ops use their own curve; unknown elementwise ops the memory-bound 'add' one
    tanh = model.duration(Elementwise(dtype="fp32", n=1 << 20, op="tanh_backward"), cpu, 1)
    add = model.duration(Elementwise(dtype="fp32", n=1 << 20, op="threshold_backward"), cpu, 1)
    assert tanh == pytest.approx(3 * add, rel=1e-6)
    # out-of-range sizes clamp to the nearest measured rate instead of extrapolating
    huge = Elementwise(dtype="fp32", n=1 << 30, op="add")
    assert model.duration(huge, cpu, 1) == pytest.approx(huge.bytes() / 12e9, rel=1e-3)


@pytest.mark.parametrize("method", ["linear", "rbf"])
def test_surfaces_of_points_on_a_hyperplane_interpolate_in_it(method: str) -> None:
    """Grouped convolutions' points all have k = 9 n (a 3-D hyperplane of the 4-D features), on which
    scipy's Delaunay triangulation fails: the surface interpolates in the points' own axes."""
    def fraction(m: int, n: int, groups: int) -> float:
        return 0.01 * n ** 0.5 * (m / 4096) ** 0.1 / groups ** 0.05

    rows = [{"m": m, "n": n, "k": 9 * n, "batch": groups,
             "time_s": 2.0 * m * n * 9 * n * groups / (fraction(m, n, groups) * 1e12)}
            for m in (4096, 16384, 65536) for n, groups in ((1, 32), (1, 128), (8, 8), (16, 4), (32, 2), (4, 32))]
    surface = GemmSurface(rows, 1e12, method, 0.0)
    for row in rows:  # exact at the measured points (the thin-plate spline without smoothing too)
        assert surface.fraction(row["m"], row["n"], row["k"], row["batch"]) == pytest.approx(
            fraction(row["m"], row["n"], row["batch"]), rel=1e-6)
    assert fraction(8192, 1, 32) < surface.fraction(8192, 8, 72, 8) < fraction(65536, 32, 2)


def test_grid_interpolation_is_log_log_bilinear_and_clamped() -> None:
    grid = grid_2d([(x, y, x * y**2) for x in (1, 4) for y in (2, 8)])
    assert grid is not None
    assert grid(2, 4) == pytest.approx(2 * 4**2, rel=1e-9)  # a power law is linear in logs
    assert grid(100, 0.5) == pytest.approx(4 * 2**2, rel=1e-9)
    assert grid_2d([(1, 2, 1.0), (4, 2, 2.0), (1, 8, 3.0)]) is None  # (4, 8) missing


def _transpose_rate(rows: int, length: int) -> float:
    """Bytes/s of the synthetic batched transposes: slower as a block's rows or length grow, and
    half as fast where the source row stride is an even number of cache lines (set conflicts)."""
    return 64e9 / (rows * length) ** 0.25 / (2 if rows * 4 % 128 == 0 else 1)


def test_batched_transposes_are_timed_by_their_block(cal_path: Path) -> None:
    data = synthetic()
    data["kernels"]["transpose"] = [
        {"dtype": "fp32", "threads": 1, "rows": rows, "length": length, "bytes": 8 << 20,
         "time_s": (8 << 20) / _transpose_rate(rows, length)}
        for rows in (4, 12, 48, 64, 256) for length in (16, 256, 4096)
    ]
    cal = tmp_calibration(cal_path.parent / "blocks.json", data)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal))
    nbytes = 4 << 20

    def rate(rows: int, length: int) -> float:
        return 2 * nbytes / model.duration(Copy(nbytes=nbytes, run=1, rows=rows, length=length), cpu, 1)

    for rows, length in ((4, 16), (48, 256), (64, 256), (256, 4096)):  # measured blocks: their rate, at any size
        assert rate(rows, length) == pytest.approx(_transpose_rate(rows, length), rel=1e-9)
    # between measured blocks of the same kind of row stride: log-log bilinear, exact for this power
    # law; 32 rows (2 cache lines a row) lie beyond the conflicting ones measured: 64's rate
    assert rate(24, 64) == pytest.approx(_transpose_rate(24, 64), rel=1e-9)
    assert rate(128, 1024) == pytest.approx(_transpose_rate(128, 1024), rel=1e-9)
    assert rate(32, 256) == pytest.approx(_transpose_rate(64, 256), rel=1e-9)
    # beyond the grid: the edge's rate
    assert rate(1024, 1 << 20) == pytest.approx(_transpose_rate(256, 4096), rel=1e-9)
    # never faster than streaming the bytes: a huge tensor of fast blocks streams from memory
    huge = Copy(nbytes=1 << 30, run=1, rows=4, length=16)
    assert model.duration(huge, cpu, 1) == pytest.approx(huge.bytes() / 12e9, rel=1e-3)
    # without a block, or without the points, the run's curve times it
    whole = model.duration(Copy(nbytes=nbytes, run=1), cpu, 1)
    assert whole == pytest.approx(2 * nbytes / PERMUTE_RATES[1], rel=1e-6)
    unmeasured = CostModel(CalibratedEfficiency(load_calibration(cal_path)))
    assert unmeasured.duration(Copy(nbytes=nbytes, run=1, rows=64, length=256), cpu, 1) == whole
    # an incomplete grid is not interpolated
    data["kernels"]["transpose"].pop()
    partial = CostModel(CalibratedEfficiency(tmp_calibration(cal_path.parent / "partial.json", data)))
    assert partial.duration(Copy(nbytes=nbytes, run=1, rows=64, length=256), cpu, 1) == whole


def test_layout_changing_copies_interpolate_in_the_run(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal))
    nbytes = 4 << 20
    for run, rate in PERMUTE_RATES.items():
        assert model.duration(Copy(nbytes=nbytes, run=run), cpu, 1) == pytest.approx(2 * nbytes / rate, rel=1e-6)
    # run 4 lies halfway (in log) between runs 1 and 16: the geometric mean of their rates
    assert model.duration(Copy(nbytes=nbytes, run=4), cpu, 1) == pytest.approx(2 * nbytes / 2e9, rel=1e-6)
    # longer runs than measured take the longest run's rate; a streaming copy is not a permute
    assert model.duration(Copy(nbytes=nbytes, run=4096), cpu, 1) == pytest.approx(2 * nbytes / 16e9, rel=1e-6)
    assert model.duration(Copy(nbytes=nbytes), cpu, 1) != model.duration(Copy(nbytes=nbytes, run=1), cpu, 1)
    # below the smallest measured tensor a copy runs at its rate (a recurrent cell's 8 KiB gate
    # copies are not 512 KiB ones), no faster than the cheapest ATen call
    committed = CalibratedEfficiency(load_calibration(COMMITTED_CALIBRATION), blas="torch")
    smallest = min(row["bytes"] for row in committed.calibration.rows("permute"))
    at_smallest = committed.host_time(Copy(nbytes=smallest / 2, run=128), 1)
    small = committed.host_time(Copy(nbytes=smallest / 128, run=128), 1)
    assert small == pytest.approx(max(at_smallest / 64, committed.dispatch_floor(1)), rel=1e-6)
    assert small < at_smallest / 10
    # a calibration without layout-changing copies does not cover them
    data = synthetic()
    del data["kernels"]["permute"]
    bare = tmp_calibration(cal_path.parent / "bare.json", data)
    assert not CalibratedEfficiency(bare).covers(Copy(nbytes=nbytes, run=1))
    assert CalibratedEfficiency(bare).covers(Copy(nbytes=nbytes))
    # fp32 points cannot time a 16-bit product (10-50x slower without 16-bit arithmetic)
    assert CalibratedEfficiency(bare).covers(Gemm(dtype="fp32", m=64, n=64, k=64))
    assert not CalibratedEfficiency(bare).covers(Gemm(dtype="bf16", m=64, n=64, k=64))


def test_fused_attention_is_its_products_and_its_exponentials(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal))
    attention = Attention(dtype="fp32", batch=64, lq=128, lk=128, e=64)
    products = model.duration(attention.gemm(), cpu, 1)
    # one exponential per score at the exp curve's L1 rate (the synthetic calibration has no exp
    # curve, so the first elementwise one, add: 200 GB/s over 8 bytes per element)
    exponentials = attention.exponentials * 8 / 200e9
    assert model.duration(attention, cpu, 1) == pytest.approx(products + exponentials, rel=1e-3)
    backward = Attention(dtype="fp32", batch=64, lq=128, lk=128, e=64, backward=True)
    assert model.duration(backward, cpu, 1) > model.duration(attention, cpu, 1)


def test_convolutions_use_their_own_points(cal_path: Path) -> None:
    efficiency = CalibratedEfficiency(load_calibration(cal_path), gemm_method="linear")
    for direction, fraction in CONV_FRACTION.items():
        conv = Gemm(dtype="fp32", m=16384, n=64, k=288, batch=2 if direction == "backward" else 1, conv=direction)
        assert efficiency.gemm_fraction(conv, 1) == pytest.approx(fraction, rel=1e-6)
        # a weight-gradient-only backward does half the work at the same fraction of peak
        assert efficiency.gemm_fraction(Gemm(dtype="fp32", m=16384, n=64, k=288, conv=direction), 4) == pytest.approx(
            fraction, rel=1e-6)
    # the same dimensions as a BLAS product use the GEMM points; so do convolutions without points
    product = Gemm(dtype="fp32", m=256, n=64, k=256)
    assert efficiency.gemm_fraction(product, 1) == pytest.approx(_gemm_eff(256, 64, 256), rel=1e-6)
    data = synthetic()
    del data["kernels"]["conv"]
    bare = CalibratedEfficiency(tmp_calibration(cal_path.parent / "bare.json", data), gemm_method="linear")
    as_conv = Gemm(dtype="fp32", m=256, n=64, k=256, conv="forward")
    assert bare.gemm_fraction(as_conv, 1) == pytest.approx(_gemm_eff(256, 64, 256), rel=1e-6)


ONE_GRADIENT_FRACTION = {("forward", 1): 0.2, ("backward_input", 1): 0.05, ("backward_weight", 1): 0.2,
                         ("forward", 2): 0.1, ("backward_input", 2): 0.04, ("backward_weight", 2): 0.1}
"""Fractions of fp32 peak of suite-9 style convolution points, by pass and stride."""


def test_convolution_gradients_and_strides_have_their_own_points(cal_path: Path) -> None:
    data = synthetic()
    data["kernels"]["conv"] = [
        {"dtype": "fp32", "threads": t, "direction": direction, "stride": stride, "m": m, "n": n, "k": k,
         "passes": 1, "time_s": 2.0 * m * n * k / (fraction * t * CLOCK * 16 * 4)}
        for (direction, stride), fraction in ONE_GRADIENT_FRACTION.items()
        for t in (1, 4) for m in (4096, 65536) for n in (32, 128) for k in (27, 288, 1152)
    ]
    efficiency = CalibratedEfficiency(tmp_calibration(cal_path.parent / "passes.json", data), gemm_method="linear")

    def fraction(conv: str, stride: int = 1, batch: int = 1) -> float:
        kernel = Gemm(dtype="fp32", m=16384, n=64, k=288, batch=batch, conv=conv, stride=stride)
        value = efficiency.gemm_fraction(kernel, 1)
        assert value is not None
        return value

    for (direction, stride), expected in ONE_GRADIENT_FRACTION.items():
        assert fraction(direction, stride) == pytest.approx(expected, rel=1e-6)
    # a backward computing both gradients takes the time of both passes: 1/f = (1/f_in + 1/f_w) / 2
    assert fraction("backward", batch=2) == pytest.approx(2 / (1 / 0.05 + 1 / 0.2), rel=1e-6)
    assert fraction("backward", stride=2, batch=2) == pytest.approx(2 / (1 / 0.04 + 1 / 0.1), rel=1e-6)
    # a stride-3 convolution is strided; without strided points a strided one uses the others
    assert fraction("forward", stride=3) == pytest.approx(0.1, rel=1e-6)
    # depthwise (grouped) convolutions have points of their own; ungrouped ones never use them
    data["kernels"]["conv"] += [
        {"dtype": "fp32", "threads": t, "direction": "forward", "stride": 1, "groups": 64, "m": m, "n": 1, "k": k,
         "passes": 1, "time_s": 2.0 * m * k * 64 / (0.01 * t * CLOCK * 16 * 4)}
        for t in (1, 4) for m in (4096, 65536) for k in (5, 9, 25)
    ]
    grouped = CalibratedEfficiency(tmp_calibration(cal_path.parent / "grouped.json", data), gemm_method="linear")
    depthwise = Gemm(dtype="fp32", m=16384, n=1, k=9, batch=64, conv="forward", groups=64)
    assert grouped.gemm_fraction(depthwise, 1) == pytest.approx(0.01, rel=1e-6)
    plain = Gemm(dtype="fp32", m=16384, n=64, k=288, conv="forward")
    assert grouped.gemm_fraction(plain, 1) == pytest.approx(0.2, rel=1e-6)
    # wider groups (suite 21) join the depthwise points: 4 groups of 16 channels run at their own rate
    wide = [{"dtype": "fp32", "threads": t, "direction": "forward", "stride": 1, "groups": groups, "m": m,
             "n": n, "k": 9 * n, "passes": 1, "time_s": 2.0 * m * n * 9 * n * groups / (0.15 * t * CLOCK * 16 * 4)}
            for t in (1, 4) for m in (4096, 65536) for groups, n in ((2, 16), (4, 16), (8, 8))]
    widened = CalibratedEfficiency(tmp_calibration(cal_path.parent / "wide.json", {
        **data, "kernels": {**data["kernels"], "conv": data["kernels"]["conv"] + wide}}), gemm_method="linear")
    four_groups = Gemm(dtype="fp32", m=4096, n=16, k=144, batch=4, conv="forward", groups=4)
    assert widened.gemm_fraction(four_groups, 1) == pytest.approx(0.15, rel=1e-6)
    assert grouped.gemm_fraction(four_groups, 1) == pytest.approx(0.01, rel=1e-6)  # depthwise's, 15x too slow
    assert widened.gemm_fraction(depthwise, 1) == pytest.approx(0.01, rel=1e-6)
    # 1x1 convolutions (suite 21, rows with one tap) are their own class; 3x3 ones never use them
    ones = [{"dtype": "fp32", "threads": t, "direction": "forward", "stride": 1, "m": m, "n": n, "k": k, "taps": 1,
             "passes": 1, "time_s": 2.0 * m * n * k / (0.3 * t * CLOCK * 16 * 4)}
            for t in (1, 4) for m in (4096, 65536) for n in (32, 128) for k in (64, 256)]
    pointwise = CalibratedEfficiency(tmp_calibration(cal_path.parent / "ones.json", {
        **data, "kernels": {**data["kernels"], "conv": data["kernels"]["conv"] + ones}}), gemm_method="linear")
    one_tap = Gemm(dtype="fp32", m=16384, n=64, k=128, conv="forward", pointwise=True)
    assert pointwise.gemm_fraction(one_tap, 1) == pytest.approx(0.3, rel=1e-6)
    assert pointwise.gemm_fraction(plain, 1) == pytest.approx(0.2, rel=1e-6)
    assert grouped.gemm_fraction(one_tap, 1) == pytest.approx(0.2, rel=1e-6)  # without them: the 3x3 points
    assert kernel_for("aten::convolution", "conv", [[8, 64, 16, 16], [32, 64, 1, 1], []], ["float", "float", ""],
                      [], False).kernel.pointwise
    # bf16 convolutions (suite 21, on CPUs with native bf16) are timed from their own points, not from
    # bf16 products (AMX products ran 2-5x faster than oneDNN's bf16 convolutions here)
    halves = [{**row, "dtype": "bf16", "time_s": row["time_s"] / 2} for row in data["kernels"]["conv"]
              if row["dtype"] == "fp32" and "groups" not in row and row["direction"] == "forward"]
    bf16_gemm = [{**row, "dtype": "bf16", "time_s": row["time_s"] / 8} for row in data["kernels"]["gemm"]
                 if row["dtype"] == "fp32"]
    products = {**data, "kernels": {**data["kernels"], "gemm": data["kernels"]["gemm"] + bf16_gemm}}
    half_conv = Gemm(dtype="bf16", m=16384, n=64, k=288, conv="forward")
    from_products = CalibratedEfficiency(tmp_calibration(cal_path.parent / "products.json", products),
                                         gemm_method="linear")
    with_convs = CalibratedEfficiency(tmp_calibration(cal_path.parent / "halves.json", {
        **products, "kernels": {**products["kernels"], "conv": data["kernels"]["conv"] + halves}}),
        gemm_method="linear")
    fp32_seconds = grouped.host_time(plain, 1)
    assert with_convs.host_time(half_conv, 1) == pytest.approx(fp32_seconds / 2, rel=1e-6)
    assert from_products.host_time(half_conv, 1) < fp32_seconds / 4
    # 1-D depthwise points (a one-high image) are their own class: a 2-D kernel keeps the 2-D rate
    data["kernels"]["conv"] += [
        {"dtype": "fp32", "threads": t, "direction": "forward", "stride": 1, "groups": 64, "m": m, "n": 1, "k": 5,
         "passes": 1, "image": [m // 512, 64, 1, 512], "time_s": 2.0 * m * 5 * 64 / (0.001 * t * CLOCK * 16 * 4)}
        for t in (1, 4) for m in (16384, 65536)
    ]
    lines = CalibratedEfficiency(tmp_calibration(cal_path.parent / "lines.json", data), gemm_method="linear")
    assert lines.gemm_fraction(depthwise, 1) == pytest.approx(0.01, rel=1e-6)
    line = Gemm(dtype="fp32", m=32768, n=1, k=5, batch=64, conv="forward", groups=64, line=True)
    assert lines.gemm_fraction(line, 1) == pytest.approx(0.001, rel=1e-6)  # m alone varies: along m
    data["kernels"]["conv"] = [row for row in data["kernels"]["conv"] if row["stride"] == 1 and "image" not in row]
    unstrided = CalibratedEfficiency(tmp_calibration(cal_path.parent / "s1.json", data), gemm_method="linear")
    assert unstrided.gemm_fraction(Gemm(dtype="fp32", m=16384, n=64, k=288, conv="forward", stride=2), 1) == (
        pytest.approx(0.2, rel=1e-6))


def test_one_gradient_passes_fall_back_to_two_gradient_points(cal_path: Path) -> None:
    """Calibrations of suite 8 and older measured the backward with both gradients only."""
    efficiency = CalibratedEfficiency(load_calibration(cal_path), gemm_method="linear")
    for conv in ("backward_input", "backward_weight"):
        kernel = Gemm(dtype="fp32", m=16384, n=64, k=288, conv=conv)
        assert efficiency.gemm_fraction(kernel, 1) == pytest.approx(CONV_FRACTION["backward"], rel=1e-6)
    with pytest.raises(ValueError, match="convolution pass"):
        Gemm(dtype="fp32", m=1, n=1, k=1, conv="sideways")


def test_cold_cache_bounds_memory_bound_kernels(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    warm, cold = (CostModel(CalibratedEfficiency(cal, cache=cache)) for cache in ("warm", "cold"))
    small = Elementwise(dtype="fp32", n=1 << 18, op="relu")  # 3 MiB: cache-resident when warm
    assert warm.duration(small, cpu, 1) == pytest.approx(small.bytes() / 60e9, rel=1e-3)
    assert cold.duration(small, cpu, 1) == pytest.approx(small.bytes() / COLD_BANDWIDTH, rel=1e-3)
    total = Reduction(dtype="fp64", n=1 << 18, op="mean")
    assert cold.duration(total, cpu, 1) == pytest.approx(total.bytes() / COLD_BANDWIDTH, rel=1e-3)
    # a kernel slower than the cold floor (compute-bound tanh at DRAM sizes) keeps its own time
    huge = Elementwise(dtype="fp32", n=1 << 28, op="tanh")
    assert cold.duration(huge, cpu, 1) == pytest.approx(warm.duration(huge, cpu, 1), rel=1e-9)
    # layout-changing copies get the same floor
    transpose, head_permute = Copy(nbytes=4 << 20, run=1), Copy(nbytes=4 << 20, run=256)
    assert cold.duration(transpose, cpu, 1) == warm.duration(transpose, cpu, 1)  # 1 GB/s: slower than the floor
    assert cold.duration(head_permute, cpu, 1) == pytest.approx(head_permute.bytes() / COLD_BANDWIDTH, rel=1e-3)
    assert cold.duration(head_permute, cpu, 1) > warm.duration(head_permute, cpu, 1)
    # a product pays its bytes on the cold add curve less the same bytes on the warm one
    product = Gemm(dtype="fp32", m=256, n=256, k=256)
    same_bytes = Elementwise(dtype="fp32", n=int(product.bytes()) // 12, op="add", inputs=2, outputs=1)
    assert same_bytes.bytes() == product.bytes()
    extra = cold.duration(same_bytes, cpu, 1) - warm.duration(same_bytes, cpu, 1)
    assert extra > 0
    assert cold.duration(product, cpu, 1) == pytest.approx(warm.duration(product, cpu, 1) + extra, rel=1e-9)
    convolution = Gemm(dtype="fp32", m=256, n=256, k=256, conv="forward")
    assert cold.duration(convolution, cpu, 1) == warm.duration(convolution, cpu, 1)
    with pytest.raises(ValueError, match="cache"):
        CalibratedEfficiency(cal, cache="lukewarm")


def test_in_place_maps_fetch_only_what_they_read(cal_path: Path) -> None:
    """An op that writes in place fetches no output array: after a 128 MiB flush here, 8 MiB took
    322 us through ``x.relu_()`` against 643-651 us through ``relu(x)`` (349 against 706-725 us for
    a scalar multiply, 562-614 against 976-1046 us for ``x.add_(y)`` against ``add(x, y, out=z)``)."""
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    warm, cold = (CostModel(CalibratedEfficiency(cal, cache=cache)) for cache in ("warm", "cold"))
    relu = Elementwise(dtype="fp32", n=1 << 18, op="relu", inputs=1, outputs=1)
    relu_ = dataclasses.replace(relu, in_place=True)
    assert relu_.bytes() == relu.bytes() == 2 * relu_.fetched_bytes()
    assert cold.duration(relu, cpu, 1) == pytest.approx(relu.bytes() / COLD_BANDWIDTH, rel=1e-3)
    assert cold.duration(relu_, cpu, 1) == pytest.approx(relu.bytes() / 2 / COLD_BANDWIDTH, rel=1e-3)
    add_ = Elementwise(dtype="fp32", n=1 << 18, op="add", inputs=2, outputs=1, in_place=True)
    assert cold.duration(add_, cpu, 1) == pytest.approx(add_.bytes() * 2 / 3 / COLD_BANDWIDTH, rel=1e-3)
    # warm, its distinct bytes set the cache level: 512 KiB in place, 1 MiB out of place
    small, small_ = (dataclasses.replace(kernel, n=1 << 17) for kernel in (relu, relu_))
    assert warm.duration(small, cpu, 1) == pytest.approx(small.bytes() / 60e9, rel=1e-3)
    assert warm.duration(small_, cpu, 1) < 0.9 * warm.duration(small, cpu, 1)


def test_sums_over_rows_are_timed_from_their_own_points() -> None:
    """A bias gradient (``sum`` of ``[rows, width]`` over its rows) runs ATen's outer reduction:
    1.4-3.7x a sum over the last dimension here (``validation/microbench/framework.py``). It is
    timed from the ``sum@outer<width>`` points of the two nearest widths, log-interpolated."""
    data = synthetic()
    data["kernels"]["gemm"] += [dict(row, blas="torch") for row in data["kernels"]["gemm"]]
    plain = CostModel(CalibratedEfficiency(validate(copy.deepcopy(data), "cal.json"), blas="torch", cache="warm"))
    rates = {64: 40e9, 1024: 10e9}  # bytes/s of the synthetic outer sums, any size
    data["kernels"]["framework"] += [{"op": f"sum@outer{width}", "dtype": "fp32", "threads": t, "bytes": size,
                                      "input": [size // 4 // width, width], "time_s": size / rate}
                                     for width, rate in rates.items() for t in (1, 4) for size in (1 << 18, 1 << 23)]
    cal = validate(data, "cal.json")
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal, blas="torch", cache="warm"))

    def bias_gradient(rows: int, width: int) -> Reduction:
        shapes, types = [[rows, width], [], [], []], ["float", "ScalarList", "Scalar", ""]
        kernel = kernel_for("aten::sum", "reduction", shapes, types, ["", "[0]", "True", ""], False).kernel
        assert isinstance(kernel, Reduction) and kernel.inner == width and kernel.outputs == width
        return kernel

    wide = bias_gradient(2048, 1024)
    assert model.duration(wide, cpu, 1) == pytest.approx(wide.bytes() / rates[1024], rel=1e-3)
    between = bias_gradient(2048, 256)  # halfway between 64 and 1024 in log(width)
    assert model.duration(between, cpu, 1) == pytest.approx(between.bytes() / math.sqrt(40e9 * 10e9), rel=1e-3)
    narrow = bias_gradient(8192, 16)  # below the narrowest measured width: its rate
    assert model.duration(narrow, cpu, 1) == pytest.approx(narrow.bytes() / rates[64], rel=1e-3)
    # without the points (an older calibration) it is a sum like any other
    inner = dataclasses.replace(wide, inner=0)
    assert plain.duration(wide, cpu, 1) == plain.duration(inner, cpu, 1) == model.duration(inner, cpu, 1)


@pytest.mark.parametrize(("op", "shape", "dims", "inner"), [
    ("sum", [128, 16, 768], "[0, 1]", 768),  # a bias gradient of [sequence, batch, width] activations
    ("sum", [4, 5, 6], "[1]", 6),
    ("mean", [64, 256], "[0]", 256),
    ("sum", [64, 256], "[-1]", 0),  # over the last dimension: contiguous
    ("sum", [64, 256], "[]", 0),  # everything
    ("sum", [8, 16, 4, 4], "[0, 2, 3]", 0),  # a convolution's bias gradient: the last dimension too
    ("amax", [64, 256], "[0]", 0),  # another kernel
])
def test_reductions_over_leading_dimensions_keep_their_rows_width(op: str, shape: list, dims: str,
                                                                  inner: int) -> None:
    kernel = kernel_for(f"aten::{op}", "reduction", [shape, [], [], []], ["float", "ScalarList", "Scalar", ""],
                        ["", dims, "False", ""], False).kernel
    assert isinstance(kernel, Reduction) and kernel.inner == inner


@pytest.mark.parametrize(("name", "shapes", "expected"), [
    ("aten::add_", [[64, 256], [64, 256], []], True),
    ("aten::div_", [[64, 256], []], True),
    ("aten::relu_", [[64, 256]], True),
    ("aten::add", [[64, 256], [64, 256], []], False),
    ("aten::copy_", [[64, 256], [64, 256], []], False),  # the destination is written, not read
    ("aten::fill_", [[64, 256], []], False),
    ("aten::zero_", [[64, 256]], False),
    ("aten::index_add_", [[64, 256], [], [8], [8, 256], []], False),
])
def test_traced_in_place_maps_are_marked(name: str, shapes: list, expected: bool) -> None:
    dtypes = ["float" if shape else "Scalar" for shape in shapes]
    kernel = kernel_for(name, "elementwise", shapes, dtypes, [], False).kernel
    assert isinstance(kernel, Elementwise)
    assert kernel.in_place is expected


def tmp_calibration(path: Path, data: dict):
    write_calibration(data, path)
    return load_calibration(path)


def test_other_devices_fall_back(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    a100 = builtin_catalog().gpus["a100"]
    gemm = Gemm(dtype="fp16", m=4096, n=4096, k=4096)
    assert CalibratedEfficiency(cal).efficiency(gemm, a100, None) == ConstantEfficiency().efficiency(gemm, a100, None)
    # another CPU gets the host's fractions of peak
    spr = builtin_catalog().cpus["spr-8480"]
    fraction = CalibratedEfficiency(cal).efficiency(Gemm(dtype="fp64", m=1024, n=1024, k=1024), spr, 8)[0]
    assert fraction == pytest.approx(_gemm_eff(1024, 1024, 1024), rel=1e-6)


def test_host_warnings(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    assert host_warnings(cal, HOST, 1) == []
    other = HostFacts(**{**HOST.__dict__, "cpu_model": "Other CPU", "isa_flags": ("avx2",)})
    [warning] = host_warnings(cal, other, 1)
    assert "another machine" in warning and "cpu_model" in warning and "isa_flags" in warning
    [stale] = host_warnings(cal, HOST, 2)
    assert "stale" in stale
    smaller_l3 = dataclasses.replace(HOST, caches=(*HOST.caches[:2], CacheInfo("L3", 16 << 20, 4)))
    [caches] = host_warnings(cal, smaller_l3, 1)
    assert "same model name" in caches and "L3 32 MiB" in caches and "L3 16 MiB" in caches


def test_default_calibration_is_the_committed_one_of_this_kind_of_machine(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each committed calibration is the default on the machine it measured (model, cores, flags and
    caches all alike; of two Zen 5 guests alike in all of them, the later suite's); another machine
    gets the most like it (an AVX2 AMD guest with other caches an EPYC's, an unknown AVX-512 Intel
    CPU the Xeon's with the nearer caches); $SIMHPC_CALIBRATION wins, and an error about the file it
    names says so."""
    from simhpc.hardware.host import COMMITTED_CALIBRATION, _committed_hosts, default_calibration

    monkeypatch.delenv("SIMHPC_CALIBRATION", raising=False)
    committed = _committed_hosts()
    assert committed[0][0] == COMMITTED_CALIBRATION and len(committed) >= 3
    for path, facts, _ in committed:  # of files of one kind of machine, the latest suite's, then the newest
        alike = sorted((recency, other_path) for other_path, other, recency in committed if other.same_machine(facts))
        assert default_calibration(facts) == alike[-1][1]
        assert len(alike) == 1 or path.name.startswith("epyc-zen5")
    zen5 = next(facts for path, facts, _ in committed if path.name == "epyc-zen5.json")
    assert default_calibration(zen5).name == "epyc-zen5-4.5ghz.json"  # suite 34 over suite 20
    zen = next(facts for path, facts, _ in committed if path.name.startswith("epyc"))
    bigger_l3 = dataclasses.replace(zen, caches=(*zen.caches[:2], CacheInfo("L3", 256 << 20, 2)))
    assert default_calibration(bigger_l3).name == "epyc-zen3.json"  # 32 MiB: the nearer L3
    four_cores = dataclasses.replace(zen, cores=4, cpu_model="AMD EPYC 7B12")
    assert default_calibration(four_cores) == default_calibration(zen)
    # an unknown AVX-512 Intel CPU: a Xeon's, the one with the nearer caches (32 MiB L3: the 105 MiB one's)
    assert default_calibration(HOST).name == "xeon-spr.json"
    huge_l3 = dataclasses.replace(HOST, caches=(*HOST.caches[:2], CacheInfo("L3", 512 << 20, 4)))
    assert default_calibration(huge_l3) == COMMITTED_CALIBRATION
    monkeypatch.setenv("SIMHPC_CALIBRATION", "/elsewhere/mine.json")
    assert default_calibration(zen) == Path("/elsewhere/mine.json")
    with pytest.raises(HostFactsError, match=r"mine.json: no such calibration file \(named by \$SIMHPC_CALIBRATION"):
        host_catalog_entries()
    with pytest.raises(CalibrationError, match=r"named by \$SIMHPC_CALIBRATION"):
        load_calibration()
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json", encoding="utf-8")
    monkeypatch.setenv("SIMHPC_CALIBRATION", str(garbage))
    with pytest.raises(HostFactsError, match=r"not a readable calibration JSON .*\(named by \$SIMHPC_CALIBRATION\)"):
        host_catalog_entries()
    garbage.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(HostFactsError, match=r"\(named by \$SIMHPC_CALIBRATION\)$"):
        host_catalog_entries()
    data = synthetic()
    data["derived"]["cache_latency"]["L2"] = "fast"
    garbage.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(HostFactsError, match=r"derived\.cache_latency\.L2: expected a number > 0, got 'fast'"):
        host_catalog_entries()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "schema version"),
        (lambda d: d.update(schema_version=0), "reads versions 1, 2"),
        (lambda d: d["kernels"]["gemm"][2].update(blas="eigen"), "kernels.gemm.2.blas"),
        (lambda d: d.update(schema="chrome"), "not a simhpc calibration"),
        (lambda d: d["derived"].update(clock_hz=-1), "derived.clock_hz"),
        (lambda d: d["derived"]["cache_latency"].update(L1D="fast"), "derived.cache_latency.L1D"),
        (lambda d: d["derived"].update(peak_flops_per_core="x"), "derived.peak_flops_per_core: expected an object"),
        (lambda d: d["kernels"]["gemm"][3].pop("time_s"), "kernels.gemm.3.time_s"),
        (lambda d: d["kernels"].update(gemm=[]), "no GEMM points"),
        (lambda d: d["kernels"].update(bogus=[]), "unknown section"),
        (lambda d: d["host"].update(cores="two"), "host.cores"),
        (lambda d: d.update(microbench=[1]), "microbench: expected an object, got list"),
        (lambda d: d.update(microbench={"suite_version": "13"}), "microbench.suite_version: expected an integer"),
        (lambda d: d.update(probes=None), "probes: expected an object"),
        (lambda d: d.update(probes={"clock": {"clock_hz": "fast"}}), "probes.clock.clock_hz: expected a number"),
        (lambda d: d.update(fingerprint="x"), "fingerprint: expected an object"),
    ],
)
def test_malformed_calibrations(mutate, message: str) -> None:
    data = synthetic()
    mutate(data)
    with pytest.raises(CalibrationError, match=message):
        validate(data, "cal.json")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["host"]["caches"][0].update(shared_by="fast"), "host.caches.0"),
        (lambda d: d["host"].update(nominal_clock_hz=-1.0), "host.nominal_clock_hz"),
        (lambda d: d.update(fingerprint={"isa_flags": [0]}), "fingerprint.isa_flags: expected a list of strings"),
        (lambda d: d["kernels"]["gemm"][0].update(dtype="fast"), "kernels.gemm.0.dtype: unknown dtype 'fast'"),
        (lambda d: d["kernels"]["gemm"][0].update(layout="xx"), "kernels.gemm.0.layout"),
        (lambda d: d["kernels"]["gemm_cold"][0].update(batch=1e308), "kernels.gemm_cold.0.batch: expected an integer"),
        (lambda d: d["kernels"]["gemm_cold"][0].update(blas="eigen"), "kernels.gemm_cold.0.blas"),
        (lambda d: d["kernels"]["conv"][0].update(image=0), "kernels.conv.0.image"),
        (lambda d: d["kernels"]["conv"][0].update(stride=None), "kernels.conv.0.stride"),
        (lambda d: d["kernels"]["framework"][0].update(window=None), "kernels.framework.0.window"),
        (lambda d: d["kernels"]["framework"][0].update(input=[]), "kernels.framework.0.input"),
        (lambda d: d["kernels"]["framework"][0].update(input=[4096]), "kernels.framework.0.input: expected a shape "
                                                                       "(integers > 0, at least 2)"),  # a pool's
        (lambda d: d["kernels"]["elementwise"][0].update(cache="tepid"), "kernels.elementwise.0.cache"),
        (lambda d: d["kernels"]["dispatch"][0].update(step_bytes=-1), "kernels.dispatch.0.step_bytes"),
        (lambda d: d["kernels"]["gemm"][0].update(round_trip_s="far"), "kernels.gemm.0.round_trip_s: expected"),
        (lambda d: d["kernels"]["gemm_cold"][0].update(l1_probe_s=-1), "kernels.gemm_cold.0.l1_probe_s: expected"),
        (lambda d: d["kernels"]["dispatch"][-1].update(parameters="many"), "parameters: expected a number >= 0"),
        (lambda d: d["kernels"]["dispatch"][-1].update(layers=0.5), "layers: expected an integer"),
        (lambda d: d["kernels"]["dispatch"][0].update(product_extra_s="fast"), "product_extra_s: expected a number"),
    ],
)
def test_malformed_fields_the_cost_model_reads(mutate, message: str) -> None:
    """Every field the catalog or the cost model reads, optional ones included, is checked where the
    file is read (each of these raised a TypeError or ValueError traceback from the cost model)."""
    from simhpc.hardware.host import COMMITTED_CALIBRATION

    data = json.loads(COMMITTED_CALIBRATION.read_text(encoding="utf-8"))
    mutate(data)
    with pytest.raises(CalibrationError, match=re.escape(message)):
        validate(data, "cal.json")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not valid JSON"),
        (b'{"schema": "simhpc-calibration", "schema_ver', "truncated"),
        (b"\x89PNG\r\n", "not UTF-8 text"),
        (b'{"traceEvents": []}', "not a simhpc calibration"),
        (b"[1, 2]", "not a simhpc calibration"),
    ],
)
def test_bad_calibration_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "cal.json"
    path.write_bytes(content)
    with pytest.raises(CalibrationError, match=message):
        load_calibration(path)


def test_cli_bad_calibration_exits_2(tmp_path: Path) -> None:
    trace = next((ROOT / "validation" / "traces" / "captures").glob("mlp_t1.json*"))
    bad = tmp_path / "cal.json"
    bad.write_text('{"schema": "simhpc-calibration", "schema_version": 1, "host"')
    result = CliRunner().invoke(main, ["compare", str(trace), "--calibration", str(bad)])
    assert result.exit_code == 2 and result.output.startswith("error: ") and result.output.count("\n") == 1
    missing = CliRunner().invoke(main, ["compare", str(trace), "--calibration", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "no such calibration file" in missing.output


def test_run_refuses_a_bad_calibration_that_simhpc_calibration_names(tmp_path: Path, monkeypatch) -> None:
    """A run used to fall back to constant efficiencies without a word when the file
    ``$SIMHPC_CALIBRATION`` names did not validate; it is the user's file, so it is an error."""
    from simhpc.hardware.host import COMMITTED_CALIBRATION
    from simhpc.runner import default_cost_model

    data = json.loads(COMMITTED_CALIBRATION.read_text(encoding="utf-8"))
    data["kernels"]["conv"][0]["image"] = 0
    bad = tmp_path / "mine.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setenv("SIMHPC_CALIBRATION", str(bad))
    default_cost_model.cache_clear()
    try:
        result = CliRunner().invoke(main, ["run", str(ROOT / "scenarios" / "allreduce_single_node.yaml"),
                                           "-o", str(tmp_path / "out")])
    finally:
        default_cost_model.cache_clear()
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"error: {bad}: kernels.conv.0.image: expected a list of integers > 0, "
                                     "got 0 (named by $SIMHPC_CALIBRATION)")


def test_cli_foreign_calibration_warns(tmp_path: Path, cal_path: Path) -> None:
    trace = next((ROOT / "validation" / "traces" / "captures").glob("mlp_t1.json*"))
    result = CliRunner().invoke(
        main, ["compare", str(trace), "--calibration", str(cal_path), "--json", "-o", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "another machine" in result.stderr
    assert json.loads(result.stdout)["ops_total"] > 0


def test_gemm_backends(tmp_path: Path) -> None:
    """Version 2 keys GEMM points by BLAS; version 1 files (no ``blas``) load as numpy points."""
    data = synthetic()
    old = json.loads(json.dumps(data))
    old["schema_version"] = 1
    cal_old = validate(old, "old.json")
    assert cal_old.gemm_backends() == ["numpy"]
    with pytest.raises(ValueError, match="no GEMM points measured through 'torch'"):
        CalibratedEfficiency(cal_old, blas="torch")
    torch_rows = [dict(row, blas="torch", time_s=row["time_s"] * 1.5) for row in data["kernels"]["gemm"]]
    data["kernels"]["gemm"] = [dict(row, blas="numpy") for row in data["kernels"]["gemm"]] + torch_rows
    cal = validate(data, "cal.json")
    assert cal.gemm_backends() == ["numpy", "torch"]
    cpu, _ = host_specs(cal)
    kernel = Gemm(dtype="fp32", m=256, n=256, k=256)
    numpy_time = CostModel(CalibratedEfficiency(cal, gemm_method="linear")).duration(kernel, cpu, 4)
    torch_time = CostModel(CalibratedEfficiency(cal, gemm_method="linear", blas="torch")).duration(kernel, cpu, 4)
    assert torch_time == pytest.approx(1.5 * numpy_time, rel=1e-6)
    trace = next((ROOT / "validation" / "traces" / "captures").glob("mlp_t1.json*"))
    path = tmp_path / "old.json"
    write_calibration(old, path)
    runner = CliRunner()
    refused = runner.invoke(main, ["compare", str(trace), "--calibration", str(path), "--blas", "torch"])
    assert refused.exit_code == 2 and "no GEMM points measured through torch" in refused.output
    args = ["compare", str(trace), "--calibration", str(path), "--json", "-o", str(tmp_path / "o")]
    assert json.loads(runner.invoke(main, args).stdout)["blas"] == "numpy"  # default: what the file has


def test_detect_host() -> None:
    facts = detect_host()
    assert facts.cores >= 1 and facts.logical_cpus >= facts.cores
    assert set(facts.fingerprint()) == {"cpu_model", "cores", "isa_flags"}
    assert HostFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("cores", 10**30, "host.cores: expected an integer from 1 to 1048576"),
    ("sockets", 0, "host.sockets: expected an integer from 1 to 1048576, got 0"),
    ("logical_cpus", -2, "host.logical_cpus: expected an integer from 1 to 1048576, got -2"),
    ("memory_bytes", -5, "host.memory_bytes: expected a number of bytes >= 0, got -5"),
])
def test_host_facts_out_of_range_name_their_field(field: str, value: int, expected: str) -> None:
    """Not the catalog entry built from them (``cpus.host.cores_per_socket``), which the file lacks."""
    facts = detect_host().to_dict()
    facts[field] = value
    with pytest.raises(HostFactsError, match=re.escape(f"cal.json: {expected}")):
        HostFacts.from_dict(facts, "cal.json: host")


def test_committed_calibration_is_the_catalog_host() -> None:
    cal = load_calibration(COMMITTED)
    catalog = builtin_catalog()
    assert "host" in catalog.cpus and catalog.nodes["host-node"].cpu == catalog.cpus["host"]
    assert host_catalog_entries(COMMITTED)["cpus"]["host"]["clock"] == cal.derived["clock_hz"]
    cpu = catalog.cpus["host"]
    assert cal.gemm_backends() == ["numpy", "torch"]
    for blas in cal.gemm_backends():
        model = CostModel(CalibratedEfficiency(cal, gemm_method="linear", blas=blas))
        for row in [r for r in cal.rows("gemm") if r["blas"] == blas][::25]:
            kernel = Gemm(dtype=row["dtype"], m=row["m"], n=row["n"], k=row["k"], batch=row["batch"],
                          layout=row.get("layout", "nn"), interleaved=row.get("interleaved", ""))
            assert model.duration(kernel, cpu, row["threads"]) == pytest.approx(row["time_s"], rel=0.02)
    assert cal.data["microbench"]["profile"] == "full"
    assert cal.data["microbench"]["wall_time_s"] < 180  # the longest of the merged runs


def test_microbench_timing_summary() -> None:
    from simhpc.costs.benchsuite import load_submodule

    timing = load_submodule("timing")
    result = timing.summarize([3.0, 1.0, 2.0, 10.0, 2.5], 4)
    assert result.median_s == 2.5 and result.min_s == 1.0 and result.calls_per_sample == 4
    assert result.spread_s > 0


def test_microbench_rounds_keep_the_faster_measurement() -> None:
    from simhpc.costs.benchsuite import load_submodule

    runner = load_submodule("runner")
    times = iter([2.0, 5.0, 1.5, 9.0])

    def point(name: str) -> dict:
        return {"name": name, "time_s": next(times)}

    tasks = [runner.Task("gemm", "a", lambda: point("a")), runner.Task("gemm", "b", lambda: point("b")),
             runner.Task("gemm", "a", lambda: point("a"), again=True),
             runner.Task("gemm", "b", lambda: point("b"), again=True)]
    rows = runner.run(tasks)["kernels"]["gemm"]
    assert rows == [{"name": "a", "time_s": 1.5, "rounds": 2}, {"name": "b", "time_s": 5.0, "rounds": 2}]
    full = runner.plan(2, 32 << 20)
    repeated = [t for t in full if t.again]
    # only multi-thread torch GEMMs get a second round, all of them (layouts and 16-bit types too)
    assert all(t.label.startswith("gemm torch ") and " 2t " in t.label for t in repeated)
    assert {t.label for t in repeated} == {t.label for t in full if t.label.startswith("gemm torch ")
                                           and " 2t " in t.label and t.section == "gemm" and not t.again}
    if repeated:  # torch is importable here: the second round comes after every other point
        assert full.index(repeated[0]) > max(i for i, t in enumerate(full) if not t.again and t.section != "probes")
    if load_submodule("latency").two_cpus_available():  # then the cores' round trip once more
        assert full[-1].label == "peer round trip at the end"


def test_microbench_counts_the_points_measured_on_a_shared_core(monkeypatch) -> None:
    """The L1 probe before every first-round point: a reading over SHARED_L1_SLOWDOWN x the fastest
    so far counts its point as measured on a shared core; the readings are summarised in the
    probes, each row keeps the reading taken before it (a faster planned repeat's row has none),
    and where over SHARED_RETAKE_SHARE of the points read shared (here 1 of 4) they are kept as
    measured."""
    from simhpc.costs.benchsuite import load_submodule
    from simhpc.costs.calibration_merge import row_identity

    runner, latency = load_submodule("runner"), load_submodule("latency")
    readings = iter([2e-9, 2.2e-9, 4e-9, 2.1e-9])  # a, b, c (shared), d; no probe before a repeat
    monkeypatch.setattr(latency, "measure_l1_probe", lambda l1_bytes: next(readings))
    tasks = [runner.Task("gemm", name, lambda time_s=time_s: {"time_s": time_s})
             for name, time_s in zip("abcd", (1.0, 2.0, 9.0, 4.0))]
    repeat = runner.Task("gemm", "a", lambda: {"time_s": 0.5}, again=True)
    result = runner.run([*tasks, repeat], l1_bytes=49152)
    rows = result["kernels"]["gemm"]
    assert [row["time_s"] for row in rows] == [0.5, 2.0, 9.0, 4.0]
    assert [row.get("l1_probe_s") for row in rows] == [None, 2.2e-9, 4e-9, 2.1e-9]
    assert row_identity(rows[1]) == row_identity({"time_s": 3.0})  # a measurement, not the point's identity
    probe = result["probes"]["L1 probe"]
    assert probe["shared_points"] == 1 and probe["samples"] == 4 and probe["fastest_s"] == 2e-9
    assert probe["median_s"] == pytest.approx(2.15e-9) and probe["p90_s"] == 2.2e-9
    assert "L1 probe" not in runner.run([runner.Task("gemm", "e", lambda: {"time_s": 1.0})])["probes"]


def test_microbench_measures_points_taken_with_the_cores_far_apart_again(monkeypatch) -> None:
    """The cores' round trip before every multi-thread point (and repeat) is kept in its row; the
    first-round points read over FAR_CORES x the run's fastest are measured again right after the
    first round, before and instead of their planned repeats; the faster measurement is kept."""
    from simhpc.costs.benchsuite import load_submodule

    runner, latency = load_submodule("runner"), load_submodule("latency")
    readings = iter([300e-9, 60e-9, 320e-9, 58e-9, 61e-9, 59e-9])  # a, c, d (first round); a, d, c again
    monkeypatch.setattr(latency, "quick_round_trip", lambda: next(readings))
    times = {"a": iter([9.0, 3.0]), "b": iter([1.0]), "c": iter([2.0, 2.5]), "d": iter([7.0, 4.0])}
    order: list[str] = []

    def point(name: str) -> dict:
        order.append(name)
        return {"time_s": next(times[name])}

    labels = {"a": "gemm 2t a", "b": "gemm 1t b", "c": "gemm 2t c", "d": "gemm 2t d"}
    tasks = [runner.Task("gemm", labels[name], lambda name=name: point(name)) for name in "abcd"]
    tasks += [runner.Task("gemm", labels[name], lambda name=name: point(name), again=True) for name in "cd"]
    tasks.append(runner.Task("probes", "end", lambda: {"round_trip_s": 1.0}))
    result = runner.run(tasks, round_trips=True)
    assert order == ["a", "b", "c", "d", "a", "d", "c"]  # a, d far (over 2 x 60 ns): retaken, d's repeat dropped
    rows = result["kernels"]["gemm"]
    assert [row["time_s"] for row in rows] == [3.0, 1.0, 2.0, 4.0]
    assert [row.get("round_trip_s") for row in rows] == [58e-9, None, 60e-9, 61e-9]
    assert [row.get("rounds") for row in rows] == [2, None, 2, 2]
    before = result["probes"]["round trip before points"]
    assert before["far_points"] == 2 and before["retaken"] == 2 and before["samples"] == 3
    assert before["kept_far"] == 0
    assert before["fastest_s"] == 60e-9
    assert runner.threads_of("gemm torch fp32 2t 1x64x64x16 nt") == 2 and runner.threads_of("hash 4096 B") == 1
    alone = runner.Task("gemm", "2t e", lambda: {"time_s": 1.0})
    assert "round trip before points" not in runner.run([alone])["probes"]


def test_microbench_retake_still_far_waits_behind_a_planned_repeat(monkeypatch) -> None:
    """A retake whose probe still reads the cores far apart is put back behind one planned repeat
    (RETAKE_DEFERRALS times at most), and measured anyway once no planned repeat is left."""
    from simhpc.costs.benchsuite import load_submodule

    runner, latency = load_submodule("runner"), load_submodule("latency")
    # first round a (far), b, c; a's retake far -> b's repeat; far -> c's repeat; near -> a
    readings = iter([300e-9, 60e-9, 62e-9, 310e-9, 61e-9, 320e-9, 63e-9, 58e-9])
    monkeypatch.setattr(latency, "quick_round_trip", lambda: next(readings))
    order: list[str] = []

    def point(name: str) -> dict:
        order.append(name)
        return {"time_s": 1.0 / order.count(name)}

    tasks = [runner.Task("gemm", f"2t {name}", lambda name=name: point(name)) for name in "abc"]
    tasks += [runner.Task("gemm", f"2t {name}", lambda name=name: point(name), again=True) for name in "bc"]
    rows = runner.run(tasks, round_trips=True)["kernels"]["gemm"]
    assert order == ["a", "b", "c", "b", "c", "a"]
    assert rows[0]["round_trip_s"] == 58e-9 and rows[0]["rounds"] == 2
    readings = iter([300e-9, 60e-9, 330e-9])  # no planned repeat to wait behind: measured far
    order.clear()
    result = runner.run(tasks[:2], round_trips=True)
    assert order == ["a", "b", "a"] and result["probes"]["round trip before points"]["kept_far"] == 1


def test_microbench_measures_points_slower_than_the_reference_again(monkeypatch) -> None:
    """After the first round, the points over SLOWER_THAN_REFERENCE x their reference time are
    measured again, the slowest relative to it first, before and instead of their planned repeats;
    the faster measurement is kept, and the probes count them. A point the reference lacks, one
    within the threshold, and one whose first measurement took long are not measured again."""
    from simhpc.costs.benchsuite import load_submodule
    from simhpc.costs.calibration_merge import row_identity

    runner = load_submodule("runner")
    times = {"a": iter([2.0, 0.9]), "b": iter([1.1]), "c": iter([1.5, 1.6]), "d": iter([5.0])}
    order: list[str] = []

    def point(name: str) -> dict:
        order.append(name)
        return {"op": name, "time_s": next(times[name])}

    reference = {row_identity({"op": name}): 1.0 for name in "abc"}
    tasks = [runner.Task("framework", name, lambda name=name: point(name)) for name in "abcd"]
    tasks.append(runner.Task("framework", "c", lambda: point("c"), again=True))
    result = runner.run(tasks, reference=lambda section, row: reference.get(row_identity(row)))
    assert order == ["a", "b", "c", "d", "a", "c"]  # a (2x) before c (1.5x); c's planned repeat dropped
    assert [row["time_s"] for row in result["kernels"]["framework"]] == [0.9, 1.1, 1.5, 5.0]
    assert result["probes"]["slower than reference"] == {
        "threshold": runner.SLOWER_THAN_REFERENCE, "points": 2, "retaken": 2, "kept_slow": 1}

    monkeypatch.setattr(runner, "REFERENCE_RETAKE_MAX_S", -1.0)  # every point took too long to repeat
    times.update(a=iter([2.0]), b=iter([1.1]), c=iter([1.5, 1.4]), d=iter([5.0]))
    order.clear()
    result = runner.run(tasks, reference=lambda section, row: reference.get(row_identity(row)))
    assert order == ["a", "b", "c", "d", "c"]  # only c's planned repeat
    assert result["probes"]["slower than reference"]["points"] == 0
    alone = runner.Task("framework", "e", lambda: {"op": "e", "time_s": 1.0})
    assert "slower than reference" not in runner.run([alone])["probes"]


def test_microbench_retakes_go_by_how_far_over_the_reference_they_read(monkeypatch) -> None:
    """With a reference, every point over SLOWER_THAN_REFERENCE x it is measured again first, the
    slowest relative to it first, whether the cores read far apart before it (a: 1.5x) or not
    (b: 3x); a point read far but within the reference (c) comes last; one read far without a
    reference point (d) comes with c, in measuring order."""
    from simhpc.costs.benchsuite import load_submodule
    from simhpc.costs.calibration_merge import row_identity

    runner, latency = load_submodule("runner"), load_submodule("latency")
    first = {"a": 300e-9, "b": 60e-9, "c": 310e-9, "d": 320e-9, "e": 61e-9}
    readings = iter([first[name] for name in "abcde"])
    monkeypatch.setattr(latency, "quick_round_trip", lambda: next(readings, 60e-9))
    order: list[str] = []
    times = {"a": iter([1.5, 1.4]), "b": iter([3.0, 0.9]), "c": iter([1.0, 0.9]), "d": iter([1.0, 0.9]),
             "e": iter([1.0])}

    def point(name: str) -> dict:
        order.append(name)
        return {"op": name, "time_s": next(times[name])}

    reference = {row_identity({"op": name}): 1.0 for name in "abce"}
    tasks = [runner.Task("framework", f"2t {name}", lambda name=name: point(name)) for name in "abcde"]
    result = runner.run(tasks, round_trips=True, reference=lambda section, row: reference.get(row_identity(row)))
    assert order == ["a", "b", "c", "d", "e", "b", "a", "c", "d"]
    assert result["probes"]["slower than reference"] == {
        "threshold": runner.SLOWER_THAN_REFERENCE, "points": 1, "retaken": 1, "kept_slow": 0}
    assert result["probes"]["round trip before points"]["retaken"] == 3
    assert [row["time_s"] for row in result["kernels"]["framework"]] == [1.4, 0.9, 0.9, 0.9, 1.0]


def test_microbench_reference_of_a_faster_guest_is_scaled_by_the_run_s_median_ratio() -> None:
    """A reference measured on a guest 1.3x faster (two Zen 5 guests alike in all the OS shows):
    the points of a section 1.3x their reference are this machine's speed, not slow spells; only the
    one at 1.8x (1.38x the section's median ratio) is measured again, and the summary gives the scale."""
    from simhpc.costs.benchsuite import load_submodule
    from simhpc.costs.calibration_merge import row_identity

    runner = load_submodule("runner")
    names = [f"p{i}" for i in range(runner.SCALE_MIN_POINTS + 5)]
    first = {name: 1.3 for name in names} | {"p3": 1.8}
    order: list[str] = []

    def point(name: str) -> dict:
        order.append(name)
        return {"op": name, "time_s": first[name] if order.count(name) == 1 else 1.3}

    reference = {row_identity({"op": name}): 1.0 for name in names}
    tasks = [runner.Task("framework", name, lambda name=name: point(name)) for name in names]
    result = runner.run(tasks, reference=lambda section, row: reference.get(row_identity(row)))
    assert order == [*names, "p3"]
    assert result["probes"]["slower than reference"] == {
        "threshold": runner.SLOWER_THAN_REFERENCE, "points": 1, "retaken": 1, "kept_slow": 0,
        "scaled": {"framework": 1.3}}


def test_microbench_past_its_deadline_no_retake_is_probed(monkeypatch) -> None:
    """Once the deadline has passed no repeat fits, so none is probed either: the probes before
    hundreds of far retakes, each deferred up to three times, took calibrate 4-5 s past its
    deadline on the Zen 4 guest. The trailing probe still runs."""
    from simhpc.costs.benchsuite import load_submodule

    runner, latency = load_submodule("runner"), load_submodule("latency")
    probes: list[str] = []

    def probe() -> float:
        probes.append("round trip")
        return 300e-9 if len(probes) % 2 else 60e-9  # every other point far

    monkeypatch.setattr(latency, "quick_round_trip", probe)
    clock = iter(range(0, 10_000))
    monkeypatch.setattr(runner.time, "perf_counter", lambda: float(next(clock)))  # a second per reading
    tasks = [runner.Task("gemm", f"2t {i}", lambda: {"time_s": 1.0}) for i in range(20)]
    tasks += [runner.Task("gemm", f"2t {i}", lambda: {"time_s": 1.0}, again=True) for i in range(20)]
    tasks.append(runner.Task("probes", "end", lambda: {"round_trip_s": 1.0}))
    result = runner.run(tasks, deadline_s=30.0, round_trips=True)
    assert len(probes) == 20  # the first round's; no retake's
    assert result["repeats_skipped"] == 20 and "end" in result["probes"]


def test_microbench_measures_the_few_points_read_on_a_shared_core_again(monkeypatch) -> None:
    """Where at most SHARED_RETAKE_SHARE of the points read shared, they are measured again after
    the first round, with a probe of their own; the faster measurement is kept."""
    from simhpc.costs.benchsuite import load_submodule

    runner, latency = load_submodule("runner"), load_submodule("latency")
    readings = iter([4e-9] + [2e-9] * 8 + [5e-9] + [2.1e-9, 2.05e-9] * 2)  # a and j shared; retakes: check, row
    monkeypatch.setattr(latency, "measure_l1_probe", lambda l1_bytes: next(readings))
    order: list[str] = []

    def point(name: str) -> dict:
        order.append(name)
        return {"time_s": 1.0 / order.count(name)}

    tasks = [runner.Task("framework", f"op 1t {name}", lambda name=name: point(name)) for name in "abcdefghi"]
    chase = runner.Task("latency", "pointer chase j", lambda: {"latency_s": 2e-9 / (1 + order.count("j"))})
    result = runner.run([*tasks, chase], l1_bytes=32768)
    assert order == [*"abcdefghi", "a"]
    row = result["kernels"]["framework"][0]
    assert row["time_s"] == 0.5 and row["rounds"] == 2 and row["l1_probe_s"] == 2.1e-9
    assert result["kernels"]["latency"][0]["latency_s"] == 2e-9  # a pointer chase's row: latency_s (never faster)
    assert result["probes"]["L1 probe"]["retaken"] == 2 and result["probes"]["L1 probe"]["shared_points"] == 2


@pytest.mark.host_timing
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_microbench_l1_probe_reads_an_l1_hit() -> None:
    """Over three quarters of a 32 KiB L1: a few nanoseconds a load, not DRAM's hundred, on the
    calling core and on every core (a thread bound to each)."""
    from simhpc.costs.benchsuite import load_submodule

    latency = load_submodule("latency")
    assert 2e-10 < latency.measure_l1_probe(32768) < 3e-8
    assert 2e-10 < latency.measure_l1_probes(32768) < 3e-8


def test_microbench_multi_thread_points_take_every_cores_l1_probe(monkeypatch) -> None:
    """Before a multi-thread point the L1 watch reads the slowest core's probe (its threads wait for
    it), before a single-thread point the calling core's."""
    from simhpc.costs.benchsuite import load_submodule

    runner, latency = load_submodule("runner"), load_submodule("latency")
    monkeypatch.setattr(latency, "measure_l1_probe", lambda l1_bytes: 2e-9)
    monkeypatch.setattr(latency, "measure_l1_probes", lambda l1_bytes: 5e-9)
    tasks = [runner.Task("gemm", label, lambda: {"time_s": 1.0}) for label in ("x 1t a", "x 2t b")]
    rows = runner.run(tasks, l1_bytes=32768)["kernels"]["gemm"]
    assert [row["l1_probe_s"] for row in rows] == [2e-9, 5e-9]


def test_microbench_larger_16bit_products_only_where_the_cpu_computes_them() -> None:
    """A 16-bit type the CPU multiplies natively also gets products above the coarse grid's 2^24
    multiply-adds (up to 2^26), in every layout; a converted (fallback) type does not."""
    from simhpc.costs.benchsuite import load_submodule

    gemm, runner = load_submodule("gemm"), load_submodule("runner")
    fallback, native = gemm.half_shapes(), gemm.half_shapes(native=True)
    assert max(m * n * k for m, n, k, _ in fallback) == gemm.HALF_MAX_MNK
    larger = [shape for shape in native if shape not in fallback]
    assert larger and all(gemm.HALF_MAX_MNK < m * n * k <= gemm.NATIVE_HALF_MAX_MNK for m, n, k, _ in larger)
    assert {layout for *_, layout in larger} == set(gemm.HALF_LAYOUTS) and set(fallback) < set(native)
    if gemm.torch_available():
        def labels(native_half: tuple[str, ...], dtype: str) -> int:
            tasks = runner.plan(2, 32 << 20, native_half=native_half)
            return sum(t.label.startswith(f"gemm torch {dtype} ") and not t.again for t in tasks)
        assert labels(("bf16",), "bf16") == labels((), "bf16") + 2 * len(larger)  # 1 and 2 threads
        assert labels(("bf16",), "fp16") == labels((), "fp16")


@pytest.mark.host_timing
def test_microbench_first_touch_costs_a_page_fault_per_page() -> None:
    """A write into freshly mapped memory takes longer than into touched memory, by a per-page
    cost of the order of a page fault (a microsecond, not a nanosecond or a millisecond)."""
    from simhpc.costs.benchsuite import load_submodule

    pages, timing, runner = (load_submodule(name) for name in ("pages", "timing", "runner"))
    row = pages.measure_first_touch(1, timing.QUICK)
    assert row["pages"] * row["page_bytes"] == row["bytes"] >= 32 << 20
    assert 1e-8 < row["time_s"] / row["pages"] < 1e-4
    small = pages.measure_first_touch(1, timing.QUICK, 512 << 10)
    assert small["bytes"] == 512 << 10 and small["pages"] == (512 << 10) // small["page_bytes"]
    assert 1e-8 < small["time_s"] / small["pages"] < 1e-4
    labels = [t.label for t in runner.plan(2, 32 << 20, quick=True) if t.section == "first_touch"]
    assert labels == [f"first touch {t}t {size} B" for t in (1, 2) for size in (512 << 10, 2 << 20, 8 << 20, 64 << 20)]


@pytest.mark.host_timing
def test_microbench_unmapping_written_memory_costs_a_fraction_of_a_fault_per_page() -> None:
    """Unmapping a buffer the cores wrote takes time per page (the kernel frees each one): of the
    order of a tenth of a microsecond, on each thread count the suite measures."""
    from simhpc.costs.benchsuite import load_submodule

    pages, timing, runner = (load_submodule(name) for name in ("pages", "timing", "runner"))
    row = pages.measure_unmap(1, timing.QUICK, 8 << 20)
    assert row["pages"] * row["page_bytes"] == row["bytes"] == 8 << 20
    assert 1e-9 < row["time_s"] / row["pages"] < 1e-5
    labels = [t.label for t in runner.plan(2, 32 << 20, quick=True) if t.section == "unmap"]
    assert labels == [f"unmap {t}t {64 << 20} B" for t in (1, 2)]


def test_a_page_fault_costs_what_was_measured_for_buffers_of_its_size(tmp_path: Path) -> None:
    """First-touch points of several buffer sizes: a write into fresh memory of a measured size
    pays that size's cost a page, one between two sizes a cost interpolated in the size's
    logarithm, one past the measured sizes the nearest's; a calibration of one size (suites before
    36) charges every size alike."""
    data = synthetic(threads=(1, 2))
    data["kernels"]["first_touch"] = [
        {"threads": t, "bytes": size, "pages": size // 4096, "page_bytes": 4096, "time_s": size // 4096 * per}
        for t, costs in ((1, {1 << 20: 1.2e-6, 64 << 20: 1.2e-6}), (2, {1 << 20: 0.8e-6, 64 << 20: 0.5e-6}))
        for size, per in costs.items()
    ]
    efficiency = CalibratedEfficiency(tmp_calibration(tmp_path / "sizes.json", data))
    assert efficiency.first_touch_s(1 << 20, 2) == pytest.approx(256 * 0.8e-6)
    assert efficiency.first_touch_s(8 << 20, 2) == pytest.approx(2048 * 0.65e-6)  # halfway in log size
    assert efficiency.first_touch_s(128 << 20, 2) == pytest.approx(32768 * 0.5e-6)
    assert efficiency.first_touch_s(4096, 2) == pytest.approx(0.8e-6)
    assert efficiency.first_touch_s(8 << 20, 1) == pytest.approx(2048 * 1.2e-6)
    assert efficiency.first_touch_s(0, 2) == 0.0
    for row in data["kernels"]["first_touch"]:  # the buffer's size is its pages', fields every row has
        row.pop("bytes")
    unsized = CalibratedEfficiency(tmp_calibration(tmp_path / "unsized.json", data))
    assert unsized.first_touch_s(8 << 20, 2) == efficiency.first_touch_s(8 << 20, 2)
    data["kernels"]["first_touch"] = [row for row in data["kernels"]["first_touch"] if row["pages"] == 16384]
    single = CalibratedEfficiency(tmp_calibration(tmp_path / "one.json", data))
    assert single.first_touch_s(1 << 20, 2) == pytest.approx(256 * 0.5e-6)


def test_microbench_first_touch_maps_private_memory_as_malloc_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's ``mmap`` maps shared memory unless told; its faults go through the shared-memory file
    system (2.2 us a page on the Zen 4 guest against 1.4 us for the private mapping malloc makes)."""
    import mmap

    from simhpc.costs.benchsuite import load_submodule

    pages, timing = load_submodule("pages"), load_submodule("timing")
    flags: list[int] = []
    real = mmap.mmap

    def recording(*args: object, **kwargs: object) -> mmap.mmap:
        flags.append(int(kwargs.get("flags", mmap.MAP_SHARED)))
        return real(*args, **kwargs)

    monkeypatch.setattr(pages.mmap, "mmap", recording)
    pages.measure_first_touch(1, timing.QUICK)
    assert flags and all(f & mmap.MAP_PRIVATE and not f & mmap.MAP_SHARED for f in flags)


@pytest.mark.host_timing
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_microbench_dispatch_costs_are_microseconds() -> None:
    """The profiled self time of a view op and the gaps between two calls from Python and from
    the autograd engine: microseconds (a nanosecond would be a clock error, a millisecond a broken
    loop; the cold engine gap took 112 us on the 2.2 GHz Xeon guest); the engine's gap, which holds
    its node's own bookkeeping, the longer."""
    from simhpc.costs.benchsuite import load_submodule

    dispatch = load_submodule("dispatch")
    rows = {what: dispatch.measure_dispatch(what) for what in dispatch.WHAT}
    for what, row in rows.items():
        assert row["what"] == what and row["samples"] > 1000 and 5e-8 < row["time_s"] < 1e-3
    assert rows["engine_gap"]["time_s"] > rows["no_kernel_op"]["time_s"]
    for what in ("no_kernel_op", "call_gap", "engine_gap"):  # after a 16 MiB fill: out of the caches
        assert rows[f"{what}_cold"]["time_s"] > rows[what]["time_s"]


@pytest.mark.host_timing
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_microbench_training_step_transitions_grow_with_what_the_step_moves() -> None:
    """Each transition of the profiled training loop is measured once a profiled step, at every
    width; a wider model's step touches more bytes, and its transitions, whose code the step's
    traffic evicts, take longer (30-80 us at width 64 against 120-430 us at 2048 on the Xeon guest);
    a deeper one's too (270-1160 us at 128 layers)."""
    from simhpc.costs.benchsuite import load_submodule

    dispatch = load_submodule("dispatch")
    narrow, wide = min(dispatch.TRAINING_WIDTHS), max(dispatch.TRAINING_WIDTHS)
    for what in dispatch.TRANSITIONS:
        rows = [dispatch.measure_transition(what, width) for width in (narrow, wide)]
        assert all(row["samples"] == dispatch.TRAINING_STEPS and 1e-6 < row["time_s"] < 10e-3 for row in rows)
        assert rows[1]["step_bytes"] > 50 * rows[0]["step_bytes"]
        assert rows[1]["time_s"] > rows[0]["time_s"], what
        deep = dispatch.measure_transition(what, narrow, max(dispatch.TRAINING_DEPTHS))
        assert deep["parameters"] == 2 * max(dispatch.TRAINING_DEPTHS) and deep["graph_nodes"] > deep["parameters"]
        assert deep["time_s"] > 2 * rows[0]["time_s"], what  # zero_grad, the engine and the optimizer visit more


@pytest.mark.host_timing
def test_the_first_product_after_a_training_step_pays_more_than_the_probe_ops_mean() -> None:
    """``evicted_call`` records the probe's product's own extra after the network's step
    (``product_extra_s``): the BLAS's code is fetched again besides the op's own, more than the
    probe's ops take on average even with the fill (29-40 against 9-15 us on the EPYC Zen 5 guest)."""
    from simhpc.costs.benchsuite import load_submodule

    pytest.importorskip("torch")
    dispatch = load_submodule("dispatch")
    row = dispatch.measure_evicted_call()
    assert dispatch.PROBE_PRODUCT in row["probe_ops"]
    assert row["product_extra_s"] > row["time_s"] > 0


@pytest.mark.host_timing
def test_microbench_repeats_give_way_to_the_deadline() -> None:
    """A repeat its first round says would end past the deadline is skipped; the point stays."""
    from simhpc.costs.benchsuite import load_submodule

    runner = load_submodule("runner")

    def slow() -> dict:
        time.sleep(0.05)
        return {"time_s": 1.0}

    tasks = [runner.Task("gemm", "a", slow), runner.Task("gemm", "a", slow, again=True)]
    result = runner.run(tasks, deadline_s=0.08)
    assert result["repeats_skipped"] == 1 and result["kernels"]["gemm"] == [{"time_s": 1.0}]
    assert runner.run(tasks, deadline_s=10.0)["kernels"]["gemm"] == [{"time_s": 1.0, "rounds": 2}]


@pytest.mark.host_timing
def test_microbench_first_round_samples_less_when_it_falls_behind() -> None:
    """Points get their whole budget while the first round, projected at its pace, ends by 85 % of
    the deadline; behind that, a share in proportion, never below a tenth: less sampling time,
    shorter samples, fewer repeats (at least 3); and the whole budget again once the run ends."""
    from simhpc.costs.benchsuite import load_submodule

    runner, timing = load_submodule("runner"), load_submodule("timing")
    assert runner._pace(elapsed=50.0, done=500, total=1000, deadline_s=170.0) == 1.0  # 100 s projected
    assert runner._pace(elapsed=100.0, done=500, total=1000, deadline_s=170.0) == pytest.approx(44.5 / 100)
    assert runner._pace(elapsed=150.0, done=500, total=1000, deadline_s=170.0) == runner.PACE_FLOOR
    seen = []

    def point() -> dict:
        seen.append(timing.paced(timing.FULL))
        time.sleep(0.01)
        return {"time_s": 1.0}

    tasks = [runner.Task("gemm", f"p{i}", point) for i in range(20)]
    runner.run(tasks, deadline_s=0.05)  # 0.2 s of points against 0.045 s: behind from the start
    assert seen[0] == timing.FULL
    slowest = seen[-1]
    assert slowest.min_time_s == pytest.approx(runner.PACE_FLOOR * timing.FULL.min_time_s)
    assert slowest.repeats == 3 and slowest.long_repeats == 2
    assert slowest.sample_time_s == pytest.approx(timing.FULL.sample_time_s / 4)
    assert timing.paced(timing.FULL) == timing.FULL


@pytest.mark.host_timing
@pytest.mark.skipif(
    shutil.which("gcc") is None or importlib.util.find_spec("threadpoolctl") is None,
    reason="needs gcc and threadpoolctl",
)
def test_calibrate_quick_writes_a_valid_file(tmp_path: Path) -> None:
    output = tmp_path / "quick.json"
    result = CliRunner().invoke(main, ["calibrate", "--quick", "-o", str(output)])
    assert result.exit_code == 0, result.output
    cal = load_calibration(output)
    assert cal.data["microbench"]["profile"] == "quick"
    assert {"gemm", "elementwise", "reduction", "bandwidth", "latency", "stencil", "hash_probe"} <= set(
        cal.data["kernels"]
    )
    assert cal.host.fingerprint() == detect_host().fingerprint()
    assert all(row["time_s"] > 0 and row["spread_s"] >= 0 for row in cal.rows("gemm"))
    # its batched transposes time a channels-last copy by its block, unlike the one-block points
    model = CalibratedEfficiency(cal)
    block, whole = Copy(nbytes=4 << 20, run=1, rows=64, length=256), Copy(nbytes=4 << 20, run=1)
    data = {**cal.data, "kernels": {k: v for k, v in cal.data["kernels"].items() if k != "transpose"}}
    without = CalibratedEfficiency(tmp_calibration(tmp_path / "without.json", data))
    assert model.host_time(block, 1) != model.host_time(whole, 1) == without.host_time(block, 1)
    if detect_host().cores > 1 and len(os.sched_getaffinity(0)) > 1:  # the cores' round trip, start and end
        trips = [cal.data["probes"][name] for name in ("peer round trip", "peer round trip at the end")]
        # the fastest trip is the hardware's; the slowest may include a preemption on a loaded host
        assert all(1e-9 < t["min_s"] < 1e-4 and t["min_s"] <= t["round_trip_s"] <= t["max_s"] for t in trips)
        assert "cores' round trip" in result.output
    probe = cal.data["probes"]["L1 probe"]
    assert probe["fastest_s"] <= probe["median_s"] <= probe["p90_s"]
    assert "L1 probe before each point" in result.output


def test_calibrate_warns_when_a_fifth_of_the_points_ran_on_a_shared_core(capsys: pytest.CaptureFixture[str]) -> None:
    from simhpc.cli.calibrate_cmd import _echo_l1_probe

    def probe(shared: int) -> dict:
        return {"fastest_s": 2e-9, "median_s": 2.2e-9, "p90_s": 4e-9, "samples": 100, "shared_points": shared,
                "slowdown_threshold": 1.3}

    _echo_l1_probe({"L1 probe": probe(20)})
    captured = capsys.readouterr()
    assert "20 of 100 points measured on a shared core (over 1.3x the fastest)" in captured.out
    assert "warning" not in captured.err
    _echo_l1_probe({"L1 probe": {**probe(21), "retaken": 0}})
    assert "shared this core's L1 for 21% of the points" in capsys.readouterr().err
    _echo_l1_probe({"L1 probe": {**probe(5), "retaken": 4}})
    assert "5 of 100 points measured on a shared core (over 1.3x the fastest), 4 of them measured again" in (
        capsys.readouterr().out)
    _echo_l1_probe({})  # a file without the probe: nothing printed
    assert capsys.readouterr().out == ""


def test_calibrate_warns_when_many_points_stay_slower_than_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    from simhpc.cli.calibrate_cmd import _echo_reference

    def probe(kept: int) -> dict:
        return {"slower than reference": {"threshold": 1.15, "points": 300, "retaken": 120, "kept_slow": kept,
                                          "reference": "epyc-zen4.json"}}

    _echo_reference(probe(50), 1000)
    captured = capsys.readouterr()
    assert "300 points over 1.15x their time in epyc-zen4.json: 120 measured again, 50 kept over it" in captured.out
    assert "warning" not in captured.err
    _echo_reference(probe(51), 1000)
    assert "warning: 51 of 1000 points are kept over 1.15x their time in epyc-zen4.json" in capsys.readouterr().err
    _echo_reference({}, 1000)  # no reference: nothing printed
    assert capsys.readouterr().out == ""
    scaled = probe(3)
    scaled["slower than reference"]["scaled"] = {"framework": 1.3, "gemm": 1.25}
    _echo_reference(scaled, 1000)
    assert ("in epyc-zen4.json (its times scaled by this run's median ratio to them: framework 1.3, gemm 1.25): "
            in capsys.readouterr().out)


def test_calibrate_warns_when_the_cores_round_trip_moved(capsys: pytest.CaptureFixture[str]) -> None:
    from simhpc.cli.calibrate_cmd import _echo_round_trips

    def probe(median_s: float) -> dict:
        return {"round_trip_s": median_s, "min_s": median_s / 2, "max_s": median_s * 3}

    _echo_round_trips({"peer round trip": probe(70e-9), "peer round trip at the end": probe(80e-9)})
    assert "warning" not in capsys.readouterr().err
    _echo_round_trips({"peer round trip": probe(70e-9), "peer round trip at the end": probe(330e-9)})
    captured = capsys.readouterr()
    assert "start 70 ns (35 ns-210 ns), end 330 ns" in captured.out and "moved during the run" in captured.err
    _echo_round_trips({})  # one core: no probe, nothing printed
    assert capsys.readouterr().out == ""
    moved = {"peer round trip": probe(70e-9), "peer round trip at the end": probe(330e-9)}

    def before(kept_far: int) -> dict:
        return {"fastest_s": 50e-9, "median_s": 60e-9, "samples": 100, "far_points": 30, "retaken": 25,
                "kept_far": kept_far, "far_threshold": 2.0}

    _echo_round_trips({**moved, "round trip before points": before(10)})  # the readings before points decide
    captured = capsys.readouterr()
    assert "30 of 100 points measured far apart" in captured.out and "10 kept from" in captured.out
    assert "warning" not in captured.err
    _echo_round_trips({**moved, "round trip before points": before(11)})
    assert "11 of 100 multi-thread points are kept from a measurement" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_kernel_library_leaves_floating_point_state_alone() -> None:
    """Built with -ffast-math but not linked with it: no process-wide flush-to-zero."""
    import numpy as np

    from simhpc.costs.benchsuite import load_submodule

    load_submodule("native").library().clock_probe(1000, 2)
    assert (np.array([1e-310]) * np.array([1.0]))[0] > 0


def test_calibrate_bad_output_folder(tmp_path: Path) -> None:
    """Every output path the file could not be written to is refused before any measuring."""
    (tmp_path / "a_file").write_text("")
    for output, expected in ((tmp_path / "no" / "such" / "c.json", "does not exist"),
                             (tmp_path, "is a folder; give the file to write"),
                             (tmp_path / "a_file" / "c.json", f"{tmp_path / 'a_file'} is not a folder")):
        result = CliRunner().invoke(main, ["calibrate", "--quick", "-o", str(output)])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: {output}: ") and expected in result.stderr


def test_transposed_products_use_the_points_of_their_layout(tmp_path: Path) -> None:
    """A calibration with ``nt`` points times narrow ``nt`` products from them; wide ones (and
    layouts it did not measure) from the ``nn`` points."""
    data = synthetic()
    narrow = [
        dict(row, layout="nt", time_s=row["time_s"] * 3.0)
        for row in data["kernels"]["gemm"]
        if row["dtype"] == "fp32" and min(row["m"], row["n"], row["k"]) < 64 and row["batch"] == 1
    ]
    data["kernels"]["gemm"] += narrow
    cal = tmp_calibration(tmp_path / "layouts.json", data)
    efficiency = CalibratedEfficiency(cal, gemm_method="linear")
    for m, n, k in ((1024, 16, 256), (16, 1024, 1024)):
        nn, nt, tn = (Gemm(dtype="fp32", m=m, n=n, k=k, layout=layout) for layout in ("nn", "nt", "tn"))
        assert efficiency.gemm_fraction(nt, 4) == pytest.approx(efficiency.gemm_fraction(nn, 4) / 3.0, rel=1e-6)
        assert efficiency.gemm_fraction(tn, 4) == efficiency.gemm_fraction(nn, 4)
    wide = Gemm(dtype="fp32", m=256, n=1024, k=64)
    assert efficiency.gemm_fraction(dataclasses.replace(wide, layout="nt"), 4) == pytest.approx(
        efficiency.gemm_fraction(wide, 4), rel=1e-6
    )
    data["kernels"]["gemm"][0]["layout"] = "tx"
    with pytest.raises(CalibrationError, match=r"kernels\.gemm\.0\.layout"):
        validate(data, "bad.json")


def test_matrix_vector_products_use_their_own_points(tmp_path: Path) -> None:
    """A product with m = 1 or n = 1 is timed from the matrix-vector points of its side (and layout,
    else another layout's), never from the grid's narrow products; without such points, batched
    or as a convolution it is timed as before."""
    data = synthetic()
    before = CalibratedEfficiency(tmp_calibration(tmp_path / "grid.json", data), gemm_method="linear")
    for layout in ("nn", "nt"):
        for rows in (16, 64, 256, 1024):
            for k in (16, 64, 256, 1024):
                # streaming the matrix at 50 GB/s: no function of the grid's points
                data["kernels"]["gemm"] += [
                    {"dtype": "fp32", "threads": t, "batch": 1, "m": m, "n": n, "k": k, "layout": layout,
                     "time_s": 4.0 * rows * k / 50e9 * (2.0 if layout == "nt" else 1.0), "spread_s": 0.0}
                    for t in (1, 4) for m, n in ((1, rows), (rows, 1))]
    efficiency = CalibratedEfficiency(tmp_calibration(tmp_path / "vectors.json", data), gemm_method="linear")
    for m, n in ((1, 256), (256, 1)):
        vector = Gemm(dtype="fp32", m=m, n=n, k=64)
        assert efficiency.host_time(vector, 4) == pytest.approx(4.0 * 256 * 64 / 50e9, rel=1e-6)
        assert efficiency.host_time(dataclasses.replace(vector, layout="nt"), 4) == pytest.approx(
            2.0 * 4.0 * 256 * 64 / 50e9, rel=1e-6)
        assert efficiency.host_time(dataclasses.replace(vector, layout="tn"), 4) == efficiency.host_time(vector, 4)
        assert efficiency.host_time(vector, 4) != before.host_time(vector, 4)
        for other in (dataclasses.replace(vector, batch=8), dataclasses.replace(vector, conv="forward")):
            assert efficiency.host_time(other, 4) == before.host_time(other, 4)
    narrow = Gemm(dtype="fp32", m=256, n=16, k=64)
    assert efficiency.host_time(narrow, 4) == before.host_time(narrow, 4)


def test_committed_calibration_times_matrix_vector_products_as_measured() -> None:
    """On the committed Zen 4 guest's calibration a matrix-vector product takes a fraction of a
    product four columns wide (MKL's gemv streams the matrix once), at about the rate of its
    measured neighbours, and the points of a side give its products between them."""
    cal = load_calibration(ROOT / "validation" / "calibration" / "epyc-zen4.json")
    efficiency = CalibratedEfficiency(cal, blas="torch")
    points = {(r["m"], r["n"], r["k"], r.get("layout", "nn"), r["threads"]): r["time_s"]
              for r in cal.rows("gemm") if r.get("blas") == "torch" and r["batch"] == 1}
    assert points[(1024, 1, 1024, "nn", 1)] < points[(1024, 4, 1024, "nn", 1)] / 5
    for threads in (1, 2):
        for m, n, k in ((1, 1024, 1024), (1024, 1, 1024), (1, 128, 4096), (4096, 1, 128)):
            measured = points[(m, n, k, "nt", threads)]
            assert efficiency.host_time(Gemm(dtype="fp32", m=m, n=n, k=k, layout="nt"), threads) == pytest.approx(
                measured, rel=0.15)
        between = efficiency.host_time(Gemm(dtype="fp32", m=1, n=512, k=512, layout="nt"), threads)
        assert points[(1, 128, 1024, "nt", threads)] < between < points[(1, 1024, 1024, "nt", threads)]


def test_outer_products_use_their_own_points(tmp_path: Path) -> None:
    """A product with k = 1 (an outer product: torch's rank-1 update writes its result once) is timed
    from the outer-product points of its layout, else another layout's, never from the grid's
    narrowest products; without such points (an older calibration) it is timed as before, and a
    product with m = 1 stays a matrix-vector one."""
    assert vector_side(128, 512, 1, 1) == "k" and vector_side(1, 512, 1, 1) == "m"
    assert vector_side(128, 512, 4, 1) == vector_side(128, 512, 1, 8) == ""
    data = synthetic()
    before = CalibratedEfficiency(tmp_calibration(tmp_path / "grid.json", data), gemm_method="linear")
    # writing the result at 40 GB/s: no function of the grid's points
    data["kernels"]["gemm"] += [
        {"dtype": "fp32", "threads": t, "batch": 1, "m": m, "n": n, "k": 1, "layout": layout,
         "time_s": 4.0 * m * n / 40e9 * (2.0 if layout == "nt" else 1.0), "spread_s": 0.0}
        for t in (1, 4) for layout in ("nn", "nt") for m in (16, 128, 1024) for n in (16, 128, 1024)]
    efficiency = CalibratedEfficiency(tmp_calibration(tmp_path / "outer.json", data), gemm_method="linear")
    outer = Gemm(dtype="fp32", m=128, n=512, k=1)
    assert efficiency.host_time(outer, 4) == pytest.approx(4.0 * 128 * 512 / 40e9, rel=1e-6)
    assert efficiency.host_time(dataclasses.replace(outer, layout="nt"), 1) == pytest.approx(
        2.0 * 4.0 * 128 * 512 / 40e9, rel=1e-6)
    assert efficiency.host_time(dataclasses.replace(outer, layout="tn"), 4) == efficiency.host_time(outer, 4)
    assert efficiency.host_time(outer, 4) != before.host_time(outer, 4)
    for other in (dataclasses.replace(outer, k=4), dataclasses.replace(outer, batch=8)):
        assert efficiency.host_time(other, 4) == before.host_time(other, 4)


def test_microbench_outer_product_shapes() -> None:
    """k = 1, the result at most ``VECTOR_MAX_ELEMENTS``, no side of 1 (the matrix-vector points'),
    in the two layouts of a linear layer's outer products; one point in quick mode."""
    from simhpc.costs.benchsuite import load_submodule

    gemm = load_submodule("gemm")
    shapes = gemm.outer_shapes()
    assert len(shapes) == len(set(shapes)) == 2 * 16
    assert all(k == 1 and min(m, n) > 1 and m * n <= gemm.VECTOR_MAX_ELEMENTS for m, n, k, _ in shapes)
    assert {layout for *_, layout in shapes} == set(gemm.OUTER_LAYOUTS) == {"nn", "nt"}
    assert len(gemm.outer_shapes(quick=True)) == 1


def test_microbench_classifier_head_shapes() -> None:
    """A linear layer to ``HEAD_CLASSES`` classes in its three products (forward ``nt``, input
    gradient ``nn``, weight gradient ``tn``) over every batch and hidden width of ``HEAD_SIDES``,
    but those the layout points measure, at most ``LAYOUT_MAX_MNK`` multiply-adds."""
    from simhpc.costs.benchsuite import load_submodule

    gemm = load_submodule("gemm")
    shapes = gemm.head_shapes()
    assert len(shapes) == len(set(shapes)) and not set(shapes) & set(gemm.layout_shapes())
    classes = gemm.HEAD_CLASSES
    by_layout = {layout: [(m, n, k) for m, n, k, lay in shapes if lay == layout] for layout in ("nt", "nn", "tn")}
    assert len(by_layout["nt"]) == len(by_layout["nn"]) == len(by_layout["tn"]) == len(shapes) // 3
    assert all(n == classes for _, n, _ in by_layout["nt"]) and all(k == classes for *_, k in by_layout["nn"])
    assert all(m == classes for m, *_ in by_layout["tn"])
    assert (128, classes, 1024) in by_layout["nt"] and (64, classes, 512) not in by_layout["nt"]
    assert all(m * n * k <= gemm.LAYOUT_MAX_MNK for m, n, k, _ in shapes)
    assert len(gemm.head_shapes(quick=True)) == 1


def test_microbench_matrix_vector_shapes() -> None:
    """Both sides, three layouts, the matrix at most ``VECTOR_MAX_ELEMENTS``; one point in quick mode."""
    from simhpc.costs.benchsuite import load_submodule

    gemm = load_submodule("gemm")
    shapes = gemm.vector_shapes()
    assert len(shapes) == len(set(shapes)) == 2 * 3 * 16
    assert all(min(m, n) == 1 and max(m, n) * k <= gemm.VECTOR_MAX_ELEMENTS for m, n, k, _ in shapes)
    assert {layout for *_, layout in shapes} == {"nn", "nt", "tn"}
    assert {(m == 1, n == 1) for m, n, _, _ in shapes} == {(True, False), (False, True)}
    assert len(gemm.vector_shapes(quick=True)) == 1


def test_unseen_matrix_vector_products_are_traced_as_vectors() -> None:
    """``unseen_shapes.py vectors`` hands the cost model what a trace would: every product has a
    vector side, its layout read from the strides (a vector is never a transposed operand)."""
    pytest.importorskip("torch")
    script = ROOT / "validation" / "calibration" / "unseen_shapes.py"
    spec = importlib.util.spec_from_file_location("unseen_shapes", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    products = list(module._vectors())
    assert len(products) == 2 * len(module.VECTORS)
    for label, call, traced, _ in products:
        assert min(traced.m, traced.n) == 1 and traced.batch == 1, label
        assert traced.layout == ("nt" if label.endswith("fwd nt") else "nn"), label
        assert tuple(call().shape) == (traced.m, traced.n), label


def test_interleaved_products_use_their_own_points_else_their_layouts(tmp_path: Path) -> None:
    """Batched products with interleaved operands are timed from points measured so; an
    interleaving the calibration did not measure falls back to the points of the layout."""
    data = synthetic()
    batched = [dict(row, layout="nt", interleaved="ab", time_s=row["time_s"] * 1.25)
               for row in data["kernels"]["gemm"] if row["dtype"] == "fp32"]
    data["kernels"]["gemm"] += batched
    efficiency = CalibratedEfficiency(tmp_calibration(tmp_path / "interleaved.json", data), gemm_method="linear")
    plain = Gemm(dtype="fp32", m=256, n=256, k=64, batch=1, layout="nt")
    both = dataclasses.replace(plain, interleaved="ab")
    assert efficiency.gemm_fraction(both, 4) == pytest.approx(efficiency.gemm_fraction(plain, 4) / 1.25, rel=1e-6)
    unmeasured = dataclasses.replace(plain, interleaved="b")
    assert efficiency.gemm_fraction(unmeasured, 4) == efficiency.gemm_fraction(plain, 4)
    data["kernels"]["gemm"][-1]["interleaved"] = "c"
    with pytest.raises(CalibrationError, match=r"kernels\.gemm\.\d+\.interleaved"):
        validate(data, "bad.json")


def test_microbench_interleaved_operands_have_attention_strides() -> None:
    """The microbenchmark's interleaved operands are the views a multi-head attention multiplies."""
    pytest.importorskip("torch")
    import numpy as np

    from simhpc.costs.benchsuite import load_submodule

    gemm = load_submodule("gemm")
    a, b = np.ones((64, 128, 64), np.float32), np.ones((64, 64, 128), np.float32)
    call = gemm._torch_call(a, b, np.empty((64, 128, 128), np.float32), "nt", None, "ab")
    operands = call.__closure__  # the lambda's (ta, tb, tc)
    strides = sorted(cell.cell_contents.stride() for cell in operands if hasattr(cell.cell_contents, "stride"))
    assert (64, 1, 4096) in strides and (64, 4096, 1) in strides
    assert float(call()[0, 0, 0]) == 64.0


def test_merge_keeps_each_points_fastest_measurement(tmp_path: Path) -> None:
    fast, slow = synthetic(), synthetic()
    for row in slow["kernels"]["gemm"][::2] + slow["kernels"]["bandwidth"]:
        row["time_s"] *= 1.3
    for row in fast["kernels"]["gemm"][1::2]:
        row["time_s"] *= 1.5
    slow["kernels"]["gemm"].append(dict(slow["kernels"]["gemm"][0], m=8, time_s=1e-6))  # only in one run
    slow["probes"]["clock"]["clock_hz"] = CLOCK * 0.9
    runs = [tmp_calibration(tmp_path / f"{name}.json", data) for name, data in (("fast", fast), ("slow", slow))]
    merged = merge_calibrations(runs, created="2026-01-02T00:00:00Z")
    reference = synthetic()["kernels"]
    gemm = merged["kernels"]["gemm"]
    assert len(gemm) == len(reference["gemm"]) + 1
    assert [row["time_s"] for row in gemm[:-1]] == [row["time_s"] for row in reference["gemm"]]
    assert gemm[-1]["m"] == 8
    assert merged["kernels"]["bandwidth"] == reference["bandwidth"]
    assert merged["derived"] == synthetic()["derived"]  # recomputed from the fastest points and probes
    validate(merged, "merged.json")
    foreign = synthetic()
    foreign["host"]["cores"] = 64
    other = tmp_calibration(tmp_path / "foreign.json", foreign)
    with pytest.raises(CalibrationError, match=r"foreign\.json: measured on another machine"):
        merge_calibrations([runs[0], other])


def test_cli_merge(tmp_path: Path, cal_path: Path) -> None:
    out = tmp_path / "merged.json"
    result = CliRunner().invoke(main, ["calibrate", "--merge", str(cal_path), "--merge", str(cal_path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_calibration(out).data["kernels"] == load_calibration(cal_path).data["kernels"]
    (tmp_path / "broken.json").write_text('{"schema": "simhpc-calibration"')
    broken = CliRunner().invoke(main, ["calibrate", "--merge", str(tmp_path / "broken.json"), "-o", str(out)])
    assert broken.exit_code == 2 and "broken.json" in broken.output and "Traceback" not in broken.output
    both = CliRunner().invoke(main, ["calibrate", "--merge", str(cal_path), "--quick", "-o", str(out)])
    assert both.exit_code == 2 and "--merge measures nothing" in both.stderr


def test_calibrate_reference_is_used_only_for_this_kind_of_machine(tmp_path: Path, cal_path: Path) -> None:
    """A named reference of this kind of machine gives each row its time; one of another machine is
    refused with a warning, and --reference with --no-reference is a one-line error."""
    from rich.console import Console

    from simhpc.cli.calibrate_cmd import _reference
    from simhpc.costs.calibration_merge import reference_seconds

    calibration = load_calibration(cal_path)
    warnings = Console(file=io.StringIO(), width=200)
    found = _reference(cal_path, calibration.host, warnings)
    assert found is not None
    lookup = reference_seconds(found)
    row = calibration.rows("gemm")[0]
    assert lookup("gemm", {**row, "time_s": 123.0, "l1_probe_s": 1e-9}) == row["time_s"]
    assert lookup("gemm", {**row, "threads": 99}) is None and lookup("conv", row) is None
    other = dataclasses.replace(calibration.host, cores=calibration.host.cores + 1)
    assert _reference(cal_path, other, warnings) is None
    assert "measured another kind of machine" in warnings.file.getvalue()
    both = CliRunner().invoke(main, ["calibrate", "--reference", str(cal_path), "--no-reference", "-o",
                                     str(tmp_path / "c.json")])
    assert both.exit_code == 2 and "--reference needs a measuring run" in both.stderr
    missing = CliRunner().invoke(main, ["calibrate", "--reference", str(tmp_path / "none.json"), "-o",
                                        str(tmp_path / "c.json")])
    assert missing.exit_code == 2 and "none.json: no such calibration file" in missing.stderr
    assert not (tmp_path / "c.json").exists()


def test_repair_replaces_only_the_points_far_from_their_median(tmp_path: Path) -> None:
    """A point 1.6x its median over four runs takes the median run's row; one 1.2x off, or
    measured by fewer than three runs, stays as the repaired run measured it."""
    base, runs = synthetic(), [synthetic() for _ in range(3)]
    gemm = base["kernels"]["gemm"]
    gemm[0]["time_s"] *= 1.6  # an outlier: slowed by another tenant
    gemm[1]["time_s"] *= 1.2  # within the ratio
    gemm[2]["time_s"] /= 1.6  # a fast outlier
    runs[0]["kernels"]["gemm"][0]["time_s"] *= 1.1  # the others disagree a little: the (lower) median is run 1's
    runs[1]["kernels"]["gemm"][0]["time_s"] *= 1.05
    gemm.append(dict(gemm[3], m=8, time_s=1.0))  # in the base and one other run only
    runs[0]["kernels"]["gemm"].append(dict(gemm[-1], time_s=1e-6))
    files = [tmp_calibration(tmp_path / f"run{i}.json", data) for i, data in enumerate([base, *runs])]
    repaired, count = repair_outliers(files[0], files[1:])
    reference = synthetic()["kernels"]["gemm"]
    rows = repaired["kernels"]["gemm"]
    assert count == 2
    assert rows[0]["time_s"] == pytest.approx(reference[0]["time_s"] * 1.05)
    assert rows[1]["time_s"] == pytest.approx(reference[1]["time_s"] * 1.2)
    assert rows[2]["time_s"] == reference[2]["time_s"]
    assert rows[-1]["time_s"] == 1.0
    assert repaired["microbench"]["repaired"]["points"] == 2
    assert repaired["created"] == base["created"]
    validate(repaired, "repaired.json")
    foreign = synthetic()
    foreign["host"]["cores"] = 64
    with pytest.raises(CalibrationError, match=r"foreign\.json: measured on another machine"):
        repair_outliers(files[0], [files[1], tmp_calibration(tmp_path / "foreign.json", foreign)])


def test_cli_repair(tmp_path: Path, cal_path: Path) -> None:
    out = tmp_path / "repaired.json"
    files = [arg for _ in range(3) for arg in ("--merge", str(cal_path))]
    result = CliRunner().invoke(main, ["calibrate", "--repair", *files, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "repaired 0 points" in result.output
    assert load_calibration(out).data["kernels"] == load_calibration(cal_path).data["kernels"]
    few = CliRunner().invoke(main, ["calibrate", "--repair", *files[:4], "-o", str(out)])
    assert few.exit_code == 2 and "at least two others" in few.stderr and "Traceback" not in few.output


def test_16_bit_products_use_their_own_points_at_the_fp32_peak() -> None:
    """A host without AVX512-BF16/FP16 or AMX computes bf16 as fp32: the same peak. A bf16 product
    is timed from the bf16 points of its layout, not from fp32's nor from ``nn`` stand-ins."""
    data = synthetic()
    cal = validate(data, "cal.json")
    assert cal.peak_flops("bf16", 1) == pytest.approx(cal.peak_flops("fp32", 1))
    assert cal.peak_flops("fp16", 1) == pytest.approx(cal.peak_flops("fp32", 1))
    flagged = validate({**data, "host": {**data["host"], "isa_flags": [*data["host"]["isa_flags"], "avx512_bf16"]}},
                       "cal.json")
    assert flagged.peak_flops("bf16", 1) == pytest.approx(2 * cal.peak_flops("fp32", 1))
    assert flagged.peak_flops("fp16", 1) == pytest.approx(cal.peak_flops("fp32", 1))
    fraction = {"nn": 0.01, "nt": 0.05}
    for t in (1, 4):
        for layout, share in fraction.items():
            for m in (64, 256):
                for n in (64, 256):
                    for k in (64, 256):
                        flops = 2.0 * m * n * k
                        data["kernels"]["gemm"].append(
                            {"dtype": "bf16", "threads": t, "batch": 1, "m": m, "n": n, "k": k, "layout": layout,
                             "time_s": flops / (share * cal.peak_flops("fp32", t))}
                        )
    efficiency = CalibratedEfficiency(validate(data, "cal.json"), gemm_method="linear")
    for layout, share in fraction.items():
        product = Gemm(dtype="bf16", m=128, n=128, k=128, layout=layout)
        assert efficiency.gemm_fraction(product, 1) == pytest.approx(share, rel=1e-6)
    tn = Gemm(dtype="bf16", m=128, n=128, k=128, layout="tn")  # not measured in bf16: its nn points
    assert efficiency.gemm_fraction(tn, 4) == pytest.approx(fraction["nn"], rel=1e-6)
    fp16 = Gemm(dtype="fp16", m=128, n=128, k=128)  # no points of its own: fp32's fractions
    fp32 = Gemm(dtype="fp32", m=128, n=128, k=128)
    assert efficiency.gemm_fraction(fp16, 1) == pytest.approx(efficiency.gemm_fraction(fp32, 1), rel=1e-9)


def test_framework_ops_use_the_measurements_of_the_very_op(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    efficiency = CalibratedEfficiency(cal, cache="cold")
    pool = FrameworkOp(dtype="fp32", op="max_pool2d_with_indices", nbytes=4 << 20)
    assert CostModel(efficiency).duration(pool, cpu, 1) == pytest.approx(pool.bytes() / POOL_RATE, rel=1e-6)
    tiny = FrameworkOp(dtype="fp32", op="max_pool2d_with_indices", nbytes=1 << 10)  # below the smallest point
    assert CostModel(efficiency).duration(tiny, cpu, 1) == pytest.approx((1 << 20) / POOL_RATE, rel=1e-6)
    unmeasured = FrameworkOp(dtype="fp32", op="bernoulli", nbytes=4 << 20)
    assert efficiency.covers(pool) and not efficiency.covers(unmeasured)
    assert efficiency.stream_time(unmeasured, 1) is None


def test_traced_pointwise_ops_use_the_frameworks_own_points() -> None:
    """With torch's GEMM points (a torch trace), a traced ``gelu`` is timed from torch's own ``gelu``
    points; with numpy's, and ops torch was not measured for, from the C kernels' curves."""
    data = synthetic()
    data["kernels"]["gemm"] += [dict(row, blas="torch") for row in data["kernels"]["gemm"]]
    gelu_rate = 3e9
    for t in (1, 4):
        for size in (1 << 20, 16 << 20):
            data["kernels"]["framework"].append(
                {"op": "gelu", "dtype": "fp32", "threads": t, "bytes": size, "time_s": size / gelu_rate}
            )
    cal = validate(data, "cal.json")
    cpu, _ = host_specs(cal)
    gelu = Elementwise(dtype="fp32", n=1 << 20, op="gelu", flops_per_element=10.0, inputs=1, outputs=1)
    torch_model = CostModel(CalibratedEfficiency(cal, blas="torch", cache="warm"))
    numpy_model = CostModel(CalibratedEfficiency(cal, blas="numpy", cache="warm"))
    assert torch_model.duration(gelu, cpu, 1) == pytest.approx(gelu.bytes() / gelu_rate, rel=1e-6)
    assert numpy_model.duration(gelu, cpu, 1) != pytest.approx(gelu.bytes() / gelu_rate, rel=0.05)
    add = Elementwise(dtype="fp32", n=1 << 20, op="add")
    assert torch_model.duration(add, cpu, 1) == pytest.approx(numpy_model.duration(add, cpu, 1))
    foreach = dataclasses.replace(gelu, op="_foreach_gelu")  # the same per-tensor kernel over a list
    assert torch_model.duration(foreach, cpu, 1) == pytest.approx(torch_model.duration(gelu, cpu, 1))


def test_traced_logical_reductions_use_the_frameworks_own_points() -> None:
    """A traced ``all`` over a bool mask is timed from torch's ``all`` points (a tenth of a streamed
    sum's rate here); other reductions, and any with numpy's points, keep the C kernels' curves."""
    data = synthetic()
    data["kernels"]["gemm"] += [dict(row, blas="torch") for row in data["kernels"]["gemm"]]
    rate = 2e9
    data["kernels"]["framework"] += [{"op": "all", "dtype": "int8", "threads": t, "bytes": size,
                                      "time_s": size / rate} for t in (1, 4) for size in (1 << 14, 1 << 22)]
    cal = validate(data, "cal.json")
    cpu, _ = host_specs(cal)
    torch_model = CostModel(CalibratedEfficiency(cal, blas="torch", cache="warm"))
    numpy_model = CostModel(CalibratedEfficiency(cal, blas="numpy", cache="warm"))
    traced = kernel_for("aten::all", "reduction", [[16, 4, 128, 128]], ["bool"], [], False).kernel
    assert traced == Reduction(dtype="int8", n=16 * 4 * 128 * 128, outputs=1, op="all")
    assert torch_model.duration(traced, cpu, 1) == pytest.approx(traced.bytes() / rate, rel=1e-6)
    assert numpy_model.duration(traced, cpu, 1) < traced.bytes() / rate / 2
    total = Reduction(dtype="int8", n=traced.n, outputs=1, op="sum")
    assert torch_model.duration(total, cpu, 1) == pytest.approx(numpy_model.duration(total, cpu, 1))


def test_log_softmax_is_timed_from_the_softmax_points() -> None:
    """Without points of its own, a log-softmax (and its gradient) takes the measured rate of
    torch's softmax, whose passes it shares, not the C kernels' exponential."""
    data = synthetic()
    data["kernels"]["gemm"] += [dict(row, blas="torch") for row in data["kernels"]["gemm"]]
    rate = 1e9
    data["kernels"]["framework"] += [{"op": "_softmax", "dtype": "fp32", "threads": 1, "bytes": size,
                                      "time_s": size / rate} for size in (1 << 20, 16 << 20)]
    cal = validate(data, "cal.json")
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal, blas="torch", cache="warm"))
    for op in ("_softmax", "_log_softmax", "_log_softmax_backward_data"):
        kernel = Elementwise(dtype="fp32", n=1 << 20, op=op, flops_per_element=10.0, inputs=2, outputs=1)
        assert model.duration(kernel, cpu, 1) == pytest.approx(kernel.bytes() / rate, rel=1e-6), op


def test_recurrent_layer_is_its_products_and_gates(cal_path: Path) -> None:
    cal = load_calibration(cal_path)
    cpu, _ = host_specs(cal)
    efficiency = CalibratedEfficiency(cal, cache="warm")
    lstm = Recurrent(dtype="fp32", steps=64, batch=32, width=128, hidden=256, gates=4)
    products = efficiency.host_time(lstm.sequence_gemms()[0], 1) + 64 * efficiency.host_time(lstm.step_gemm(), 1)
    forward = CostModel(efficiency).duration(lstm, cpu, 1)
    assert products < forward < 1.5 * products  # the gates add a little to the products
    backward = CostModel(efficiency).duration(dataclasses.replace(lstm, backward=True), cpu, 1)
    assert 1.5 * forward < backward < 3 * forward  # twice the products
    assert efficiency.covers(lstm)
    # cold cache: the input projection pays for its cold operands, the per-step products do not
    cold = CalibratedEfficiency(cal, cache="cold")
    step = lstm.step_gemm()
    assert cold.host_time(step, 1) > efficiency.host_time(step, 1)
    projection = lstm.sequence_gemms()[0]
    extra = cold.host_time(lstm, 1) - efficiency.host_time(lstm, 1)
    assert extra == pytest.approx(cold.host_time(projection, 1) - efficiency.host_time(projection, 1), rel=1e-6)


def _traced_norm(op: str, shape: list[int]) -> tuple[list[list[int]], list[str]]:
    """Input Dims and Input type torch records for a normalisation op on ``shape``."""
    if op == "native_batch_norm":
        return [shape, *[[shape[1]]] * 4, [], [], []], ["float"] * 5 + ["Scalar"] * 3
    width = shape[-1]
    return [shape, [], [width], [width], []], ["float", "ScalarList", "float", "float", "Scalar"]


@pytest.mark.parametrize(("op", "slowdown"), [("native_batch_norm", 0.5), ("native_layer_norm", 0.9)])
def test_traced_normalisation_is_timed_from_its_own_points(op: str, slowdown: float) -> None:
    """A calibration measured ATen's training-mode batch norm and its layer norm; a traced one of
    the same bytes takes the measured time (on the AVX2 EPYC, ATen ran the batch norm at 3-5 GB/s,
    far below a streaming pass over the same bytes, and the layer norm below it too)."""
    from simhpc.costs.opmap import kernel_for
    from simhpc.costs.opnames import classify

    cal = load_calibration(EPYC)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal, blas="torch"))
    rows = [r for r in cal.rows("framework") if r["op"] == op and r["threads"] == 1]
    assert len(rows) == 3
    for row in rows:
        traced = kernel_for(f"aten::{op}", classify(f"aten::{op}"), *_traced_norm(op, row["input"]), [], False)
        assert traced.kernel is not None and traced.kernel.bytes() == row["bytes"]
        assert model.duration(traced.kernel, cpu, 1) == pytest.approx(row["time_s"], rel=1e-6)
        streaming = CostModel(CalibratedEfficiency(cal, blas="numpy")).duration(traced.kernel, cpu, 1)
        assert streaming < slowdown * row["time_s"]


def test_traced_square_root_runs_at_atens_measured_rate() -> None:
    """ATen's ``sqrt`` (Adam's denominator) is measured: on the AVX2 EPYC it ran at a fraction of
    a memory-bound ``mul``'s rate, which the C ``add`` kernel's curve stood in for before."""
    cal = load_calibration(EPYC)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal, blas="torch"))
    n = 1 << 20  # 4 MiB, a measured size
    sqrt = Elementwise(dtype="fp32", n=n, op="sqrt", flops_per_element=10.0, inputs=1, outputs=1)
    row = next(r for r in cal.rows("framework") if r["op"] == "sqrt" and r["threads"] == 1 and r["bytes"] == 8 * n)
    assert model.duration(sqrt, cpu, 1) == pytest.approx(row["time_s"], rel=1e-6)
    mul = Elementwise(dtype="fp32", n=n, op="mul", inputs=1, outputs=1)
    assert model.duration(sqrt, cpu, 1) > 2 * model.duration(mul, cpu, 1)


def test_small_framework_ops_run_at_their_smallest_sizes_rate_above_the_dispatch_floor() -> None:
    """bernoulli_ is measured from 256 KiB: an 8 KiB fill is not charged the 256 KiB call's time,
    and no traced op that computes is timed below the cheapest measured framework call."""
    efficiency = CalibratedEfficiency(load_calibration(COMMITTED), blas="torch")
    floor = efficiency.dispatch_floor(1)
    assert 0 < floor < 20e-6
    small = efficiency.host_time(FrameworkOp(dtype="fp32", op="bernoulli", nbytes=8 << 10), 1)
    measured = efficiency.host_time(FrameworkOp(dtype="fp32", op="bernoulli", nbytes=256 << 10), 1)
    assert floor <= small < measured / 10
    tiny = Elementwise(dtype="fp32", n=64, op="add", inputs=2, outputs=1)
    assert efficiency.host_time(tiny, 1) == pytest.approx(floor)
    numpy = CalibratedEfficiency(load_calibration(COMMITTED), blas="numpy")
    assert numpy.host_time(tiny, 1) < floor / 10  # the C kernel of a simulated node pays no dispatch


def test_traced_indexed_ops_use_their_own_points() -> None:
    """A gather of the shape the committed calibration measured is predicted at that point's time
    (the C ``add`` kernel would give a fraction of it: ATen's indexed loops are slower)."""
    cal = load_calibration(COMMITTED)
    row = next(r for r in cal.rows("framework") if r["op"] == "gather" and r["threads"] == 1
               and r["input"][2] == 8192)
    kernel = kernel_for("aten::gather", "elementwise", [[8192, 256], [], [8192, 256], []],
                        ["float", "Scalar", "long int", "Scalar"], [], False).kernel
    assert kernel.bytes() == row["bytes"]
    assert CalibratedEfficiency(cal, blas="torch").host_time(kernel, 1) == pytest.approx(row["time_s"], rel=0.05)


def test_dram_figures_come_from_the_largest_working_set_when_the_llc_is_the_sockets() -> None:
    """A guest that reports its socket's 480 MiB L3 has no stream point past twice it: DRAM is the
    largest measured working set's rate, not a default."""
    data = synthetic()
    huge = dataclasses.replace(HOST, caches=(*HOST.caches[:2], CacheInfo("L3", 480 << 20, 4)))
    cal = build_calibration(huge, data["kernels"], data["probes"], {"suite_version": 1}, "2026-01-01T00:00:00Z")
    largest = max(row["bytes"] for row in data["kernels"]["bandwidth"])
    one_core = [r["bytes"] / r["time_s"] for r in data["kernels"]["bandwidth"] if r["threads"] == 1
                and r["bytes"] == largest]
    assert cal["derived"]["core_bandwidth"] == pytest.approx(one_core[0])
    assert cal["derived"]["memory_latency"] == pytest.approx(100e-9)


def test_cold_product_fit_weighs_a_point_above_it_as_one_below() -> None:
    """Points scattered by the same factors above and below 30 us + bytes / 30 GB/s give that fit
    back (least squares of the log ratio); a least-relative-squares fit went under most of them."""
    from simhpc.costs.cold_products import cold_product_fits

    rows = []
    for i, (m, n, k) in enumerate(((32, 32, 32), (64, 10, 4096), (512, 512, 16), (4, 512, 512), (512, 4, 512),
                                   (256, 256, 256), (16, 64, 4096), (512, 512, 512))):
        moved = 4.0 * (m * k + k * n + m * n)
        for factor in (3.0, 1 / 3.0) if i % 2 else (1.5, 1 / 1.5):
            rows.append({"blas": "torch", "dtype": "fp32", "threads": 1, "m": m, "n": n, "k": k, "warm_s": 1e-4,
                         "time_s": 1e-4 + factor * (30e-6 + moved / 30e9)})
    seconds, per_byte = cold_product_fits(rows, "torch")[1]
    assert seconds == pytest.approx(30e-6, rel=0.02) and per_byte == pytest.approx(1 / 30e9, rel=0.02)


@pytest.mark.parametrize("shared, left_out", [(3, True), (5, False)])
def test_cold_points_measured_on_a_shared_core_are_left_out_when_few(shared: int, left_out: bool) -> None:
    """Of 20 cold points on 30 us + bytes / 30 GB/s, ``shared`` read the L1 probe at 1.6 ns against
    1.09 ns and took 40 us more: 3 (15 %) are left out and the fit is the core's own; 5 (25 %), and
    the core was shared often enough that they stay."""
    from simhpc.costs.cold_products import cold_product_fits, unshared

    rows = []
    for i, m in enumerate(range(16, 16 + 20 * 24, 24)):
        moved = 4.0 * (m * 512 + 512 * 64 + m * 64)
        extra = 30e-6 + moved / 30e9 + (40e-6 if i < shared else 0.0)
        rows.append({"blas": "torch", "dtype": "fp32", "threads": 2, "m": m, "n": 64, "k": 512, "warm_s": 1e-4,
                     "time_s": 1e-4 + extra, "l1_probe_s": 1.6e-9 if i < shared else 1.09e-9})
    assert len(unshared(rows)) == (20 - shared if left_out else 20)
    seconds, per_byte = cold_product_fits(rows, "torch")[2]
    assert (seconds == pytest.approx(30e-6, rel=0.02) and per_byte == pytest.approx(1 / 30e9, rel=0.02)) == left_out
    assert unshared([{k: v for k, v in row.items() if k != "l1_probe_s"} for row in rows[:4]]) == [
        {k: v for k, v in row.items() if k != "l1_probe_s"} for row in rows[:4]]  # no readings: all kept


def test_cold_products_pay_the_fitted_cold_call_time(cal_path: Path) -> None:
    """``gemm_cold`` points whose cold-less-warm times are 50 us + bytes / 20 GB/s give that fit back,
    and ``cache="cold"`` charges it to every BLAS product (none to a convolution)."""
    from simhpc.costs.cold_products import cold_product_fits

    data = json.loads(cal_path.read_text())
    rows = []
    for t in (1, 4):
        for m, n, k in ((32, 32, 32), (64, 10, 4096), (512, 512, 16), (1024, 1024, 1024)):
            moved = 4.0 * (m * k + k * n + m * n)
            rows.append({"blas": "torch", "dtype": "fp32", "threads": t, "batch": 1, "m": m, "n": n, "k": k,
                         "layout": "nn", "cache": "cold", "warm_s": 1e-3, "time_s": 1e-3 + 50e-6 + moved / 20e9})
    rows.append({**rows[0], "time_s": 0.5e-3})  # faster cold than warm: noise, left out of the fit
    fits = cold_product_fits(rows, "torch")
    assert set(fits) == {1, 4}
    assert fits[1][0] == pytest.approx(50e-6, rel=1e-6) and fits[1][1] == pytest.approx(1 / 20e9, rel=1e-6)
    assert cold_product_fits(rows, "numpy") == {}
    data["kernels"]["gemm_cold"] = [dict(row, blas="numpy") for row in rows]  # the synthetic file's BLAS
    cal = validate(data, "cold.json")
    product = Gemm(dtype="fp32", m=64, n=10, k=4096)
    warm = CalibratedEfficiency(cal, cache="warm")
    cold = CalibratedEfficiency(cal, cache="cold")
    assert cold.cold_operands_s(product, 1) == pytest.approx(50e-6 + product.bytes() / 20e9, rel=1e-6)
    assert warm.cold_operands_s(product, 1) == 0.0
    assert cold.cold_operands_s(dataclasses.replace(product, conv="forward"), 1) == 0.0


def test_a_product_after_one_of_another_layout_pays_its_layouts_share(cal_path: Path) -> None:
    """``gemm_cold`` rows with ``after`` (a product timed right after a flush and one of another
    layout) stay out of the cold-call fit and give the part of its constant that is the layout's
    kernels: a product whose layout's kernels are cold pays that part even when the constant's
    remainder is warm, and the whole constant when both are cold. The part is its own layout's
    points' median, all the points' for a layout without any."""
    from simhpc.costs.cold_products import cold_product_fits, path_constants

    data = json.loads(cal_path.read_text())
    rows = []
    for m, n, k in ((32, 32, 32), (64, 10, 4096), (512, 512, 16)):
        moved = 4.0 * (m * k + k * n + m * n)
        rows.append({"blas": "numpy", "dtype": "fp32", "threads": 1, "batch": 1, "m": m, "n": n, "k": k,
                     "layout": "nn", "cache": "cold", "warm_s": 1e-3, "time_s": 1e-3 + 50e-6 + moved / 20e9})
    after = [{"blas": "numpy", "dtype": "fp32", "threads": 1, "batch": 1, "m": 32, "n": 16, "k": 256,
              "layout": layout, "after": first, "cache": "cold", "warm_s": 4e-6, "time_s": 4e-6 + extra}
             for (first, layout), extra in zip((("nt", "nn"), ("nn", "tn"), ("nt", "tn")), (8e-6, 12e-6, 20e-6))]
    assert cold_product_fits(rows + after, "numpy") == cold_product_fits(rows, "numpy")
    assert path_constants(rows + after, "numpy") == {1: pytest.approx(12e-6)}
    assert path_constants(rows + after, "numpy", "tn") == {1: pytest.approx(16e-6)}
    assert path_constants(rows, "numpy") == {}
    data["kernels"]["gemm_cold"] = rows + after
    efficiency = CalibratedEfficiency(validate(data, "cold.json"), cache="cold")
    for layout, batch, path in (("nn", 1, 8e-6), ("tn", 1, 16e-6), ("nn", 2, 12e-6)):  # batched: all points
        own = Gemm(dtype="fp32", m=2048, n=2048, k=2048, layout=layout, batch=batch)
        assert efficiency.product_in_step_s(own, 1, 0.0, 0.0, 1.0) == pytest.approx(
            efficiency.product_in_step_s(own, 1, 0.0, 0.0, 0.0) + path)
    # no points of its layout: all the points' median; slower than the synthetic file's dispatch floor
    product = Gemm(dtype="fp32", m=2048, n=2048, k=2048, layout="nt")
    warm = efficiency.product_in_step_s(product, 1, 0.0, 0.0, 0.0)
    assert warm > efficiency.dispatch_floor(1)
    assert efficiency.product_in_step_s(product, 1, 0.0, 0.0, 1.0) == pytest.approx(warm + 12e-6)
    assert efficiency.product_in_step_s(product, 1, 1.0, 0.0, 0.0) == pytest.approx(warm + 50e-6)
    assert efficiency.product_in_step_s(product, 1, 0.5, 0.0, 1.0) == pytest.approx(warm + 19e-6 + 12e-6)
    # output lines fetched before they are written: at the roofline's memory bandwidth
    bandwidth = efficiency.calibration.model_bandwidth(1)
    assert efficiency.product_in_step_s(product, 1, 0.0, 0.0, 0.0, 1e6) == pytest.approx(warm + 1e6 / bandwidth)
    data["kernels"]["gemm_cold"] = rows
    without = CalibratedEfficiency(validate(data, "cold.json"), cache="cold")
    assert without.product_in_step_s(product, 1, 0.0, 0.0, 1.0) == pytest.approx(warm)


def test_path_points_with_their_operands_read_stand_alone(cal_path: Path) -> None:
    """Suite 40's path points read the timed product's operands first (``operands: cached``); the
    older ones also hold the operands' fetch. Where a thread count has points of the new kind, the
    layout's part is their median alone; elsewhere the old points' still."""
    from simhpc.costs.cold_products import path_constants

    def row(threads: int, layout: str, extra: float, **more: str) -> dict:
        return {"blas": "torch", "dtype": "fp32", "threads": threads, "batch": 1, "m": 32, "n": 16, "k": 256,
                "layout": layout, "after": "nt", "cache": "cold", "warm_s": 4e-6, "time_s": 4e-6 + extra, **more}

    old = [row(1, "tn", 4.3e-6), row(1, "nn", 5e-6), row(2, "tn", 3.5e-6)]
    new = [row(1, "tn", 3e-6, operands="cached"), row(1, "nn", 2e-6, operands="cached")]
    assert path_constants(old + new, "torch", "tn") == {1: pytest.approx(3e-6), 2: pytest.approx(3.5e-6)}
    assert path_constants(old + new, "torch") == {1: pytest.approx(2.5e-6), 2: pytest.approx(3.5e-6)}
    assert path_constants(old, "torch", "tn") == {1: pytest.approx(4.3e-6), 2: pytest.approx(3.5e-6)}


def test_a_one_thread_product_pays_one_cores_cold_parts(cal_path: Path) -> None:
    """A matrix-vector or outer product runs on one thread whatever the thread count: on 4 it pays
    the 1-thread fit's cold constant and per-byte cost over its own warm time."""
    data = json.loads(cal_path.read_text())
    rows = []
    for t, constant in ((1, 10e-6), (4, 40e-6)):
        for m, n, k in ((32, 32, 32), (64, 10, 4096), (512, 512, 16)):
            moved = 4.0 * (m * k + k * n + m * n)
            rows.append({"blas": "numpy", "dtype": "fp32", "threads": t, "batch": 1, "m": m, "n": n, "k": k,
                         "layout": "nn", "cache": "cold", "warm_s": 1e-3, "time_s": 1e-3 + constant + moved / 20e9})
    data["kernels"]["gemm_cold"] = rows
    efficiency = CalibratedEfficiency(validate(data, "cold.json"), cache="cold")
    gemv = Gemm(dtype="fp32", m=1, n=1 << 14, k=1 << 14)
    warm = efficiency.product_in_step_s(gemv, 4, 0.0, 0.0, 0.0)
    assert warm > efficiency.dispatch_floor(4) + 40e-6 + 1e6 / 20e9
    assert efficiency.product_in_step_s(gemv, 4, 1.0, 1e6, 0.0) == pytest.approx(warm + 40e-6 + 1e6 / 20e9)
    assert efficiency.product_in_step_s(gemv, 4, 1.0, 1e6, 0.0, one_thread=True) == pytest.approx(
        warm + 10e-6 + 1e6 / 20e9)


def test_cold_products_pay_at_most_one_dram_pass_over_their_bytes(cal_path: Path) -> None:
    """A fit whose bytes cost more than streaming them from DRAM (after a 128 MiB flush, a VM's
    page walks too) charges them at the roofline's DRAM bandwidth: 50 us + bytes / 12 GB/s here."""
    data = json.loads(cal_path.read_text())
    data["kernels"]["gemm_cold"] = [
        {"blas": "numpy", "dtype": "fp32", "threads": 1, "batch": 1, "m": m, "n": m, "k": m, "layout": "nn",
         "cache": "cold", "warm_s": 1e-3, "time_s": 1e-3 + 50e-6 + 12.0 * m * m / 5e9}
        for m in (32, 256, 1024)
    ]
    cal = validate(data, "cold.json")
    product = Gemm(dtype="fp32", m=1024, n=1024, k=1024)
    charged = CalibratedEfficiency(cal, cache="cold").cold_operands_s(product, 1)
    assert cal.model_bandwidth(1) == pytest.approx(12e9, rel=0.05)
    assert charged == pytest.approx(50e-6 + product.bytes() / cal.model_bandwidth(1), rel=1e-6)


@pytest.mark.host_timing
def test_clock_probe_is_not_fooled_by_folded_adds() -> None:
    """The dependent-add chain reads the core clock, not several adds a cycle (the immediate form
    read 19 GHz on a 3.6 GHz Xeon, whose renamer folds adds of an immediate)."""
    from simhpc.costs.benchsuite import load_submodule

    try:
        clock = load_submodule("latency").measure_clock(chunks=20, iters=20_000)["clock_hz"]
    except Exception as error:  # no C compiler: nothing to measure
        pytest.skip(f"native kernels unavailable: {error}")
    assert 0.5e9 < clock < 6.5e9


def test_busy_check_takes_the_median_of_several_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task runnable in one snapshot of a quiet machine does not make it busy; one in most does."""
    from simhpc.cli import calibrate_cmd

    for readings, expected in (([3, 0, 0, 0, 0], 0), ([2, 2, 0, 2, 1], 2)):
        sequence = iter(readings)
        monkeypatch.setattr(calibrate_cmd, "_runnable_now", lambda sequence=sequence: next(sequence))
        assert calibrate_cmd._other_runnable(samples=len(readings), interval_s=0.0) == expected


def test_fused_attention_is_timed_from_its_own_points(tmp_path: Path) -> None:
    """A calibration with ``attention`` points times a fused attention (either pass) at the
    measured time of its shape; without them, from its products and exponentials."""
    data = synthetic()
    rows = [{"library": "torch", "dtype": "fp32", "threads": t, "backward": backward, "batch": heads, "lq": length,
             "lk": length, "e": e, "time_s": (3e-9 if backward else 1e-9) * heads * length * length * e / t}
            for t in (1, 4) for backward in (False, True) for heads in (16, 64) for length in (64, 256)
            for e in (32, 64)]
    data["kernels"]["attention"] = rows
    efficiency = CalibratedEfficiency(tmp_calibration(tmp_path / "attention.json", data), gemm_method="linear")
    for backward, per in ((False, 1e-9), (True, 3e-9)):
        kernel = Attention(dtype="fp32", batch=64, lq=256, lk=256, e=64, backward=backward)
        assert efficiency.attention_time(kernel, 4) == pytest.approx(per * 64 * 256 * 256 * 64 / 4, rel=1e-6)
    without = CalibratedEfficiency(tmp_calibration(tmp_path / "plain.json", synthetic()), gemm_method="linear")
    plain = Attention(dtype="fp32", batch=64, lq=256, lk=256, e=64)
    assert without.attention_time(plain, 4) > without.host_time(plain.gemm(), 4)  # its exponentials on top
    data["kernels"]["attention"][0].pop("lq")
    with pytest.raises(CalibrationError, match=r"kernels\.attention\.0\.lq"):
        validate(data, "bad.json")


def test_effective_cache_is_what_the_pointer_chase_reads_fast() -> None:
    """The working set a program keeps in cache: the Xeon guest reports its socket's 480 MiB L3 and
    reads 11.3 MiB at under half the DRAM latency (32, 23 and 64 MiB in three runs the session
    before, 16 MiB two days before that: other guests share that L3); the EPYC Zen 2 guest, 8 MiB of
    its 16 MiB L3."""
    xeon, zen2 = load_calibration(COMMITTED), load_calibration(COMMITTED.with_name("epyc-zen2.json"))
    assert xeon.host.last_level_cache == 480 << 20 and xeon.effective_cache_bytes() == 11863232
    assert zen2.host.last_level_cache == 16 << 20 and zen2.effective_cache_bytes() == 8 << 20
    without = dataclasses.replace(zen2, data={**zen2.data, "kernels": {**zen2.data["kernels"], "latency": []}})
    assert without.effective_cache_bytes() == 16 << 20


def test_a_line_from_the_last_level_cache_costs_its_latency_share_of_memory() -> None:
    """The chase's median latency past the private caches and within the effective cache, over the
    memory latency: a tenth or so on the EPYC guests; 1 (memory's cost) without such points."""
    zen2 = load_calibration(COMMITTED.with_name("epyc-zen2.json"))
    held = sorted(row["latency_s"] for row in zen2.rows("latency") if (512 << 10) < row["bytes"] <= 8 << 20)
    share = zen2.last_level_latency_share(512 << 10)
    assert 0.05 < share < 0.3 and share == held[len(held) // 2] / zen2.derived["memory_latency"]
    assert zen2.last_level_latency_share(8 << 20) == 1.0  # nothing past the private caches is held
    without = dataclasses.replace(zen2, data={**zen2.data, "kernels": {**zen2.data["kernels"], "latency": []}})
    assert without.last_level_latency_share(512 << 10) == 1.0


def test_rewrite_points_say_which_share_of_written_lines_a_distance_sends_to_memory() -> None:
    """The lines are cached (0) up to the farthest point under half way from the nearest point's
    time to the farthest's, then the time's climb from there to the farthest's (1), over the
    logarithm of the distance and never falling (a slower nearer point is noise); one thread's
    points; None without them."""
    zen2 = load_calibration(COMMITTED.with_name("epyc-zen2.json"))
    assert zen2.rewrite_memory_share(1 << 20) is None
    mib = 1 << 20
    times = {0: 8e-6, mib: 7e-6, 7 * mib: 10e-6, 15 * mib: 11e-6, 31 * mib: 19e-6, 63 * mib: 23e-6, 127 * mib: 27e-6}
    rows = [{"threads": 1, "since_bytes": since, "bytes": mib, "time_s": time} for since, time in times.items()]
    rows += [{"threads": 2, "since_bytes": since, "bytes": mib, "time_s": 1e-6} for since in times]
    measured = dataclasses.replace(zen2, data={**zen2.data, "kernels": {**zen2.data["kernels"], "rewrite": rows}})
    assert measured.rewrite_memory_share(mib) == 0.0
    assert measured.rewrite_memory_share(16 * mib) == 0.0  # 11 us: under half way (17.5), the cached level
    assert measured.rewrite_memory_share(32 * mib) == pytest.approx(8 / 16)
    assert measured.rewrite_memory_share(math.sqrt(32 * 64) * mib) == pytest.approx(10 / 16)  # by the log
    assert measured.rewrite_memory_share(1 << 40) == 1.0
    everywhere = [{**row, "time_s": 9e-6} for row in rows]
    flat = dataclasses.replace(zen2, data={**zen2.data, "kernels": {**zen2.data["kernels"], "rewrite": everywhere}})
    assert flat.rewrite_memory_share(1 << 40) == 0.0


def test_recurrent_layers_are_timed_from_their_own_points(tmp_path: Path) -> None:
    """A calibration with ``recurrent`` points times an LSTM layer (either pass) at the measured
    time of its shape; without them, from its products and gates."""
    data = synthetic()

    def layer(length: int, batch: int, width: int, hidden: int, backward: bool) -> Recurrent:
        return Recurrent(dtype="fp32", steps=length, batch=batch, width=width, hidden=hidden, backward=backward)

    rows = [{"library": "torch", "dtype": "fp32", "threads": t, "backward": backward, "length": length, "batch": batch,
             "width": width, "hidden": hidden, "gates": 4,
             "time_s": layer(length, batch, width, hidden, backward).flops() / (2e9 * t * (1 + backward))}
            for t in (1, 4) for backward in (False, True) for length in (8, 32) for batch in (8, 32)
            for width, hidden in ((64, 128), (128, 256))]
    data["kernels"]["recurrent"] = rows
    efficiency = CalibratedEfficiency(tmp_calibration(tmp_path / "recurrent.json", data), gemm_method="linear")
    for backward in (False, True):
        kernel = layer(32, 8, 128, 256, backward)
        assert efficiency.recurrent_time(kernel, 4) == pytest.approx(kernel.flops() / (8e9 * (1 + backward)),
                                                                     rel=1e-6)
    without = CalibratedEfficiency(tmp_calibration(tmp_path / "plain.json", synthetic()), gemm_method="linear")
    forward = layer(32, 8, 128, 256, False)
    assert without.recurrent_time(forward, 4) > sum(without.host_time(g, 4) for g in forward.sequence_gemms())
    data["kernels"]["recurrent"][0].pop("hidden")
    with pytest.raises(CalibrationError, match=r"kernels\.recurrent\.0\.hidden"):
        validate(data, "bad.json")


@pytest.mark.host_timing
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_microbench_recurrent_layer_times_are_milliseconds() -> None:
    """oneDNN's LSTM layer, forward and backward, on the smallest point: neither a clock error
    (a microsecond) nor a broken loop (a second); its backward does about twice its work. Each is
    taken as the median of five quick measurements, the two passes in turn: on the shared 2-core
    host one quick measurement put the backward under the forward (0.42 against 0.44 ms), and so
    did the fastest of three (0.39 against 0.45 ms; it is 0.60-0.72 against 0.41-0.45 ms)."""
    from simhpc.costs.benchsuite import load_submodule

    recurrent, timing = load_submodule("recurrent"), load_submodule("timing")
    shape = recurrent.shapes(quick=True)[0]
    rounds = [[recurrent.measure_recurrent(*shape, backward, 1, timing.QUICK) for backward in (False, True)]
              for _ in range(5)]
    rows = [sorted((pair[index] for pair in rounds), key=lambda row: row["time_s"])[2] for index in (0, 1)]
    assert [row["backward"] for row in rows] == [False, True] and rows[0]["length"] == shape[0]
    assert all(1e-5 < row["time_s"] < 1.0 for row in rows)
    assert rows[1]["time_s"] > rows[0]["time_s"]


def test_convolution_heads_to_few_channels_use_their_own_points() -> None:
    """A 1x1 convolution to one channel (a U-Net's mask head) is far from the 16-256-channel 1x1
    points: oneDNN took 3x what those gave at 2 threads; suite 29 measures such heads. Without
    them, the head's work padded to oneDNN's 16-channel block comes to 60 % of it (under a half
    from the unpadded work)."""
    cal = load_calibration(COMMITTED)
    forward = _head("aten::mkldnn_convolution", 8, 32, 1, 64)
    row = next(r for r in cal.rows("conv") if r.get("image") == [8, 32, 64, 64] and r["n"] == 1
               and r["threads"] == 2 and r["direction"] == "forward")
    predicted = CalibratedEfficiency(cal, blas="torch").host_time(forward, 2)
    assert predicted == pytest.approx(row["time_s"], rel=0.15)
    data = json.loads(json.dumps(cal.data))
    data["kernels"]["conv"] = [r for r in data["kernels"]["conv"] if r["n"] > 3 or r.get("groups", 1) > 1]
    without = CalibratedEfficiency(validate(data, "no heads"), blas="torch").host_time(forward, 2)
    assert predicted / 2 < without < predicted


@pytest.mark.parametrize(("threads", "measured_s"), [(1, 3.79e-3), (2, 1.94e-3)])
def test_3x3_convolution_heads_to_few_channels_use_their_own_points(threads: int, measured_s: float) -> None:
    """A 3x3 convolution to one or three channels runs far below the grid's 32-128 output channels'
    rate; the Zen 4 guest's calibration times one it did not measure (64 -> 1 channel on 16 x 32 x
    32: 3.76-3.83 ms at 1 thread, 1.94-1.95 ms at 2 in three runs here, ``unseen_shapes.py convs``)
    from its heads to one and three channels (suite 32). The grid's points (32-128 output channels)
    gave a fifteenth of it; the head's work padded to oneDNN's 16-channel block, which those points
    time at their own rate, gives three quarters."""
    cal = load_calibration(ROOT / "validation" / "calibration" / "epyc-zen4.json")
    forward = kernel_for("aten::mkldnn_convolution", "conv", [[16, 64, 32, 32], [1, 64, 3, 3], [1], [], [], [], []],
                         ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                         ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"], False).kernel
    predicted = CalibratedEfficiency(cal, blas="torch").host_time(forward, threads)
    assert predicted == pytest.approx(measured_s, rel=0.2)
    data = json.loads(json.dumps(cal.data))
    data["kernels"]["conv"] = [r for r in data["kernels"]["conv"]
                               if r["n"] > 3 or r.get("groups", 1) > 1 or r.get("taps", 9) == 1]
    without = CalibratedEfficiency(validate(data, "no heads"), blas="torch").host_time(forward, threads)
    assert without == pytest.approx(measured_s, rel=0.35)


def test_microbench_has_3x3_heads_to_few_channels() -> None:
    from simhpc.costs.benchsuite import load_submodule

    conv = load_submodule("conv")
    heads = [shape for shape in conv.shapes() if shape[2] <= 3]
    assert heads == [(*shape, 1) for shape in conv.NARROW_OUT] and len(heads) == 4


def test_thread_blend_interpolates_between_measured_counts_and_clamps_outside() -> None:
    """Thread counts between two measured ones weigh them linearly; outside, the nearest one alone."""
    assert thread_blend([1, 2, 4], 3) == [(2, 0.5), (4, 0.5)]
    assert thread_blend([1, 4], 2) == [(1, pytest.approx(2 / 3)), (4, pytest.approx(1 / 3))]
    assert thread_blend([1, 2, 4], 2) == [(2, 1.0)]
    assert thread_blend([2, 4], 1) == [(2, 1.0)]
    assert thread_blend([1, 2], 8) == [(2, 1.0)]
    assert thread_blend([], 2) == []


SLOW_CONV_ARGS = (["float", "float", "ScalarList", "float", "ScalarList", "ScalarList"],
                  ["", "", "[1, 1]", "", "[1, 1]", "[0, 0]"])
"""Types and values of ``_slow_conv2d_forward(input, weight, kernel_size, bias, stride, padding)``."""
MKLDNN_CONV_ARGS = (["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                    ["", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1"])
"""Types and values of ``mkldnn_convolution(input, weight, bias, padding, stride, dilation, groups)``."""


def _head(op: str, images: int, channels: int, outputs: int, side: int) -> Gemm:
    """The forward kernel of a traced 1x1 convolution ``op`` of ``channels`` -> ``outputs``."""
    image, weight = [images, channels, side, side], [outputs, channels, 1, 1]
    if op == "aten::_slow_conv2d_forward":
        shapes, (types, values) = [image, weight, [], [outputs], [], []], SLOW_CONV_ARGS
    else:
        shapes, (types, values) = [image, weight, [outputs], [], [], [], []], MKLDNN_CONV_ARGS
    kernel = kernel_for(op, "conv", shapes, types, values, False).kernel
    assert isinstance(kernel, Gemm)
    return kernel


def test_torchs_own_convolutions_are_told_from_onednns_by_their_op() -> None:
    """``_slow_conv2d_forward`` / ``_backward`` (torch's own kernels) make native kernels, oneDNN's
    ``mkldnn_convolution`` not."""
    native = _head("aten::_slow_conv2d_forward", 8, 64, 1, 64)
    onednn = _head("aten::mkldnn_convolution", 8, 64, 1, 64)
    assert native.native and native.pointwise and (native.m, native.n, native.k) == (8 * 64 * 64, 1, 64)
    assert not onednn.native and dataclasses.replace(onednn, native=True) == native
    backward = kernel_for("aten::_slow_conv2d_backward", "conv",
                          [[8, 1, 64, 64], [8, 64, 64, 64], [1, 64, 1, 1], [], [], [], []],
                          ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList"],
                          ["", "", "", "[1, 1]", "[1, 1]", "[0, 0]", "[True, True, False]"], False).kernel
    assert backward.native and backward.conv == "backward"


def test_a_native_surface_of_heads_borrows_onednns_wide_points() -> None:
    """Measured natively only at heads to one or three channels, a 1x1 convolution to 64 channels
    torch runs itself is timed from oneDNN's points of that width (the two ran within ~10 % an
    image there), and a head from the native heads, not from oneDNN's."""
    cal = load_calibration(ROOT / "validation" / "calibration" / "epyc-zen4.json")
    model = CalibratedEfficiency(cal, blas="torch")
    wide = _head("aten::_slow_conv2d_forward", 8, 256, 64, 28)
    assert model.host_time(wide, 1) == pytest.approx(model.host_time(dataclasses.replace(wide, native=False), 1),
                                                     rel=0.15)
    head = _head("aten::_slow_conv2d_forward", 8, 32, 1, 64)
    native_row = next(r for r in cal.rows("conv") if r.get("image") == [8, 32, 64, 64] and r["n"] == 1
                      and r["threads"] == 1 and r["direction"] == "forward")
    assert native_row["backend"] == "Slow2d"
    assert model.host_time(head, 1) == pytest.approx(native_row["time_s"], rel=0.15)


UNMEASURED_HEADS = [  # (op, images, channels in, out, image side, threads, measured seconds)
    ("aten::mkldnn_convolution", 16, 64, 1, 64, 1, 3.3e-3),
    ("aten::mkldnn_convolution", 16, 64, 1, 64, 2, 1.8e-3),
    ("aten::mkldnn_convolution", 16, 64, 1, 32, 1, 0.52e-3),
    ("aten::_slow_conv2d_forward", 8, 64, 1, 32, 1, 0.057e-3),
    ("aten::_slow_conv2d_forward", 4, 32, 1, 64, 1, 0.059e-3),
]
"""Forward passes of 1x1 heads the Zen 4 guest's calibration did not measure, timed as its points are
(memory kept, two or three runs each, 1.7-2.0 ms for the second); the op says which kernels ran."""


@pytest.mark.parametrize(("op", "images", "channels", "outputs", "side", "threads", "measured_s"), UNMEASURED_HEADS)
def test_a_1x1_head_is_timed_from_the_points_of_the_kernels_that_ran_it(
        op: str, images: int, channels: int, outputs: int, side: int, threads: int, measured_s: float) -> None:
    """On one thread torch runs a 1x1 head of under 16 images through its own kernels, of more
    through oneDNN's, 3-10x slower; suite 33 measures heads both ways (each point says which ran
    it), and each kernel is timed from its own. With the points of both in one surface, as before,
    these came out 73-93 % under at 1 thread (0.039 ms for the 16 x 32 x 32 oneDNN head, 0.011 ms
    for the 8 x 32 x 32 native one); now within 34 %, oneDNN's within 17 % (timed as the work of
    their output channels padded to oneDNN's block)."""
    cal = load_calibration(ROOT / "validation" / "calibration" / "epyc-zen4.json")
    head = _head(op, images, channels, outputs, side)
    predicted = CalibratedEfficiency(cal, blas="torch").host_time(head, threads)
    assert predicted == pytest.approx(measured_s, rel=0.35)
    data = json.loads(json.dumps(cal.data))
    for row in data["kernels"]["conv"]:
        row.pop("backend", None)
    mixed = CalibratedEfficiency(validate(data, "no backends"), blas="torch").host_time(head, threads)
    if threads == 1 and side == 32:
        assert mixed < measured_s / 3


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_microbench_records_which_kernels_torch_ran_a_convolution_through() -> None:
    from simhpc.costs.benchsuite import load_submodule

    conv = load_submodule("conv")
    timing = load_submodule("timing")
    native, onednn = (conv.measure_conv(images, 32, 1, 16, 1, "forward", 1, timing.QUICK, kernel=1)
                      for images in (8, 16))
    assert (native["backend"], onednn["backend"]) == ("Slow2d", "Mkldnn")
    heads = {(shape[0], shape[2]) for shape in conv.pointwise_shapes() if shape[2] <= 3}
    assert {8, 16} <= {images for images, _ in heads}


def test_a_onednn_convolution_to_few_channels_costs_its_block(cal_path: Path) -> None:
    """oneDNN computes output channels a block at a time (16 with AVX-512, 8 with AVX2): a
    convolution to fewer costs as much as one to a block, timed from the points' padded work;
    torch's own kernels (``native``) and grouped convolutions are not padded."""
    data = synthetic()
    data["kernels"]["conv"] = [
        {"dtype": "fp32", "threads": 1, "direction": "forward", "stride": 1, "m": m, "n": n, "k": k, "passes": 1,
         "time_s": 2.0 * m * n * k / (0.2 * CLOCK * 16 * 4)}
        for m in (4096, 65536) for n in (32, 128) for k in (27, 288, 1152)
    ]
    efficiency = CalibratedEfficiency(tmp_calibration(cal_path.parent / "blocks.json", data), gemm_method="linear")
    block = efficiency.products.channel_block
    assert block == (16 if "avx512f" in efficiency.calibration.host.isa_flags else 8)

    def seconds(n: int, **kind: object) -> float:
        value = efficiency.host_time(Gemm(dtype="fp32", m=16384, n=n, k=288, conv="forward", **kind), 1)
        assert value is not None
        return value

    assert seconds(1) == pytest.approx(seconds(block), rel=1e-9)
    assert seconds(block + 1) == pytest.approx(seconds(2 * block), rel=1e-9)
    assert seconds(1, native=True) < seconds(block) / 4
    assert seconds(1, groups=4, batch=4) < seconds(block, groups=4, batch=4) / 4
