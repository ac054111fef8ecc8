"""What every workload implements, and the run context it receives."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from simhpc.costs import CostModel
from simhpc.engine import Simulation
from simhpc.hardware.catalog import Catalog
from simhpc.hardware.specs import NodeSpec
from simhpc.scenario.types import Strict


class InvalidReference(ValueError):
    """A scenario field names something that does not exist (a catalog entry, a rank).

    ``field`` is the dotted path below the workload section, or from the scenario's top with
    ``absolute=True`` (the scenario's network is what is wrong); :attr:`path` is the full path.
    """

    def __init__(self, field: str, message: str, absolute: bool = False) -> None:
        self.field = field
        self.path = field if absolute else f"workload.{field}"
        super().__init__(message)


@dataclass
class RunContext:
    """What a workload gets to act on: the simulation, hardware, network and cost model."""

    sim: Simulation
    catalog: Catalog
    cost_model: CostModel
    network: Any = None
    """A :class:`simhpc.network.Network`, or None when the scenario has no network section."""
    node: NodeSpec | None = None
    """The catalog node a ``gpu_cluster`` topology is built from (None for other topologies)."""


def gpu_cluster_node(kind: str, catalog: Catalog, topology: Any, dtype: str | None = None,
                     dtype_field: str = "dtype") -> NodeSpec:
    """The GPU node of a ``gpu_cluster`` topology config, for workloads that need one.

    Raises:
        InvalidReference: the topology is not a GPU cluster, its node has no GPUs, or its GPU
            has no peak for ``dtype`` (the workload's compute dtype, when given; its field is
            ``dtype_field``).
    """
    if getattr(topology, "kind", None) != "gpu_cluster":
        raise InvalidReference("kind", f"{kind} needs a gpu_cluster network topology")
    node = catalog.nodes.get(topology.node)
    if node is None or node.gpu is None or not node.gpus:
        raise InvalidReference("kind", f"node {topology.node!r} of the topology has no GPUs")
    if dtype is not None and dtype not in node.gpu.peak_flops:
        known = ", ".join(sorted(node.gpu.peak_flops)) or "none"
        raise InvalidReference(dtype_field, f"GPU {node.gpu.name!r} of node {topology.node!r} has no peak for "
                               f"{dtype} (it has: {known})")
    return node


class Workload(ABC):
    """A workload turns its config into SimPy processes on devices and links.

    Subclasses set ``Config`` (a :class:`Strict` pydantic model with a ``kind`` literal) and are
    registered with ``@register("workload", kind)``.
    """

    Config: ClassVar[type[Strict]]
    needs_network: ClassVar[bool] = False
    output_names: ClassVar[tuple[str, ...]] = ()
    """The files :meth:`output_files` may write (a run removes those an earlier run left)."""

    def __init__(self, config: Any, context: RunContext) -> None:
        self.config = config
        self.ctx = context
        self.sim = context.sim

    @classmethod
    def check(cls, config: Any, catalog: Catalog, topology: Any) -> None:
        """Validate references (catalog entries, ranks of the topology config).

        Raise :class:`InvalidReference` naming the field below ``workload``.
        """

    @abstractmethod
    def start(self) -> None:
        """Schedule the workload's processes on the simulation."""

    @abstractmethod
    def summary(self) -> dict[str, Any]:
        """Results after the simulation has run (JSON-serialisable, deterministic)."""

    def output_files(self) -> dict[str, str]:
        """Files of its own the workload adds to a run's folder: name -> text (deterministic), each
        named in :attr:`output_names`."""
        return {}
