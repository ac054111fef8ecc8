"""Sweep progress on stderr: a rich progress bar on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from simhpc.units import counted, format_time

PLAIN_PERIOD_S = 5.0
PLAIN_STEP = 0.1


class SweepProgress:
    """Counts finished runs by status and shows them. A context manager.

    Args:
        total: runs to do in this invocation.
        interactive: a rich bar (True), plain lines (False) or decide by ``stream.isatty()`` (None).
        stream: where plain lines go (default stderr).
        enabled: False shows nothing (counts are still kept).
    """

    def __init__(self, total: int, interactive: bool | None = None, stream: IO[str] | None = None,
                 enabled: bool = True) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.enabled = enabled
        self.counts: Counter[str] = Counter()
        self.done = 0
        self._started = time.monotonic()
        self._last_line = self._started
        self._last_fraction = 0.0
        self._last_printed = 0
        self._bar: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        self._started = self._last_line = time.monotonic()
        if self.enabled and self.interactive and self.total:
            self._bar = Progress(
                TextColumn("[bold]sweep[/]"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TextColumn("eta"),
                TimeRemainingColumn(), console=Console(file=self.stream), transient=False)
            self._bar.start()
            self._task = self._bar.add_task("runs", total=self.total, status="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.enabled and not self.interactive and self.total and self._last_printed != self.done:
            self._line()

    def status_text(self) -> str:
        """``12 ok, 1 error`` for the runs finished so far."""
        return ", ".join(f"{n} {status}" for status, n in sorted(self.counts.items())) or "none finished"

    def advance(self, status: str) -> None:
        """Count one finished run with ``status``."""
        self.done += 1
        self.counts[status] += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=1, status=self.status_text())
            return
        now = time.monotonic()
        fraction = self.done / self.total if self.total else 1.0
        if now - self._last_line >= PLAIN_PERIOD_S or fraction - self._last_fraction >= PLAIN_STEP - 1e-9:
            self._line()

    def _line(self) -> None:
        now = time.monotonic()
        elapsed = now - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = f", ~{format_time(left)} left" if self.done < self.total and rate > 0 else ""
        print(f"sweep: {self.done}/{counted(self.total, 'run')} done ({self.status_text()}), "
              f"{format_time(elapsed)} elapsed{eta}", file=self.stream, flush=True)
        self._last_line = now
        self._last_fraction = self.done / self.total if self.total else 1.0
        self._last_printed = self.done
