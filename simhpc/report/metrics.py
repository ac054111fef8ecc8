"""Run outputs computed from the trace records: summary.json and metrics.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from simhpc.engine import Simulation


def write_summary_json(summary: dict[str, Any], path: Path) -> None:
    """Write the summary with sorted keys so equal runs give identical bytes."""
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def track_metrics(sim: Simulation) -> list[dict[str, Any]]:
    """Per track: spans, busy seconds and utilisation over the simulated time."""
    horizon = sim.now or sim.trace.end_time()
    rows = []
    for track in sim.trace.tracks:
        busy = track.busy_time()
        rows.append({
            "process": track.process,
            "thread": track.thread,
            "spans": len(track.spans),
            "busy_s": busy,
            "utilisation": busy / horizon if horizon > 0 else 0.0,
        })
    return rows


def write_metrics_csv(sim: Simulation, path: Path) -> None:
    """One row per track (device stream or link) with its busy time and utilisation."""
    rows = track_metrics(sim)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["process", "thread", "spans", "busy_s", "utilisation"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "busy_s": repr(row["busy_s"]), "utilisation": f"{row['utilisation']:.6f}"})
