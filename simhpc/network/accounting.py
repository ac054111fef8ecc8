"""Per-link accounting: bytes carried, merged busy spans and utilisation counters.

Each directed link that carries traffic gets one trace track, ``("network", link.name)``, whose
spans are the merged intervals the link was busy (spans never overlap), and in flow mode a
counter series of the same name sampled with ``{"utilisation": fraction}`` whenever its load
changes. Where nothing will draw the spans (no trace.json, no timeline.png) each link's track
holds a :class:`LinkSpanTally` instead: the last span, the spans' count and their summed time
(what metrics.csv reads), kept in arrays over all links and updated a step at a time. Where only
timeline.png draws them (``compact``), the tally also logs each span as it closes, three numbers
in arrays rather than an object, and hands a link's spans out when its row is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import numpy as np

from simhpc.engine import Simulation, Track
from simhpc.engine.recorder import CounterSeries, Span
from simhpc.network.topology import Topology


class LinkAccounting:
    """Byte counters for every link, and (when ``record``) its trace track and counter.

    Args:
        sim: the simulation whose trace receives the records.
        topology: the links accounted.
        record: record busy spans and utilisation counters in the trace.
        counters: with ``record``, the utilisation counters too.
        spans: with ``record``, keep every busy span (False: their count and time only, as
            metrics.csv needs: a :class:`LinkSpanTally` per link).
        compact: with ``spans``, keep them in a tally's log of closed spans (:class:`LinkSpanTally`
            hands them out as spans): the same spans, in a fraction of the time and memory, for a
            run whose only reader of them is timeline.png, which draws a few links' rows.
    """

    def __init__(self, sim: Simulation, topology: Topology, record: bool = True, counters: bool = True,
                 spans: bool = True, compact: bool = False) -> None:
        self.sim = sim
        self.topology = topology
        self.record = record
        self.counters = counters
        count = len(topology.links)
        self._bytes = np.zeros(count)
        self._carried: dict[tuple[int, ...], float] = {}
        self._later: list[Callable[[np.ndarray], None]] = []
        self.capacity = topology.capacities
        """Every link's bandwidth (bytes/s), by link index."""
        self._tracks: list[Track | None] = [None] * count
        self._utilisation: list[CounterSeries | None] = [None] * count
        self._busy = np.zeros(count, dtype=bool)
        """Per link: whether its load is above zero (flow mode)."""
        self._tally = None if spans and not compact else _Tallies(count, log=spans)
        self._slot = np.zeros(count, dtype=np.int64)
        """Scratch space of :meth:`busy_from` (a link's last position in its batch)."""
        self._latest = np.full(count, -np.inf)
        """Scratch space of :meth:`busy_from` (a link's latest end in its batch; -inf between calls)."""

    def carried(self, path: tuple[int, ...], nbytes: float) -> None:
        """Count ``nbytes`` on every link of ``path`` (summed per path until read)."""
        self._carried[path] = self._carried.get(path, 0.0) + nbytes

    def carried_later(self, flush: Callable[[np.ndarray], None]) -> None:
        """Have ``flush(bytes)`` add to ``bytes`` (per link) what its transfers have carried since
        it last ran, whenever the bytes are read, until :meth:`carried_all` (a schedule that counts
        its transfers' ends in bulk)."""
        self._later.append(flush)

    def carried_all(self, flush: Callable[[np.ndarray], None]) -> None:
        """``flush``'s transfers have all ended: count the rest of their bytes and forget it."""
        flush(self._bytes)
        self._later.remove(flush)

    @property
    def bytes(self) -> np.ndarray:
        """Bytes carried by each link, indexed by link index."""
        if self._carried:
            for path, nbytes in self._carried.items():
                self._bytes[list(path)] += nbytes
            self._carried.clear()
        for flush in self._later:
            flush(self._bytes)
        return self._bytes

    def _track(self, link: int) -> Track:
        track = self._tracks[link]
        if track is None:
            track = self.sim.trace.track("network", self.topology.links[link].name)
            if self._tally is not None:
                track.spans = LinkSpanTally(self._tally, link)  # type: ignore[assignment]
                self._tally.tracked[link] = True
            self._tracks[link] = track
        return track

    def busy(self, path: tuple[int, ...], start: float, end: float) -> None:
        """Mark every link of ``path`` busy over [start, end], merged with touching spans.

        Starts must come in non-decreasing order (the simulated time a transfer is issued).
        """
        tally = self._tally
        if tally is not None:
            for link in path:
                if not tally.tracked[link]:
                    self._track(link)
                tally.cover(link, start, end)
            return
        for link in path:
            track = self._track(link)
            spans = track.spans
            if spans and start <= spans[-1].end:
                if end > spans[-1].end:
                    spans[-1].end = end
            else:
                track.span("busy", start, end, "network")

    def busy_from(self, start: float, links: np.ndarray, ends: np.ndarray, distinct: bool = False) -> None:
        """Mark each ``links[j]`` busy over [start, ends[j]]: the paths of several transfers issued
        at ``start`` (now), one after another, as :meth:`busy` would one at a time (``distinct``:
        the caller knows no link is there twice)."""
        tally = self._tally
        if tally is None:
            for link, end in zip(links.tolist(), ends.tolist()):
                self.busy((link,), start, end)
            return
        if not tally.tracked[links].all():
            for link in dict.fromkeys(links[~tally.tracked[links]].tolist()):  # in busy()'s order
                self._track(link)
        unique, latest = links, ends
        if not distinct:
            positions = np.arange(links.size)
            self._slot[links] = positions
            once = self._slot[links] == positions  # one place of each link
            if not once.all():  # one start: a link's later calls only extend its span
                unique = links[once]
                np.maximum.at(self._latest, links, ends)
                latest = self._latest[unique]
                self._latest[unique] = -np.inf
        extend = (tally.count[unique] > 0) & (start <= tally.end[unique])
        extended = unique[extend]
        tally.end[extended] = np.maximum(tally.end[extended], latest[extend])
        opened = unique[~extend]
        ended = opened[tally.count[opened] > 0]
        tally.close_spans(ended)
        tally.start[opened] = start
        tally.end[opened] = latest[~extend]
        tally.count[opened] += 1

    def loads_changed(self, links: np.ndarray, loads: np.ndarray, now: float) -> None:
        """Record new link loads (bytes/s) at ``now`` on ``links`` (distinct): utilisation samples,
        and busy spans opened or closed where a link's load became or stopped being zero."""
        fractions = loads / self.capacity[links]
        if self.counters:
            series_of = self._utilisation
            for link, fraction in zip(links.tolist(), fractions.tolist()):
                series = series_of[link]
                if series is None:
                    series = series_of[link] = self.sim.trace.counter("network", self.topology.links[link].name)
                series.sample(now, {"utilisation": fraction})
        busy = fractions > 0.0
        flipped = busy != self._busy[links]
        if not flipped.any():
            return
        links, busy = links[flipped], busy[flipped]
        self._busy[links] = busy
        if self._tally is not None:
            opened = links[busy]
            for link in opened[~self._tally.tracked[opened]].tolist():
                self._track(link)
            self._tally.flip(opened, links[~busy], now)
            return
        for link, now_busy in zip(links.tolist(), busy.tolist()):
            track = self._track(link)
            if not now_busy:
                track.spans[-1].end = now
            elif not track.spans or track.spans[-1].end < now:  # else: idle for no time, reopen
                track.span("busy", now, now, "network")

    def close(self, now: float) -> None:
        """The run ends at ``now``: links still busy (flow mode) have their open spans end here."""
        if self._tally is not None:
            self._tally.close(np.flatnonzero(self._busy), now)
        else:
            for link in np.flatnonzero(self._busy).tolist():
                spans = self._track(link).spans
                spans[-1].end = max(spans[-1].end, now)
        self._busy[:] = False

    def utilisation(self, makespan: float) -> np.ndarray:
        """Average utilisation of each link over ``[0, makespan]`` (bytes / capacity / time)."""
        if makespan <= 0:
            return np.zeros_like(self._bytes)
        return self.bytes / (self.capacity * makespan)

    def busiest(self, makespan: float, top: int) -> list[dict[str, Any]]:
        """The ``top`` links by bandwidth utilisation over the run (then bytes, then link index).

        ``bandwidth_utilisation`` is bytes / (capacity x makespan): a link that carried fewer bytes
        at a lower capacity (an oversubscribed spine) can be the busier one. ``metrics.csv``'s
        ``utilisation`` is another figure: the fraction of time a track was busy at all.
        """
        carried = self.bytes
        use = self.utilisation(makespan)
        order = np.lexsort((np.arange(carried.size), -carried, -use))[:top]
        links = self.topology.links
        return [
            {"link": links[i].name, "bytes": float(carried[i]), "bandwidth_utilisation": float(use[i])}
            for i in order.tolist()
            if carried[i] > 0
        ]


class _Tallies:
    """Per link: its busy spans' count, the summed time of all but the last, and the last's start
    and end; whether its track exists; with ``log``, every span closed so far (:class:`_SpanLog`)."""

    def __init__(self, links: int, log: bool = False) -> None:
        self.count = np.zeros(links, dtype=np.int64)
        self.closed = np.zeros(links)
        self.start = np.zeros(links)
        self.end = np.zeros(links)
        self.tracked = np.zeros(links, dtype=bool)
        self.log = _SpanLog() if log else None

    def cover(self, link: int, start: float, end: float) -> None:
        """``link`` is busy over [start, end]: extend its last span if they touch, else open one."""
        if self.count[link] and start <= self.end[link]:
            if end > self.end[link]:
                self.end[link] = end
            return
        if self.count[link]:
            self.closed[link] += self.end[link] - self.start[link]
            if self.log is not None:
                self.log.add(link, float(self.start[link]), float(self.end[link]))
        self.start[link], self.end[link] = start, end
        self.count[link] += 1

    def close_spans(self, links: np.ndarray) -> None:
        """The last spans of ``links`` (distinct, each with one) are over: count their time, log them."""
        self.closed[links] += self.end[links] - self.start[links]
        if self.log is not None and links.size:
            self.log.add_many(links, self.start[links], self.end[links])

    def spans(self, link: int) -> list[Span]:
        """``link``'s spans (the logged ones and the last), as a list would hold them."""
        assert self.log is not None
        starts, ends = self.log.of(link)
        spans = [Span(start, end, "busy", "network") for start, end in zip(starts.tolist(), ends.tolist())]
        if self.count[link]:
            spans.append(Span(float(self.start[link]), float(self.end[link]), "busy", "network"))
        return spans

    def flip(self, opened: np.ndarray, idle: np.ndarray, now: float) -> None:
        """At ``now`` the ``opened`` links became busy (a new span, unless the last ended now:
        it goes on) and the ``idle`` ones stopped (their last span ends)."""
        self.end[idle] = now
        fresh = opened[(self.count[opened] == 0) | (self.end[opened] < now)]
        self.close_spans(fresh[self.count[fresh] > 0])
        self.start[fresh] = now
        self.end[fresh] = now
        self.count[fresh] += 1

    def close(self, busy: np.ndarray, now: float) -> None:
        """The run ends at ``now``: the ``busy`` links' last spans end no earlier."""
        self.end[busy] = np.maximum(self.end[busy], now)


LOG_BLOCK = 1 << 20
"""Spans a :class:`_SpanLog` gathers before joining its pieces into one block of arrays."""


class _SpanLog:
    """The spans closed on the links, in the order they closed: single ones gathered in lists, a
    step's in arrays, joined into blocks of about :data:`LOG_BLOCK`. A link's are picked out of
    the blocks when asked for (a figure draws a few links' rows), and kept until more close."""

    def __init__(self) -> None:
        self._blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending = 0
        self._single: tuple[list[int], list[float], list[float]] = ([], [], [])
        self._picked: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, link: int, start: float, end: float) -> None:
        for column, value in zip(self._single, (link, start, end), strict=True):
            column.append(value)
        self._picked.clear()

    def add_many(self, links: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self._flush_single()
        self._piece(links.astype(np.int32), starts, ends)
        self._picked.clear()

    def _flush_single(self) -> None:
        links, starts, ends = self._single
        if links:
            self._single = ([], [], [])
            self._piece(np.array(links, dtype=np.int32), np.array(starts), np.array(ends))

    def _piece(self, links: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self._pieces.append((links, starts, ends))
        self._pending += links.size
        if self._pending >= LOG_BLOCK:
            self._join()

    def _join(self) -> None:
        if self._pieces:
            self._blocks.append(tuple(np.concatenate(column) for column in zip(*self._pieces, strict=True)))
            self._pieces, self._pending = [], 0

    def of(self, link: int) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends of ``link``'s logged spans, in the order they closed."""
        found = self._picked.get(link)
        if found is None:
            self._flush_single()
            self._join()
            starts, ends = [np.zeros(0)], [np.zeros(0)]
            for links, block_starts, block_ends in self._blocks:
                mine = links == link
                starts.append(block_starts[mine])
                ends.append(block_ends[mine])
            found = self._picked[link] = np.concatenate(starts), np.concatenate(ends)
        return found


class LinkSpanTally:
    """A link track's spans kept as a tally: their count (``len``), their total time
    (:meth:`busy_time`, summed in the order they ended, as a list's would be) and the last span
    (``[-1]``, whose end can still be set). Where the tally logs them, iterating hands out all
    the spans; else the others are not kept."""

    __slots__ = ("_link", "_tallies")

    def __init__(self, tallies: _Tallies, link: int) -> None:
        self._tallies = tallies
        self._link = link

    def __len__(self) -> int:
        return int(self._tallies.count[self._link])

    def __getitem__(self, index: int) -> _LastSpan | Span:
        count = len(self)
        if count and index in (-1, count - 1):
            return _LastSpan(self._tallies, self._link)
        if self._tallies.log is None or not -count <= index < count:
            raise IndexError("a tallied link track keeps only its last span")
        return self._tallies.spans(self._link)[index]

    def __iter__(self) -> Iterator[Span]:
        if self._tallies.log is None:
            raise TypeError("a tallied link track keeps only its last span: build the run with a trace or timeline")
        return iter(self._tallies.spans(self._link))

    def pop(self) -> NoReturn:
        raise TypeError("a tallied link track keeps only its last span: it cannot drop it")

    def busy_time(self) -> float:
        tallies, link = self._tallies, self._link
        return float(tallies.closed[link] + (tallies.end[link] - tallies.start[link]))


class _LastSpan:
    """A tallied link's last busy span, read and cut in place."""

    __slots__ = ("_link", "_tallies")

    def __init__(self, tallies: _Tallies, link: int) -> None:
        self._tallies = tallies
        self._link = link

    @property
    def start(self) -> float:
        return float(self._tallies.start[self._link])

    @property
    def end(self) -> float:
        return float(self._tallies.end[self._link])

    @end.setter
    def end(self, time: float) -> None:
        self._tallies.end[self._link] = time
