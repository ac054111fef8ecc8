"""``simhpc compare MEASURED [--calibration FILE] [--json] [-o OUTDIR]`` and ``--against B``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

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
    percent_error,
)
from simhpc.trace.core_distance import calibration_round_trip, capture_round_trips, distance_warning
from simhpc.trace.page_charges import EVENTS_AND_HEAP_GROWTH, HEAP_GROWTH
from simhpc.trace.readers import read_trace
from simhpc.trace.records import DEVICE_CATEGORIES, OPTIMIZER_STEPS, REPEATED_RUNS, Trace
from simhpc.trace.step_ops import FRAMEWORK_KINDS
from simhpc.trace.thread_count import best_fit, calibrated_thread_counts, loose_fit_warning, thread_misfits
from simhpc.units import counted, format_time


class CompareError(SimhpcError):
    """A trace cannot be compared (no modellable ops, bad options)."""


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else format_time(seconds)


MAX_THREADS = 4096
"""Most threads a trace may say it ran on (a larger count is a corrupt file, not a CPU)."""
HEAP_NOTE_SHARE = 0.05
"""Note the heap page faults a trace may hide when they could reach this share of its step."""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def _mape(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


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


_THREADS_FROM = {
    "option": "",
    "trace": "",
    "host": " (all host cores: the trace does not record its thread count; give --threads if it ran on fewer)",
    "inferred": " (the trace does not record its thread count: the one whose predictions fit its large products "
                "best; give --threads to set it)",
}


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


def _distance_note(cores: str, cores_from: str, estimated: int, threads: int) -> str:
    """What the report's first line says of the products measured in the other state of the cores
    (nothing for a 1-thread trace, timed from 1-thread points)."""
    if threads <= 1:
        return ""
    if cores == "far":
        told = "as the capture read them" if cores_from == "capture" else "as --cores says"
        return (f" (the cores far apart, {told}: {estimated} multi-thread ones measured near "
                "taken at their far speed-up)")
    if not estimated:
        return ""
    unknown = ("; the trace does not record where its threads ran: --cores far times them far apart"
               if cores_from == "default" else "")
    return f" ({estimated} multi-thread ones measured with the cores far apart taken at their near speed-up{unknown})"


def _steps(summary: dict[str, Any]) -> str:
    """How many steps the report's figures are over, and what marked them."""
    if summary["steps_from"] == OPTIMIZER_STEPS:
        return (f"{counted(summary['steps'], 'training step')} (each to the end of an optimizer.step(): the "
                "trace marks no ProfilerStep, profiled without a schedule)")
    if summary["steps_from"] == REPEATED_RUNS:
        return (f"{counted(summary['steps'], 'step')} (the runs of one sequence of top-level ops it repeats: the "
                "trace marks no ProfilerStep and no optimizer.step())")
    return f"{summary['steps'] or 'no'} profiler steps"


def _print_report(comparison: Comparison, summary: dict[str, Any], worst: int) -> None:
    console = Console()
    console.print(
        f"[bold]{comparison.source}[/]: {_steps(summary)}, "
        f"{counted(comparison.threads, 'thread')}"
        f"{_THREADS_FROM[summary['threads_from']]}, {summary['ops_modelled']} of "
        f"{summary['ops_total']} ops modelled; "
        f"GEMMs predicted from the {summary['blas']} BLAS points of {summary['calibration']}"
        + _distance_note(summary["cores"], summary["cores_from"], summary["distance_estimated_products"],
                         comparison.threads)
    )
    what = "step time" if summary["steps"] else "time from the first op to the last"
    console.print(
        f"{what}: measured {format_time(comparison.measured_step_s)}, predicted "
        f"{format_time(comparison.predicted_step_s)} ({_pct(comparison.step_error_pct)})"
    )
    unmodelled = comparison.unmodelled_step_s
    if unmodelled > 0 and comparison.measured_step_s > 0:
        console.print(
            f"not in the prediction: {format_time(unmodelled)} a step measured in the "
            f"{summary['ops_unmodelled']} ops not modelled ({100 * unmodelled / comparison.measured_step_s:.1f} % "
            "of it; the last table)"
        )
    growth = comparison.heap_growth_step_s
    if growth > 0:
        returned = comparison.heap_growth_unmap_s
        without = comparison.predicted_step_s - growth - returned
        console.print(
            f"without the {format_time(growth)} a step of page faults estimated from the heap's growth (below)"
            + (f" and the {format_time(returned)} of giving their pages back" if returned > 0 else "") + ": "
            f"predicted {format_time(without)} ({_pct(percent_error(without, comparison.measured_step_s))}); "
            "a plain process meets either, as the holes its earlier allocations left decide "
            "(validation/README.md, session 40)"
        )
    outside = comparison.outside_ops_s
    if outside is not None and comparison.measured_step_s > 0:
        console.print(
            f"outside any op: {format_time(outside)} a step "
            f"({100 * outside / comparison.measured_step_s:.1f} % of it: Python and framework time between "
            f"ops); predicted {format_time(comparison.call_gaps_s)}, a calibrated gap per top-level op "
            "(between two calls from Python or from the autograd engine; a step's start and its backward's "
            "entry and exit by the bytes moved since they last ran)"
        )
    grown = comparison.first_touch_basis == HEAP_GROWTH
    if comparison.first_touch_step_s > 0:
        fresh = sum(1 for p in comparison.predictions if p.first_touch_s > 0)
        if comparison.first_touch_basis in ("memory events", EVENTS_AND_HEAP_GROWTH):
            why = ("into pages no earlier allocation of the trace covered, by its memory events: the heap's "
                   "growth and the blocks malloc maps on its own (in the ops' predictions)")
            if comparison.first_touch_basis == EVENTS_AND_HEAP_GROWTH:
                why += ("; or, where more, each profiled step's blocks of its largest heap size (1 to 32 MiB), "
                        "which glibc's heap trims put on pages given back to the system, as the events do not show "
                        "(the part of each above the heap's lowest top since it was freed)")
        else:
            why = ("tensors of 32 MiB or more, which glibc's malloc maps afresh (in the ops' predictions; a large "
                   "enough free chunk at the heap's top serves one without faults, as what the process freed "
                   "before decides, which a trace without memory events does not record)")
            if grown:
                why += ("; or, in each profiled step (the whole trace where it marks none), the blocks of its "
                        "largest heap size (1 to 32 MiB), which the heap's growth under the profiler puts on new pages")
        console.print(
            f"first touch: {format_time(comparison.first_touch_step_s)} a step of page faults predicted, "
            f"{fresh} ops writing {why}"
        )
    faults = comparison.capture_page_faults_per_step
    if faults is not None:
        console.print(
            f"page faults: {comparison.fresh_pages_per_step:.0f} pages a step predicted fresh; the capture "
            f"counted {faults:.0f} page faults a step in its process (getrusage, every thread's)"
        )
    if comparison.activations_step_s > 0:
        convolutions = sum(1 for p in comparison.predictions if p.activations_s > 0)
        console.print(
            f"convolutions' activations: {format_time(comparison.activations_step_s)} a step fetched from memory, "
            f"the trace's {convolutions} NCHW convolutions (in their predictions: the calibration's loops found "
            "their images in cache, a training step's other traffic leaves them in memory)"
        )
    if comparison.evicted_code_step_s > 0:
        evicted = sum(1 for p in comparison.predictions if p.evicted_code_s > 0) / max(1, comparison.steps)
        console.print(
            f"evicted code: {format_time(comparison.evicted_code_step_s)} a step, {evicted:.0f} ops a step whose "
            "code the data touched since their last call evicted from the last-level cache (the calibration's "
            "evicted_call each)"
        )
    if comparison.unmap_s > 0:
        console.print(
            f"freed memory: {format_time(comparison.unmap_s)} a step giving written pages back to the kernel: "
            "the blocks glibc mapped on their own, unmapped as they are freed, and, where the trace does not "
            "record its malloc's settings (glibc's defaults), the heap pages its trims give back, one for each "
            "page written fresh (the calibration's unmap cost a page; in the step, not in any op's prediction)"
        )
    exposed = comparison.heap_faults_if_fresh_s
    if exposed is not None and exposed > HEAP_NOTE_SHARE * comparison.measured_step_s:
        console.print(
            f"note: the trace does not say how its process's malloc was set; with glibc's defaults, tensors of "
            f"1 to 32 MiB are often written into fresh pages too (heap trims): {format_time(exposed)} a step of "
            "page faults if all were, beyond those predicted (validation/traces/capture.py keeps freed memory)"
        )
    if grown or (comparison.steps and comparison.first_touch_basis == "shapes"):
        estimated = ("estimated as each step's largest heap blocks" if grown
                     else "predicted only for blocks of 32 MiB or more")
        console.print(
            "note: the trace has no allocation events (profile with profile_memory=True): under the profiler a "
            f"training loop's heap grows, and the tensors written into its new pages are {estimated} "
            "(validation/README.md, sessions 32 and 34)"
        )
    kinds = Table(title="per op kind (ops with a kernel; self time)", title_justify="left")
    for column in ("kind", "ops", "measured", "predicted", "error", "MAPE", "repeats"):
        kinds.add_column(column, justify="left" if column == "kind" else "right")
    for kind, row in comparison.kinds.items():
        kinds.add_row(
            kind,
            str(int(row["ops"])),
            _fmt(row["measured_s"]),
            _fmt(row["predicted_s"]),
            _pct(row.get("total_error_pct")),
            _mape(row.get("mape_pct")),
            _mape(row.get("repeat_mape_pct")),
        )
    console.print(kinds)
    console.print("repeats: the MAPE of each recurring op against its own median over the steps, the floor of "
                  "step-to-step variation under the kind's MAPE")
    bad = Table(title=f"worst {worst} ops (absolute error)", title_justify="left")
    for column in ("op", "shapes", "measured", "predicted", "error"):
        bad.add_column(column, justify="left" if column in ("op", "shapes") else "right")
    for row in summary["worst_ops"]:
        bad.add_row(
            row["name"],
            row["shapes"][:48],
            _fmt(row["measured_s"]),
            _fmt(row["predicted_s"]),
            _pct(row["error_pct"]),
        )
    console.print(bad)
    if comparison.unmodelled:
        missing = Table(title=f"not modelled: {summary['ops_unmodelled']} ops", title_justify="left")
        for column in ("op", "count", "measured", "why"):
            missing.add_column(column, justify="right" if column in ("count", "measured") else "left")
        for name, row in comparison.unmodelled.items():
            missing.add_row(name, str(row["count"]), _fmt(row["measured_s"]), row["reason"])
        console.print(missing)
    else:
        console.print("every op was modelled")
    if comparison.skipped_events:
        console.print(_skipped_line(comparison.skipped_events), markup=False)
    for what, count in comparison.notes.items():
        console.print(f"note: {count} {what}", markup=False)


def _reasons(skipped: dict[str, int]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in sorted(skipped.items()))


def _skipped_line(skipped: dict[str, int], what: str = "events") -> str:
    return f"{what} skipped while reading (in no count above): {_reasons(skipped)}"


def _print_against(result: dict[str, Any], limit: int) -> None:
    console = Console()
    console.print(f"A = {result['a']}\nB = {result['b']}")
    console.print(
        f"span: A {format_time(result['a_span_s'])}, B {format_time(result['b_span_s'])} "
        f"({_pct(result['span_diff_pct'])})"
    )
    if result["steps"]:
        steps = result["steps"]
        console.print(
            f"step: A {format_time(steps['a_step_s'])}, B {format_time(steps['b_step_s'])} ({_pct(steps['diff_pct'])})"
        )
    rows = sorted(result["tracks"], key=lambda row: (row["diff_pct"] is None,  # in both first, largest
                                                     -abs((row["a_busy_s"] or 0.0) - (row["b_busy_s"] or 0.0))))
    shown = f"; the {limit} largest differences of {len(rows)}" if len(rows) > limit else ""
    tracks = Table(title=f"busy time per track ({result['matched_tracks']} in both{shown})", title_justify="left")
    for column in ("track", "A", "B", "A vs B"):
        tracks.add_column(column, justify="left" if column == "track" else "right")
    for row in rows[:limit]:
        tracks.add_row(row["track"], _fmt(row["a_busy_s"]), _fmt(row["b_busy_s"]), _pct(row["diff_pct"]))
    console.print(tracks)
    names = Table(title=f"span names ({result['matched_names']} in both; largest differences)", title_justify="left")
    for column in ("name", "A count", "B count", "A total", "B total", "A vs B"):
        names.add_column(column, justify="left" if column == "name" else "right")
    for row in result["names"][:limit]:
        names.add_row(
            row["name"],
            str(row["a_count"]),
            str(row["b_count"]),
            _fmt(row["a_total_s"]),
            _fmt(row["b_total_s"]),
            _pct(row["diff_pct"]),
        )
    console.print(names)
    for side in ("a", "b"):
        if result[f"{side}_skipped_events"]:
            console.print(_skipped_line(result[f"{side}_skipped_events"], f"events of {side.upper()}"), markup=False)


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
            _print_against(result, worst)
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
        skipped = _reasons(comparison.skipped_events)
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
    _print_report(comparison, summary, worst)
    click.echo(f"wrote {folder / 'comparison.json'}, {folder / 'ops.csv'}, {folder / 'predicted_vs_measured.png'}")
