"""How MoE training scales with nodes: `scenarios/moe_gpt.yaml` (GPT-MoE, 12 layers, Capricorn
checkpointing every iteration) on 4, 16 and 64 DGX-A100-like nodes, one expert per GPU and 192
sequences per node, three iterations, drawing nothing (no trace, no timeline).

For each size prints the wall time of building the run (routing included) and of simulating it, the
events, the network transfers (each all-to-all is n (n - 1) messages a rail among n nodes, plus the
checkpoint copies and the gradient rings) and events per transfer, and the mean simulated
iteration; in analytic mode, in analytic mode with ``network.batch_links: paths``, then in flow
mode up to ``--flow-max`` nodes, with each one's wall time and simulated iteration over analytic
mode's. Analytic mode times each all-to-all's batch and each ring in advance
(:mod:`simhpc.network.analytic_batch`, :mod:`simhpc.network.analytic_ring`), so it takes far fewer
events than transfers; flow mode simulates each transfer, and charges the contention on the NICs
and the fabric that analytic mode leaves out (``paths``: all but that between separate steps).

    .venv/bin/python benchmarks/moe_scale.py [--nodes 4 16 64] [--flow-max 16]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from simhpc.runner import build
from simhpc.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "moe_gpt.yaml"


def measure(nodes: int, mode: str, batch_links: str) -> dict[str, float]:
    """Build and run wall times, events, transfers and mean iteration of one run."""
    scenario = load_scenario(SCENARIO, [
        f"network.topology.nodes={nodes}", f"network.mode={mode}", f"network.batch_links={batch_links}",
        f"workload.model.experts={8 * nodes}",
        f"workload.global_batch={192 * nodes}", "workload.iterations=3", "workload.warmup=1",
        "outputs.trace=false", "outputs.timeline=false"])
    start = time.perf_counter()
    sim, workload = build(scenario, str(SCENARIO), link_spans=False)
    built = time.perf_counter()
    workload.start()
    sim.run()
    ran = time.perf_counter()
    return {"build_s": built - start, "run_s": ran - built, "events": sim.events_processed,
            "transfers": workload.comm.network.transfers, "iteration_s": float(workload.iteration_times()[1:].mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--flow-max", type=int, default=16, help="largest size run in flow mode")
    args = parser.parse_args()
    print(f"{'nodes':>5} {'GPUs':>5} {'mode':<14} {'build':>7} {'run':>7} {'events':>9} {'transfers':>10} "
          f"{'ev/transfer':>11} {'iteration':>9} {'wall/analytic':>13} {'iteration/analytic':>18}")
    measure(min(args.nodes), "analytic", "ends")  # warm-up: imports and first-call costs, not printed
    for nodes in args.nodes:
        analytic = None
        for mode, batch_links in (("analytic", "ends"), ("analytic", "paths"), ("flow", "ends")):
            if mode == "flow" and nodes > args.flow_max:
                continue
            r = measure(nodes, mode, batch_links)
            label = f"{mode} {batch_links}" if mode == "analytic" else mode
            analytic = analytic or r
            ratios = "" if r is analytic else (
                f" {(r['build_s'] + r['run_s']) / (analytic['build_s'] + analytic['run_s']):13.2f}"
                f" {r['iteration_s'] / analytic['iteration_s']:18.3f}")
            print(f"{nodes:>5} {8 * nodes:>5} {label:<14} {r['build_s']:6.2f}s {r['run_s']:6.2f}s {r['events']:>9,.0f} "
                  f"{r['transfers']:>10,} {r['events'] / r['transfers']:11.3f} {r['iteration_s']:8.3f}s{ratios}")


if __name__ == "__main__":
    main()
