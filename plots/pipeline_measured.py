"""Pipelines measured on this CPU against their simulation: Gantt charts of the same plans.

Reads a capture of ``validation/traces/pipeline_capture.py`` (default: the committed Zen 3 one)
and draws, for 1F1B and PRT k = 4 at one micro-batch count, the measured round of median
iteration time (two processes standing for two GPUs) above the simulation of the very same plan
with the figures measured beside it (op times at their medians).

    .venv/bin/python plots/pipeline_measured.py                      # -> plots/pipeline_measured.png
    .venv/bin/python plots/pipeline_measured.py --micro-batches 8 -o runs/measured_m8.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

import matplotlib

matplotlib.use("Agg")

from simhpc.engine.recorder import TraceRecorder
from simhpc.policies.pipeline.explicit import parse_op
from simhpc.report.gantt import plot_gantts

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from validation.traces import pipeline_capture as harness  # noqa: E402

SCHEDULES = ({"kind": "1f1b"}, {"kind": "prt", "k": 4})
CATEGORY = {"F": "forward", "B": "backward"}


def measured(run: dict[str, Any]) -> tuple[TraceRecorder, float]:
    """The run's round of median iteration time as a trace (device rows), and that time."""
    rounds = sorted(run["iterations"], key=lambda iteration: harness.measured_iteration(iteration)[0])
    iteration = rounds[len(rounds) // 2]
    recorder = TraceRecorder()
    for device, record in enumerate(iteration):
        track = recorder.track(f"core {device}", "compute")
        for label, start, end in record:
            op = parse_op(label)
            track.span(label, start, end, CATEGORY[op.kind], {"micro_batch": op.micro_batch, "stage": op.stage,
                                                              "pipeline": 0, "iteration": 0})
    return recorder, harness.measured_iteration(iteration)[0]


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, default=harness.HERE / "pipeline_captures" / "epyc-zen3.json.gz")
    parser.add_argument("--micro-batches", type=int, default=2, help="m of the runs drawn (2, 4 or 8)")
    parser.add_argument("-o", "--out", type=Path, default=HERE / "pipeline_measured.png")
    args = parser.parse_args()
    try:
        capture = harness.read_capture(args.capture)
    except (OSError, ValueError) as error:  # missing, not gzip, not JSON
        fail(f"{args.capture}: not a capture of validation/traces/pipeline_capture.py ({error})")
    panels = []
    for schedule in SCHEDULES:
        run = next((run for run in capture["runs"] if run["schedule"] == schedule
                    and run["micro_batches"] == args.micro_batches), None)
        if run is None:
            fail(f"{args.capture}: no {harness.schedule_name(schedule)} run at m = {args.micro_batches}")
        name = f"{harness.schedule_name(schedule)}, m = {args.micro_batches}, depth {run['stages']}"
        recorder, seconds = measured(run)
        panels.append((f"{name}: measured on 2 pinned processes, {seconds * 1e3:.1f} ms", recorder))
        result = harness.simulate_run(capture, run["plan"], run["micro_batches"])
        simulated = result.summary["workload"]["iteration_time_s"]
        panels.append((f"{name}: simulated, the same plan and measured figures, {simulated * 1e3:.1f} ms",
                       result.sim.trace))
    plot_gantts(panels, args.out, micro_batches=args.micro_batches)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
