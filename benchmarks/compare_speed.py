"""How fast ``simhpc compare`` reads and predicts a long trace, and whether its time grows linearly.

Builds traces of 1 and ``--copies`` back-to-back copies of a committed capture (a GRU's training
steps on the EPYC Zen 2 guest: about 3000 ops a step, most of them small), then times ``simhpc
compare`` on each as a user runs it, in a process of its own (its committed calibration; the report
files written to a temporary folder), and prints the median wall time, the ops per second and the
ratio of the long trace's seconds per op to the short one's (1.0: linear in the trace's length).

    python benchmarks/compare_speed.py [--copies 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "validation" / "traces" / "captures" / "epyc-zen2" / "gru_t1.json.gz"
CALIBRATION = ROOT / "validation" / "calibration" / "epyc-zen2.json"


def repeated(copies: int, folder: Path) -> Path:
    """The capture's events ``copies`` times, each copy shifted past the last and its steps renumbered."""
    data = json.loads(gzip.decompress(CAPTURE.read_bytes()))
    events = data["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    out = []
    for i in range(copies):
        for event in events:
            event = copy.copy(event)
            if isinstance(event.get("ts"), (int, float)):
                event["ts"] += i * span
            name = str(event.get("name", ""))
            if name.startswith("ProfilerStep#"):
                event["name"] = f"ProfilerStep#{i * 1000 + int(name.split('#')[1])}"
            out.append(event)
    path = folder / f"gru_x{copies}.json"
    path.write_text(json.dumps({**data, "traceEvents": out}))
    return path


def timed_compare(trace: Path, folder: Path) -> tuple[float, int]:
    """Wall seconds of one ``compare --json`` and the ops it counted."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "simhpc", "compare", str(trace), "--calibration", str(CALIBRATION),
                             "--json", "-o", str(folder / "out")], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(result.stderr)
    return elapsed, json.loads(result.stdout)["ops_total"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        per_op = {}
        for copies in (1, args.copies):
            trace = repeated(copies, folder)
            runs = [timed_compare(trace, folder) for _ in range(args.repeats)]
            seconds, ops = statistics.median(r[0] for r in runs), runs[0][1]
            per_op[copies] = seconds / ops
            print(f"{copies} x capture: {ops} ops, {trace.stat().st_size / 1e6:.1f} MB, compare {seconds:.2f} s "
                  f"(median of {args.repeats}), {ops / seconds:,.0f} ops/s")
        print(f"seconds per op, {args.copies} copies over 1: {per_op[args.copies] / per_op[1]:.2f}")


if __name__ == "__main__":
    main()
