"""Gantt charts of pipeline-training runs (devices as rows, ops coloured by micro-batch and pass).

Any run:
    .venv/bin/python plots/gantt_pipeline.py scenarios/pipeline_bert_large.yaml \\
        --set 'workload.schedule={kind: prt, k: 3}' -o runs/gantt.png

A finished run, from its trace (no new simulation; every iteration if ``--iteration all``):
    .venv/bin/python plots/gantt_pipeline.py --trace runs/pipeline_bert_large/trace.json -o runs/gantt.png

Without a scenario it draws the committed figure ``plots/gantt_bert_large.png``: BERT-large on
8 V100s with 8 micro-batches under 1F1B (depth 8), PRT unidirectional (k=3, depth 24), PRT
bidirectional (k=2) and ZB-H1 (depth 8, split backward), first iteration, on one time axis.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simhpc.errors import SimhpcError
from simhpc.report.gantt import pipeline_spans, plot_gantts
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from simhpc.trace.readers import read_chrome_trace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COMMITTED = [
    ("1F1B, depth 8 (baseline)", ["workload.schedule={kind: 1f1b}"]),
    ("PRT unidirectional, k=3 (depth 24, round-robin)", ["workload.schedule={kind: prt, k: 3}"]),
    ("PRT bidirectional, k=2 (depth 16 per direction)", ["workload.schedule={kind: prt, k: 2, direction: bi}"]),
    ("ZB-H1, depth 8 (split backward: B, then W)", ["workload.schedule={kind: zb-h1}"]),
]


def run(scenario: Path, overrides: list[str]) -> tuple[str, object]:
    """Simulate one iteration; return a panel title and the trace."""
    config = load_scenario(scenario, [*overrides, "workload.iterations=1"])
    result = simulate(config, str(scenario))
    workload = result.summary["workload"]
    title = f"{config.name}: {workload['schedule']['kind']}, {workload['stages']} stages, "
    if result.summary["status"] == "oom":  # the ops that ran before it
        title += result.summary["error"]["message"]
    else:
        title += (f"{workload['throughput_samples_per_second']:.0f} samples/s, "
                  f"bubble {workload['bubble_fraction']:.0%}")
    return title, result.sim.trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", type=Path, help="a pipeline_training scenario")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--trace", type=Path, help="draw a finished run from its trace.json instead of simulating")
    parser.add_argument("--iteration", default="0", help="iteration to draw (default 0), or 'all'")
    parser.add_argument("-o", "--output", type=Path, help="PNG to write")
    args = parser.parse_args()
    if args.trace is not None and (args.scenario is not None or args.overrides):
        parser.error("--trace draws a finished run: give no scenario and no --set")
    if args.iteration != "all" and not args.iteration.isdigit():
        parser.error(f"--iteration: a whole number or 'all', got {args.iteration!r}")
    try:
        draw(args)
    except SimhpcError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def draw(args: argparse.Namespace) -> None:
    """Simulate the panels ``args`` asks for (or read the run ``--trace`` names) and write the figure."""
    iteration = None if args.iteration == "all" else int(args.iteration)
    if args.trace is not None:
        recorder = read_chrome_trace(args.trace)
        if not pipeline_spans(recorder, iteration=iteration):
            raise SimhpcError(f"{args.trace}: no pipeline ops (forward/backward/weight spans) of iteration "
                              f"{args.iteration}: not a pipeline_training run's trace?")
        output = args.output or args.trace.with_name("gantt.png")
        output.parent.mkdir(parents=True, exist_ok=True)
        plot_gantts([(str(args.trace), recorder)], output, iteration=iteration)
        print(output)
        return
    if args.scenario is None:
        scenario = ROOT / "scenarios" / "pipeline_bert_large.yaml"
        panels = []
        for label, overrides in COMMITTED:
            title, trace = run(scenario, overrides)
            panels.append((f"{label} — {title.split(': ', 1)[1]}", trace))
        output = args.output or HERE / "gantt_bert_large.png"
    else:
        panels = [run(args.scenario, args.overrides)]
        output = args.output or Path("runs") / f"gantt_{args.scenario.stem}.png"
    output.parent.mkdir(parents=True, exist_ok=True)
    plot_gantts(panels, output, iteration=iteration)  # type: ignore[arg-type]
    print(output)


if __name__ == "__main__":
    main()
