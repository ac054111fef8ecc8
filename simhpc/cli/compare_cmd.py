"""``simhpc compare MEASURED [--calibration FILE] [--json] [-o OUTDIR]`` and ``--against B``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from simhpc.cli.compare_report import print_against, print_report, reasons
from simhpc.cli.main import PATH, user_errors, write_refusal
from simhpc.costs.benchsuite import MicrobenchError, load_suite
from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import Calibration, host_specs, host_warnings, load_calibration
from simhpc.costs.far_points import cores_during
from simhpc.costs.model import CostModel
from simhpc.errors import SimhpcError
from simhpc.hardware.host import committed_calibrations, detect_host
from simhpc.report.comparison import plot_comparison, write_ops_csv
from simhpc.trace.against import compare_traces
from simhpc.trace.compare import (
    LARGE_PRODUCT_S,
    SPEED_RATIO_BOUNDS,
    Comparison,
    compare_trace,
    default_blas,
)
from simhpc.trace.core_distance import calibration_round_trip, capture_round_trips, distance_warning
from simhpc.trace.readers import read_trace
from simhpc.trace.records import DEVICE_CATEGORIES, Trace
from simhpc.trace.step_ops import FRAMEWORK_KINDS
from simhpc.trace.thread_count import best_fit, calibrated_thread_counts, loose_fit_warning, thread_misfits


class CompareError(SimhpcError):
    """A trace cannot be compared (no modellable ops, bad options)."""


MAX_THREADS = 4096
"""Most threads a trace may say it ran on (a larger count is a corrupt file, not a CPU)."""


def _threads(trace: Trace, option: int | None, default: int) -> tuple[int, str]:
    """Threads to predict with and where the count came from (``option``, ``trace`` or ``host``)."""
    if option is not None:
        if not 1 <= option <= MAX_THREADS:
            raise CompareError(f"--threads must be from 1 to {MAX_THREADS}, got {option}")
        return option, "option"
    if "num_threads" not in trace.metadata:
        return default, "host"
    recorded = trace.metadata["num_threads"]
    if not isinstance(recorded, int) or isinstance(recorded, bool) or not 1 <= recorded <= MAX_THREADS:
        raise CompareError(f"{trace.source}: num_threads: {recorded!r} is not a CPU thread count "
                           f"(a whole number from 1 to {MAX_THREADS}); give --threads")
    return recorded, "trace"


def thread_range_warning(cal: Calibration, threads: int, threads_from: str) -> str | None:
    """Why ``threads`` lies outside what ``cal`` measured (above its largest measured thread count or
    its host's cores: the model extrapolates), or None."""
    measured = cal.thread_counts("gemm")
    top = min(max(measured, default=cal.host.cores), cal.host.cores)
    if threads <= top:
        return None
    given = {"option": f"--threads {threads}", "trace": f"the trace's num_threads ({threads})"}.get(
        threads_from, f"{threads} threads")
    return (f"{given} is above the calibrated range of {cal.source} (threads measured: "
            f"{', '.join(map(str, measured)) or 'none'}; its host has {cal.host.cores} cores): predictions "
            f"extrapolate its {top}-thread points to {threads} threads (calibrate a host with that many cores)")


def speed_warning(comparison: Comparison, cal: Calibration) -> str | None:
    """Why the trace's large products (:attr:`~simhpc.trace.compare.Comparison.product_speed_ratio`)
    say the calibration may describe another machine, naming the other committed calibrations of
    this kind of machine (guests alike in every fact the OS shows ran 1.3x apart); None where they
    do not."""
    ratio = comparison.product_speed_ratio
    low, high = SPEED_RATIO_BOUNDS
    if ratio is None or low <= ratio <= high:
        return None
    others = [os.path.relpath(path) for path in committed_calibrations()
              if path.resolve() != Path(cal.source).resolve()]
    return (f"the trace's {len(comparison.large_products())} products of {LARGE_PRODUCT_S * 1e3:g} ms or more "
            f"took {ratio:.2f}x their predicted time (median): {cal.source} may describe a "
            f"{'slower' if ratio < 1 else 'faster'} machine than the one that ran it (another model or clock)"
            + (f"; committed calibrations of this kind of machine: {', '.join(others)} (--calibration)"
               if others else "; calibrate on that machine"))


@click.command("compare")
@click.argument("measured", type=PATH)
@click.option(
    "--calibration",
    type=PATH,
    default=None,
    help="Calibration file (default: $SIMHPC_CALIBRATION, else the committed calibration in "
    "validation/calibration/ of this kind of machine, or of the one most like it).",
)
@click.option(
    "--against",
    type=PATH,
    default=None,
    help="Align MEASURED with this trace instead of predicting it (per track and span name).",
)
@click.option(
    "--threads",
    type=int,
    default=None,
    help="Threads the trace ran on (default: its num_threads metadata, else the count whose predictions fit "
    "its large products best, else all host cores).",
)
@click.option(
    "--blas",
    type=click.Choice(["torch", "numpy"]),
    default=None,
    help="Whose measured GEMMs predict the trace's (default: torch for a torch.profiler export when the "
    "calibration has torch points, else numpy).",
)
@click.option(
    "--cache",
    type=click.Choice(["cold", "warm"]),
    default=None,
    help="Memory-bound ops no faster than from DRAM (cold, the default: operands of a framework op inside a "
    "step) or at the cache-warm rates of repeated calls (warm).",
)
@click.option(
    "--cores",
    type=click.Choice(["near", "far"]),
    default=None,
    help="Where the trace's threads ran: on cores near each other or far apart (default: as the round trips "
    "the capture recorded say, else near). Cloud guests' vCPUs are moved between the two for minutes at a "
    "time; only validation/traces/capture.py records which.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON object only.")
@click.option(
    "-o",
    "--outdir",
    type=PATH,
    default=None,
    help="Folder for comparison.json, ops.csv and predicted_vs_measured.png (default: runs/compare-<trace name>).",
)
@click.option("--worst", type=click.IntRange(min=1), default=10, show_default=True, help="How many worst ops to list.")
@user_errors
def command(
    measured: Path,
    calibration: Path | None,
    against: Path | None,
    threads: int | None,
    blas: str | None,
    cache: str | None,
    cores: str | None,
    as_json: bool,
    outdir: Path | None,
    worst: int,
) -> None:
    """Predict every op of a measured trace (torch.profiler / Chrome JSON, or the one trace file in a
    tensorboard_trace_handler folder) with the calibrated cost model.

    Reports measured vs predicted step time, MAPE per op kind, the worst ops, the ops it could not
    model, and a figure of predicted vs measured time per op. With --against B, aligns two traces.
    """
    trace = read_trace(measured)
    stem = measured.name.removesuffix(".gz").removesuffix(".json")
    if against is not None:
        given = [name for name, value in (("--calibration", calibration), ("--threads", threads),
                                          ("--blas", blas), ("--cache", cache), ("--cores", cores))
                 if value is not None]
        if given:
            raise CompareError(f"{given[0]} sets how ops are predicted; --against aligns two traces as "
                               "they are and predicts nothing")
        result = compare_traces(trace, read_trace(against))
        result["warnings"] = []
        if not result["matched_tracks"] and not result["matched_names"]:
            result["warnings"].append("the two traces share no track and no span name: they name their "
                                      "timelines differently, so nothing could be aligned")
        for warning in result["warnings"]:
            click.echo(f"warning: {warning}", err=True)
        if outdir is not None:
            try:
                outdir.mkdir(parents=True, exist_ok=True)
                (outdir / "comparison.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            except OSError as error:
                raise CompareError(f"{outdir}: cannot write ({write_refusal(error)})") from None
        if as_json:
            click.echo(json.dumps(result, indent=1))
        else:
            print_against(result, worst)
        return
    if not any(op.kind in FRAMEWORK_KINDS for op in trace.ops):
        what = ("a torch.profiler export that recorded no ops" if trace.format == "torch.profiler"
                else "a torch.profiler export with record_shapes=True is expected")
        unread = ", ".join(f"{count} {reason}" for reason, count in sorted(trace.skipped.items()))
        what += f"; events not read: {unread}" if unread else ""
        raise CompareError(f"{measured}: no framework ops found ({what}); to align two timelines use --against")
    on_device = [op for op in trace.ops if op.category in DEVICE_CATEGORIES]
    if on_device:
        raise CompareError(
            f"{measured}: ran on a GPU ({len(on_device)} device kernels and copies, e.g. "
            f"{on_device[0].name!r}); the calibration describes this host's CPU, and a GPU run's CPU ops "
            f"only launch work; to align it with a simulated timeline use --against"
        )
    if not any(op.shapes for op in trace.ops if op.kind in FRAMEWORK_KINDS):
        raise CompareError(
            f"{measured}: its ops carry no input shapes (recorded without record_shapes=True), so "
            f"none can be predicted; capture with torch.profiler.profile(record_shapes=True)"
        )
    cal = load_calibration(calibration)
    try:
        suite_version = load_suite().SUITE_VERSION
    except MicrobenchError:
        suite_version = None
    warnings: list[str] = []

    def warn(text: str) -> None:
        warnings.append(text)
        click.echo(f"warning: {text}", err=True)

    for warning in host_warnings(cal, detect_host(), suite_version):
        warn(warning)
    cpu, _ = host_specs(cal)
    used, threads_from = _threads(trace, threads, cal.host.cores)
    backends = cal.gemm_backends()
    if trace.format == "torch.profiler" and "torch" not in backends:
        warn(f"{cal.source} was calibrated without torch: products are timed from numpy's "
             "BLAS and ATen ops from the C kernels, which torch's own kernels can run far from "
             "(calibrate where torch is installed)")
    chosen = blas or default_blas(trace, backends)
    if chosen not in backends:
        raise CompareError(
            f"--blas {chosen}: {cal.source} has no GEMM points measured through {chosen} "
            f"(it has: {', '.join(backends)}); re-run 'simhpc calibrate' where that BLAS is installed"
        )
    capture_round_trips_s, calibration_round_trip_s = capture_round_trips(trace), calibration_round_trip(cal)
    cores_from = "option" if cores else "capture" if capture_round_trips_s else "default"
    cores = cores or cores_during(capture_round_trips_s, cal)
    cache = cache or "cold"
    model = CostModel(CalibratedEfficiency(cal, blas=chosen, cache=cache, cores=cores))
    if threads_from == "host":
        misfits = thread_misfits(trace, model, cpu, calibrated_thread_counts(cal))
        if misfits is not None:
            used, threads_from = best_fit(misfits), "inferred"
            loose = loose_fit_warning(misfits)
            if loose is not None:
                warn(loose)
    beyond = thread_range_warning(cal, used, threads_from)
    if beyond is not None:
        warn(beyond)
    far = distance_warning(capture_round_trips_s, calibration_round_trip_s, used)
    if far is not None:
        warn(far)
    comparison = compare_trace(trace, model, cpu, used)
    if comparison.ops_total == 0 or comparison.measured_step_s <= 0:
        skipped = reasons(comparison.skipped_events)
        raise CompareError(f"{measured}: nothing to compare, no op of positive duration"
                           + (f" (events skipped: {skipped})" if skipped else ""))
    speed = speed_warning(comparison, cal)
    if speed is not None:
        warn(speed)
    summary = comparison.summary(worst)
    summary["calibration"] = cal.source
    summary["blas"] = chosen
    summary["cores"] = cores
    summary["cores_from"] = cores_from
    summary["distance_estimated_products"] = model.efficiency.products.distance_estimated
    summary["cache"] = cache
    summary["threads_from"] = threads_from
    summary["capture_round_trips_s"] = capture_round_trips_s
    summary["calibration_round_trip_s"] = calibration_round_trip_s
    summary["warnings"] = warnings
    folder = outdir or Path("runs") / f"compare-{stem}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "comparison.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        write_ops_csv(comparison, folder / "ops.csv")
        plot_comparison(comparison, folder / "predicted_vs_measured.png")
    except OSError as error:
        raise CompareError(f"{folder}: cannot write the report ({write_refusal(error)})") from None
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    print_report(comparison, summary, worst)
    click.echo(f"wrote {folder / 'comparison.json'}, {folder / 'ops.csv'}, {folder / 'predicted_vs_measured.png'}")
