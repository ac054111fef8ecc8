"""Running a planned sweep: skip stored runs, execute the rest, store each result as it lands."""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simhpc.errors import SimhpcError
from simhpc.sweep.errors import SweepError
from simhpc.sweep.executors import ExecutorConfig, open_executor
from simhpc.sweep.export import write_atomically, write_csv, write_parquet
from simhpc.sweep.plan import SweepPlan, SweepPoint
from simhpc.sweep.progress import SweepProgress
from simhpc.sweep.store import ResultStore
from simhpc.sweep.worker import RunOutcome
from simhpc.units import counted

SPEC_NAME = "sweep.yaml"
CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"


@dataclass
class SweepReport:
    """What a sweep invocation did.

    Attributes:
        folder: the sweep folder.
        planned: distinct runs in the sweep.
        skipped: runs already in the store (not run again).
        ran: runs executed now.
        counts: statuses of the runs executed now.
        failed: the sweep's runs stored with status ``error`` (now or before): (point, error line).
        exports: tables written (CSV, Parquet).
        executor: a description of where the runs executed ('' when nothing ran).
    """

    folder: Path
    planned: int
    skipped: int = 0
    ran: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    failed: list[tuple[SweepPoint, str]] = field(default_factory=list)
    exports: list[Path] = field(default_factory=list)
    executor: str = ""


def write_spec(plan: SweepPlan, folder: Path) -> Path:
    """Save the resolved sweep spec as ``folder/sweep.yaml`` (atomically)."""
    text = yaml.safe_dump(plan.describe(), sort_keys=False)
    return write_atomically(folder / SPEC_NAME, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def export(store: ResultStore, folder: Path) -> list[Path]:
    """Write ``results.csv`` (and ``results.parquet`` when pyarrow is installed) from the store.

    Only the runs of the sweep last planned here are exported (in sweep order); runs of earlier
    versions of the scenario or spec stay in the store as a cache.
    """
    records = store.planned_records()
    written = [write_csv(records, folder / CSV_NAME)]
    parquet = write_parquet(records, folder / PARQUET_NAME)
    if parquet is not None:
        written.append(parquet)
    return written


def _export_quietly(store: ResultStore, folder: Path) -> None:
    """Export on the way out of a failed or interrupted sweep, never masking its exception."""
    with contextlib.suppress(OSError, SimhpcError, sqlite3.Error):
        export(store, folder)


def _checked(point: SweepPoint, outcome: RunOutcome) -> RunOutcome:
    if outcome.key and outcome.key != point.key:
        message = (f"the worker resolved this run to key {outcome.key[:12]}, "
                   f"the sweep planned {point.key[:12]} "
                   "(is the same simhpc version installed on every worker?)")
        return RunOutcome(point.key, "error", None, message, outcome.wall_s)
    return outcome


def run_sweep(plan: SweepPlan, folder: str | Path, config: ExecutorConfig | None = None, *,
              retry_errors: bool = False, run_outputs: bool = False, progress: bool = True,
              interactive: bool | None = None, log: Callable[[str], None] | None = None) -> SweepReport:
    """Run every point of ``plan`` not yet in ``folder``'s store, storing each result as it finishes.

    Args:
        plan: the validated sweep.
        folder: the sweep folder (``results.sqlite``, ``results.csv``, ``sweep.yaml``).
        config: where to run (default: local processes, one per CPU).
        retry_errors: run again the points stored with status ``error``.
        run_outputs: also write each run's outputs (summary, trace, ...) to ``folder/runs/<key>/``.
        progress: show progress on stderr.
        interactive: a progress bar (True) or plain lines (False); None: bar on a terminal.
        log: called with one-line messages (start, skipped runs).

    Raises:
        SweepError: the folder is in use or not a store, the executor cannot start, a worker died.
    """
    config = config or ExecutorConfig()
    config.check()
    folder = Path(folder)
    if (folder / SPEC_NAME).resolve() == Path(plan.source).resolve():
        raise SweepError(f"{folder}: the sweep folder would overwrite the scenario {plan.source} with its "
                         f"{SPEC_NAME}; pick another folder with -o")
    report = SweepReport(folder, planned=len(plan.points))
    say = log or (lambda message: None)
    with ResultStore(folder) as store:
        try:
            write_spec(plan, folder)
            store.set_plan(point.key for point in plan.points)
            stored = store.statuses()
            todo = [point for point in plan.points
                    if point.key not in stored or (retry_errors and stored[point.key] == "error")]
            report.skipped = len(plan.points) - len(todo)
            if report.skipped:
                say(f"{report.skipped} of {counted(len(plan.points), 'run')} already stored in {store.path}, skipped")
            if todo:
                _execute(plan, todo, store, report, config, retry_errors,
                         str(folder / "runs") if run_outputs else None, progress, interactive, say)
        except BaseException:
            _export_quietly(store, folder)  # what finished is in the tables; the first failure is reported
            raise
        report.exports = export(store, folder)
        stored_errors = {record.key: record.error or "" for record in store.planned_records()
                         if record.status == "error"}
    report.failed = [(point, stored_errors[point.key].splitlines()[0] if stored_errors[point.key] else "")
                     for point in plan.points if point.key in stored_errors]
    return report


def _execute(plan: SweepPlan, todo: list[SweepPoint], store: ResultStore, report: SweepReport,
             config: ExecutorConfig, replace: bool, outdir: str | None, progress: bool,
             interactive: bool | None, say: Callable[[str], None]) -> None:
    executor = open_executor(config, len(todo))
    report.executor = executor.describe()
    say(f"running {counted(len(todo), 'run')} on {report.executor}")
    with executor, SweepProgress(len(todo), interactive=interactive, enabled=progress) as bar:
        for point, outcome in executor.run(todo, plan.source, outdir):
            outcome = _checked(point, outcome)
            store.record(point.key, point.params, point.seed, point.resolved, outcome.status,
                         outcome.summary, outcome.error, outcome.wall_s, replace=replace)
            report.ran += 1
            report.counts[outcome.status] += 1
            bar.advance(outcome.status)
