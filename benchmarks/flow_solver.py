"""Time per incremental max-min rate update with 1,000 and 10,000 active flows on a fat-tree.

Fills a 128-host fat-tree (16 hosts per leaf, 2:1 oversubscribed) with flows between random host
pairs, then alternately removes a random flow and adds a new one, recomputing the rates after
each change; prints the mean time per update.

    python benchmarks/flow_solver.py [--updates 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simhpc.network import FlowSolver, fat_tree


def mean_update_time(active: int, updates: int, seed: int = 0) -> tuple[float, int]:
    """Mean seconds per update and the size of the last recomputed component."""
    topology = fat_tree(hosts=128, hosts_per_leaf=16, bandwidth=12.5e9, latency=1e-6, oversubscription=2.0)
    hosts = topology.endpoints
    rng = np.random.default_rng(seed)

    def random_path() -> np.ndarray:
        src, dst = rng.choice(len(hosts), size=2, replace=False)
        return topology.route(hosts[src], hosts[dst]).links

    solver = FlowSolver(topology.capacities)
    for flow in range(active):
        solver.add(flow, random_path())
    solver.update()
    live = list(range(active))
    next_id = active
    start = time.perf_counter()
    for step in range(updates):
        if step % 2 == 0:
            victim = live.pop(int(rng.integers(len(live))))
            solver.remove(victim)
        else:
            solver.add(next_id, random_path())
            live.append(next_id)
            next_id += 1
        changed, _ = solver.update()
    return (time.perf_counter() - start) / updates, changed.size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=100)
    args = parser.parse_args()
    for active in (1_000, 10_000):
        seconds, changed = mean_update_time(active, args.updates)
        print(
            f"{active:>6,} active flows: {seconds * 1e3:8.3f} ms per update "
            f"(mean of {args.updates}; last update changed {changed:,} rates)"
        )


if __name__ == "__main__":
    main()
