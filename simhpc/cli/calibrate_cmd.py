"""``simhpc calibrate [-o FILE] [--quick]``: run the real-kernel microbenchmarks on this host
(``--merge``, ``--repair``: combine calibrations already measured)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from simhpc.cli.main import PATH, user_errors, write_refusal
from simhpc.costs.benchsuite import MicrobenchError, load_suite, suite_dir
from simhpc.costs.calibration_file import (
    Calibration,
    CalibrationError,
    build_calibration,
    load_calibration,
    write_calibration,
)
from simhpc.costs.calibration_merge import OUTLIER_RATIO, merge_calibrations, reference_seconds, repair_outliers
from simhpc.hardware.host import HostFacts, default_calibration, detect_host, native_half_types
from simhpc.units import format_bandwidth, format_rate, format_time

BUSY_RUNNABLE = 0.25
"""Warn when more than this many other tasks per CPU are runnable as calibration starts."""
DEADLINE_S = 170.0
"""A full calibration ends within this (the target is under 3 minutes on 2 cores): the torch
GEMMs' second-round repeats, measured last, are dropped when time runs short."""


def _runnable_now() -> int:
    """Runnable tasks other than this one (``procs_running`` of /proc/stat; 0 if unknown)."""
    try:
        for line in Path("/proc/stat").read_text(encoding="utf-8").splitlines():
            if line.startswith("procs_running"):
                return max(0, int(line.split()[1]) - 1)
    except (OSError, ValueError):
        pass
    return 0


def _other_runnable(samples: int = 9, interval_s: float = 0.02) -> int:
    """Runnable tasks other than this one: the median of a few snapshots over ``samples x
    interval_s`` (one snapshot often catches a short-lived task of a quiet machine)."""
    counts = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        counts.append(_runnable_now())
    return statistics.median_low(counts)


def _write(data: dict[str, Any], output: Path) -> None:
    try:
        write_calibration(data, output)
    except OSError as error:
        raise MicrobenchError(f"{output}: cannot write ({write_refusal(error)})") from None


@click.command("calibrate")
@click.option(
    "-o",
    "--output",
    type=PATH,
    default=Path("calibration.json"),
    show_default=True,
    help="Calibration file to write.",
)
@click.option("--quick", is_flag=True, help="A few points per kernel (seconds): a smoke test, not a calibration.")
@click.option(
    "--merge",
    "merge",
    multiple=True,
    type=PATH,
    help="Measure nothing: combine these calibrations of one host (repeat the option), keeping each "
    "point's fastest measurement (on a machine whose speed drifts, the min-of-N estimate).",
)
@click.option(
    "--repair",
    is_flag=True,
    help=f"With --merge: keep the first file and replace only its points more than {OUTLIER_RATIO}x "
    "from their median over all the files (measured by at least three) with the median measurement.",
)
@click.option(
    "--reference",
    type=PATH,
    help="An earlier calibration of this kind of machine: points that read over 1.15x its time are "
    "measured again after the first round, the faster kept. Default: the committed calibration of "
    "this kind of machine, where there is one.",
)
@click.option("--no-reference", is_flag=True, help="Measure no point again for being slower than a reference.")
@user_errors
def command(output: Path, quick: bool, merge: tuple[Path, ...], repair: bool, reference: Path | None,
            no_reference: bool) -> None:
    """Time real kernels on this machine and write a calibration file.

    GEMM through numpy's BLAS and, when torch is importable, through PyTorch's (fp32/fp64,
    1 and all threads; points tagged with their 'blas'; narrow, matrix-vector, cold and 16-bit products),
    with torch also convolutions, fused attention, LSTM layers, pooling and ATen pointwise ops;
    elementwise maps, reductions (cache-warm and cold), layout-changing copies, STREAM
    copy/triad, a pointer-chase latency curve, the AMR 7-point stencil and hash-table probes
    (C, built with gcc), the round trip of a cache line between two cores at the
    start and the end, and an L1 probe before every point (how many were measured while another
    hardware thread shared the core). Points over 1.15x their time in a reference calibration of
    this kind of machine are measured again after the first round. Pass the file to
    'simhpc compare --calibration FILE' or set
    SIMHPC_CALIBRATION=FILE; else the committed calibration (validation/calibration/) of this
    kind of machine, or of the one most like it, is the catalog's 'host' CPU.
    """
    err = Console(stderr=True)
    _check_output(output)
    if merge and quick:
        raise MicrobenchError("--quick sets what to measure and --merge measures nothing: give one of them")
    if reference is not None and (no_reference or merge):
        raise MicrobenchError("--reference needs a measuring run without --no-reference or --merge")
    if repair:
        if len(merge) < 3:
            raise MicrobenchError("--repair needs the file to repair and at least two others, each given with --merge")
        base, *others = (load_calibration(path) for path in merge)
        repaired, count = repair_outliers(base, others)
        _write(repaired, output)
        click.echo(f"repaired {count} points of {merge[0]} (over {OUTLIER_RATIO}x from their median over "
                   f"{len(merge)} calibrations) into {output}")
        return
    if merge:
        _write(merge_calibrations([load_calibration(path) for path in merge]), output)
        click.echo(f"merged {len(merge)} calibrations (each point's fastest) into {output}")
        return
    suite = load_suite()
    host = detect_host()
    busy = _other_runnable()
    if busy > BUSY_RUNNABLE * host.logical_cpus:
        err.print(
            f"warning: this machine is busy ({busy} other runnable tasks on {host.logical_cpus} CPUs): "
            "measurements will be slower and noisier than the hardware can do"
        )
    if importlib.util.find_spec("torch") is None:
        err.print(
            "warning: torch is not installed, so its products (16-bit ones too), convolutions, pooling, "
            "ATen pointwise ops and dispatch costs are not measured: 'simhpc compare' of torch.profiler "
            "traces then times products from numpy's BLAS and lists what it cannot time "
            "(.venv/bin/pip install torch==2.13.0 to measure them)"
        )
    baseline = None if quick or no_reference else _reference(reference, host, err)
    start = time.perf_counter()
    try:
        native_half = native_half_types(host.isa_flags)
        tasks = suite.plan(host.cores, host.last_level_cache, quick=quick, native_half=native_half)
        with Progress(
            TextColumn("[bold]calibrate[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err,
            transient=True,
            disable=not sys.stderr.isatty(),
        ) as progress:
            bar = progress.add_task("building kernels", total=len(tasks))
            native = sys.modules[f"{suite.__name__}.native"]
            native.library()

            done = 0

            def advance(label: str) -> None:
                nonlocal done
                progress.update(bar, description=label, completed=done)
                done += 1

            left = None if quick else DEADLINE_S - (time.perf_counter() - start)
            l1 = next((cache.size for cache in host.caches if cache.name == "L1D"), None)
            results = suite.run(tasks, advance, deadline_s=left, l1_bytes=l1,
                                round_trips=suite.peers_available(host.cores),
                                reference=reference_seconds(baseline) if baseline else None)
            if baseline:
                results["probes"]["slower than reference"]["reference"] = Path(baseline.source).name
    except RuntimeError as error:  # BuildError, missing threadpoolctl, a kernel that failed
        raise MicrobenchError(f"calibration failed: {error}") from None
    wall = time.perf_counter() - start
    microbench = {
        "suite_version": suite.SUITE_VERSION,
        "source_hash": native.source_hash(),
        "profile": "quick" if quick else "full",
        "wall_time_s": round(wall, 1),
        "first_round_s": round(results.get("first_round_s", wall), 1),
        "other_runnable": [busy, _other_runnable()],
        "folder": suite_dir().name,
    }
    created = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = build_calibration(host, results["kernels"], results["probes"], microbench, created)
    _write(data, output)
    derived = data["derived"]
    points = sum(len(rows) for rows in data["kernels"].values())
    click.echo(
        f"{host.cpu_model}: {host.cores} cores, {host.simd_isa} ({derived['vector_bits']}-bit, "
        f"{derived['fma_units']} FMA units), clock {derived['clock_hz'] / 1e9:.2f} GHz; "
        f"peak fp64 {format_rate(derived['peak_flops_per_core']['fp64'] * host.cores)}, "
        f"fp32 {format_rate(derived['peak_flops_per_core']['fp32'] * host.cores)}"
    )
    click.echo(
        f"DRAM {format_bandwidth(derived['memory_bandwidth'])} (1 core "
        f"{format_bandwidth(derived['core_bandwidth'])}), latency {format_time(derived['memory_latency'])}"
    )
    _echo_round_trips(data["probes"])
    _echo_l1_probe(data["probes"])
    _echo_reference(data["probes"], points)
    skipped = results.get("repeats_skipped", 0)
    click.echo(f"wrote {output}: {points} measured points in {wall:.0f} s"
               + (f" ({skipped} second-round repeats skipped to finish within {DEADLINE_S:.0f} s)" if skipped else ""))


def _check_output(output: Path) -> None:
    """Refuse an output path the calibration could not be written to, before minutes of measuring."""
    folder = output.parent
    if not folder.exists():
        raise MicrobenchError(f"{output}: folder {folder} does not exist")
    if not folder.is_dir():
        raise MicrobenchError(f"{output}: {folder} is not a folder")
    if output.is_dir():
        raise MicrobenchError(f"{output}: is a folder; give the file to write, e.g. {output / 'calibration.json'}")
    if output.exists() and not output.is_file():
        raise MicrobenchError(f"{output}: not a regular file (a pipe or a device?)")
    if not os.access(folder, os.W_OK | os.X_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise MicrobenchError(f"{output}: not writable")


def _reference(named: Path | None, host: HostFacts, err: Console) -> Calibration | None:
    """The calibration whose times pick the points to measure again: ``named``, else the default
    calibration where it measured this kind of machine (None otherwise, with a warning for a named
    file of another machine)."""
    if named is None:
        path = default_calibration(host)
        if not path.exists():
            return None
        try:
            calibration = load_calibration(path)
        except CalibrationError:
            return None
        return calibration if calibration.host.same_machine(host) else None
    calibration = load_calibration(named)
    if not calibration.host.same_machine(host):
        err.print(f"warning: {named} measured another kind of machine than this one; "
                  "no point is measured again for being slower than it")
        return None
    return calibration


KEPT_SLOW_WARNING = 0.05
"""Share of a run's points kept over the reference's threshold (found slow by nothing else) above which
``calibrate`` warns: 6.3-7.8 % in the three fresh checks on a busy Zen 4 host, whose 2-thread CNN
came out 11.9-17.9 % over, 0.7-3.2 % in the four others (``validation/README.md``, session 37)."""


def _echo_reference(probes: dict, points: int) -> None:
    """Print how many points read slower than the reference and how many of them were measured again;
    warn when more than :data:`KEPT_SLOW_WARNING` of the ``points`` are kept slow."""
    slow = probes.get("slower than reference")
    if not slow:
        return
    scaled = slow.get("scaled") or {}
    scale = (" (its times scaled by this run's median ratio to them: "
             + ", ".join(f"{section} {ratio:g}" for section, ratio in scaled.items()) + ")") if scaled else ""
    click.echo(f"{slow['points']} points over {slow['threshold']}x their time in {slow['reference']}{scale}: "
               f"{slow['retaken']} measured again, {slow['kept_slow']} kept over it")
    if slow["kept_slow"] > KEPT_SLOW_WARNING * points:
        click.echo(f"warning: {slow['kept_slow']} of {points} points are kept over {slow['threshold']}x their time "
                   f"in {slow['reference']} (the host was busy, and there was no time to measure them all "
                   f"again): the ops timed from them may be predicted slow; {MERGE_ADVICE}", err=True)


SHARED_CORE_WARNING = 0.2
"""Share of the points measured on a shared core above which ``calibrate`` warns: the microbenchmark
runner's ``SHARED_RETAKE_SHARE``, above which it keeps them as measured."""


def _echo_l1_probe(probes: dict) -> None:
    """Print the L1 probe taken before every point and how many points were measured while another
    hardware thread shared the core; warn when that is more than :data:`SHARED_CORE_WARNING` of them."""
    probe = probes.get("L1 probe")
    if not probe:
        return
    points = probe["samples"]
    shared = probe["shared_points"]
    retaken = f", {probe['retaken']} of them measured again" if probe.get("retaken") else ""
    click.echo(f"L1 probe before each point: fastest {format_time(probe['fastest_s'])}, median "
               f"{format_time(probe['median_s'])}, 90th percentile {format_time(probe['p90_s'])}; {shared} of "
               f"{points} points measured on a shared core (over {probe['slowdown_threshold']}x the fastest)"
               + retaken)
    if shared > SHARED_CORE_WARNING * points:
        click.echo(f"warning: another hardware thread shared this core's L1 for {shared / points:.0%} of the "
                   "points (the host ran something beside this machine's CPU): cache-resident kernels then run "
                   "up to 1.6x slower, and so many are kept as measured; calibrate again in a quieter moment and "
                   "combine the runs with --merge", err=True)


ROUND_TRIP_DRIFT = 1.5
"""Start-to-end ratio of the cores' median round trip above which ``calibrate`` warns (a run without
a reading before each point)."""
KEPT_FAR_WARNING = 0.1
"""Share of the multi-thread points kept from a measurement with the cores far apart above which
``calibrate`` warns."""
MERGE_ADVICE = "calibrate again and combine the runs with --merge"


def _echo_round_trips(probes: dict) -> None:
    """Print the cores' round trip at the start and the end of the run and before each multi-thread
    point, and warn when many of those points are kept from a measurement with the cores far apart
    (the host moved this machine's vCPUs; small multi-thread products then take up to 3x longer),
    or, in a run without the readings before each point, when the round trip moved."""
    start, end = probes.get("peer round trip"), probes.get("peer round trip at the end")
    if not start:
        return
    shown = [f"{what} {format_time(probe['round_trip_s'])} ({format_time(probe['min_s'])}-"
             f"{format_time(probe['max_s'])})" for what, probe in (("start", start), ("end", end)) if probe]
    click.echo("cores' round trip (median of bursts, fastest-slowest): " + ", ".join(shown))
    before = probes.get("round trip before points")
    if before:
        click.echo(f"cores' round trip before each multi-thread point: fastest {format_time(before['fastest_s'])}, "
                   f"median {format_time(before['median_s'])}; {before['far_points']} of {before['samples']} "
                   f"points measured far apart (over {before['far_threshold']}x the fastest), "
                   f"{before['retaken']} of them measured again after the first round; {before['kept_far']} "
                   "kept from a measurement far apart")
        if before["kept_far"] > KEPT_FAR_WARNING * before["samples"]:
            click.echo(f"warning: {before['kept_far']} of {before['samples']} multi-thread points are kept from a "
                       "measurement with the cores far apart (the host moved this machine's CPUs): they may be "
                       f"slow; {MERGE_ADVICE}", err=True)
    elif end and max(start["round_trip_s"], end["round_trip_s"]) > ROUND_TRIP_DRIFT * min(
            start["round_trip_s"], end["round_trip_s"]):
        click.echo("warning: the round trip between two cores moved during the run (the host moved this "
                   f"machine's CPUs): multi-thread points may be slow; {MERGE_ADVICE}", err=True)

