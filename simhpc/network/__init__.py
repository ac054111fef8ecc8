"""The network: topologies, routing, max-min fair flows, transfers and collectives."""

from simhpc.network.builders import dragonfly, fat_tree, gpu_cluster, single_switch, torus
from simhpc.network.collectives import ALL_REDUCE_ALGORITHMS, Communicator
from simhpc.network.fabric import MODES, Network, Route
from simhpc.network.flowmodel import ActiveFlow
from simhpc.network.flows import FlowSolver, max_min_rates
from simhpc.network.topology import Link, Topology

__all__ = [
    "ALL_REDUCE_ALGORITHMS",
    "MODES",
    "ActiveFlow",
    "Communicator",
    "FlowSolver",
    "Link",
    "Network",
    "Route",
    "Topology",
    "dragonfly",
    "fat_tree",
    "gpu_cluster",
    "max_min_rates",
    "single_switch",
    "torus",
]
