"""Two traces held against each other (``simhpc compare A --against B``): a simhpc trace and a
measured one, or two runs, aligned by track label and span name."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from typing import Any

from simhpc.trace.readers import Trace

_OS_THREAD = re.compile(r"\bthread \d+\b")
"""torch.profiler's thread names carry the OS thread id (``thread 27218 (python)``)."""


def _track_keys(trace: Trace) -> dict[str, str]:
    """Track label -> the key two traces are aligned by: OS thread ids replaced by the thread's
    order of first appearance, so two captures of one program (two processes) align."""
    keys: dict[str, str] = {}
    ordinals: dict[str, int] = {}
    for label in dict.fromkeys(op.track for op in trace.ops):
        for match in _OS_THREAD.findall(label):
            ordinals.setdefault(match, len(ordinals) + 1)
        keys[label] = _OS_THREAD.sub(lambda m: f"thread #{ordinals[m.group(0)]}", label)
    return keys


def _track_busy(trace: Trace) -> dict[str, float]:
    keys = _track_keys(trace)
    busy: dict[str, float] = defaultdict(float)
    for op in trace.ops:
        if op.parent is None:
            busy[keys[op.track]] += op.duration
    return dict(busy)


_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
"""torch.profiler's step spans, numbered from the start of profiling: compared as one name."""


def _name_totals(trace: Trace) -> dict[str, tuple[int, float]]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for op in trace.ops:
        entry = totals[_PROFILER_STEP.sub("ProfilerStep#*", op.name)]
        entry[0] += 1
        entry[1] += op.duration
    return {name: (int(v[0]), v[1]) for name, v in totals.items()}


def _diff(a: float, b: float) -> float | None:
    return 100.0 * (a - b) / b if b else None


def compare_traces(a: Trace, b: Trace) -> dict[str, Any]:
    """Align two traces by track label and span name.

    Returns:
        ``span_s`` of each, and for ``tracks`` (busy time of top-level spans) and ``names`` (count
        and total duration per span name): one row per key present in either trace, with A's and
        B's values and A's difference from B in %; keys in only one trace are listed as such.
    """
    tracks_a, tracks_b = _track_busy(a), _track_busy(b)
    tracks = []
    for key in list(dict.fromkeys([*tracks_a, *tracks_b])):
        va, vb = tracks_a.get(key), tracks_b.get(key)
        tracks.append(
            {
                "track": key,
                "a_busy_s": va,
                "b_busy_s": vb,
                "diff_pct": _diff(va, vb) if va is not None and vb is not None else None,
            }
        )
    names_a, names_b = _name_totals(a), _name_totals(b)
    names = []
    for key in sorted(set(names_a) | set(names_b)):
        ca, ta = names_a.get(key, (0, 0.0))
        cb, tb = names_b.get(key, (0, 0.0))
        names.append(
            {
                "name": key,
                "a_count": ca,
                "b_count": cb,
                "a_total_s": ta,
                "b_total_s": tb,
                "diff_pct": _diff(ta, tb) if ca and cb else None,
            }
        )
    names.sort(key=lambda row: (-abs(row["a_total_s"] - row["b_total_s"]), row["name"]))
    steps = None
    if a.steps and b.steps:  # the median step, as compare's step error
        sa = statistics.median(s.duration for s in a.steps)
        sb = statistics.median(s.duration for s in b.steps)
        steps = {"a_step_s": sa, "b_step_s": sb, "diff_pct": _diff(sa, sb)}
    return {
        "a": a.source,
        "b": b.source,
        "a_span_s": a.span(),
        "b_span_s": b.span(),
        "span_diff_pct": _diff(a.span(), b.span()),
        "steps": steps,
        "tracks": tracks,
        "names": names,
        "only_in_a": sorted(set(names_a) - set(names_b)),
        "only_in_b": sorted(set(names_b) - set(names_a)),
        "matched_names": len(set(names_a) & set(names_b)),
        "matched_tracks": len(set(tracks_a) & set(tracks_b)),
        "a_skipped_events": dict(a.skipped),
        "b_skipped_events": dict(b.skipped),
    }
