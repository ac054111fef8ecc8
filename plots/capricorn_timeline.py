"""One training iteration per checkpoint policy: compute, training traffic, checkpoint chunks.

Runs ``scenarios/moe_demo.yaml`` (2 nodes x 8 A100, a 2-layer GPT-MoE, checkpoint every
iteration) once per policy and draws, for GPU 0 of node 0, the same steady-state iteration:

* **compute**: its kernels (attention, experts, optimizer), and stalls waiting for the checkpoint;
* **training traffic**: its all-to-all and all-reduce transfers (rail 0 and NVLink);
* **checkpoint**: its checkpoint copies in flight (to host memory, peers, or staging).

Writes ``plots/capricorn_timeline.png`` (the committed figure) unless ``-o`` names another file::

    .venv/bin/python plots/capricorn_timeline.py [ITERATION] [-o FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simhpc.runner import simulate  # noqa: E402
from simhpc.scenario.loader import load_scenario  # noqa: E402

SCENARIO = ROOT / "scenarios" / "moe_demo.yaml"
OUTPUT = ROOT / "plots" / "capricorn_timeline.png"
POLICIES = ("none", "torchsnapshot", "checkfreq", "gemini", "capricorn")
COLOURS = {"compute": "#4c72b0", "stall": "#c44e52", "profile": "#8172b2", "comm": "#55a868",
           "checkpoint": "#dd8452"}


def iteration_spans(policy: str, iteration: int) -> tuple[float, float, dict[str, list]]:
    """(start, end, rows) of ``iteration`` on n0.gpu0; rows: label -> [(start, end, category)]."""
    overrides = [f"workload.checkpoint.policy={policy}", f"workload.iterations={iteration + 1}"]
    if policy == "checkfreq":
        overrides.append("workload.checkpoint.options={adaptive: false}")
    result = simulate(load_scenario(SCENARIO, overrides), str(SCENARIO))
    records = [r for r in result.workload.trainer.records if r.iteration == iteration and r.status == "done"]
    start, end = records[-1].start, records[-1].end
    rows: dict[str, list] = {"compute": [], "training traffic": [], "checkpoint": []}
    for track in result.sim.trace.tracks:
        if track.process == "n0.gpu0" and track.thread == "compute":
            row = "compute"
        elif (track.process == "n0.gpu0" and track.thread.startswith(("a2a", "allreduce"))) or (
            track.process == "n0" and track.thread == "nvlink"
        ):
            row = "training traffic"
        elif track.process == "n0.gpu0" and track.thread.startswith("ckpt"):
            row = "checkpoint"
        else:
            continue
        for span in track.spans:
            if span.end > start and span.start < end:
                rows[row].append((max(span.start, start), min(span.end, end), span.category or "compute"))
    return start, end, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("iteration", nargs="?", type=int, default=8, help="the iteration drawn (default 8)")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT, help=f"figure to write (default {OUTPUT})")
    args = parser.parse_args(argv)
    iteration = args.iteration
    figure, axes = plt.subplots(len(POLICIES), 1, figsize=(12, 1.5 * len(POLICIES) + 1), sharex=False)
    for axis, policy in zip(axes, POLICIES):
        start, end, rows = iteration_spans(policy, iteration)
        for y, (label, spans) in enumerate(reversed(rows.items())):
            for begin, finish, category in spans:
                colour = COLOURS.get(category, "#999999")
                axis.broken_barh([(begin - start, finish - begin)], (y - 0.4, 0.8), color=colour, linewidth=0)
            axis.text(-0.005 * (end - start), y, label, ha="right", va="center", fontsize=8)
        axis.set_yticks([])
        axis.set_xlim(0, end - start)
        axis.set_ylim(-0.6, len(rows) - 0.4)
        axis.set_title(f"{policy}: iteration {iteration} takes {end - start:.3f} s", fontsize=9, loc="left")
        axis.tick_params(labelsize=8)
    axes[-1].set_xlabel("time since the iteration started (s)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    figure.legend(handles, list(COLOURS), loc="upper right", ncol=len(COLOURS), fontsize=8)
    figure.suptitle("One iteration on n0.gpu0 per checkpoint policy (moe_demo: checkpoint every iteration)",
                    fontsize=10, x=0.01, ha="left")
    figure.tight_layout(rect=(0.06, 0, 1, 0.95))
    figure.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
