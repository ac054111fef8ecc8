"""A training step's framework transitions (its start, the backward's entry and exit) timed from
the calibration's profiled training loops."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

TRANSITION_COUNTS = {"step_start": "parameters", "backward_entry": "graph_nodes", "backward_exit": "parameters"}
"""What each transition's own work grows with beyond its code's eviction: ``zero_grad`` and the
optimizer's set-up visit every parameter tensor; the engine's set-up walks the autograd graph."""


@dataclass(frozen=True)
class TransitionCurves:
    """A transition's cost from the profiled training loops: its code evicted by the bytes moved
    since it last ran (the width sweep, at the fewest layers: interpolated in log bytes, flat
    beyond), plus its own work over what that sweep's graph holds (the depth sweep, at the
    narrowest width: its excess over the width curve, linear in the parameter or node count of
    :data:`TRANSITION_COUNTS`, 0 below the width sweep's count and extended with the last slope
    above the deepest loop)."""

    key: str
    log_bytes: tuple[float, ...]
    seconds_by_bytes: tuple[float, ...]
    counts: tuple[float, ...] = ()
    excess_s: tuple[float, ...] = ()

    @classmethod
    def from_rows(cls, what: str, rows: list[dict[str, Any]]) -> TransitionCurves:
        """Curves from a calibration's rows of ``what`` (rows without ``layers``: a width sweep alone)."""
        key = TRANSITION_COUNTS.get(what, "parameters")
        base = min(row.get("layers", 0) for row in rows)
        width_rows = sorted((row for row in rows if row.get("layers", 0) == base), key=lambda row: row["step_bytes"])
        curves = cls(key, tuple(math.log(row["step_bytes"]) for row in width_rows),
                     tuple(row["time_s"] for row in width_rows))
        narrowest = min(row.get("width", 0) for row in rows)
        depth_rows = sorted((row for row in rows if row.get("width", 0) == narrowest and key in row),
                            key=lambda row: row[key])
        if len(depth_rows) < 2:
            return curves
        excess = [max(0.0, row["time_s"] - curves.by_bytes(row["step_bytes"])) for row in depth_rows]
        return replace(curves, counts=tuple(float(row[key]) for row in depth_rows), excess_s=tuple(excess))

    def by_bytes(self, nbytes: float) -> float:
        """The width sweep's seconds at ``nbytes`` moved."""
        return float(np.interp(math.log(max(nbytes, 1.0)), self.log_bytes, self.seconds_by_bytes))

    def seconds(self, work: Any) -> float:
        """The transition after ``work`` (``touched_bytes``, ``graph_nodes``, ``parameters``)."""
        total = self.by_bytes(work.touched_bytes)
        if not self.counts:
            return total
        count, counts, excess = float(getattr(work, self.key)), self.counts, self.excess_s
        if count <= counts[-1]:
            return total + max(0.0, float(np.interp(count, counts, excess, left=0.0)))
        slope = (excess[-1] - excess[-2]) / (counts[-1] - counts[-2]) if counts[-1] > counts[-2] else 0.0
        return total + max(0.0, excess[-1] + slope * (count - counts[-1]))
