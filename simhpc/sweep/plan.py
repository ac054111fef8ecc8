"""A sweep plan: the spec expanded into points, each validated and keyed before any run starts."""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simhpc.errors import ScenarioError
from simhpc.runner import build
from simhpc.scenario.loader import naming_override, read_yaml, scenario_from_dict, with_overrides
from simhpc.scenario.overrides import OverrideError, override_path, set_override
from simhpc.sweep.keys import resolved_scenario, run_key
from simhpc.sweep.spec import SweepSpec, merge_grid, parse_spec

MAX_POINTS = 100_000
MANY_POINTS = 10_000
"""From this many points the sweep says that it is validating them (a fraction of a millisecond each)."""


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep.

    Attributes:
        index: position in the sweep order (grid product, then zip, then seeds innermost).
        key: the run key (sha256 of the resolved scenario).
        params: swept path -> the value as written in the spec.
        seed: the scenario seed of this run.
        data: the raw scenario mapping of this run (what a worker validates and runs).
        resolved: the validated scenario as JSON data (units resolved).
    """

    index: int
    key: str
    params: dict[str, Any]
    seed: int
    data: dict[str, Any]
    resolved: dict[str, Any]

    def label(self) -> str:
        """``path=value, ..., seed=N`` for messages."""
        parts = [f"{path}={value}" for path, value in self.params.items()]
        return ", ".join([*parts, f"seed={self.seed}"])


@dataclass(frozen=True)
class SweepPlan:
    """Every distinct run of a sweep, in sweep order.

    Attributes:
        source: the scenario file (for messages and for workers).
        spec: the checked sweep spec.
        overrides: the ``--set`` overrides applied to the base scenario.
        points: the runs, one per distinct key.
        combinations: points before equal scenarios were merged (>= ``len(points)``).
    """

    source: str
    spec: SweepSpec
    overrides: tuple[str, ...]
    points: list[SweepPoint]
    combinations: int

    def describe(self) -> dict[str, Any]:
        """The resolved sweep, as saved in ``sweep.yaml``."""
        return {
            "scenario": self.source,
            "overrides": list(self.overrides),
            "sweep": self.spec.to_dict(),
            "combinations": self.combinations,
            "runs": len(self.points),
        }


def combinations(spec: SweepSpec) -> Iterator[tuple[dict[str, Any], dict[str, str], int | None]]:
    """Yield (params, section of each path, seed) in sweep order; seed None = the scenario's."""
    grid_paths = list(spec.grid)
    zip_paths = list(spec.zip)
    zip_length = len(next(iter(spec.zip.values()))) if spec.zip else 1
    sections = {**dict.fromkeys(grid_paths, "grid"), **dict.fromkeys(zip_paths, "zip")}
    seeds: list[int | None] = list(spec.seeds) if spec.seeds is not None else [None]
    for grid_values in itertools.product(*(spec.grid[path] for path in grid_paths)):
        for row in range(zip_length):
            params = dict(zip(grid_paths, grid_values))
            params.update({path: spec.zip[path][row] for path in zip_paths})
            for seed in seeds:
                yield params, sections, seed


def count_combinations(spec: SweepSpec) -> int:
    """How many points the spec expands to."""
    zip_length = len(next(iter(spec.zip.values()))) if spec.zip else 1
    seeds = len(spec.seeds) if spec.seeds is not None else 1
    return math.prod(len(values) for values in spec.grid.values()) * zip_length * seeds


def _apply(base: dict[str, Any], params: dict[str, Any], sections: dict[str, str],
           seed: int | None, source: str, spec_source: str) -> dict[str, Any]:
    data = copy.deepcopy(base)
    for path, value in params.items():
        try:
            set_override(data, path, value)
        except OverrideError as error:
            raise ScenarioError(spec_source, f"sweep.{sections[path]}.{path}",
                                f"{error} ({error.path})" if error.path != path else str(error)) from None
    if seed is not None:
        set_override(data, "seed", seed)
    return data


def _base_error(base: dict[str, Any], source: str) -> ScenarioError | None:
    try:
        build(scenario_from_dict(base, source), source)
    except ScenarioError as error:
        return error
    return None


def _validate(data: dict[str, Any], params: dict[str, Any], sections: dict[str, str],
              seed: int | None, source: str, spec_source: str, base: dict[str, Any]) -> Any:
    try:
        scenario = scenario_from_dict(data, source)
        build(scenario, source)  # what only the built machine can check (ranks, stages, references)
        return scenario
    except ScenarioError as error:
        field = error.path  # already the data's own path (no union tags)
        for path, value in params.items():
            inside = field == path or field.startswith(path + ".")
            if not inside and path.startswith(field + "."):
                # An error about a section the swept path lies in: the sweep's fault only if the
                # scenario without the sweep's values does not fail the same way.
                same = _base_error(base, source)
                inside = same is None or (same.path, same.message) != (error.path, error.message)
            if inside:
                where = "" if field == path else f" at {field}"
                shown = "" if repr(value) in error.message else f" (value {value!r})"
                raise ScenarioError(spec_source, f"sweep.{sections[path]}.{path}",
                                    f"{error.message}{where}{shown}") from None
        if field == "seed" and seed is not None:
            raise ScenarioError(spec_source, "sweep.seeds", f"{error.message} (seed {seed!r})") from None
        point = ", ".join(f"{p}={v}" for p, v in params.items())
        if seed is not None:
            point += f"{', ' if point else ''}seed={seed}"
        suffix = f" (in sweep point {point})" if point else ""
        raise ScenarioError(source, field, error.message + suffix) from None


def plan_sweep(base: dict[str, Any], source: str, spec: SweepSpec, overrides: Iterable[str] = (),
               spec_source: str | None = None, log: Callable[[str], None] | None = None) -> SweepPlan:
    """Expand ``spec`` over the raw scenario ``base`` (its ``sweep`` section is ignored).

    Every point is validated and keyed here, so a bad value stops the sweep before any run.
    Points whose resolved scenarios are equal share a key and run once.

    Raises:
        ScenarioError: naming the sweep path whose value is bad, or the field and the point.
    """
    spec_source = spec_source or source
    total = count_combinations(spec)
    if total > MAX_POINTS:
        raise ScenarioError(spec_source, "sweep", f"{total} runs is more than the limit of {MAX_POINTS}")
    if log is not None and total >= MANY_POINTS:
        log(f"validating {total:,} points before any run starts")
    base = {key: value for key, value in base.items() if key != "sweep"}
    points: list[SweepPoint] = []
    seen: set[str] = set()
    for params, sections, seed in combinations(spec):
        data = _apply(base, params, sections, seed, source, spec_source)
        try:
            scenario = _validate(data, params, sections, seed, source, spec_source, base)
        except ScenarioError as error:
            raise naming_override(error, overrides) from None
        key = run_key(scenario)
        if key in seen:
            continue
        seen.add(key)
        resolved = resolved_scenario(scenario)
        points.append(SweepPoint(len(points), key, dict(params), scenario.seed, data, resolved))
    return SweepPlan(source, spec, tuple(overrides), points, total)


def load_plan(scenario: str | Path, overrides: Iterable[str] = (), grid: Iterable[str] = (),
              spec_file: str | Path | None = None, log: Callable[[str], None] | None = None) -> SweepPlan:
    """Read a scenario (and a separate spec file), apply ``--set`` and ``--grid``, plan the sweep.

    The spec is the scenario's ``sweep:`` section, or the file ``spec_file`` (a mapping with a
    ``sweep:`` key, or the spec itself) when given; ``--grid`` options add grid factors.

    Raises:
        ScenarioError: for any bad input, before anything runs or is written.
    """
    source = str(scenario)
    overrides = tuple(overrides)
    grid = tuple(grid)
    data = with_overrides(read_yaml(scenario), overrides, source)
    spec_source, raw = source, data.get("sweep")
    if spec_file is not None:
        spec_source = str(spec_file)
        loaded = read_yaml(spec_file, "sweep spec")
        if "sweep" in loaded and len(loaded) > 1:
            extra = next(key for key in loaded if key != "sweep")
            raise ScenarioError(spec_source, str(extra), "unknown field: a spec file holds a 'sweep:' mapping "
                                "or the spec itself (grid, zip, seeds)")
        raw = loaded.get("sweep", loaded)
    _check_sweep_overrides(overrides, source)
    raw = merge_grid(raw, grid)
    spec = parse_spec(raw, spec_source)
    _check_swept_overrides(overrides, spec, source)
    if not spec.paths and spec.seeds is None:
        raise ScenarioError(spec_source, "sweep",
                            "nothing to sweep: give sweep: {grid: ..., zip: ..., seeds: [...]} "
                            "or --grid PATH=V1,V2")
    return plan_sweep(data, source, spec, overrides, spec_source, log)


def _check_sweep_overrides(overrides: Iterable[str], source: str) -> None:
    """Refuse a ``--set`` into a grid or zip factor: its dots would split the factor's dotted path."""
    for text in overrides:
        path = override_path(text)
        if path.startswith(("sweep.grid.", "sweep.zip.")):
            raise ScenarioError(source, path, f"--set cannot name a swept path (its dots would split it): "
                                f"give the values with --grid PATH=V1,V2 instead (--set {text!r})")


def _check_swept_overrides(overrides: Iterable[str], spec: SweepSpec, source: str) -> None:
    """Refuse a ``--set`` of a path the sweep sets at every point: it would have no effect."""
    for text in overrides:
        path = override_path(text)
        swept = next((factor for factor in spec.paths if path == factor or path.startswith(factor + ".")), None)
        if swept is not None:
            section = "grid" if swept in spec.grid else "zip"
            raise ScenarioError(source, path, f"the sweep sets it at every point (sweep.{section}: {swept}), so "
                                f"--set {text!r} would have no effect: drop the --set or change the sweep")


def params_json(point: SweepPoint) -> str:
    """The point's swept values as JSON (in spec order)."""
    return json.dumps(point.params, separators=(",", ":"), default=str)
