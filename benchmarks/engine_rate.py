"""Event rate of a flow-mode all-to-all against a bare SimPy loop of plain timeouts.

Runs an all-to-all among 64 ranks on a fat-tree (64 hosts, 8 per leaf) in flow mode, repeated
a few times in one simulation (routes computed beforehand), then a bare loop of as many plain
timeouts; prints the median events/s of each (``Simulation.events_processed`` over wall time)
and their ratio.

    python benchmarks/engine_rate.py [--repeats 5] [--iterations 3] [--trace]
"""

from __future__ import annotations

import argparse
import statistics
import time

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, fat_tree


def all_to_all_run(iterations: int, record: bool) -> tuple[int, float]:
    """Events processed and wall seconds of ``iterations`` back-to-back all-to-alls."""
    sim = Simulation(seed=0)
    topology = fat_tree(hosts=64, hosts_per_leaf=8, bandwidth=12.5e9, latency=1e-6)
    network = Network(sim, topology, "flow", record_links=record)
    comm = Communicator(network, topology.endpoints, record=record)
    for src in topology.endpoints:  # routing is set-up, not event processing: do it untimed
        for dst in topology.endpoints:
            topology.route(src, dst)

    def workload():
        for _ in range(iterations):
            yield comm.all_to_all(1 << 20)

    start = time.perf_counter()
    sim.process(workload())
    sim.run()
    return sim.events_processed, time.perf_counter() - start


def bare_run(events: int) -> tuple[int, float]:
    """Events processed and wall seconds of one process yielding ``events`` plain timeouts."""
    sim = Simulation(seed=0)

    def loop():
        for _ in range(events):
            yield sim.timeout(1e-6)

    start = time.perf_counter()
    sim.process(loop())
    sim.run()
    return sim.events_processed, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--trace", action="store_true", help="record link spans and counters")
    args = parser.parse_args()
    network_rates, bare_rates, walls = [], [], []
    for _ in range(args.repeats):
        events, wall = all_to_all_run(args.iterations, args.trace)
        network_rates.append(events / wall)
        walls.append(wall / args.iterations)
        bare_events, bare_wall = bare_run(events)
        bare_rates.append(bare_events / bare_wall)
    network, bare = statistics.median(network_rates), statistics.median(bare_rates)
    print(
        f"flow-mode all-to-all (64 ranks, fat-tree 8/leaf, {args.iterations} iterations, "
        f"trace {'on' if args.trace else 'off'}): {events:,} events, "
        f"{statistics.median(walls) * 1e3:.0f} ms wall per all-to-all"
    )
    print(f"  network model : {network:10,.0f} events/s (median of {args.repeats})")
    print(f"  bare SimPy    : {bare:10,.0f} events/s (median of {args.repeats})")
    print(f"  ratio         : {network / bare:.3f} (of bare SimPy's rate, the engine's ceiling)")


if __name__ == "__main__":
    main()
