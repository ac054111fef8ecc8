"""``simhpc plot SWEEP_DIR --x PATH --y METRIC [--hue PATH]``."""

from __future__ import annotations

from pathlib import Path

import click

from simhpc.cli.main import PATH, user_errors


@click.command("plot")
@click.argument("sweep_dir", type=PATH)
@click.option("--x", "x", required=True, metavar="PATH",
              help="Scenario path on the x axis, e.g. workload.size.")
@click.option("--y", "y", required=True, metavar="METRIC",
              help="Summary metric (dotted), e.g. workload.mean_time_s.")
@click.option("--hue", default=None, metavar="PATH", help="Scenario path: one series per value.")
@click.option("--where", "where", multiple=True, metavar="PATH=VALUE",
              help="Keep only runs with this parameter value (repeatable).")
@click.option("--errorbar", type=click.Choice(["ci95", "std"]), default="ci95", show_default=True,
              help="ci95: 95% confidence interval of the mean over seeds (Student t); "
                   "std: sample standard deviation.")
@click.option("--kind", type=click.Choice(["auto", "line", "bar"]), default="auto", show_default=True,
              help="auto: line for numeric x, grouped bars otherwise.")
@click.option("--name", default=None, help="File stem of the figure and its data (default plot_<METRIC>).")
@user_errors
def command(sweep_dir: Path, x: str, y: str, hue: str | None, where: tuple[str, ...], errorbar: str,
            kind: str, name: str | None) -> None:
    """Plot METRIC against PATH from the results of the sweep in SWEEP_DIR (PNG + CSV).

    Runs sharing (hue, x) are averaged (normally the seeds of one point); error bars show the
    95% confidence interval of the mean (or the standard deviation with --errorbar std).
    """
    from simhpc.report.sweep_plot import plot_sweep

    figure = plot_sweep(sweep_dir, x, y, hue, where, errorbar, kind, name)  # type: ignore[arg-type]
    for note in figure.notes:
        click.echo(f"note: {note}", err=True)
    points = len(figure.groups)
    click.echo(f"wrote {figure.png} and {figure.csv} ({points} point{'' if points == 1 else 's'})")
