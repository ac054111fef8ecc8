"""Trace recorder: busy spans per track, counters, instants and flow arrows.

Every busy interval of a device stream, link or queue is recorded once here; the Chrome/Perfetto
writer (:mod:`simhpc.trace.chrome`) and the summaries both read these records.
Times are simulated seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Span:
    """One busy interval on a track."""

    start: float
    end: float
    name: str
    category: str = ""
    args: dict[str, Any] | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class Track:
    """A timeline row: ``process`` is a node or device, ``thread`` a stream, lane or link.

    ``spans`` may instead be a tally that keeps only the last span, their count and time, where
    nothing will draw them (:class:`~simhpc.network.accounting.LinkSpanTally`).
    """

    index: int
    process: str
    thread: str
    spans: list[Span] = field(default_factory=list)

    def span(
        self,
        name: str,
        start: float,
        end: float,
        category: str = "",
        args: dict[str, Any] | None = None,
    ) -> Span:
        """Record a busy interval; spans on one track come in time order and never overlap."""
        if end < start:
            raise ValueError(f"span {name!r} on {self.label} ends before it starts")
        if self.spans:
            last = self.spans[-1]
            if start < last.end - 1e-12 * max(1.0, abs(last.end)):
                raise ValueError(
                    f"span {name!r} [{start}, {end}] overlaps {last.name!r} "
                    f"[{last.start}, {last.end}] on {self.label}"
                )
        record = Span(start, end, name, category, args)
        self.spans.append(record)
        return record

    @property
    def label(self) -> str:
        return f"{self.process}/{self.thread}"

    def busy_time(self) -> float:
        """Total busy time (spans never overlap on a track)."""
        if not isinstance(self.spans, list):  # a tally of spans nothing draws (a link's)
            return self.spans.busy_time()  # type: ignore[attr-defined]
        return sum(span.end - span.start for span in self.spans)


@dataclass(slots=True)
class CounterSeries:
    """A time series of named values on a process (link utilisation, memory in use)."""

    process: str
    name: str
    times: list[float] = field(default_factory=list)
    values: list[dict[str, float]] = field(default_factory=list)

    def sample(self, time: float, values: dict[str, float]) -> None:
        """Record the values from ``time`` on; a sample at the same time replaces the last."""
        if self.times and self.times[-1] == time:
            self.values[-1] = values
        else:
            self.times.append(time)
            self.values.append(values)


@dataclass(slots=True)
class Instant:
    process: str
    thread: str
    name: str
    time: float
    args: dict[str, Any] | None = None


@dataclass(slots=True)
class FlowArrow:
    """An arrow from a point on one track (a send) to a point on another (its receive)."""

    name: str
    source: Track
    source_time: float
    target: Track
    target_time: float


class TraceRecorder:
    """Collects the records of one run in creation order (deterministic)."""

    def __init__(self) -> None:
        self._tracks: dict[tuple[str, str], Track] = {}
        self._counters: dict[tuple[str, str], CounterSeries] = {}
        self.instants: list[Instant] = []
        self.arrows: list[FlowArrow] = []

    def track(self, process: str, thread: str) -> Track:
        """The track for (process, thread), created on first use."""
        key = (process, thread)
        track = self._tracks.get(key)
        if track is None:
            track = Track(len(self._tracks), process, thread)
            self._tracks[key] = track
        return track

    @property
    def tracks(self) -> list[Track]:
        return list(self._tracks.values())

    def clip(self, time: float) -> None:
        """End the record at ``time`` (a run stopped early): spans recorded ahead of it, with the
        end their work would have had, are cut there; spans starting after it are dropped (a
        tallied track's spans never start after the clock: they are the links')."""
        for track in self._tracks.values():
            spans = track.spans
            while spans and spans[-1].start > time:
                spans.pop()
            if spans and spans[-1].end > time:
                spans[-1].end = time

    def counter(self, process: str, name: str) -> CounterSeries:
        """The counter series ``name`` on ``process``, created on first use."""
        key = (process, name)
        series = self._counters.get(key)
        if series is None:
            series = CounterSeries(process, name)
            self._counters[key] = series
        return series

    @property
    def counters(self) -> list[CounterSeries]:
        return list(self._counters.values())

    def instant(
        self, process: str, thread: str, name: str, time: float, args: dict[str, Any] | None = None
    ) -> None:
        """Record a point event (a failure, a stall, a phase boundary)."""
        self.instants.append(Instant(process, thread, name, time, args))

    def arrow(
        self, name: str, source: Track, source_time: float, target: Track, target_time: float
    ) -> None:
        """Record a flow arrow (send -> receive)."""
        self.arrows.append(FlowArrow(name, source, source_time, target, target_time))

    def end_time(self) -> float:
        """The latest end of any span, instant or counter sample."""
        ends = [track.spans[-1].end for track in self._tracks.values() if track.spans]
        ends += [instant.time for instant in self.instants]
        ends += [series.times[-1] for series in self._counters.values() if series.times]
        return max(ends, default=0.0)
