"""How a greedy pipeline order's planning time grows with the number of micro-batches.

Chimera and bidirectional PRT order their ops by greedy dry runs (:mod:`simhpc.policies.pipeline.greedy`,
several per plan). Plans ``scenarios/pipeline_uniform.yaml``'s 8 GPUs under Chimera and under
bidirectional PRT (k = 2) for m = 256 .. 2048 micro-batches and prints the median wall time of
building the workload (the plan and its candidates; the simulation itself is not timed) and the
ratio of each time to the previous m's: 2.0 per doubling is linear in m. On the 2-core Zen 5
guest (2026-12-07, one repeat), at m = 256 / 512 / 1024 / 2048:

- Chimera 1.29 / 2.03 / 4.02 / 8.83 s, bidirectional PRT 2.01 / 3.94 / 8.22 / 17.98 s;
- before a dry run kept the micro-batches waiting to enter apart and looked only at queue heads
  (`_ReadyOps`), each choice scanned every ready op: 1.83 / 3.82 / 12.73 / 38.42 s and 2.31 / 6.81 /
  22.30 / 81.03 s (x3 to x3.6 per doubling), the same plans byte for byte.

    .venv/bin/python benchmarks/pipeline_planner.py [--repeats 3] [--micro-batches 256 512 1024 2048]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from simhpc.runner import build
from simhpc.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "pipeline_uniform.yaml"
SCHEDULES = {"chimera": "{kind: chimera}", "prt-bi k=2": "{kind: prt, k: 2, direction: bi}"}


def plan_seconds(schedule: str, micro_batches: int, repeats: int) -> float:
    """Median wall seconds of building the workload (planning its op order)."""
    scenario = load_scenario(SCENARIO, [f"workload.schedule={schedule}", f"workload.micro_batches={micro_batches}",
                                        "outputs={trace: false, timeline: false}"])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        build(scenario, str(SCENARIO))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[256, 512, 1024])
    args = parser.parse_args()
    print("greedy pipeline planning on 8 GPUs: median wall seconds, and the ratio to the previous m")
    print(f"{'schedule':<12} " + " ".join(f"{f'm={m}':>16}" for m in args.micro_batches))
    for label, schedule in SCHEDULES.items():
        cells, previous = [], None
        for m in args.micro_batches:
            seconds = plan_seconds(schedule, m, args.repeats)
            ratio = f"x{seconds / previous:.2f}" if previous else ""
            cells.append(f"{seconds:9.2f} s {ratio:>5}")
            previous = seconds
        print(f"{label:<12} " + " ".join(f"{cell:>16}" for cell in cells))


if __name__ == "__main__":
    main()
