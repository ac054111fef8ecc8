"""Tables of a sweep's results: ``results.csv`` (and ``results.parquet`` if pyarrow is present).

Deterministic: the same runs give the same bytes. The wall-clock time of each run is not
exported (``results.sqlite`` keeps it, column ``wall_s`` of table ``runs``)."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from simhpc.sweep.store import RunRecord

FIXED_COLUMNS = ("key", "status", "seed", "error")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar leaves of nested mappings as ``{dotted.key: value}``; lists are left out."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        elif value is None or isinstance(value, (str, int, float, bool)):
            flat[name] = value
    return flat


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)
    return value


def _simulated_error(summary: dict[str, Any] | None) -> str | None:
    """The message of a run that ended in the simulation (a simulated out-of-memory)."""
    error = (summary or {}).get("error")
    return error.get("message") if isinstance(error, dict) else None


def table(records: Iterable[RunRecord]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and rows: key, status, seed, error, ``param.<path>``..., summary scalars."""
    records = list(records)
    param_columns: dict[str, None] = {}
    summary_columns: set[str] = set()
    rows: list[dict[str, Any]] = []
    for record in records:
        error = record.error or _simulated_error(record.summary)
        row: dict[str, Any] = {
            "key": record.key,
            "status": record.status,
            "seed": record.seed,
            "error": error.splitlines()[0] if error else None,
        }
        for path, value in record.params.items():
            param_columns[f"param.{path}"] = None
            scalar = value is None or isinstance(value, (str, int, float, bool))
            row[f"param.{path}"] = value if scalar else json.dumps(value, sort_keys=True)
        for name, value in flatten(record.summary or {}).items():
            if name in ("status", "seed"):
                continue
            summary_columns.add(name)
            row[name] = value
        rows.append(row)
    columns = [*FIXED_COLUMNS, *param_columns, *sorted(summary_columns)]
    return columns, rows


def write_atomically(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write`` a temporary file beside ``path``, then rename it into place.

    Readers see the old file or the new one, never a partial one; if ``write`` fails or is
    interrupted, the temporary file is removed and the old file kept.
    """
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        # A folder in the way or a read-only folder: the write's own error is the one to report.
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
    return path


def write_csv(records: Iterable[RunRecord], path: str | Path) -> Path:
    """Write the table as CSV (atomically)."""
    columns, rows = table(records)

    def write(temporary: Path) -> None:
        with temporary.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({name: _cell(value) for name, value in row.items()})
            handle.flush()
            os.fsync(handle.fileno())

    return write_atomically(path, write)


def parquet_available() -> bool:
    """Whether pyarrow is installed (Parquet export is optional)."""
    return importlib.util.find_spec("pyarrow") is not None


def write_parquet(records: Iterable[RunRecord], path: str | Path) -> Path | None:
    """Write the table as Parquet if pyarrow is installed; return None otherwise."""
    if not parquet_available():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns, rows = table(records)
    data = {name: [row.get(name) for row in rows] for name in columns}
    for name, values in data.items():
        kinds = {type(value) for value in values if value is not None}
        if kinds == {int, float}:
            data[name] = [None if value is None else float(value) for value in values]
        elif len(kinds) > 1:
            data[name] = [None if value is None else str(value) for value in values]
    return write_atomically(path, lambda temporary: pq.write_table(pa.table(data), temporary))
