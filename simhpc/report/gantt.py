"""Pipeline Gantt charts: devices as rows, ops as bars coloured by micro-batch and pass.

Reads the spans the pipeline engine records on each device's ``compute`` stream (category
``forward``/``backward``/``weight``, args ``micro_batch``, ``stage``, ``pipeline``, ``iteration``).
Forward bars are a light shade of the micro-batch's colour, backward bars a dark one, and the
weight-gradient (``W``) bars of split-backward (zero-bubble) plans the plain colour, dotted; bars
of the second (upward) pipeline of a bidirectional schedule are hatched. Labels show the
micro-batch (and stage, when the bar is wide enough). A thin red strip under a row marks where
that device waited for bytes in flight (the engine's ``p2p_transfer`` waits on the ``p2p wait``
thread: exposed point-to-point communication).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from simhpc.engine.recorder import Span, TraceRecorder

PASS_CATEGORIES = ("forward", "backward", "weight")
SHADE = {"forward": 0.45, "backward": -0.25, "weight": 0.0}
"""Per pass: blend of the micro-batch colour towards white (> 0) or black (< 0)."""
HATCH = {"forward": "", "backward": "", "weight": "...."}
"""Per pass: bar hatch (combined with the second pipeline's ``///``)."""
IN_FLIGHT = "p2p_transfer"
"""Category of a device's wait for bytes in flight (on its ``p2p wait`` thread)."""


def pipeline_spans(recorder: TraceRecorder, thread: str = "compute",
                   iteration: int | None = 0, categories: Sequence[str] = PASS_CATEGORIES) -> dict[str, list[Span]]:
    """Per device (trace process), its spans of ``categories`` (the passes: forward, backward,
    weight) on ``thread`` of ``iteration`` (None: all)."""
    rows: dict[str, list[Span]] = {}
    for track in recorder.tracks:
        if track.thread != thread:
            continue
        spans = [span for span in track.spans if span.category in categories
                 and (iteration is None or (span.args or {}).get("iteration") == iteration)]
        if spans:
            rows[track.process] = spans
    return rows


def in_flight_waits(recorder: TraceRecorder, iteration: int | None = 0) -> dict[str, list[Span]]:
    """Per device, its waits for bytes in flight in ``iteration`` (None: all)."""
    return pipeline_spans(recorder, "p2p wait", iteration, (IN_FLIGHT,))


def _shade(colour: tuple[float, float, float], amount: float) -> tuple[float, float, float]:
    """Blend towards white (amount > 0) or black (amount < 0)."""
    target = 1.0 if amount > 0 else 0.0
    a = abs(amount)
    return tuple(c + (target - c) * a for c in colour)  # type: ignore[return-value]


def draw_gantt(axes: Axes, rows: dict[str, list[Span]], micro_batches: int | None = None,
               origin: float | None = None, scale: float = 1e3,
               waits: dict[str, list[Span]] | None = None) -> None:
    """Draw ``rows`` (device -> spans) on ``axes``, and under each row its ``waits`` for bytes in
    flight; times relative to ``origin``, times ``scale``."""
    spans = [span for row in rows.values() for span in row]
    if not spans:
        return
    start = min(span.start for span in spans) if origin is None else origin
    count = micro_batches or 1 + max(int((span.args or {}).get("micro_batch", 0)) for span in spans)
    palette = plt.get_cmap("tab20" if count > 10 else "tab10")
    base = [to_rgb(palette(i % palette.N)) for i in range(count)]
    width = max(span.end for span in spans) - start
    for row, device in enumerate(rows):
        for span in rows[device]:
            args = span.args or {}
            j = int(args.get("micro_batch", 0))
            colour = _shade(base[j % count], SHADE[span.category])
            left, length = (span.start - start) * scale, (span.end - span.start) * scale
            hatch = ("///" if args.get("pipeline", 0) else "") + HATCH[span.category]
            axes.barh(row, length, left=left, height=0.8, color=colour, edgecolor="white", linewidth=0.3,
                      hatch=hatch or None)
            if length > width * scale / 60:
                text = f"{j}" if length < width * scale / 25 else f"{j}·s{args.get('stage', '')}"
                axes.text(left + length / 2, row, text, ha="center", va="center", fontsize=5.5,
                          color="white" if span.category == "backward" else "black")
        for span in (waits or {}).get(device, []):
            axes.barh(row + 0.33, (span.end - span.start) * scale, left=(span.start - start) * scale, height=0.14,
                      color="tab:red", linewidth=0)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels(list(rows), fontsize=7)
    axes.invert_yaxis()
    axes.set_xlim(0, width * scale)


def plot_gantt(recorder: TraceRecorder, path: str | Path, title: str = "", iteration: int | None = 0,
               micro_batches: int | None = None) -> None:
    """Write one Gantt chart of a run's pipeline ops (devices as rows) to ``path``."""
    plot_gantts([(title, recorder)], path, iteration=iteration, micro_batches=micro_batches)


def plot_gantts(runs: Sequence[tuple[str, TraceRecorder]], path: str | Path, iteration: int | None = 0,
                micro_batches: int | None = None, shared_axis: bool = True) -> None:
    """Stack the Gantt charts of several runs (one panel each, same time axis by default)."""
    panels = [(title, pipeline_spans(recorder, iteration=iteration), in_flight_waits(recorder, iteration))
              for title, recorder in runs]
    height = sum(0.22 * max(1, len(rows)) + 0.9 for _, rows, _ in panels) + 0.6
    figure, axes_list = plt.subplots(len(panels), 1, figsize=(12, height), sharex=shared_axis, squeeze=False)
    for axes, (title, rows, waits) in zip(axes_list[:, 0], panels):
        draw_gantt(axes, rows, micro_batches, waits=waits)
        axes.set_title(title, fontsize=9, loc="left")
    if shared_axis:
        longest = max((max(s.end for row in rows.values() for s in row) - min(s.start for row in rows.values()
                       for s in row)) * 1e3 for _, rows, _ in panels if rows)
        axes_list[-1, 0].set_xlim(0, longest)
    axes_list[-1, 0].set_xlabel("time within the iteration (ms)")
    spans = [span for _, rows, _ in panels for row in rows.values() for span in row]
    legend = [Patch(facecolor=_shade(to_rgb("tab:blue"), 0.45), label="forward (light)"),
              Patch(facecolor=_shade(to_rgb("tab:blue"), -0.25), label="backward (dark)")]
    if any((span.args or {}).get("pipeline", 0) for span in spans):
        legend.append(Patch(facecolor="white", edgecolor="grey", hatch="///", label="second pipeline (bidirectional)"))
    if any(span.category == "weight" for span in spans):
        legend.insert(2, Patch(facecolor=to_rgb("tab:blue"), edgecolor="white", hatch=HATCH["weight"],
                               label="weight gradient W (dotted)"))
    if any(waits for _, _, waits in panels):
        legend.append(Patch(facecolor="tab:red", label="waiting for bytes in flight (red strip)"))
    figure.legend(handles=legend, fontsize=7, loc="lower center", ncol=len(legend), frameon=False)
    figure.tight_layout(rect=(0, 0.035, 1, 1))
    figure.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(figure)
