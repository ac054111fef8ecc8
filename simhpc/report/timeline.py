"""timeline.png: the busy intervals of up to ``MAX_ROWS`` tracks over simulated time."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from simhpc.engine.recorder import TraceRecorder, Track
from simhpc.units import format_time

MAX_ROWS = 48
FIXED_COLOURS = {"stall": "tab:red"}
"""Categories drawn in the same colour in every figure (a stall is red, as in the policy timelines)."""


def plot_timeline(recorder: TraceRecorder, path: str | Path, title: str = "", max_rows: int = MAX_ROWS) -> None:
    """Draw one row per track, spans as bars coloured by category (or name).

    With more than ``max_rows`` tracks, rows are picked round-robin over track families
    (labels with digits masked: every NVLink, every NIC, ...), busiest first, so each kind of
    resource stays visible; rows keep their creation order.
    """
    tracks = _pick_rows([track for track in recorder.tracks if track.spans], max_rows)
    end = recorder.end_time() or 1.0
    scale, unit = _time_scale(end)
    labels = sorted({span.category or span.name for track in tracks for span in track.spans})
    palette = [plt.get_cmap("tab20")(i) for i in range(20) if i not in (6, 7)]  # tab20's reds: stalls only
    colours = {label: FIXED_COLOURS.get(label, palette[i % len(palette)]) for i, label in enumerate(labels)}
    height = max(2.5, 0.28 * len(tracks) + 1.2)
    figure, axes = plt.subplots(figsize=(12, height))
    for row, track in enumerate(tracks):
        bars = [(span.start * scale, (span.end - span.start) * scale) for span in track.spans]
        faces = [colours[span.category or span.name] for span in track.spans]
        axes.broken_barh(bars, (row - 0.4, 0.8), facecolors=faces, linewidth=0)
    axes.set_yticks(range(len(tracks)))
    axes.set_yticklabels([track.label for track in tracks], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlim(0, end * scale)
    axes.set_xlabel(f"simulated time ({unit})")
    printable = "".join(c for c in (title or "") if c.isprintable())  # control characters have no glyph
    axes.set_title(printable or "timeline")
    if len(labels) <= 20:
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours[label]) for label in labels]
        axes.legend(handles, labels, fontsize=7, loc="upper right", ncol=min(4, max(1, len(labels))))
    with warnings.catch_warnings():  # a name in a script the font lacks (CJK, emoji) draws boxes, silently
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
        figure.tight_layout()
        figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)


def _pick_rows(tracks: list[Track], max_rows: int) -> list[Track]:
    if len(tracks) <= max_rows:
        return tracks
    families: dict[str, list[Track]] = {}
    for track in sorted(tracks, key=lambda t: (-t.busy_time(), t.index)):
        families.setdefault(re.sub(r"\d+", "#", track.label), []).append(track)
    queues = list(families.values())
    chosen: list[Track] = []
    while len(chosen) < max_rows:
        for queue in queues:
            if queue and len(chosen) < max_rows:
                chosen.append(queue.pop(0))
    return sorted(chosen, key=lambda t: t.index)


def _time_scale(end: float) -> tuple[float, str]:
    """A unit for the x axis such that the run spans more than one unit."""
    unit = format_time(end).split()[-1]
    factors = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "ps": 1e12}
    return factors[unit], unit
