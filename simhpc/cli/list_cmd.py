"""``simhpc list``: registered hardware, topologies, workloads and policies."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from simhpc.hardware.catalog import builtin_catalog
from simhpc.registry import families


@click.command("list")
def command() -> None:
    """Print the hardware catalog and every registry family."""
    table = Table(title="simhpc components", title_justify="left")
    table.add_column("family", style="bold")
    table.add_column("names")
    for family, members in builtin_catalog().names().items():
        table.add_row(f"hardware: {family}", ", ".join(members))
    for family, members in families().items():
        table.add_row(family, ", ".join(members))
    Console().print(table)
