"""Topology builders: single switch, fat-tree, dragonfly, torus and multi-GPU clusters.

Each builder is registered in the ``topology`` family under its name. Parameters are SI numbers
(bytes/s, seconds); nonsense raises :class:`ValueError` naming the parameter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from simhpc.network.topology import Topology
from simhpc.registry import register

_PCIE_PEER_PENALTY = 1.0
"""Routing cost (s) added to each GPU<->PCIe hop so GPU peers always talk over NVLink."""
_GLOBAL_HOP_PENALTY = 1.0
"""Routing cost (s) added to each dragonfly global cable, more than any local path costs, so a
route between groups takes exactly one global link (local, global, local: minimal routing)."""


def _count(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _rate(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _delay(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value >= 0)
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_scale(name: str, nodes: int, cables: int) -> None:
    """Refuse a topology too large to build before building any of it (see Topology limits)."""
    if nodes > Topology.MAX_NODES or cables > Topology.MAX_CABLES:
        raise ValueError(f"{name}: {nodes} nodes and {cables} cables, more than the limit of "
                         f"{Topology.MAX_NODES} nodes and {Topology.MAX_CABLES} cables")


def _oversubscription(value: object) -> float:
    ratio = _rate("oversubscription", value)
    if ratio < 1.0:
        raise ValueError(f"oversubscription must be >= 1 (1 = non-blocking), got {value!r}")
    return ratio


@register("topology", "single_switch")
def single_switch(hosts: int, bandwidth: float, latency: float) -> Topology:
    """Hosts ``h0..h{n-1}`` on one non-blocking switch.

    Args:
        hosts: number of hosts.
        bandwidth: host link bandwidth per direction (bytes/s).
        latency: host link latency (s); host-to-host paths cross two links.
    """
    hosts = _count("hosts", hosts)
    bandwidth = _rate("bandwidth", bandwidth)
    latency = _delay("latency", latency)
    _check_scale(f"single_switch of {hosts} hosts", hosts + 1, hosts)
    topo = Topology(f"single_switch-{hosts}")
    topo.add_switch("switch")
    for i in range(hosts):
        topo.add_endpoint(f"h{i}")
        topo.connect(f"h{i}", "switch", bandwidth, latency)
    return topo


def _leaf_spine(
    topo: Topology,
    ports: Sequence[Sequence[str]],
    bandwidth: float,
    latency: float,
    oversubscription: float,
    spines: int,
) -> None:
    """Connect groups of ports to leaves and every leaf to every spine.

    Each leaf's uplink capacity is ``ports_per_leaf * bandwidth / oversubscription``, spread
    evenly over the spines. A single leaf needs no spine.
    """
    per_leaf = max(len(group) for group in ports)
    uplink = per_leaf * bandwidth / (oversubscription * spines)
    for leaf, group in enumerate(ports):
        topo.add_switch(f"leaf{leaf}")
        for port in group:
            topo.connect(port, f"leaf{leaf}", bandwidth, latency)
    if len(ports) == 1:
        return
    for spine in range(spines):
        topo.add_switch(f"spine{spine}")
        for leaf in range(len(ports)):
            topo.connect(f"leaf{leaf}", f"spine{spine}", uplink, latency)


@register("topology", "fat_tree")
def fat_tree(
    hosts: int,
    hosts_per_leaf: int,
    bandwidth: float,
    latency: float,
    oversubscription: float = 1.0,
    spines: int | None = None,
    ecmp: bool = True,
) -> Topology:
    """A two-level leaf/spine fat-tree; hosts ``h0..h{n-1}`` fill leaves in order.

    Args:
        hosts: number of hosts.
        hosts_per_leaf: hosts under each leaf (the last leaf may be partly filled).
        bandwidth: host link bandwidth per direction (bytes/s).
        latency: latency of every link (s).
        oversubscription: leaf downlink / uplink capacity (1 = non-blocking).
        spines: number of spines (default ``hosts_per_leaf``); each leaf-spine link carries
            ``hosts_per_leaf * bandwidth / (oversubscription * spines)``.
        ecmp: spread host pairs over the spines by a stable hash.
    """
    hosts = _count("hosts", hosts)
    per_leaf = _count("hosts_per_leaf", hosts_per_leaf)
    bandwidth = _rate("bandwidth", bandwidth)
    latency = _delay("latency", latency)
    ratio = _oversubscription(oversubscription)
    spines = per_leaf if spines is None else _count("spines", spines)
    leaves = -(-hosts // per_leaf)
    _check_scale(f"fat_tree of {hosts} hosts", hosts + leaves + spines, hosts + leaves * spines)
    topo = Topology(f"fat_tree-{hosts}", ecmp=ecmp)
    names = [f"h{i}" for i in range(hosts)]
    for name in names:
        topo.add_endpoint(name)
    groups = [names[i : i + per_leaf] for i in range(0, hosts, per_leaf)]
    _leaf_spine(topo, groups, bandwidth, latency, ratio, spines)
    return topo


@register("topology", "dragonfly")
def dragonfly(
    groups: int,
    routers_per_group: int,
    hosts_per_router: int,
    bandwidth: float,
    latency: float,
    global_bandwidth: float | None = None,
    global_links: int = 1,
    ecmp: bool = True,
) -> Topology:
    """A dragonfly: all-to-all routers within a group, global links between every group pair.

    Routers are ``g{g}.r{r}``, hosts ``h{i}`` numbered router by router. The global links of a
    group are spread round-robin over its routers; two links that land on the same router pair
    become one link of the summed bandwidth. Routing is minimal: a route between groups crosses
    exactly one global link (local, global, local), never two, even where that has as few hops.

    Args:
        groups: number of groups.
        routers_per_group: routers in each group.
        hosts_per_router: hosts on each router.
        bandwidth: host and local (intra-group) link bandwidth (bytes/s).
        latency: latency of every link (s).
        global_bandwidth: bandwidth of one global link (default ``bandwidth``).
        global_links: global links between each pair of groups.
        ecmp: spread host pairs over equal minimal paths by a stable hash.
    """
    groups = _count("groups", groups)
    routers = _count("routers_per_group", routers_per_group)
    per_router = _count("hosts_per_router", hosts_per_router)
    bandwidth = _rate("bandwidth", bandwidth)
    latency = _delay("latency", latency)
    glob = bandwidth if global_bandwidth is None else _rate("global_bandwidth", global_bandwidth)
    global_links = _count("global_links", global_links)
    _check_scale(f"dragonfly of {groups}x{routers}x{per_router}", groups * routers * (per_router + 1),
                 groups * routers * (per_router + routers) + groups * groups * global_links)
    topo = Topology(f"dragonfly-{groups}x{routers}x{per_router}", ecmp=ecmp)
    host = 0
    for g in range(groups):
        for r in range(routers):
            topo.add_switch(f"g{g}.r{r}")
            for _ in range(per_router):
                topo.add_endpoint(f"h{host}")
                topo.connect(f"h{host}", f"g{g}.r{r}", bandwidth, latency)
                host += 1
        for a, b in itertools.combinations(range(routers), 2):
            topo.connect(f"g{g}.r{a}", f"g{g}.r{b}", bandwidth, latency)
    cables: dict[tuple[str, str], int] = {}
    for a, b in itertools.combinations(range(groups), 2):
        for m in range(global_links):
            # Port number of this cable in each group: others ordered by group index.
            port_a = (b - 1) * global_links + m
            port_b = a * global_links + m
            key = (f"g{a}.r{port_a % routers}", f"g{b}.r{port_b % routers}")
            cables[key] = cables.get(key, 0) + 1
    for (a, b), count in cables.items():
        topo.connect(a, b, glob * count, latency, cost=latency + _GLOBAL_HOP_PENALTY)
    return topo


@register("topology", "torus")
def torus(dims: Sequence[int], bandwidth: float, latency: float, ecmp: bool = False) -> Topology:
    """A 2-D or 3-D torus: one host per router, wrap-around links in every dimension.

    Hosts ``h{i}`` are the routers themselves (a direct network), numbered in row-major order
    of their coordinates; traffic passes through them. Routing is dimension-ordered (the first
    dimension first, each the short way round, ties in the positive direction): a shortest path,
    found in O(hops), so tori of thousands of nodes route quickly.

    Args:
        dims: size of each dimension (2 or 3 integers >= 1).
        bandwidth: link bandwidth per direction (bytes/s).
        latency: link latency (s).
        ecmp: accepted for symmetry with the other builders; dimension-ordered routing has no
            equal-cost choice to spread.
    """
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence) or len(dims) not in (2, 3):
        raise ValueError(f"dims must be a list of 2 or 3 integers, got {dims!r}")
    shape = tuple(_count(f"dims[{axis}]", size) for axis, size in enumerate(dims))
    bandwidth = _rate("bandwidth", bandwidth)
    latency = _delay("latency", latency)
    _check_scale("torus " + "x".join(map(str, shape)), math.prod(shape), len(shape) * math.prod(shape))
    coords = list(itertools.product(*(range(size) for size in shape)))
    index = {coord: i for i, coord in enumerate(coords)}

    def dimension_ordered(src: str, dst: str) -> list[str]:
        here, goal = list(coords[int(src[1:])]), coords[int(dst[1:])]
        hops = [src]
        for axis, size in enumerate(shape):
            forward = (goal[axis] - here[axis]) % size
            step = 1 if forward <= size - forward else -1
            while here[axis] != goal[axis]:
                here[axis] = (here[axis] + step) % size
                hops.append(f"h{index[tuple(here)]}")
        return hops

    topo = Topology("torus-" + "x".join(map(str, shape)), ecmp=ecmp, router=dimension_ordered)
    for i in range(len(coords)):
        topo.add_endpoint(f"h{i}", transit=True)
    for coord in coords:
        for axis, size in enumerate(shape):
            if size == 1:
                continue
            nxt = list(coord)
            nxt[axis] = (coord[axis] + 1) % size
            a, b = f"h{index[coord]}", f"h{index[tuple(nxt)]}"
            if not topo.graph.has_edge(a, b):  # size 2: the wrap-around is the same cable
                topo.connect(a, b, bandwidth, latency)
    return topo


@register("topology", "gpu_cluster")
def gpu_cluster(
    nodes: int,
    gpus_per_node: int,
    nvlink_bandwidth: float,
    nvlink_latency: float,
    pcie_bandwidth: float,
    pcie_latency: float,
    nics_per_node: int,
    nic_bandwidth: float,
    nic_latency: float,
    fabric: str = "single_switch",
    nodes_per_leaf: int | None = None,
    oversubscription: float = 1.0,
    spines: int | None = None,
    ecmp: bool = True,
    host_rails: bool = False,
) -> Topology:
    """Multi-GPU nodes (DGX-like) joined by a switch or a fat-tree of NIC ports.

    In node ``n{i}``: GPUs ``n{i}.gpu{j}`` (the rank endpoints) hang off an NVSwitch
    ``n{i}.nvswitch``; GPUs ``2k, 2k+1`` share PCIe switch ``n{i}.pcie{k}``; every PCIe switch
    reaches the host CPU and its memory, ``n{i}.cpu`` (an endpoint with no rank, also the root
    complex). GPU ``j`` sends off-node through NIC ``n{i}.nic{j * nics // gpus}``, which sits on
    the PCIe switch of the first GPU it serves. GPU-GPU traffic within a node uses NVLink;
    GPU<->host copies use PCIe; traffic between nodes goes PCIe -> NIC -> fabric.

    Args:
        nodes: number of nodes.
        gpus_per_node: GPUs per node.
        nvlink_bandwidth: NVLink bandwidth of one GPU to the NVSwitch, per direction.
        nvlink_latency: GPU<->NVSwitch latency.
        pcie_bandwidth: bandwidth of each PCIe link (GPU, NIC and CPU to a PCIe switch).
        pcie_latency: latency of each PCIe link.
        nics_per_node: NICs per node (<= gpus_per_node; 0 only for a single node).
        nic_bandwidth: NIC port bandwidth per direction.
        nic_latency: latency of a NIC-switch (and switch-switch) link.
        fabric: ``"single_switch"`` or ``"fat_tree"``.
        nodes_per_leaf: nodes whose NICs share a leaf (fat-tree only; default all nodes).
        oversubscription: fat-tree leaf downlink / uplink capacity.
        spines: fat-tree spines (default: NIC ports per leaf).
        ecmp: spread node pairs over equal paths by a stable hash.
        host_rails: traffic between a GPU of another node and this node's host memory enters
            through the NIC of the GPU's rail (GPUDirect RDMA on a rail-optimised fabric); by
            default it uses the node's first NIC (a host NIC), so all of a node's remote host
            traffic shares one port.
    """
    nodes = _count("nodes", nodes)
    gpus = _count("gpus_per_node", gpus_per_node)
    nics = _count("nics_per_node", nics_per_node, minimum=0 if nodes == 1 else 1)
    if nics > gpus:
        raise ValueError(f"nics_per_node ({nics}) must not exceed gpus_per_node ({gpus})")
    nvlink = (_rate("nvlink_bandwidth", nvlink_bandwidth), _delay("nvlink_latency", nvlink_latency))
    pcie = (_rate("pcie_bandwidth", pcie_bandwidth), _delay("pcie_latency", pcie_latency))
    nic = (_rate("nic_bandwidth", nic_bandwidth), _delay("nic_latency", nic_latency))
    if fabric not in ("single_switch", "fat_tree"):
        raise ValueError(f"fabric must be 'single_switch' or 'fat_tree', got {fabric!r}")
    per_leaf = nodes if nodes_per_leaf is None else _count("nodes_per_leaf", nodes_per_leaf)
    ratio = _oversubscription(oversubscription)
    if spines is not None:
        spines = _count("spines", spines)
    per_node = (gpus + 2 + (gpus + 1) // 2 + nics, 2 * gpus + (gpus + 1) // 2 + 2 * nics)
    fabric_switches = 1 + (spines or per_leaf * nics) + -(-nodes // per_leaf)
    _check_scale(f"gpu_cluster of {nodes} x {gpus} GPUs", nodes * per_node[0] + fabric_switches,
                 nodes * per_node[1] + fabric_switches * per_leaf * nics)

    topo = Topology(f"gpu_cluster-{nodes}x{gpus}", ecmp=ecmp)
    ports: list[str] = []
    for i in range(nodes):
        ports += _gpu_node(topo, f"n{i}", gpus, nics, nvlink, pcie, host_rails)
    if nodes == 1:
        return topo
    if fabric == "single_switch":
        topo.add_switch("switch")
        for port in ports:
            topo.connect(port, "switch", *nic)
    else:
        leaves = [ports[i : i + per_leaf * nics] for i in range(0, len(ports), per_leaf * nics)]
        _leaf_spine(topo, leaves, nic[0], nic[1], ratio, spines or per_leaf * nics)
    return topo


def _gpu_node(
    topo: Topology,
    node: str,
    gpus: int,
    nics: int,
    nvlink: tuple[float, float],
    pcie: tuple[float, float],
    host_rails: bool = False,
) -> list[str]:
    """Add one multi-GPU node; returns its NIC names (the fabric ports)."""
    for j in range(gpus):
        topo.add_endpoint(f"{node}.gpu{j}", machine=node)
    topo.add_endpoint(f"{node}.cpu", machine=node, rank=False, transit=True)
    topo.add_switch(f"{node}.nvswitch", machine=node)
    for k in range((gpus + 1) // 2):
        topo.add_switch(f"{node}.pcie{k}", machine=node)
        topo.connect(f"{node}.pcie{k}", f"{node}.cpu", *pcie)
    for j in range(gpus):
        topo.connect(f"{node}.gpu{j}", f"{node}.nvswitch", *nvlink)
        topo.connect(f"{node}.gpu{j}", f"{node}.pcie{j // 2}", *pcie, cost=pcie[1] + _PCIE_PEER_PENALTY)
    names = []
    for m in range(nics):
        first_gpu = -(-m * gpus // nics)  # ceil: the first GPU this NIC serves
        topo.add_switch(f"{node}.nic{m}", machine=node)
        topo.connect(f"{node}.nic{m}", f"{node}.pcie{first_gpu // 2}", *pcie)
        names.append(f"{node}.nic{m}")
    if nics:
        for j in range(gpus):
            topo.set_gateway(f"{node}.gpu{j}", f"{node}.nic{j * nics // gpus}")
        if host_rails:
            topo.set_rail_gateways(f"{node}.cpu", names)
        else:
            topo.set_gateway(f"{node}.cpu", f"{node}.nic0")
    return names
