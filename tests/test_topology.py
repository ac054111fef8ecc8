"""Topology builders and routing: counts, bandwidths, path lengths, NVLink/NIC use, determinism."""

from __future__ import annotations

import itertools

import pytest

from simhpc.engine import Simulation
from simhpc.network import Network, Topology, dragonfly, fat_tree, gpu_cluster, single_switch, torus
from simhpc.registry import lookup

GB = 1e9


def node_path(topo: Topology, src: str, dst: str) -> list[str]:
    return topo.path_nodes(topo.path(src, dst))


def all_paths(topo: Topology) -> dict[tuple[str, str], tuple[int, ...]]:
    return {(a, b): topo.path(a, b) for a in topo.endpoints for b in topo.endpoints}


def dgx(nodes: int, nics: int = 8, **kwargs) -> Topology:
    return gpu_cluster(
        nodes=nodes,
        gpus_per_node=8,
        nvlink_bandwidth=300 * GB,
        nvlink_latency=1e-6,
        pcie_bandwidth=32 * GB,
        pcie_latency=2e-6,
        nics_per_node=nics,
        nic_bandwidth=25 * GB,
        nic_latency=3e-6,
        **kwargs,
    )


def test_builders_are_registered() -> None:
    for kind, builder in [
        ("single_switch", single_switch),
        ("fat_tree", fat_tree),
        ("dragonfly", dragonfly),
        ("torus", torus),
        ("gpu_cluster", gpu_cluster),
    ]:
        assert lookup("topology", kind) is builder


def test_single_switch_counts_and_path() -> None:
    topo = single_switch(hosts=5, bandwidth=10 * GB, latency=1e-6)
    assert topo.endpoints == [f"h{i}" for i in range(5)]
    assert len(topo.nodes) == 6 and len(topo.links) == 2 * 5
    path = topo.path("h0", "h3")
    assert node_path(topo, "h0", "h3") == ["h0", "switch", "h3"]
    assert topo.path_latency(path) == pytest.approx(2e-6)
    assert topo.path_bandwidth(path) == 10 * GB
    assert topo.path("h2", "h2") == ()
    assert topo.node_of("h2") == "h2"


def test_links_are_full_duplex_with_their_own_capacity() -> None:
    topo = single_switch(hosts=2, bandwidth=5.0, latency=0.0)
    up, down = topo.link("h0", "switch"), topo.link("switch", "h0")
    assert up.index != down.index and up.name == "h0->switch" and down.name == "switch->h0"
    assert set(topo.path("h0", "h1")).isdisjoint(topo.path("h1", "h0"))


def test_fat_tree_counts() -> None:
    topo = fat_tree(hosts=16, hosts_per_leaf=4, bandwidth=10 * GB, latency=1e-6)
    leaves, spines = 4, 4
    assert len(topo.endpoints) == 16
    assert len(topo.nodes) == 16 + leaves + spines
    assert len(topo.links) == 2 * (16 + leaves * spines)
    assert node_path(topo, "h0", "h3") == ["h0", "leaf0", "h3"]
    assert len(topo.path("h0", "h5")) == 4


@pytest.mark.parametrize("ratio", [1.0, 2.0, 4.0])
def test_fat_tree_oversubscription_shrinks_cross_leaf_bandwidth(ratio: float) -> None:
    bandwidth = 10 * GB
    topo = fat_tree(hosts=16, hosts_per_leaf=4, bandwidth=bandwidth, latency=1e-6, oversubscription=ratio)
    uplinks = [topo.link("leaf0", f"spine{s}").bandwidth for s in range(4)]
    assert sum(uplinks) == pytest.approx(4 * bandwidth / ratio)
    assert topo.path_bandwidth(topo.path("h0", "h4")) == pytest.approx(min(bandwidth, bandwidth / ratio))
    assert topo.path_bandwidth(topo.path("h0", "h1")) == bandwidth


def test_fat_tree_ecmp_spreads_pairs_over_spines_deterministically() -> None:
    topo = fat_tree(hosts=32, hosts_per_leaf=8, bandwidth=10 * GB, latency=1e-6)
    spines = {node_path(topo, f"h{a}", f"h{b}")[2] for a in range(8) for b in range(8, 32)}
    assert len(spines) == 8
    again = fat_tree(hosts=32, hosts_per_leaf=8, bandwidth=10 * GB, latency=1e-6)
    assert all_paths(topo) == all_paths(again)
    plain = fat_tree(hosts=32, hosts_per_leaf=8, bandwidth=10 * GB, latency=1e-6, ecmp=False)
    assert {node_path(plain, f"h{a}", f"h{b}")[2] for a in range(8) for b in range(8, 32)} == {"spine0"}


@pytest.mark.parametrize("hosts,per_leaf,shift", [(8, 4, 4), (16, 4, 4), (16, 4, 8), (32, 8, 8), (12, 3, 3)])
def test_fat_tree_shift_permutations_use_distinct_spines(hosts: int, per_leaf: int, shift: int) -> None:
    """Host i -> host i + shift crosses leaves on as many spines as a leaf has flows (D mod k):
    on a non-blocking tree every flow drains at full bandwidth."""
    topo = fat_tree(hosts=hosts, hosts_per_leaf=per_leaf, bandwidth=10 * GB, latency=0.0)
    sim = Simulation(seed=0)
    network = Network(sim, topo, "flow")
    for i in range(hosts):
        network.transfer(f"h{i}", f"h{(i + shift) % hosts}", 1e9)
    sim.run()
    assert sim.env.now == pytest.approx(1e9 / (10 * GB), rel=1e-9)


def test_gpu_cluster_rails_cross_a_fat_tree_on_distinct_spines() -> None:
    """GPU j of one node to GPU j of the next (a hierarchical all-reduce's inter-node ring):
    the 8 rails of a node leave through 8 different spines."""
    topo = dgx(4, fabric="fat_tree", nodes_per_leaf=1)
    for a in range(4):
        b = (a + 1) % 4
        spines = {next(n for n in node_path(topo, f"n{a}.gpu{j}", f"n{b}.gpu{j}") if "spine" in n)
                  for j in range(8)}
        assert len(spines) == 8


def test_routing_prefers_least_latency_then_fewest_hops() -> None:
    topo = Topology("triangle")
    for name in "abc":
        topo.add_endpoint(name, transit=True)
    topo.connect("a", "b", 1.0, 5e-6)
    topo.connect("a", "c", 1.0, 1e-6)
    topo.connect("c", "b", 1.0, 1e-6)
    assert node_path(topo, "a", "b") == ["a", "c", "b"]
    topo2 = Topology("square")
    for name in "abcd":
        topo2.add_endpoint(name, transit=True)
    topo2.connect("a", "b", 1.0, 2e-6)
    topo2.connect("a", "c", 1.0, 1e-6)
    topo2.connect("c", "b", 1.0, 1e-6)
    assert node_path(topo2, "a", "b") == ["a", "b"]  # equal latency: fewer hops


def test_endpoints_do_not_forward_traffic() -> None:
    topo = Topology("line")
    topo.add_endpoint("a")
    topo.add_endpoint("b")
    topo.add_endpoint("c")
    topo.connect("a", "b", 1.0, 0.0)
    topo.connect("b", "c", 1.0, 0.0)
    with pytest.raises(ValueError, match="no route"):
        topo.path("a", "c")


@pytest.mark.parametrize("dims", [(4, 4), (4, 5), (3, 3, 3), (4, 4, 4)])
def test_torus_path_lengths_use_wrap_around(dims: tuple[int, ...]) -> None:
    topo = torus(dims=dims, bandwidth=10 * GB, latency=1e-6)
    coords = list(itertools.product(*(range(k) for k in dims)))
    assert len(topo.endpoints) == len(coords)
    for i, a in enumerate(coords):
        for j, b in enumerate(coords):
            hops = sum(min(abs(x - y), k - abs(x - y)) for x, y, k in zip(a, b, dims))
            assert len(topo.path(f"h{i}", f"h{j}")) == hops
    assert len(topo.links) == 2 * len(coords) * len(dims)


def test_torus_size_two_dimension_has_one_cable() -> None:
    topo = torus(dims=[2, 3], bandwidth=1.0, latency=1e-6)
    assert len(topo.links) == 2 * (3 * 1 + 2 * 3)


def test_dragonfly_counts_and_minimal_routes() -> None:
    topo = dragonfly(groups=4, routers_per_group=3, hosts_per_router=2, bandwidth=10 * GB, latency=1e-6)
    assert len(topo.endpoints) == 24
    routers = [n for n in topo.nodes if ".r" in n]
    assert len(routers) == 12
    host_cables, local_cables, global_cables = 24, 4 * 3, 6
    assert len(topo.links) == 2 * (host_cables + local_cables + global_cables)
    for a in topo.endpoints:
        for b in topo.endpoints:
            if a != b:
                assert len(topo.path(a, b)) <= 2 + 3  # host, local, global, local, host
    assert len(topo.path("h0", "h1")) == 2  # same router


@pytest.mark.parametrize("ecmp", [True, False])
def test_dragonfly_routes_take_one_global_link(ecmp: bool) -> None:
    """Two global links can tie with local + global in hops; minimal routing takes the latter."""
    topo = dragonfly(groups=4, routers_per_group=2, hosts_per_router=2, bandwidth=1e10, latency=1e-6,
                     global_bandwidth=2.5e9, ecmp=ecmp)
    for a in topo.endpoints:
        for b in topo.endpoints:
            if a != b:
                links = [topo.links[i] for i in topo.path(a, b)]
                crossings = [link for link in links if link.src.startswith("g") and link.dst.startswith("g")
                             and link.src.split(".")[0] != link.dst.split(".")[0]]
                assert len(crossings) <= 1, (a, b, [link.dst for link in links])


def test_dragonfly_global_links_bandwidth_and_count() -> None:
    topo = dragonfly(
        groups=3,
        routers_per_group=2,
        hosts_per_router=1,
        bandwidth=10.0,
        latency=1e-6,
        global_bandwidth=4.0,
        global_links=2,
    )
    global_links = [
        link
        for link in topo.links
        if link.src.split(".")[0] != link.dst.split(".")[0]
        and link.src.startswith("g")
        and link.dst.startswith("g")
    ]
    assert sum(link.bandwidth for link in global_links) == pytest.approx(2 * 3 * 2 * 4.0)


def test_gpu_cluster_counts() -> None:
    topo = dgx(nodes=2, nics=4)
    per_node = 8 + 1 + 1 + 4 + 4  # GPUs, cpu, NVSwitch, PCIe switches, NICs
    assert len(topo.nodes) == 2 * per_node + 1
    cables = 2 * (8 + 8 + 4 + 4) + 2 * 4  # NVLink, GPU-PCIe, PCIe-CPU, NIC-PCIe; NIC ports
    assert len(topo.links) == 2 * cables
    assert topo.endpoints == [f"n{i}.gpu{j}" for i in range(2) for j in range(8)]
    assert topo.node_of("n1.gpu3") == "n1" and topo.node_of("n1.cpu") == "n1"


def test_gpu_cluster_intra_node_uses_nvlink() -> None:
    topo = dgx(nodes=2)
    for a, b in itertools.permutations(range(8), 2):
        assert node_path(topo, f"n1.gpu{a}", f"n1.gpu{b}") == [f"n1.gpu{a}", "n1.nvswitch", f"n1.gpu{b}"]
    assert topo.path_bandwidth(topo.path("n0.gpu0", "n0.gpu7")) == 300 * GB


def test_gpu_cluster_nvlink_wins_even_when_slower_to_start() -> None:
    topo = gpu_cluster(
        nodes=1,
        gpus_per_node=4,
        nvlink_bandwidth=100.0,
        nvlink_latency=5e-6,
        pcie_bandwidth=10.0,
        pcie_latency=1e-6,
        nics_per_node=0,
        nic_bandwidth=1.0,
        nic_latency=1e-6,
    )
    assert node_path(topo, "n0.gpu0", "n0.gpu1") == ["n0.gpu0", "n0.nvswitch", "n0.gpu1"]


def test_gpu_cluster_host_copies_use_pcie() -> None:
    topo = dgx(nodes=1)
    assert node_path(topo, "n0.gpu5", "n0.cpu") == ["n0.gpu5", "n0.pcie2", "n0.cpu"]
    assert topo.path_bandwidth(topo.path("n0.cpu", "n0.gpu5")) == 32 * GB
    assert "n0.cpu" not in topo.endpoints


@pytest.mark.parametrize("nics", [1, 2, 4, 8])
def test_gpu_cluster_inter_node_path_crosses_assigned_nics(nics: int) -> None:
    topo = dgx(nodes=2, nics=nics)
    for j in range(8):
        nodes = node_path(topo, f"n0.gpu{j}", f"n1.gpu{j}")
        nic = f"nic{j * nics // 8}"
        assert f"n0.{nic}" in nodes and f"n1.{nic}" in nodes and "switch" in nodes
        assert "n0.nvswitch" not in nodes
        assert topo.path_bandwidth(topo.path(f"n0.gpu{j}", f"n1.gpu{j}")) == 25 * GB


def test_gpu_cluster_remote_host_memory_through_the_host_nic_or_the_rails() -> None:
    host_nic = dgx(nodes=2, nics=4)
    for j in range(8):  # by default every remote GPU enters a node's host memory through NIC 0
        assert "n1.nic0" in node_path(host_nic, f"n0.gpu{j}", "n1.cpu")
    rails = dgx(nodes=2, nics=4, host_rails=True)
    for j in range(8):  # with host_rails: through the NIC of the sender's rail, then that NIC's PCIe switch
        nic = f"nic{j * 4 // 8}"
        path = node_path(rails, f"n0.gpu{j}", "n1.cpu")
        assert f"n0.{nic}" in path and f"n1.{nic}" in path and path[-2].startswith("n1.pcie")
        assert f"n0.{nic}" in node_path(rails, "n1.cpu", f"n0.gpu{j}")  # and back along the same rail
    assert "n1.nic0" in node_path(rails, "n0.cpu", "n1.cpu")  # host to host: the first rail
    assert node_path(rails, "n0.gpu3", "n1.gpu3") == node_path(host_nic, "n0.gpu3", "n1.gpu3")


def test_gpu_cluster_fat_tree_fabric() -> None:
    topo = dgx(nodes=4, nics=2, fabric="fat_tree", nodes_per_leaf=2, oversubscription=2.0)
    assert {"leaf0", "leaf1"} <= set(topo.nodes)
    across = node_path(topo, "n0.gpu0", "n3.gpu0")
    assert across[across.index("leaf0") + 1].startswith("spine")
    assert topo.path_bandwidth(topo.path("n0.gpu0", "n3.gpu0")) == pytest.approx(25 * GB / 2)
    assert "spine0" not in node_path(topo, "n0.gpu0", "n1.gpu0")


def test_routing_is_deterministic_across_builds() -> None:
    first = dgx(nodes=3, nics=4, fabric="fat_tree", nodes_per_leaf=1)
    second = dgx(nodes=3, nics=4, fabric="fat_tree", nodes_per_leaf=1)
    assert all_paths(first) == all_paths(second)
    torus_a, torus_b = torus((3, 4), 1.0, 1e-6, ecmp=True), torus((3, 4), 1.0, 1e-6, ecmp=True)
    assert all_paths(torus_a) == all_paths(torus_b)


@pytest.mark.parametrize(
    ("builder", "kwargs", "message"),
    [
        (single_switch, {"hosts": 0, "bandwidth": 1.0, "latency": 0.0}, "hosts"),
        (single_switch, {"hosts": "4", "bandwidth": 1.0, "latency": 0.0}, "hosts"),
        (single_switch, {"hosts": 4, "bandwidth": -1.0, "latency": 0.0}, "bandwidth"),
        (single_switch, {"hosts": 4, "bandwidth": 1.0, "latency": float("nan")}, "latency"),
        (
            fat_tree,
            {"hosts": 8, "hosts_per_leaf": 4, "bandwidth": 1.0, "latency": 0.0, "oversubscription": 0.5},
            "oversubscription",
        ),
        (fat_tree, {"hosts": 8, "hosts_per_leaf": 0, "bandwidth": 1.0, "latency": 0.0}, "hosts_per_leaf"),
        (
            dragonfly,
            {
                "groups": 2,
                "routers_per_group": 2,
                "hosts_per_router": 1,
                "bandwidth": 1.0,
                "latency": 0.0,
                "global_bandwidth": 0.0,
            },
            "global_bandwidth",
        ),
        (torus, {"dims": [4, 4, 4, 4], "bandwidth": 1.0, "latency": 0.0}, "dims"),
        (torus, {"dims": [4, 0], "bandwidth": 1.0, "latency": 0.0}, "dims"),
    ],
)
def test_builders_reject_nonsense(builder, kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        builder(**kwargs)


def test_gpu_cluster_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="fabric"):
        dgx(nodes=2, fabric="ring")
    with pytest.raises(ValueError, match="nics_per_node"):
        dgx(nodes=2, nics=16)
    with pytest.raises(ValueError, match="nics_per_node"):
        dgx(nodes=2, nics=0)


def test_topology_rejects_bad_links() -> None:
    topo = Topology("t")
    topo.add_endpoint("a")
    topo.add_endpoint("b")
    with pytest.raises(ValueError, match="unknown node"):
        topo.connect("a", "z", 1.0, 0.0)
    with pytest.raises(ValueError, match="bandwidth"):
        topo.connect("a", "b", 0.0, 0.0)
    topo.connect("a", "b", 1.0, 0.0)
    with pytest.raises(ValueError, match="already connected"):
        topo.connect("b", "a", 1.0, 0.0)
    with pytest.raises(ValueError, match="added twice"):
        topo.add_switch("a")
