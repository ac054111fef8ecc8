"""PRT's gain over 1F1B as the reuse factor k grows, and where the remaining bubble goes.

    .venv/bin/python plots/prt_gains.py [-o plots/prt_gains.png] [--set PATH=VALUE ...]

Left: unidirectional PRT's throughput gain over 1F1B (depth = #GPUs) against k (depth k x 8) for
ResNet-50, ResNet-152 and BERT-large on 8 x V100 (their `scenarios/pipeline_*.yaml`, m = 8, flow
network), the paper's "up to" figures dashed. Right: ResNet-152's bubble fraction at each k split
into the devices' time waiting for bytes in flight (`transfer_wait_fraction`) and the rest
(waiting for the op that produces an input, and the drain). ``--set`` applies to every run (for
example ``--set workload.micro_batches=16``). About 10 s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from simhpc.errors import ScenarioError, SimhpcError
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from validation.reproduce.prt import PAPER_GAIN_PERCENT  # noqa: E402  (the paper's figures live there)

SCENARIOS = HERE.parent / "scenarios"
MODELS = {"ResNet-50": "pipeline_resnet50.yaml", "ResNet-152": "pipeline_resnet152.yaml",
          "BERT-large": "pipeline_bert_large.yaml"}
REUSE = (1, 2, 3, 4, 6, 8)


def workload(file: str, schedule: str, overrides: list[str]) -> dict[str, Any] | None:
    """One iteration's workload summary, or None where the model has too few layers to cut."""
    try:
        scenario = load_scenario(SCENARIOS / file, [f"workload.schedule={schedule}", "workload.iterations=1",
                                                    "outputs={trace: false, timeline: false}", *overrides])
    except ScenarioError as error:
        if "layers to cut" in str(error):
            return None
        raise
    summary = simulate(scenario, file).summary
    return summary["workload"] if summary["status"] == "ok" else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", type=Path, default=HERE / "prt_gains.png")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    args = parser.parse_args()
    try:
        draw(args.output, args.overrides)
    except SimhpcError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def draw(output: Path, overrides: list[str]) -> None:
    """Simulate every point and write the two-panel figure to ``output``."""
    figure, (gains, bubbles) = plt.subplots(1, 2, figsize=(11, 4.2))
    for number, (model, file) in enumerate(MODELS.items()):
        baseline = workload(file, "{kind: 1f1b}", overrides)
        if baseline is None:
            continue
        points = [(k, workload(file, f"{{kind: prt, k: {k}}}", overrides)) for k in REUSE]
        points = [(k, run) for k, run in points if run is not None]
        throughput = "throughput_samples_per_second"
        gains.plot([k for k, _ in points],
                           [100 * (run[throughput] / baseline[throughput] - 1) for _, run in points],
                           marker="o", label=model, color=f"C{number}")
        if model == "ResNet-152":
            reuse = [k for k, _ in points]
            waits = [run["transfer_wait_fraction"] for _, run in points]
            rest = [run["bubble_fraction"] - wait for (_, run), wait in zip(points, waits)]
            bubbles.bar([str(k) for k in reuse], rest, label="waiting for the producing op, drain", color="C7")
            bubbles.bar([str(k) for k in reuse], waits, bottom=rest, label="waiting for bytes in flight",
                        color="C3")
            bubbles.set_title("ResNet-152: bubble fraction by cause")
    for series, gain in PAPER_GAIN_PERCENT.items():
        paper = gain["uni"]
        gains.axhline(paper, color="0.4", linestyle="--", linewidth=0.8)
        gains.annotate(f"paper, {series}: up to +{paper:.1f} %", (REUSE[0], paper),
                       textcoords="offset points", xytext=(2, 3), fontsize=8, color="0.3")
    gains.set_xlabel("reuse factor k (stages per GPU; 1 = 1F1B)")
    gains.set_ylabel("throughput gain over 1F1B (%)")
    gains.set_title("PRT unidirectional, 8 x V100, m = 8")
    gains.set_xticks(REUSE)
    gains.grid(alpha=0.3)
    gains.legend()
    bubbles.set_xlabel("reuse factor k")
    bubbles.set_ylabel("share of the devices' time")
    bubbles.legend()
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    print(output)


if __name__ == "__main__":
    main()
