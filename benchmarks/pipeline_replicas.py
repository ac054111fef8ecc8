"""How pipeline training scales with data-parallel replicas: BERT-large, 1F1B on 8 GPUs a node, one
replica per node of a flow-mode GPU cluster, each stage's gradients ring-all-reduced among its copies.

For 4, 16 and 64 nodes (32 to 512 GPUs) prints the wall time of building the run (planning and
routing), of simulating it, the events and their rate, the trace's events, and the time to write
``trace.json`` with simhpc's writer against ``json.dump`` of the same document (the same bytes:
checked), with their ratio; then the time to simulate the same run when it draws nothing (no
trace.json, no timeline.png: no utilisation counters, each link's busy spans tallied), as sweeps
and large runs do, and the drawn run's simulation time over it.

    .venv/bin/python benchmarks/pipeline_replicas.py [--nodes 4 16 64] [--all-reduce ring|tree|hierarchical]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from simhpc.runner import build
from simhpc.scenario.loader import load_scenario
from simhpc.trace.chrome import chrome_events, write_chrome_trace

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pipeline_bert_large.yaml"


def measure(nodes: int, folder: Path, all_reduce: str) -> dict[str, float]:
    """Wall times of one run with ``nodes`` replicas, and of writing its trace both ways."""
    shape = [f"network.topology.nodes={nodes}", f"workload.data_parallel={nodes}", "workload.devices=8",
             "workload.iterations=1", f"workload.gradient_all_reduce={all_reduce}"]
    scenario = load_scenario(SCENARIO, shape)
    start = time.perf_counter()
    sim, workload = build(scenario, str(SCENARIO))
    built = time.perf_counter()
    workload.start()
    sim.run()
    ran = time.perf_counter()
    ours, plain = folder / "trace.json", folder / "plain.json"
    write_chrome_trace(sim.trace, ours)
    written = time.perf_counter()
    events = chrome_events(sim.trace)
    with plain.open("w", encoding="utf-8") as handle:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns", "otherData": {}}, handle, separators=(",", ":"))
        handle.write("\n")
    dumped = time.perf_counter()
    assert ours.read_bytes() == plain.read_bytes(), "the writer's bytes differ from json.dump's"
    undrawn = load_scenario(SCENARIO, [*shape, "outputs.trace=false", "outputs.timeline=false"])
    sim, workload = build(undrawn, str(SCENARIO), link_spans=False)
    again = time.perf_counter()
    workload.start()
    sim.run()
    bare = time.perf_counter() - again
    return {"build_s": built - start, "run_s": ran - built, "events": sim.events_processed,
            "trace_events": len(events), "write_s": written - ran, "dump_s": dumped - written, "bare_s": bare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--all-reduce", choices=["ring", "tree", "hierarchical"], default="ring",
                        help="how each stage's gradients are all-reduced among the replicas")
    args = parser.parse_args()
    print(f"{'nodes':>5} {'GPUs':>5} {'build':>7} {'run':>7} {'events':>9} {'events/s':>9} "
          f"{'trace events':>12} {'write':>7} {'json.dump':>9} {'ratio':>6} {'undrawn':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in args.nodes:
            r = measure(nodes, Path(tmp), args.all_reduce)
            print(f"{nodes:>5} {8 * nodes:>5} {r['build_s']:6.2f}s {r['run_s']:6.2f}s {r['events']:>9,.0f} "
                  f"{r['events'] / r['run_s']:>9,.0f} {r['trace_events']:>12,} {r['write_s']:6.2f}s "
                  f"{r['dump_s']:8.2f}s {r['dump_s'] / r['write_s']:6.2f} {r['bare_s']:7.2f}s "
                  f"{r['run_s'] / r['bare_s']:6.2f}")


if __name__ == "__main__":
    main()
