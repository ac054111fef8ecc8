"""Console tables of run summaries (rich), with units read from key suffixes."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table

from simhpc.units import format_bandwidth, format_size, format_time

_SUFFIX_FORMATS = (("_s", format_time), ("bytes", format_size), ("_Bps", format_bandwidth))
_BYTES_INSIDE = re.compile(r"_bytes_per_\w+$")
"""Byte counts named per something (``state_bytes_per_gpu``): sizes too."""


def format_value(key: str, value: Any) -> str:
    """Format ``value`` by its key's unit suffix (``_s``, ``bytes``, ``_Bps``)."""
    if isinstance(value, float):
        for suffix, formatter in _SUFFIX_FORMATS:
            if key.endswith(suffix):
                return formatter(value)
        if _BYTES_INSIDE.search(key):
            return format_size(value)
        return f"{value:.6g}"
    return str(value)


def flatten(summary: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Scalar leaves of a nested summary as (dotted key, value); lists are skipped."""
    rows: list[tuple[str, Any]] = []
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows.extend(flatten(value, f"{name}."))
        elif not isinstance(value, list):
            rows.append((name, value))
    return rows


def print_summary(summary: dict[str, Any], console: Console, title: str = "summary",
                  max_rows: int | None = None) -> None:
    """Print the scalar fields of a run summary as a two-column table (the first ``max_rows``
    of them and a line saying how many were left out, when given)."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    rows = flatten(summary)
    for key, value in rows[:max_rows]:
        table.add_row(key, format_value(key, value))
    if max_rows is not None and len(rows) > max_rows:
        table.add_row(f"... {len(rows) - max_rows} more", "in summary.json")
    console.print(table)
