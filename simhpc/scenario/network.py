"""The ``network:`` section: fidelity mode and a topology, one model per topology kind."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from simhpc.hardware.catalog import Catalog
from simhpc.registry import lookup
from simhpc.scenario.types import Bandwidth, Number, PositiveInt, Strict, Time


class _TopologyBase(Strict):
    def builder_params(self, catalog: Catalog) -> dict[str, Any]:
        """Keyword arguments of the registered builder."""
        return self.model_dump(exclude={"kind"})

    def build(self, catalog: Catalog) -> Any:
        """Build the :class:`~simhpc.network.topology.Topology`."""
        return lookup("topology", self.kind)(**self.builder_params(catalog))  # type: ignore[attr-defined]


class SingleSwitch(_TopologyBase):
    """Hosts on one non-blocking switch."""

    kind: Literal["single_switch"]
    hosts: PositiveInt
    bandwidth: Bandwidth
    latency: Time = 1e-6


class FatTree(_TopologyBase):
    """Two-level leaf/spine fat-tree; uplinks shrink by ``oversubscription``."""

    kind: Literal["fat_tree"]
    hosts: PositiveInt
    hosts_per_leaf: PositiveInt
    bandwidth: Bandwidth
    latency: Time = 1e-6
    oversubscription: Number = Field(1.0, ge=1.0)
    spines: PositiveInt | None = None


class Dragonfly(_TopologyBase):
    """Groups of all-to-all routers joined by global links."""

    kind: Literal["dragonfly"]
    groups: PositiveInt
    routers_per_group: PositiveInt
    hosts_per_router: PositiveInt
    bandwidth: Bandwidth
    latency: Time = 1e-6
    global_bandwidth: Bandwidth | None = None


class Torus(_TopologyBase):
    """A 2-D or 3-D torus, one host per router."""

    kind: Literal["torus"]
    dims: list[PositiveInt] = Field(min_length=2, max_length=3)
    bandwidth: Bandwidth
    latency: Time = 1e-6

    def builder_params(self, catalog: Catalog) -> dict[str, Any]:
        return {"dims": tuple(self.dims), "bandwidth": self.bandwidth, "latency": self.latency}


class GpuCluster(_TopologyBase):
    """Multi-GPU nodes of a catalog type (NVLink, PCIe, NICs) joined by a switch or fat-tree.

    Link figures come from the catalog node; any of them may be overridden here.
    """

    kind: Literal["gpu_cluster"]
    node: str
    nodes: PositiveInt = 1
    fabric: Literal["single_switch", "fat_tree"] = "single_switch"
    nodes_per_leaf: PositiveInt = 4
    oversubscription: Number = Field(1.0, ge=1.0)
    nic_bandwidth: Bandwidth | None = None
    nvlink_bandwidth: Bandwidth | None = None
    pcie_bandwidth: Bandwidth | None = None
    host_rails: bool = False
    """Another node's GPUs reach this node's host memory through the NIC of their rail (GPUDirect
    RDMA on a rail-optimised fabric) instead of the node's first NIC."""

    def builder_params(self, catalog: Catalog) -> dict[str, Any]:
        spec = catalog.nodes[self.node]
        if not spec.gpus or spec.gpu_link is None or spec.pcie is None:
            raise ValueError(f"node {self.node!r} has no GPUs with NVLink and PCIe links")
        return {
            "nodes": self.nodes,
            "gpus_per_node": spec.gpus,
            "nvlink_bandwidth": self.nvlink_bandwidth or spec.gpu_link.bandwidth,
            "nvlink_latency": spec.gpu_link.latency,
            "pcie_bandwidth": self.pcie_bandwidth or spec.pcie.bandwidth,
            "pcie_latency": spec.pcie.latency,
            "nics_per_node": spec.nics,
            "nic_bandwidth": self.nic_bandwidth or spec.nic.bandwidth,
            "nic_latency": spec.nic.latency,
            "fabric": self.fabric,
            "nodes_per_leaf": self.nodes_per_leaf,
            "oversubscription": self.oversubscription,
            "host_rails": self.host_rails,
        }


Topology = Annotated[
    SingleSwitch | FatTree | Dragonfly | Torus | GpuCluster, Field(discriminator="kind")
]


class NetworkConfig(Strict):
    """Fidelity mode and topology. ``analytic``: alpha-beta per path; ``flow``: max-min sharing."""

    mode: Literal["analytic", "flow"] = "flow"
    topology: Topology
    batch_links: Literal["ends", "paths"] = "ends"
    """Analytic mode: which links the messages a collective step issues together (an all-to-all's)
    share: ``ends``, their first and last links (the injection and ejection links); ``paths``,
    every link of their paths, so the batch's own bytes through a spine or a NIC bound it too.
    Flow mode shares every link among all flows whatever this says."""
