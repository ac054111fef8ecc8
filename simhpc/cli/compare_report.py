"""What ``simhpc compare`` prints: the report of a trace held against its predictions, and of two
traces aligned (``--against``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from simhpc.trace.compare import Comparison
from simhpc.trace.op_predictions import percent_error
from simhpc.trace.page_charges import EVENTS_AND_HEAP_GROWTH, HEAP_GROWTH
from simhpc.trace.records import OPTIMIZER_STEPS, REPEATED_RUNS
from simhpc.units import counted, format_time


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else format_time(seconds)


HEAP_NOTE_SHARE = 0.05
"""Note the heap page faults a trace may hide when they could reach this share of its step."""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def _mape(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


_THREADS_FROM = {
    "option": "",
    "trace": "",
    "host": " (all host cores: the trace does not record its thread count; give --threads if it ran on fewer)",
    "inferred": " (the trace does not record its thread count: the one whose predictions fit its large products "
                "best; give --threads to set it)",
}


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


def print_report(comparison: Comparison, summary: dict[str, Any], worst: int) -> None:
    """Print ``comparison`` (with ``summary``, its JSON form): the step, what it is made of, the op
    kinds, the ``worst`` ops and those not modelled."""
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


def reasons(skipped: dict[str, int]) -> str:
    """Skipped events as ``3 reason, 1 other reason``."""
    return ", ".join(f"{count} {reason}" for reason, count in sorted(skipped.items()))


def _skipped_line(skipped: dict[str, int], what: str = "events") -> str:
    return f"{what} skipped while reading (in no count above): {reasons(skipped)}"


def print_against(result: dict[str, Any], limit: int) -> None:
    """Print two traces aligned (:func:`~simhpc.trace.against.compare_traces`), ``limit`` rows a table."""
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
