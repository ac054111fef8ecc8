"""The sweep spec: ``sweep: {grid: {path: [values]}, zip: {path: [values]}, seeds: [...]}``.

Grid factors combine as a product; zip factors vary together (equal-length lists); every
combination runs once per seed. The spec comes from the scenario's ``sweep:`` section or a
separate file (``--spec``), plus ``--grid path=v1,v2`` on the command line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from simhpc.errors import ScenarioError
from simhpc.scenario.schema import MAX_SEED
from simhpc.scenario.yamlio import load_yaml

SECTIONS = ("grid", "zip", "seeds")


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep spec. Paths are dotted scenario paths; values are raw YAML values."""

    grid: dict[str, list[Any]] = field(default_factory=dict)
    zip: dict[str, list[Any]] = field(default_factory=dict)
    seeds: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The spec as a plain mapping (the shape it is written in)."""
        data: dict[str, Any] = {}
        if self.grid:
            data["grid"] = {path: list(values) for path, values in self.grid.items()}
        if self.zip:
            data["zip"] = {path: list(values) for path, values in self.zip.items()}
        if self.seeds is not None:
            data["seeds"] = list(self.seeds)
        return data

    @property
    def paths(self) -> list[str]:
        """Every swept path, grid first, in the order written."""
        return [*self.grid, *self.zip]


def _check_path(path: Any, where: str, source: str) -> str:
    if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
        raise ScenarioError(source, where, f"expected a dotted path like 'workload.size', got {path!r}")
    if path == "sweep" or path.startswith("sweep."):
        raise ScenarioError(source, f"{where}.{path}", "cannot sweep the sweep section itself")
    if path == "seed":
        raise ScenarioError(source, f"{where}.{path}", "the seed is swept with 'seeds: [...]', not as a path")
    return path


def _check_factors(raw: Any, section: str, source: str) -> dict[str, list[Any]]:
    where = f"sweep.{section}"
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(source, where, f"expected a mapping of path: [values], got {type(raw).__name__}")
    factors: dict[str, list[Any]] = {}
    for path, values in raw.items():
        _check_path(path, where, source)
        if not isinstance(values, list):
            raise ScenarioError(source, f"{where}.{path}", f"expected a list of values, got {values!r}")
        if not values:
            raise ScenarioError(source, f"{where}.{path}", "empty list of values")
        factors[path] = list(values)
    return factors


def _check_seeds(raw: Any, source: str) -> list[int] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ScenarioError(source, "sweep.seeds", f"expected a list of seeds, got {raw!r}")
    if not raw:
        raise ScenarioError(source, "sweep.seeds", "empty list of seeds")
    for seed in raw:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ScenarioError(source, "sweep.seeds",
                                f"seeds must be integers >= 0 (at most {MAX_SEED}), got {seed!r}")
    return list(raw)


def parse_spec(raw: Any, source: str) -> SweepSpec:
    """Check a raw ``sweep:`` mapping and return the spec.

    Raises:
        ScenarioError: naming ``sweep.<section>.<path>`` for an unknown section, a path that is
            not a dotted path, a value that is not a non-empty list, zip lists of different
            lengths or a path swept twice.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(source, "sweep", f"expected a mapping with grid, zip and/or seeds, got {raw!r}")
    unknown = [key for key in raw if key not in SECTIONS]
    if unknown:
        raise ScenarioError(source, f"sweep.{unknown[0]}", "unknown field (expected grid, zip or seeds)")
    grid = _check_factors(raw.get("grid"), "grid", source)
    zipped = _check_factors(raw.get("zip"), "zip", source)
    lengths = {path: len(values) for path, values in zipped.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{path}: {n}" for path, n in lengths.items())
        raise ScenarioError(source, "sweep.zip", f"zip lists must have the same length, got {listed}")
    _check_overlap(list(grid) + list(zipped), source)
    return SweepSpec(grid=grid, zip=zipped, seeds=_check_seeds(raw.get("seeds"), source))


def _check_overlap(paths: list[str], source: str) -> None:
    for i, path in enumerate(paths):
        for other in paths[:i]:
            if path == other:
                raise ScenarioError(source, f"sweep.{path}", "swept in both grid and zip")
            if path.startswith(other + ".") or other.startswith(path + "."):
                raise ScenarioError(source, f"sweep.{path}", f"overlaps the swept path {other!r}")


def split_values(text: str) -> list[str]:
    """Split ``a,b,[1, 2],c`` at the commas outside brackets and quotes."""
    items: list[str] = []
    depth, quote, current = 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    return items


def parse_grid_option(text: str) -> tuple[str, list[Any]]:
    """Read one ``--grid PATH=V1,V2,...`` option (each value as YAML, like ``--set``).

    ``--grid 'PATH=[V1, V2]'`` (a YAML list) works too.

    Raises:
        ScenarioError: from source ``--grid`` if the option is malformed.
    """
    if "=" not in text:
        raise ScenarioError("--grid", text, "expected --grid PATH=V1,V2,...")
    path, raw = (part.strip() for part in text.split("=", 1))
    if not path or any(not part for part in path.split(".")):
        raise ScenarioError("--grid", path or text, f"malformed path in --grid {text!r}")
    if not raw:
        raise ScenarioError("--grid", path, f"empty list of values in --grid {text!r}")
    try:
        whole = load_yaml(raw)
    except yaml.YAMLError:
        whole = None
    if isinstance(whole, list) and raw.startswith("["):
        if not whole:
            raise ScenarioError("--grid", path, f"empty list of values in --grid {text!r}")
        return path, whole
    values: list[Any] = []
    for item in split_values(raw):
        if not item.strip():
            raise ScenarioError("--grid", path, f"empty value in --grid {text!r}")
        try:
            values.append(load_yaml(item))
        except yaml.YAMLError:
            values.append(item.strip())
    return path, values


def merge_grid(raw: Any, options: Iterable[str]) -> Any:
    """Add ``--grid`` options to a raw spec mapping (replacing a grid path the spec gives too).

    Raises:
        ScenarioError: from source ``--grid`` if two options name the same path.
    """
    parsed = [parse_grid_option(text) for text in options]
    paths = [path for path, _ in parsed]
    repeated = next((path for i, path in enumerate(paths) if path in paths[:i]), None)
    if repeated is not None:
        raise ScenarioError("--grid", repeated, "given twice: list all its values in one --grid")
    if not parsed:
        return raw
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("grid") or {}, Mapping):
        return raw  # parse_spec reports the malformed spec
    grid = dict(raw.get("grid") or {})
    grid.update(parsed)
    return {**raw, "grid": grid}
