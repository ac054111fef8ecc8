"""``simhpc sweep SCENARIO [-o DIR] [--executor local|dask] [--workers N] [--scheduler ADDRESS]``."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from simhpc.cli.main import PATH, user_errors
from simhpc.sweep import ExecutorConfig, SweepError, SweepPlan, SweepReport, load_plan, run_sweep
from simhpc.sweep.store import store_path
from simhpc.units import counted

INTERRUPTED = 130
SHOWN_ERRORS = 5


@click.command("sweep")
@click.argument("scenario", type=PATH)
@click.option("-o", "--outdir", type=PATH, default=None,
              help="Sweep folder (default: sweeps/<scenario file stem>). Re-running resumes it.")
@click.option("--spec", "spec_file", type=PATH, default=None,
              help="Read the sweep spec from this file instead of the scenario's sweep: section.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Override a field of the base scenario (repeatable).")
@click.option("--grid", "grid", multiple=True, metavar="PATH=V1,V2,...",
              help="Add a grid factor or replace its values, e.g. --grid workload.size='1 MiB,16 MiB' (repeatable).")
@click.option("--executor", default=None, metavar="local|dask|dask://HOST:PORT",
              help="local: processes on this machine (default); dask: a Dask cluster (a LocalCluster "
                   "unless --scheduler names one); dask://HOST:PORT: the Dask scheduler at tcp://HOST:PORT.")
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes (local, or the Dask LocalCluster); default: the CPU count.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Dask scheduler address (tcp://host:port); without it --executor dask starts a "
                   "LocalCluster.")
@click.option("--outputs", "run_outputs", is_flag=True,
              help="Also write each run's outputs (summary, trace, ...) to DIR/runs/<key>/ "
                   "(runs already stored are not run again).")
@click.option("--retry-errors", is_flag=True, help="Run again the runs stored with an error.")
@click.option("--dry-run", is_flag=True, help="List the runs and exit (nothing runs or is written).")
@click.option("--quiet", "-q", is_flag=True, help="No progress, only the final lines.")
@user_errors
def command(scenario: Path, outdir: Path | None, spec_file: Path | None, overrides: tuple[str, ...],
            grid: tuple[str, ...], executor: str | None, workers: int | None, scheduler: str | None,
            run_outputs: bool, retry_errors: bool, dry_run: bool, quiet: bool) -> None:
    """Run every point of SCENARIO's sweep; store each result in DIR/results.sqlite as it finishes.

    The spec (``sweep: {grid: {path: [values]}, zip: {path: [values]}, seeds: [...]}``) is
    validated for every point before any run starts. Runs already stored are skipped, so a
    killed sweep resumes where it stopped. Exit status 1 if any run of the sweep raised.
    """
    if executor and executor.startswith("dask://"):
        if scheduler:
            raise SweepError("give the scheduler either as --executor dask://HOST:PORT or as --scheduler")
        executor, scheduler = "dask", "tcp://" + executor.removeprefix("dask://")
    if executor not in (None, "local", "dask"):
        raise SweepError(f"--executor must be local, dask or dask://HOST:PORT, got {executor!r}")
    if executor == "local" and scheduler:
        raise SweepError("--scheduler needs --executor dask")
    config = ExecutorConfig(kind="dask" if executor == "dask" or scheduler else "local", workers=workers,
                            scheduler=scheduler)
    config.check()
    folder = outdir or Path("sweeps") / scenario.stem
    signal.signal(signal.SIGTERM, _interrupt)  # a scheduler's or kill's TERM stops like Ctrl-C
    try:
        log = (lambda message: None) if quiet else (lambda message: click.echo(f"sweep: {message}", err=True))
        plan = load_plan(scenario, overrides, grid, spec_file, log=log)
        if dry_run:
            _print_plan(plan)
            return
        merged = plan.combinations - len(plan.points)
        log(f"{counted(len(plan.points), 'run')} in {scenario}"
            + (f" ({counted(merged, 'duplicate point')} merged)" if merged else ""))
        report = run_sweep(plan, folder, config, retry_errors=retry_errors, run_outputs=run_outputs,
                           progress=not quiet, log=log)
    except KeyboardInterrupt:
        if store_path(folder).exists():
            click.echo(f"sweep: interrupted; finished runs are stored in {folder}, "
                       "run the same command again to resume", err=True)
        else:
            click.echo("sweep: interrupted before any run started; nothing was stored", err=True)
        sys.exit(INTERRUPTED)
    _print_report(report)
    if report.failed:
        sys.exit(1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _print_plan(plan: SweepPlan) -> None:
    runs, points = len(plan.points), plan.combinations
    click.echo(f"{counted(runs, 'run')} ({counted(points, 'point')}) from {plan.source}")
    for point in plan.points:
        click.echo(f"{point.index:5d}  {point.key[:12]}  {point.label()}")


def _print_report(report: SweepReport) -> None:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.counts.items()))
    ran = f"{report.ran} ran" + (f" ({counts})" if counts else "")
    click.echo(f"sweep: {counted(report.planned, 'run')}: {ran}, {report.skipped} already stored; "
               + ", ".join(str(path) for path in [report.folder / "results.sqlite", *report.exports]))
    for point, message in report.failed[:SHOWN_ERRORS]:
        click.echo(f"  error in {point.key[:12]} ({point.label()}): {message}", err=True)
    if len(report.failed) > SHOWN_ERRORS:
        click.echo(f"  ... and {counted(len(report.failed) - SHOWN_ERRORS, 'more run')} with errors (see results.csv)",
                   err=True)
