"""How routing a cluster of multi-GPU nodes scales: each NIC's tree joined from its machine's search
and its fabric switches' trees, against a search of the whole network from every NIC.

DGX-A100-like nodes (8 GPUs, 8 NICs) on a fat-tree of 4 nodes a leaf. The routes asked for are a
hierarchical all-reduce's: every GPU to its NVSwitch peers, and each rail's ring across the nodes
(GPU j of node i to GPU j of node i + 1, through their NICs). For 64, 256 and 1024 nodes it
prints the wall time of routing them both ways, the fabric searches each made and the ratio of the
times; the routes are checked equal.

    .venv/bin/python benchmarks/routing.py [--nodes 64 256 1024]
"""

from __future__ import annotations

import argparse
import time

from simhpc.network import Topology, gpu_cluster
from simhpc.network.route_trees import RouteTrees

GB = 1e9


def cluster(nodes: int) -> Topology:
    """A fat-tree of DGX-A100-like nodes, 4 to a leaf."""
    return gpu_cluster(nodes=nodes, gpus_per_node=8, nvlink_bandwidth=300 * GB, nvlink_latency=1e-6,
                       pcie_bandwidth=32 * GB, pcie_latency=2e-6, nics_per_node=8, nic_bandwidth=25 * GB,
                       nic_latency=3e-6, fabric="fat_tree", nodes_per_leaf=4)


def route_all(topology: Topology, joined: bool) -> tuple[float, int, list[tuple[int, ...]]]:
    """Wall time, whole-network searches and routes of the hierarchical all-reduce's pairs
    (``joined``: NIC trees joined from their machines' searches, else each searched whole)."""
    trees = RouteTrees(topology._ordinal, topology._transit, topology._adjacency, topology.links, topology._cost,
                       topology._machine if joined else None)
    topology._trees = trees
    searches = 0
    search_all = trees.search_all

    def counted(src: str):
        nonlocal searches
        searches += 1
        return search_all(src)

    trees.search_all = counted  # type: ignore[method-assign]
    gpus = topology.endpoints
    nodes = len(gpus) // 8
    pairs = [(gpus[8 * i + j], gpus[8 * i + k]) for i in range(nodes) for j in range(8) for k in range(8) if j != k]
    pairs += [(gpus[8 * i + j], gpus[8 * ((i + 1) % nodes) + j]) for i in range(nodes) for j in range(8)]
    start = time.perf_counter()
    routes = [topology.path(src, dst) for src, dst in pairs]
    return time.perf_counter() - start, searches, routes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    args = parser.parse_args()
    print("routes of a hierarchical all-reduce, DGX-A100-like nodes on a fat-tree (4 nodes a leaf)")
    print(f"{'nodes':>6} {'GPUs':>6} {'whole':>9} {'searches':>9} {'joined':>9} {'searches':>9} {'ratio':>6}")
    for nodes in args.nodes:
        whole_s, whole_searches, whole_routes = route_all(cluster(nodes), joined=False)
        joined_s, joined_searches, joined_routes = route_all(cluster(nodes), joined=True)
        assert joined_routes == whole_routes, "joined trees gave other routes"
        print(f"{nodes:>6} {8 * nodes:>6} {whole_s:8.2f}s {whole_searches:>9} {joined_s:8.2f}s {joined_searches:>9} "
              f"{whole_s / joined_s:5.1f}x")


if __name__ == "__main__":
    main()
