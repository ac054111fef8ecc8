"""``simhpc run SCENARIO [-o OUTDIR] [--set PATH=VALUE ...]``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import click
from rich.console import Console

from simhpc.cli.main import PATH, user_errors
from simhpc.cli.progress import run_progress
from simhpc.report.table import print_summary
from simhpc.runner import simulate, write_outputs
from simhpc.scenario.loader import load_scenario


@click.command("run")
@click.argument("scenario", type=PATH)
@click.option("-o", "--outdir", type=PATH, default=None,
              help="Output folder (default: runs/<scenario file stem>).")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Override a scenario field, e.g. --set workload.iterations=20 (repeatable).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the output folder.")
@user_errors
def command(scenario: Path, outdir: Path | None, overrides: tuple[str, ...], quiet: bool) -> None:
    """Simulate SCENARIO; write summary.json, metrics.csv, trace.json and timeline.png (the last two
    unless the scenario's outputs.trace / outputs.timeline is false)."""
    config = load_scenario(scenario, overrides)
    folder = outdir or Path("runs") / scenario.stem
    folder.mkdir(parents=True, exist_ok=True)  # a file in the way fails now, not after the simulation
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
    result = simulate(config, str(scenario), monitor=lambda sim: run_progress(sim, config.name),
                      link_spans=config.outputs.trace or config.outputs.timeline)
    written = write_outputs(result, folder, config)
    if quiet:
        click.echo(str(folder))
        return
    console = Console()
    print_summary(result.summary, console, title=f"{config.name} ({scenario})")
    console.print(f"wall time {result.wall_time_s:.2f} s; wrote " + ", ".join(str(p) for p in written))
    if any(p.name == "trace.json" for p in written):
        console.print("open trace.json at https://ui.perfetto.dev (Open trace file)")
