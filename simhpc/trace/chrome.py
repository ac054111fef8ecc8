"""Chrome Trace Event JSON writer (opens in Perfetto and chrome://tracing).

Layout: one process (pid) per node/device/network, one thread (tid) per stream, lane or link;
``M`` events name both; ``X`` events are busy spans (``ts``/``dur`` in microseconds); ``C``
events carry counters (link utilisation, memory in use); ``i`` events mark instants; ``s``/``f``
pairs draw flow arrows from a send to its receive. Perfetto draws an arrow only between slices
that enclose its two ends; simhpc's own arrows run from the middle of the sending op's slice to
the middle of the receiving op's. An end outside every slice is moved into one of its track: the
send's into the last one before it, the receive's into the one it ends, else the first one after it.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

from simhpc.engine.recorder import TraceRecorder, Track

_NS = 1e9


def _ns(seconds: float) -> int:
    """Seconds -> whole nanoseconds, the resolution Perfetto keeps."""
    return round(seconds * _NS)


def _us(seconds: float) -> float:
    """Seconds -> microseconds, rounded to the nanosecond so output is stable.

    Perfetto rounds ``ts`` and ``dur`` to nanoseconds separately (``llround(us * 1000)``) and drops a
    complete event that begins inside the previous one on its track and ends after it: with
    sub-nanosecond digits, two touching spans could overlap by a nanosecond after its rounding.
    """
    return _ns(seconds) / 1000


def chrome_events(recorder: TraceRecorder) -> list[dict[str, Any]]:
    """All trace events of a run, in a deterministic order."""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    threads: dict[str, int] = {}  # threads named so far per process
    events: list[dict[str, Any]] = []

    def pid_of(process: str) -> int:
        if process not in pids:
            pids[process] = len(pids) + 1
            events.append({"ph": "M", "name": "process_name", "pid": pids[process], "tid": 0,
                           "args": {"name": process}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pids[process], "tid": 0,
                           "args": {"sort_index": pids[process]}})
        return pids[process]

    def tid_of(process: str, thread: str) -> int:
        key = (process, thread)
        if key not in tids:
            pid = pid_of(process)
            threads[process] = tids[key] = threads.get(process, 0) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[key],
                           "args": {"name": thread}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tids[key],
                           "args": {"sort_index": tids[key]}})
        return tids[key]

    for track in recorder.tracks:
        pid, tid = pid_of(track.process), tid_of(track.process, track.thread)
        for span in track.spans:
            # dur from the rounded ends, so touching spans never overlap after rounding
            start_ns = _ns(span.start)
            event: dict[str, Any] = {"ph": "X", "name": span.name, "pid": pid, "tid": tid,
                                     "ts": start_ns / 1000, "dur": (_ns(span.end) - start_ns) / 1000}
            if span.category:
                event["cat"] = span.category
            if span.args:
                event["args"] = span.args
            events.append(event)
    for series in recorder.counters:
        pid = pid_of(series.process)
        for time, values in zip(series.times, series.values, strict=True):
            events.append({"ph": "C", "name": series.name, "pid": pid, "tid": 0, "ts": _us(time),
                           "args": values})
    for instant in recorder.instants:
        event = {"ph": "i", "name": instant.name, "pid": pid_of(instant.process),
                 "tid": tid_of(instant.process, instant.thread), "ts": _us(instant.time), "s": "t"}
        if instant.args:
            event["args"] = instant.args
        events.append(event)
    slices: dict[int, _Slices] = {}

    def anchor(track: Track, time: float, later: bool) -> float:
        if track.index not in slices:
            slices[track.index] = _Slices(track)
        return slices[track.index].anchor(time, later)

    for number, arrow in enumerate(recorder.arrows, start=1):
        source = {"pid": pid_of(arrow.source.process), "tid": tid_of(arrow.source.process, arrow.source.thread)}
        target = {"pid": pid_of(arrow.target.process), "tid": tid_of(arrow.target.process, arrow.target.thread)}
        events.append({"ph": "s", "name": arrow.name, "cat": "flow", "id": number,
                       "ts": anchor(arrow.source, arrow.source_time, later=False), **source})
        events.append({"ph": "f", "name": arrow.name, "cat": "flow", "id": number, "bp": "e",
                       "ts": anchor(arrow.target, arrow.target_time, later=True), **target})
    return events


class _Slices:
    """A track's slices as written (microseconds), to place flow-arrow ends inside them."""

    def __init__(self, track: Track) -> None:
        spans = sorted((_us(span.start), _us(span.end)) for span in track.spans)
        self.starts = [start for start, _ in spans]
        self.spans = spans

    def anchor(self, time: float, later: bool) -> float:
        """``time`` (s) in microseconds, moved to the middle of a slice unless one encloses it.

        A slice ending at ``time`` is taken first; else ``later`` takes the first slice after
        ``time``, otherwise the last one before it. With no such slice, ``time`` itself.
        """
        ts = _us(time)
        i = bisect.bisect_right(self.starts, ts) - 1  # the last slice starting at or before ts
        if i >= 0 and ts < self.spans[i][1]:
            return ts
        ends_here = i >= 0 and ts - self.spans[i][1] <= 1e-6  # a send or receive span ending at ts
        j = i + 1 if later and not ends_here else i
        if not 0 <= j < len(self.spans):
            return ts
        start, end = self.spans[j]
        return round((start + end) / 2, 3)


_BATCH = 10_000
"""Events encoded and written at a time."""


def write_chrome_trace(recorder: TraceRecorder, path: str | Path, metadata: dict[str, Any] | None = None) -> None:
    """Write the run's trace as Chrome Trace Event JSON (``displayTimeUnit``: ns).

    The events go out in batches, each event through the C encoder (``json.dump`` encodes in
    Python, 3x slower): the bytes ``json.dump`` writes, without a second copy of the whole trace.
    """
    events = chrome_events(recorder)
    encode = json.JSONEncoder(separators=(",", ":")).encode
    with Path(path).open("w", encoding="utf-8") as handle:
        handle.write('{"traceEvents":[')
        for first in range(0, len(events), _BATCH):
            if first:
                handle.write(",")
            handle.write(",".join(map(encode, events[first:first + _BATCH])))
        handle.write(f'],"displayTimeUnit":"ns","otherData":{encode(metadata or {})}}}\n')
