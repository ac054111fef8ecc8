"""Figures of a sweep's results: a metric against a swept parameter, mean and error bars over seeds.

Reads ``DIR/results.sqlite`` and writes ``DIR/plot_<metric>.png`` with the data behind it in
``DIR/plot_<metric>.csv``. Runs are grouped by (hue, x); each group's runs (normally the seeds
of one point) give the mean and the error bar: the 95% confidence interval of the mean
(Student t, ``ci95``, the default) or the sample standard deviation (``std``).
"""

from __future__ import annotations

import csv
import json
import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.figure import Figure

from simhpc.errors import SimhpcError
from simhpc.scenario.overrides import OverrideError, parse_override
from simhpc.sweep.store import ResultStore, RunRecord
from simhpc.units import QUANTITY_KINDS, parse_quantity

ErrorBar = Literal["ci95", "std"]
Kind = Literal["auto", "line", "bar"]
_MISSING = object()


class PlotError(SimhpcError):
    """The plot request does not match the sweep's results (unknown metric or parameter)."""


@dataclass(frozen=True)
class PlotGroup:
    """One plotted point: the runs sharing a (hue, x) value.

    Attributes:
        hue: the hue label (None without ``--hue``).
        x: the x value (resolved: numbers for sizes, bandwidths, ...).
        x_label: the x value as written in the sweep spec.
        values: the metric of each run in the group.
    """

    hue: str | None
    x: Any
    x_label: str
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        """Runs in the group."""
        return len(self.values)

    @property
    def mean(self) -> float:
        """Mean of the metric."""
        return float(np.mean(self.values))

    @property
    def std(self) -> float:
        """Sample standard deviation (0 for one run)."""
        return float(np.std(self.values, ddof=1)) if self.n > 1 else 0.0

    @property
    def ci95(self) -> float:
        """Half-width of the 95% confidence interval of the mean (Student t; 0 for one run)."""
        if self.n < 2:
            return 0.0
        from scipy.stats import t

        return float(t.ppf(0.975, self.n - 1) * self.std / math.sqrt(self.n))


@dataclass
class SweepFigure:
    """What :func:`plot_sweep` wrote: the figure, its data and notes for the user."""

    png: Path
    csv: Path
    groups: list[PlotGroup]
    notes: list[str] = field(default_factory=list)


def lookup(data: Any, path: str) -> Any:
    """``data`` at a dotted path (mapping keys, list indices); ``_MISSING`` if absent."""
    node = data
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _param(record: RunRecord, path: str) -> tuple[Any, str]:
    """(resolved value, label) of a scenario path in one run."""
    if path == "seed":
        return record.seed, str(record.seed)
    resolved = lookup(record.scenario, path)
    written = record.params.get(path, _MISSING)
    if resolved is _MISSING and written is _MISSING:
        return _MISSING, ""
    if resolved is _MISSING:
        resolved = written
    label = written if written is not _MISSING else resolved
    return resolved, label if isinstance(label, str) else json.dumps(label)


def _check_path(records: list[RunRecord], path: str, option: str) -> None:
    """``path`` must be a field of the runs: a swept one, or a value of their scenarios (a whole
    section such as ``workload`` only if the sweep varies it as one factor)."""
    swept = sorted({p for record in records for p in record.params} | {"seed"})
    values = [_param(record, path)[0] for record in records]
    if all(value is _MISSING for value in values):
        raise PlotError(f"{option} {path}: not a scenario field of these runs (swept: {', '.join(swept)})")
    if path not in swept and any(isinstance(value, dict) for value in values):
        raise PlotError(f"{option} {path}: a section of the scenario, not a field (swept: {', '.join(swept)})")


def _numeric_metrics(summaries: Iterable[dict[str, Any]], prefix: str = "") -> list[str]:
    names: set[str] = set()
    for summary in summaries:
        for key, value in summary.items():
            if isinstance(value, dict):
                names.update(_numeric_metrics([value], f"{prefix}{key}."))
            elif _is_number(value):
                names.add(f"{prefix}{key}")
    return sorted(names)


def _matches(record: RunRecord, path: str, wanted: Any) -> bool:
    resolved, label = _param(record, path)
    written = record.params.get(path, _MISSING)
    if wanted in (resolved, written) or str(wanted) == label:
        return True
    return isinstance(wanted, str) and _is_number(resolved) and any(
        math.isclose(quantity, resolved, rel_tol=1e-9) for quantity in _quantities(wanted))


def _quantities(text: str) -> list[float]:
    """``text`` read as each kind of quantity it parses as (``100Gb/s``: a bandwidth in B/s)."""
    values = []
    for kind in QUANTITY_KINDS:
        try:
            values.append(parse_quantity(text, kind))
        except ValueError:  # UnitError included
            continue
    return values


def select(records: list[RunRecord], where: Iterable[str]) -> list[RunRecord]:
    """Keep the runs matching every ``PATH=VALUE`` filter (the value as written, or resolved)."""
    for text in where:
        try:
            path, wanted = parse_override(text)
        except OverrideError as error:
            raise PlotError(f"--where {text!r}: {str(error).replace('--set', '--where')}") from None
        _check_path(records, path, "--where")
        records = [record for record in records if _matches(record, path, wanted)]
        if not records:
            raise PlotError(f"--where {text}: no runs match")
    return records


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, value) if _is_number(value) else (1, json.dumps(value, sort_keys=True))


def group_runs(records: list[RunRecord], x: str, y: str,
               hue: str | None = None) -> tuple[list[PlotGroup], list[str]]:
    """Group ok runs by (hue, x) and collect the metric ``y``; return the groups and notes.

    Raises:
        PlotError: ``x``/``hue`` is not a field of the runs, or ``y`` is not a numeric metric.
    """
    notes: list[str] = []
    _check_path(records, x, "--x")
    if hue:
        _check_path(records, hue, "--hue")
    ok = [record for record in records if record.status == "ok"]
    if len(ok) < len(records):
        notes.append(f"left out {len(records) - len(ok)} runs that did not finish ok (error or oom)")
    if not ok:
        raise PlotError("no run finished ok; nothing to plot")
    values = [lookup(record.summary, y) for record in ok]
    if all(value is _MISSING for value in values):
        known = ", ".join(_numeric_metrics(record.summary for record in ok if record.summary))
        raise PlotError(f"--y {y}: no such metric in the run summaries (numeric metrics: {known})")
    present = [(record, value) for record, value in zip(ok, values)
               if value is not _MISSING and value is not None]
    undefined = [record for record, value in present if isinstance(value, float) and math.isnan(value)]
    if undefined and len(undefined) < len(present):  # a ratio of nothing in some runs: not the metric's fault
        left_out = {id(record) for record in undefined}
        present = [(record, value) for record, value in present if id(record) not in left_out]
        notes.append(f"left out {len(undefined)} runs whose {y} is not a number (NaN), e.g. {undefined[0].key[:12]}")
    if not present or not all(_is_number(value) for _, value in present):
        bad = next((value for _, value in present if not _is_number(value)), None)
        if isinstance(bad, dict):
            inside = ", ".join(_numeric_metrics([bad], prefix=f"{y}.")) or "none"
            raise PlotError(f"--y {y}: a section of the summary, not a metric (numeric metrics in it: {inside})")
        raise PlotError(f"--y {y}: not a number ({bad!r}); pick a numeric metric")
    if len(present) < len(ok):
        notes.append(f"left out {len(ok) - len(present)} runs without a value for {y}")
    buckets: dict[tuple[str, str], list[tuple[RunRecord, float]]] = {}
    order: dict[tuple[str, str], tuple[Any, Any, Any, str | None, str]] = {}
    for record, value in present:
        x_value, x_label = _param(record, x)
        hue_value, hue_label = _param(record, hue) if hue else (None, None)
        ident = (json.dumps(hue_value, sort_keys=True), json.dumps(x_value, sort_keys=True))
        buckets.setdefault(ident, []).append((record, float(value)))
        order.setdefault(ident, (_sort_key(hue_value), _sort_key(x_value), x_value, hue_label, x_label))
    idents = sorted(buckets, key=lambda ident: (order[ident][0], order[ident][1]))
    groups = [PlotGroup(order[i][3], order[i][2], order[i][4], tuple(v for _, v in buckets[i]))
              for i in idents]
    varying = _varying_params(buckets.values(), {x, hue, "seed"})
    if varying:
        notes.append("averaged over other swept parameters too: " + ", ".join(varying)
                     + " (fix them with --where PATH=VALUE or pick one as --hue)")
    return groups, notes


def _varying_params(buckets: Iterable[list[tuple[RunRecord, float]]], shown: set[Any]) -> list[str]:
    varying: set[str] = set()
    for bucket in buckets:
        for path in {p for record, _ in bucket for p in record.params} - shown:
            if len({json.dumps(record.params.get(path), sort_keys=True) for record, _ in bucket}) > 1:
                varying.add(path)
    return sorted(varying)


def _filename(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", metric)


def write_groups_csv(groups: list[PlotGroup], path: Path, x: str, hue: str | None) -> None:
    """The data behind the figure: one row per (hue, x) group."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*([hue] if hue else []), x, "x_value", "n", "mean", "std", "ci95", "min", "max"])
        for group in groups:
            stats = (group.mean, group.std, group.ci95, min(group.values), max(group.values))
            writer.writerow([*([group.hue] if hue else []), group.x_label, group.x, group.n,
                             *(repr(value) for value in stats)])


def draw(groups: list[PlotGroup], path: Path, x: str, y: str, hue: str | None, errorbar: ErrorBar,
         kind: Kind) -> None:
    """Draw a line (numeric x) or grouped-bar (categorical x) figure with error bars."""
    numeric = all(_is_number(group.x) for group in groups)
    if kind == "auto":
        kind = "line" if numeric else "bar"
    if kind == "line" and not numeric:
        raise PlotError(f"--kind line needs numeric --x values; {x} has {groups[0].x!r}")
    hues = list(dict.fromkeys(group.hue for group in groups))
    xs = sorted({json.dumps(group.x, sort_keys=True): group for group in groups}.values(),
                key=lambda group: _sort_key(group.x))
    figure = Figure(figsize=(7, 4.5))
    axes = figure.subplots()
    spread = "95% CI of the mean" if errorbar == "ci95" else "standard deviation"
    for index, label in enumerate(hues):
        series = [group for group in groups if group.hue == label]
        errors = [group.ci95 if errorbar == "ci95" else group.std for group in series]
        means = [group.mean for group in series]
        if kind == "line":
            axes.errorbar([group.x for group in series], means, yerr=errors, marker="o", capsize=3,
                          label=label)
        else:
            width = 0.8 / len(hues)
            slots = [g.x for g in xs]
            offset = (index - (len(hues) - 1) / 2) * width
            positions = [slots.index(group.x) + offset for group in series]
            axes.bar(positions, means, width=width, yerr=errors, capsize=3, label=label)
    if kind == "line":
        values = [group.x for group in xs]
        if min(values) > 0 and max(values) / min(values) >= 100:
            axes.set_xscale("log")
        axes.set_xticks(values, [group.x_label for group in xs])
        axes.minorticks_off()
    else:
        axes.set_xticks(range(len(xs)), [group.x_label for group in xs])
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    runs = sorted({group.n for group in groups})
    per_point = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
    axes.set_title(f"{y}: mean ± {spread} ({per_point} runs per point)", fontsize=10)
    if hue:
        axes.legend(title=hue, fontsize=8)
    axes.grid(True, alpha=0.3)
    with warnings.catch_warnings():  # long labels that do not fit: the figure as it is, without a warning
        warnings.simplefilter("ignore", UserWarning)
        figure.tight_layout()
    figure.savefig(path, dpi=120, format="png")


def plot_sweep(folder: str | Path, x: str, y: str, hue: str | None = None, where: Iterable[str] = (),
               errorbar: ErrorBar = "ci95", kind: Kind = "auto", name: str | None = None) -> SweepFigure:
    """Plot metric ``y`` against parameter ``x`` (one series per ``hue`` value) from a sweep folder.

    Args:
        folder: the sweep folder (with ``results.sqlite``).
        x: a scenario path (usually a swept one), or ``seed``.
        y: a dotted path into the run summary, e.g. ``workload.mean_time_s``.
        hue: a scenario path drawing one series per value.
        where: ``PATH=VALUE`` filters applied first.
        errorbar: ``ci95`` (95% CI of the mean, Student t) or ``std`` (sample standard deviation).
        kind: ``line``, ``bar`` or ``auto`` (line for numeric x).
        name: file stem (default ``plot_<y>``).

    Raises:
        PlotError, SweepError: no results, or a path/metric the runs do not have.
    """
    folder = Path(folder)
    with ResultStore(folder, readonly=True) as store:
        records = store.planned_records()  # the last sweep's runs: not those of earlier scenario versions
        earlier = store.count() - len(records)
    if not records:
        raise PlotError(f"{folder}: the sweep has no results yet")
    records = select(records, where)
    groups, notes = group_runs(records, x, y, hue)
    if earlier:
        notes.append(f"left out {earlier} stored runs of earlier versions of the sweep (not in its last plan)")
    stem = f"plot_{_filename(y)}" if name is None else name
    if not Path(stem).name.strip(".") or Path(stem).name != stem or not stem.isprintable():  # a name, not a path
        raise PlotError(f"--name {stem!r}: not a file name (the figure is written as NAME.png, its data as NAME.csv)")
    png, table = folder / f"{stem}.png", folder / f"{stem}.csv"
    draw(groups, png, x, y, hue, errorbar, kind)
    write_groups_csv(groups, table, x, hue)
    if all(group.n == 1 for group in groups):
        notes.append("one run per point: no error bars (sweep several seeds to get them)")
    return SweepFigure(png, table, groups, notes)
