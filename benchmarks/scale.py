"""How far the network model scales: a ring all-reduce among 64 .. 1024 (or more) hosts of a fat-tree.

Each host is one rank on a non-blocking two-level fat-tree (32 hosts per leaf, 100 Gb/s links,
1 us per link). For each size and mode, prints the wall time of routing (set-up) and of the
simulation, the events processed and their rate, and the simulated time against the textbook
``2(n-1)/n * S/B + 2(n-1) * alpha`` (alpha: the ring's slowest hop, four links between leaves),
which both modes should meet on a non-blocking fabric. A ring issues 2(n-1) messages per rank,
so the work grows as n^2. Flow mode simulates each message; analytic mode times the ring in
advance (:mod:`simhpc.network.analytic_ring`), a step's messages that end together one event, so
4096 hosts (33.5 M messages) take seconds there (minutes before session 63).

    .venv/bin/python benchmarks/scale.py [--hosts 64 256 1024] [--flow-max 256] [--mib 64]
"""

from __future__ import annotations

import argparse
import time

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network, fat_tree

LINK_BANDWIDTH = 12.5e9  # 100 Gb/s
LINK_LATENCY = 1e-6
HOSTS_PER_LEAF = 32


def ring_all_reduce(hosts: int, mode: str, nbytes: float) -> dict[str, float]:
    """Set-up and run wall times, events and simulated time of one ring all-reduce."""
    sim = Simulation(seed=0)
    topology = fat_tree(hosts=hosts, hosts_per_leaf=min(hosts, HOSTS_PER_LEAF), bandwidth=LINK_BANDWIDTH,
                        latency=LINK_LATENCY)
    ranks = topology.endpoints
    start = time.perf_counter()
    hops = [topology.route(src, ranks[(i + 1) % hosts]) for i, src in enumerate(ranks)]
    setup = time.perf_counter() - start
    network = Network(sim, topology, mode, record_links=False)
    comm = Communicator(network, ranks, record=False)

    def workload():
        yield comm.all_reduce(nbytes, "ring")

    start = time.perf_counter()
    sim.process(workload())
    sim.run()
    alpha = max(len(route.links) for route in hops) * LINK_LATENCY
    textbook = 2 * (hosts - 1) / hosts * nbytes / LINK_BANDWIDTH + 2 * (hosts - 1) * alpha
    return {"setup_s": setup, "run_s": time.perf_counter() - start, "events": sim.events_processed,
            "simulated_s": sim.now, "textbook_s": textbook}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--flow-max", type=int, default=256, help="largest size run in flow mode")
    parser.add_argument("--mib", type=float, default=64.0, help="all-reduce buffer per rank (MiB)")
    args = parser.parse_args()
    nbytes = args.mib * 2**20
    print(f"ring all-reduce of {args.mib:g} MiB per rank, fat-tree {HOSTS_PER_LEAF} hosts/leaf, "
          f"100 Gb/s, 1 us per link")
    print(f"{'hosts':>6} {'mode':<8} {'routing':>9} {'run':>9} {'events':>10} {'events/s':>10} "
          f"{'simulated':>10} {'/textbook':>9}")
    for hosts in args.hosts:
        for mode in ("analytic", "flow"):
            if mode == "flow" and hosts > args.flow_max:
                continue
            r = ring_all_reduce(hosts, mode, nbytes)
            print(f"{hosts:>6} {mode:<8} {r['setup_s']:8.2f}s {r['run_s']:8.2f}s {r['events']:>10,.0f} "
                  f"{r['events'] / r['run_s']:>10,.0f} {r['simulated_s'] * 1e3:8.1f}ms "
                  f"{r['simulated_s'] / r['textbook_s']:9.4f}")


if __name__ == "__main__":
    main()
