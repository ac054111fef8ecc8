"""Readers of measured traces: Chrome Trace Event JSON, and torch.profiler exports in particular.

:func:`read_trace` returns a :class:`Trace`: one :class:`OpRecord` per complete event (``X``, or
a matched ``B``/``E`` pair), with its track, nesting (parent, depth, children), self time (its
duration less its children's), shapes and dtypes (torch's ``Input Dims`` / ``Input type`` with
``record_shapes=True``), the op kind (:func:`simhpc.costs.opnames.classify`) and the profiler step
it belongs to (``ProfilerStep#N`` spans, else what :mod:`simhpc.trace.step_markers` finds: the
iterations that end at each ``optimizer.step()``, else the repeated runs of its top-level ops). The
records are :mod:`simhpc.trace.records`. simhpc's own traces are Chrome JSON too.

Nesting follows the Chrome convention: on one track, an event inside another's interval is its
child, so a parent's duration is its children's plus its own overhead (``self_time``).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simhpc.costs.opnames import classify
from simhpc.engine.recorder import TraceRecorder
from simhpc.jsonfile import load_json_file
from simhpc.trace.records import (
    PROFILER_STEPS,
    PYTHON_FRAMES,
    MemoryEvent,
    OpRecord,
    Step,
    Trace,
    TraceError,
)
from simhpc.trace.step_markers import derived_steps

_US = 1e-6
_STEP = re.compile(r"ProfilerStep#(\d{1,18})$")
_EPS = 1e-12


def _load_json(path: Path) -> Any:
    try:
        return load_json_file(path, "trace", TraceError)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file") from None


MAX_MICROSECONDS = 1e15
"""Largest timestamp or duration read (about 32 years): beyond it an event is corrupt, not slow."""


def _number(value: Any) -> float | None:
    """A timestamp or duration in microseconds, or None if it is not a number within +-MAX_MICROSECONDS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if abs(value) > MAX_MICROSECONDS or not math.isfinite(value):  # the bound first: a huge int is no float
        return None
    return float(value)


ASYNC_PHASES = frozenset(("b", "e", "n", "S", "T", "F"))
"""Async span events (legacy ``S``/``T``/``F`` too): timed, but matched by id across tracks;
counted as skipped, not read. Flows (``s``/``t``/``f``: torch's forward-backward links), instants,
counters and metadata mark no span of work and are not counted."""


def _identifier(value: Any) -> bool:
    """Whether ``value`` can be a pid or tid: a string, a number or absent (not a list or an object)."""
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


def _track_names(events: list[Any]) -> tuple[dict[Any, str], dict[tuple[Any, Any], str]]:
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for event in events:
        if (isinstance(event, Mapping) and event.get("ph") == "M" and _identifier(event.get("pid"))
                and _identifier(event.get("tid"))):
            name = (event.get("args") or {}).get("name") if isinstance(event.get("args"), Mapping) else None
            if not isinstance(name, str):
                continue
            if event.get("name") == "process_name":
                processes.setdefault(event.get("pid"), name)
            elif event.get("name") == "thread_name":
                threads.setdefault((event.get("pid"), event.get("tid")), name)
    return processes, threads


def _complete_events(events: list[Any], skipped: Counter[str]) -> list[dict[str, Any]]:
    """``X`` events, plus ``B``/``E`` pairs matched per (pid, tid) into complete events.

    ``B``/``E`` events are matched in time order (a file need not list them so), an ``E`` event's
    ``args`` are merged into its ``B`` event's (the Trace Event Format's rule; ``E``'s win), and an ``X``
    event that repeats one already read, unique id included (a file written twice over), is
    skipped.
    """
    complete: list[dict[str, Any]] = []
    open_spans: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    seen: set[tuple[Any, ...]] = set()
    negative = ""
    for event in _time_ordered_begin_end(events):
        if not isinstance(event, Mapping):
            skipped["not an object"] += 1
            continue
        if not isinstance(event.get("name", ""), str):
            skipped["event whose name is not a string"] += 1
            continue
        phase = event.get("ph")
        if phase in ("X", "B", "E") and not (_identifier(event.get("pid")) and _identifier(event.get("tid"))):
            skipped["event whose pid or tid is not a number or string"] += 1
            continue
        if phase == "X":
            if _number(event.get("ts")) is None or _number(event.get("dur")) is None:
                skipped["X event without a numeric ts/dur (a number of microseconds up to 1e15)"] += 1
                continue
            if event["dur"] < 0:
                negative = negative or (f"X event with a negative duration (the first: {event.get('name', '')!r}, "
                                        f"ts {event['ts']}, dur {event['dur']})")
                skipped[negative] += 1
                continue
            if _is_repeat(event, seen):
                skipped["duplicate X event (the same event twice)"] += 1
                continue
            complete.append(dict(event))
        elif phase == "B":
            if _number(event.get("ts")) is None:
                skipped["B event without a numeric ts (a number of microseconds up to 1e15)"] += 1
                continue
            open_spans.setdefault((event.get("pid"), event.get("tid")), []).append(event)
        elif phase == "E":
            stack = open_spans.get((event.get("pid"), event.get("tid")))
            if not stack or _number(event.get("ts")) is None:
                skipped["E event without a matching B"] += 1
                continue
            begin = stack.pop()
            duration = _number(float(event["ts"]) - float(begin["ts"]))
            if duration is None or duration < 0:
                skipped["B/E pair ending before it begins or after 1e15 us"] += 1
                continue
            merged = dict(begin)
            merged["ph"] = "X"
            merged["dur"] = duration
            if isinstance(event.get("args"), Mapping) and event["args"]:  # the format merges E's args into B's
                merged["args"] = {**(begin["args"] if isinstance(begin.get("args"), Mapping) else {}), **event["args"]}
            complete.append(merged)
        elif isinstance(phase, str) and phase in ASYNC_PHASES:
            skipped["async span events (b/e/n, S/T/F), not read"] += 1
    unended = sum(len(stack) for stack in open_spans.values())
    if unended:
        skipped["B event never ended"] += unended
    return complete


EVENT_IDS = ("External id", "Ev Idx", "Record function id")
"""``args`` that torch.profiler gives each op a unique value of: an event repeating one of them
(with the same name, times and thread) is the same event written twice."""


def _is_repeat(event: Mapping[str, Any], seen: set[tuple[Any, ...]]) -> bool:
    """Whether ``event`` repeats one in ``seen`` (recording it if not). Only events carrying an
    id are compared: without one, two calls in the same microsecond are not told apart."""
    args = event.get("args")
    if not isinstance(args, Mapping) or not any(key in args for key in EVENT_IDS):
        return False
    key = (event.get("name"), event["ts"], event["dur"], str(event.get("pid")), str(event.get("tid")),
           *(str(args.get(name)) for name in EVENT_IDS))
    if key in seen:
        return True
    seen.add(key)
    return False


def _time_ordered_begin_end(events: list[Any]) -> list[Any]:
    """``events`` with its ``B``/``E`` events in time order (stable: equal times keep the file's
    order) in the slots they took, every other event where it was."""
    slots = [i for i, event in enumerate(events)
             if isinstance(event, Mapping) and event.get("ph") in ("B", "E") and _number(event.get("ts")) is not None]
    ordered = sorted(slots, key=lambda i: float(events[i]["ts"]))
    if ordered == slots:
        return events
    result = list(events)
    for slot, source in zip(slots, ordered, strict=True):
        result[slot] = events[source]
    return result


OVERLAP_TOLERANCE_S = 1e-9
"""An event may end this much after the one it starts in and still nest in it (timestamp rounding)."""
IMPROPER_NESTING = ("complete events that start inside another of their thread and end after it (improperly "
                    "nested: taken as not its child, so the outer one's self time includes the overlap)")
"""The :attr:`Trace.notes` key counting such events."""


def _nest(ops: list[OpRecord]) -> int:
    """Parents, depths, children and self times; ``ops`` sorted by (track, start, -duration).
    Returns how many ops overlap an op of their track without nesting in it (Python frames
    left out of the count)."""
    stack: list[OpRecord] = []
    track = None
    improper = 0
    for op in ops:
        if op.track != track:
            stack, track = [], op.track
        while stack and op.start >= stack[-1].end - _EPS * max(1.0, abs(stack[-1].end)):
            stack.pop()
        if stack and op.end > stack[-1].end + OVERLAP_TOLERANCE_S:
            # with_stack=True's Python frames straddle torch's own annotations (a step's end): not news
            improper += PYTHON_FRAMES not in (op.category, stack[-1].category)
            while stack and op.end > stack[-1].end + OVERLAP_TOLERANCE_S:
                stack.pop()  # overlaps without nesting: not a child
        if stack:
            op.parent = stack[-1].index
            op.depth = len(stack)
            stack[-1].children.append(op.index)
        stack.append(op)
    for op in ops:
        op.self_time = max(0.0, op.duration - sum(ops[c].duration for c in op.children))
    return improper


def _assign_steps(ops: list[OpRecord], steps: list[Step]) -> None:
    """Each op gets the step whose interval holds its start (any track: autograd threads too)."""
    if not steps:
        return
    starts = [s.start for s in steps]
    for op in ops:
        i = bisect.bisect_right(starts, op.start + 1e-12) - 1
        if i >= 0 and op.start < steps[i].start + steps[i].duration + 1e-12:
            op.step = steps[i].number


ADDRESS_SPACE = 1 << 57
"""Addresses and sizes of memory events lie below this: the largest user address space of a
64-bit CPU (x86-64 with 5-level paging)."""


def _memory_events(events: list[Any], origin: float) -> list[MemoryEvent]:
    """The CPU ``[memory]`` instant events with a numeric time, an address in the user address space
    (:data:`ADDRESS_SPACE`) and a size within it, in time order (a GPU's, ``Device Type`` other than
    0, left out)."""
    found = []
    for event in events:
        if not (isinstance(event, Mapping) and event.get("ph") == "i" and event.get("name") == "[memory]"):
            continue
        args = event.get("args") if isinstance(event.get("args"), Mapping) else {}
        address, size, ts = args.get("Addr"), args.get("Bytes"), _number(event.get("ts"))
        if (ts is None or args.get("Device Type", 0) != 0 or not isinstance(address, int)
                or not isinstance(size, int) or isinstance(size, bool) or isinstance(address, bool)
                or not 0 <= address < ADDRESS_SPACE or not abs(size) < ADDRESS_SPACE - address):
            continue
        found.append(MemoryEvent((ts - origin) * _US, address, size))
    return sorted(found, key=lambda e: e.time)


def parse_trace(data: Any, source: str = "<trace>") -> Trace:
    """Build a :class:`Trace` from parsed Chrome Trace JSON (an object with ``traceEvents`` or a list)."""
    if isinstance(data, Mapping):
        events = data.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError(f"{source}: not a Chrome trace (a JSON object without a 'traceEvents' list)")
        metadata = {k: v for k, v in data.items() if k != "traceEvents"}
    elif isinstance(data, list):
        events, metadata = data, {}
    else:
        raise TraceError(f"{source}: not a Chrome trace (expected a JSON object or list, got {type(data).__name__})")
    skipped: Counter[str] = Counter()
    processes, threads = _track_names(events)
    complete = _complete_events(events, skipped)
    if not complete:
        reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(skipped.items()))
        hint = f" (skipped: {reasons})" if reasons else ": not a timeline trace?"
        raise TraceError(f"{source}: no complete ('X' or 'B'/'E') events{hint}")
    is_torch = (
        "schemaVersion" in metadata
        or "deviceProperties" in metadata
        or any(e.get("cat") in ("cpu_op", "user_annotation") for e in complete)
    )
    origin = min(float(e["ts"]) for e in complete)
    ops: list[OpRecord] = []
    for event in complete:
        pid, tid = event.get("pid"), event.get("tid")
        track = f"{processes.get(pid, pid)}/{threads.get((pid, tid), tid)}"
        args = event.get("args") if isinstance(event.get("args"), Mapping) else {}
        name = str(event.get("name", ""))
        category = str(event.get("cat", ""))
        shapes = args.get("Input Dims")
        dtypes = args.get("Input type")
        concrete = args.get("Concrete Inputs")
        ops.append(
            OpRecord(
                index=0,
                name=name,
                kind=classify(name, category),
                start=(float(event["ts"]) - origin) * _US,
                duration=float(event["dur"]) * _US,
                track=track,
                category=category,
                shapes=list(shapes) if isinstance(shapes, list) else [],
                dtypes=[str(t) for t in dtypes] if isinstance(dtypes, list) else [],
                concrete=list(concrete) if isinstance(concrete, list) else [],
                args=dict(args),
            )
        )
    track_order = {t: i for i, t in enumerate(dict.fromkeys(op.track for op in ops))}
    ops.sort(key=lambda op: (track_order[op.track], op.start, -op.duration, op.name))
    for i, op in enumerate(ops):
        op.index = i
    improper = _nest(ops)
    steps = sorted(
        (Step(int(m.group(1)), op.start, op.duration, op.track) for op in ops if (m := _STEP.match(op.name))),
        key=lambda s: (s.start, s.number),
    )
    steps_from = PROFILER_STEPS
    if not steps and is_torch:
        steps, steps_from = derived_steps(ops)
    _assign_steps(ops, steps)
    notes = {IMPROPER_NESTING: improper} if improper else {}
    return Trace(source, "torch.profiler" if is_torch else "chrome", ops, steps, metadata, dict(skipped), notes,
                 _memory_events(events, origin), steps_from)


TRACE_SUFFIXES = (".json", ".json.gz")
"""What a trace file's name ends with (``tensorboard_trace_handler`` writes ``*.pt.trace.json``, or
``.json.gz`` with ``use_gzip=True``)."""


def trace_file(path: Path) -> Path:
    """``path`` itself, or for a folder (a ``tensorboard_trace_handler`` log folder) the one trace file
    directly in it; a folder with none or several is a :class:`TraceError` listing what it holds."""
    if not path.is_dir():
        return path
    found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if len(found) == 1:
        return found[0]
    if not found:
        raise TraceError(f"{path}: a folder with no trace file in it (*.json or *.json.gz)")
    names = ", ".join(p.name for p in found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    raise TraceError(f"{path}: a folder of {len(found)} trace files ({names}): name the one to read")


def read_trace(path: str | Path) -> Trace:
    """Read a Chrome Trace Event JSON file (``.json`` or ``.json.gz``), or the one such file in a
    folder (:func:`trace_file`); raises :class:`TraceError`."""
    path = trace_file(Path(path))
    return parse_trace(_load_json(path), str(path))


def read_chrome_trace(path: str | Path) -> TraceRecorder:
    """The tracks and spans of a trace simhpc wrote (``trace.json``), to draw again without
    re-simulating (a Gantt chart of a finished run). ``X`` events become spans on the track their
    pid/tid's ``M`` names give; counters, instants and flow arrows are left out.

    Raises:
        TraceError: the file is missing, not a Chrome trace, or its spans overlap on a track.
    """
    source = Path(path)
    data = _load_json(source)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{source}: not a Chrome trace (no traceEvents list)")
    processes, threads = _track_names(events)
    recorder = TraceRecorder()
    for event in events:
        if not (isinstance(event, dict) and event.get("ph") == "X"):
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ts, dur)):
            raise TraceError(f"{source}: an X event without numeric ts and dur ({event.get('name')!r})")
        pid, tid = event.get("pid"), event.get("tid")
        track = recorder.track(processes.get(pid, str(pid)), threads.get((pid, tid), str(tid)))
        args = event.get("args")
        try:
            track.span(str(event.get("name", "")), ts * _US, (ts + dur) * _US, str(event.get("cat", "")),
                       dict(args) if isinstance(args, dict) else None)
        except ValueError as error:  # out of order or overlapping: not a trace simhpc wrote
            raise TraceError(f"{source}: {error}") from None
    return recorder
