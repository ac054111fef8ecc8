"""Readers of measured traces: Chrome Trace Event JSON, and torch.profiler exports in particular.

:func:`read_trace` returns a :class:`Trace`: one :class:`OpRecord` per complete event (``X``, or
a matched ``B``/``E`` pair), with its track, nesting (parent, depth, children), self time (its
duration less its children's), shapes and dtypes (torch's ``Input Dims`` / ``Input type`` with
``record_shapes=True``), the op kind (:func:`simhpc.costs.opnames.classify`) and the profiler step
it belongs to (``ProfilerStep#N`` spans, else the iterations that end at each ``optimizer.step()``,
:func:`optimizer_steps`, else the repeated runs of its top-level ops, :func:`repeated_steps`).
simhpc's own traces are Chrome JSON too.

Nesting follows the Chrome convention: on one track, an event inside another's interval is its
child, so a parent's duration is its children's plus its own overhead (``self_time``).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from simhpc.costs.opnames import classify
from simhpc.engine.recorder import TraceRecorder
from simhpc.errors import SimhpcError
from simhpc.jsonfile import load_json_file

_US = 1e-6
_STEP = re.compile(r"ProfilerStep#(\d{1,18})$")
_OPTIMIZER_STEP = re.compile(r"Optimizer\.step#\w+\.step$")
"""torch.optim's annotation of each ``optimizer.step()`` call (``Optimizer.step#AdamW.step``)."""
PROFILER_STEPS = "ProfilerStep"
OPTIMIZER_STEPS = "Optimizer.step"
REPEATED_RUNS = "repetition"
MIN_PERIOD_OPS = 4
"""Fewest top-level ops in a repeated run (:func:`repeated_steps`): a linear layer and its
activation repeat within one forward pass of a stack of them."""
_EPS = 1e-12


class TraceError(SimhpcError):
    """A trace file is missing, unreadable, or not a Chrome trace."""


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""torch.profiler categories of work that ran on a GPU (its kernels, copies and fills)."""


@dataclass(slots=True)
class OpRecord:
    """One timed op or span of a trace. Times are seconds from the trace's origin."""

    index: int
    name: str
    kind: str
    """``gemm``, ``conv``, ``elementwise``, ``reduction``, ``view``, ``group``, ``step`` or ``unknown``."""
    start: float
    duration: float
    track: str
    category: str = ""
    shapes: list[Any] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    concrete: list[Any] = field(default_factory=list)
    """torch's ``Concrete Inputs`` (scalars and int lists as strings)."""
    args: dict[str, Any] = field(default_factory=dict)
    parent: int | None = None
    depth: int = 0
    children: list[int] = field(default_factory=list)
    step: int | None = None
    self_time: float = 0.0

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class Step:
    """A profiler step (``ProfilerStep#N``)."""

    number: int
    start: float
    duration: float
    track: str


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One CPU allocation (``size`` > 0) or free (``size`` < 0): torch.profiler's ``[memory]``
    instant events, written with ``profile_memory=True``. Seconds from the trace's origin; bytes."""

    time: float
    address: int
    size: int


@dataclass
class Trace:
    """The ops of one trace file.

    Attributes:
        source: the file.
        format: ``torch.profiler`` or ``chrome``.
        ops: every complete event, in (track, start) order; ``ops[i].index == i``.
        steps: profiler steps in time order ([] if the trace has none).
        steps_from: what marked them: ``ProfilerStep`` events, or, in a trace without any (a loop
            profiled without a ``schedule``), the ends of its ``optimizer.step()`` calls
            (:func:`optimizer_steps`), else the repeated runs of its top-level ops
            (:func:`repeated_steps`, ``repetition``).
        metadata: the file's top-level keys other than ``traceEvents``.
        skipped: counts of events not read, by reason (never silently dropped).
        notes: counts of events read but suspect, by what is wrong with them (e.g. one that
            overlaps an event of its thread without nesting in it).
        memory: CPU allocations and frees ([] unless profiled with ``profile_memory=True``).
    """

    source: str
    format: str
    ops: list[OpRecord]
    steps: list[Step]
    metadata: dict[str, Any]
    skipped: dict[str, int]
    notes: dict[str, int] = field(default_factory=dict)
    memory: list[MemoryEvent] = field(default_factory=list)
    steps_from: str = PROFILER_STEPS

    @property
    def tracks(self) -> list[str]:
        """Track labels in first-appearance order."""
        return list(dict.fromkeys(op.track for op in self.ops))

    def span(self) -> float:
        """Seconds from the first op's start to the last op's end."""
        if not self.ops:
            return 0.0
        return max(op.end for op in self.ops) - min(op.start for op in self.ops)


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


PYTHON_FRAMES = "python_function"
"""The category of the Python frames torch.profiler records with ``with_stack=True``."""
PROFILER_SPAN = "Trace"
"""The category of the profiler's own span over the whole capture (``PyTorch Profiler (0)``)."""


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
        steps, steps_from = _derived_steps(ops)
    _assign_steps(ops, steps)
    notes = {IMPROPER_NESTING: improper} if improper else {}
    return Trace(source, "torch.profiler" if is_torch else "chrome", ops, steps, metadata, dict(skipped), notes,
                 _memory_events(events, origin), steps_from)


def _derived_steps(ops: list[OpRecord]) -> tuple[list[Step], str]:
    """The steps of a torch.profiler trace without ``ProfilerStep`` events and what marked them
    (:attr:`Trace.steps_from`): its optimizer steps, else its repeated runs of top-level ops."""
    for derive, marker in ((optimizer_steps, OPTIMIZER_STEPS), (repeated_steps, REPEATED_RUNS)):
        steps = derive(ops)
        if steps:
            return steps, marker
    return [], PROFILER_STEPS


def _spans(starts: list[float], ends: list[float], track: str) -> list[Step]:
    return [Step(number, start, end - start, track)
            for number, (start, end) in enumerate(zip(starts, ends, strict=True))]


NOT_WORK = ("user_annotation", PYTHON_FRAMES, PROFILER_SPAN)
"""Categories of events that time no framework work: annotations (``record_function``, torch.optim's
own, the steps), ``with_stack=True``'s Python frames, the profiler's span of the whole capture."""


def _framework_top(ops: list[OpRecord], op: OpRecord) -> bool:
    """Whether ``op`` is an event of the framework (not a Python frame) inside no other such event."""
    if op.category in (PYTHON_FRAMES, PROFILER_SPAN):
        return False
    parent = op.parent
    while parent is not None and ops[parent].category == PYTHON_FRAMES:
        parent = ops[parent].parent
    return parent is None


def optimizer_steps(ops: list[OpRecord]) -> list[Step]:
    """The training iterations of a trace without ``ProfilerStep`` events (torch.profiler marks none
    unless given a ``schedule``), each ending where a run of ``optimizer.step()`` calls ends (several
    optimizers step one after another; a run is broken by framework work between two calls) and
    starting where the previous one ended (the first: at the trace's first op); none unless there
    are two or more. The calls may sit inside Python frames (``with_stack=True``) or an annotation
    of the user's (``record_function``). ``ops`` in (track, start) order, nested."""
    track = next((op.track for op in ops if _OPTIMIZER_STEP.match(op.name)), None)
    if track is None:
        return []
    calls: list[OpRecord] = []
    work: list[float] = []  # starts of framework work on the track outside the optimizers' annotations
    inside_until = -math.inf  # the end of the latest optimizer annotation (step, zero_grad)
    for op in ops:  # start order within the track, parents first
        if op.track != track or op.start < inside_until:
            continue
        if op.name.startswith("Optimizer."):
            inside_until = op.end
            if _OPTIMIZER_STEP.match(op.name):
                calls.append(op)
        elif op.category not in NOT_WORK:
            work.append(op.start)
    ends = [calls[0].end]
    for previous, call in pairwise(calls):
        if bisect.bisect_left(work, call.start) > bisect.bisect_right(work, previous.end):
            ends.append(call.end)
        else:
            ends[-1] = call.end  # another optimizer of the same iteration
    if len(ends) < 2:
        return []
    first = min(op.start for op in ops if op.category != PROFILER_SPAN)
    return _spans([first, *ends[:-1]], ends, track)


def repeated_steps(ops: list[OpRecord]) -> list[Step]:
    """The calls of a loop profiled without a ``schedule`` and without an optimizer (a model's
    forward passes): where the top-level framework events of the busiest thread (Python frames
    seen through) are one sequence run two or more times over, of :data:`MIN_PERIOD_OPS` events
    at least or of annotations only (the user's ``record_function`` around each call), each run
    is a step, from its first event's start to the next's (the last: to its last event's end);
    none otherwise. ``ops`` in (track, start) order, nested."""
    tops = [op for op in ops if _framework_top(ops, op)]
    if not tops:
        return []
    track = Counter(op.track for op in tops).most_common(1)[0][0]
    roots = [op for op in tops if op.track == track]
    names = [op.name for op in roots]
    count = len(names)
    for period in range(1, count // 2 + 1):
        marked = period >= MIN_PERIOD_OPS or all(op.category == "user_annotation" for op in roots[:period])
        if marked and count % period == 0 and names[period:] == names[:-period]:
            starts = [roots[i].start for i in range(0, count, period)]
            return _spans(starts, [*starts[1:], max(op.end for op in roots[-period:])], track)
    return []


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
