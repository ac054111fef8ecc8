"""The files ``simhpc compare`` writes of a :class:`~simhpc.trace.compare.Comparison`: one row per
op (``ops.csv``) and the predicted-vs-measured figure."""

from __future__ import annotations

import csv
from pathlib import Path

from simhpc.trace.compare import Comparison, shape_text


def write_ops_csv(comparison: Comparison, path: Path) -> None:
    """One row per op: name, kind, shapes, step, measured and predicted seconds, status."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "name", "kind", "shapes", "step", "measured_s", "predicted_s", "status"])
        for p in comparison.predictions:
            status = "kernel" if p.kernel is not None else ("no-kernel" if p.modelled else f"unmodelled: {p.reason}")
            writer.writerow(
                [
                    p.op.index,
                    p.op.name,
                    p.op.kind,
                    shape_text(p.op),
                    p.op.step,
                    f"{p.measured_s:.9g}",
                    f"{p.predicted_s:.9g}",
                    status,
                ]
            )


def plot_comparison(comparison: Comparison, path: Path) -> None:
    """Predicted vs measured time per kernel-carrying op, log-log, one colour per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 5.6))
    rows = [p for p in comparison.with_kernels() if p.measured_s > 0 and p.predicted_s > 0]
    for kind in sorted({p.op.kind for p in rows}):
        chosen = [p for p in rows if p.op.kind == kind]
        axes.scatter(
            [p.measured_s * 1e6 for p in chosen],
            [p.predicted_s * 1e6 for p in chosen],
            s=14,
            alpha=0.7,
            label=f"{kind} ({len(chosen)})",
        )
    if rows:
        low = min(min(p.measured_s, p.predicted_s) for p in rows) * 1e6 / 1.5
        high = max(max(p.measured_s, p.predicted_s) for p in rows) * 1e6 * 1.5
        axes.plot([low, high], [low, high], color="black", linewidth=0.8, label="predicted = measured")
        axes.fill_between(
            [low, high],
            [low / 1.15, high / 1.15],
            [low * 1.15, high * 1.15],
            color="grey",
            alpha=0.15,
            label="±15 %",
        )
        axes.set_xscale("log")
        axes.set_yscale("log")
    axes.set_xlabel("measured self time per op (µs)")
    axes.set_ylabel("predicted time per op (µs)")
    gemm = comparison.kinds.get("gemm", {}).get("mape_pct")
    step = comparison.step_error_pct
    title = f"{Path(comparison.source).name}: step error " + ("-" if step is None else f"{step:+.1f} %")
    if gemm is not None:
        title += f", GEMM MAPE {gemm:.1f} %"
    axes.set_title(title, fontsize=10)
    if rows:
        axes.legend(fontsize=8, loc="upper left")
    else:
        axes.text(0.5, 0.5, "no op with a kernel was modelled", ha="center", va="center", transform=axes.transAxes)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(figure)
