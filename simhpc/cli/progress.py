"""A progress display on stderr for runs that take more than a second (terminals only)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live

from simhpc.engine import Simulation
from simhpc.units import format_time

DELAY_S = 1.0


@contextmanager
def run_progress(sim: Simulation, label: str, enabled: bool | None = None) -> Iterator[None]:
    """Show simulated time and events processed while the body runs, after ``DELAY_S``.

    Shown only when stderr is a terminal (or ``enabled`` forces it); transient, so it leaves
    no trace in logs.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield
        return
    done = threading.Event()

    def show() -> None:
        if done.wait(DELAY_S):
            return
        console = Console(stderr=True)
        with Live(console=console, transient=True, refresh_per_second=4) as live:
            while not done.wait(0.25):
                live.update(f"[bold]{label}[/] simulated {format_time(sim.now)}, "
                            f"{sim.events_processed:,} events processed")

    thread = threading.Thread(target=show, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
