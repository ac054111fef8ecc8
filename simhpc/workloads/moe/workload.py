"""``kind: moe_training``: MoE training with a checkpoint policy, failures and recovery.

Builds the machine view (GPUs, host memories, storage, link rates from the topology), the
model arithmetic, the expert-load process and the checkpoint policy, then runs the
:class:`~simhpc.workloads.moe.trainer.Trainer` and the
:class:`~simhpc.workloads.moe.recovery.FailureInjector`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Generator
from typing import Any

import numpy as np
from pydantic import ValidationError

from simhpc.hardware.catalog import Catalog
from simhpc.hardware.devices import Device
from simhpc.hardware.specs import NodeSpec, StorageSpec
from simhpc.registry import UnknownNameError, lookup, register
from simhpc.scenario.messages import describe_validation_error
from simhpc.units import MAX_COUNT, format_size
from simhpc.workloads.base import InvalidReference, RunContext, Workload, gpu_cluster_node
from simhpc.workloads.moe.checkpointer import CheckpointStore
from simhpc.workloads.moe.comm import TrainingComm
from simhpc.workloads.moe.config import MoETrainingConfig
from simhpc.workloads.moe.loads import ExpertLoads
from simhpc.workloads.moe.model import Layout, MoEModel
from simhpc.workloads.moe.plan import ClusterFacts, iteration_phases
from simhpc.workloads.moe.recovery import FailureInjector
from simhpc.workloads.moe.storage import Storage
from simhpc.workloads.moe.summary import summarise
from simhpc.workloads.moe.trainer import Trainer


def _policy_options(config: MoETrainingConfig) -> Any:
    """The policy class and its validated options (InvalidReference on a bad name or option)."""
    try:
        policy = lookup("checkpoint", config.checkpoint.policy)
    except UnknownNameError as error:
        raise InvalidReference("checkpoint.policy", str(error)) from None
    try:
        options = policy.Options.model_validate(config.checkpoint.options)
    except ValidationError as error:
        where, message = describe_validation_error(error, config.checkpoint.options)
        if message.startswith("unknown field"):
            message = "unknown option" + message.removeprefix("unknown field")
        raise InvalidReference(f"checkpoint.options.{where}".rstrip("."), message) from None
    return policy, options


def _storage_spec(config: MoETrainingConfig, catalog: Catalog, node: NodeSpec) -> StorageSpec | None:
    name = config.checkpoint.storage
    if name is None:
        return node.storage
    if name not in catalog.storage:
        known = ", ".join(sorted(catalog.storage))
        raise InvalidReference("checkpoint.storage", f"unknown storage {name!r} (known: {known})")
    return catalog.storage[name]


@register("workload", "moe_training")
class MoETrainingWorkload(Workload):
    """Data- and expert-parallel MoE training; see :mod:`simhpc.workloads.moe`."""

    Config = MoETrainingConfig
    needs_network = True

    @classmethod
    def check(cls, config: MoETrainingConfig, catalog: Catalog, topology: Any) -> None:
        node = gpu_cluster_node("moe_training", catalog, topology, config.model.dtype, "model.dtype")
        gpu = node.gpu
        assert gpu is not None  # checked by gpu_cluster_node
        if "fp32" not in gpu.peak_flops:
            raise InvalidReference(f"hardware.gpus.{gpu.name}.peak_flops", f"GPU {gpu.name!r} has no fp32 peak, "
                                   "which the optimizer step over fp32 master weights needs", absolute=True)
        cls._check_layout(config, topology.nodes, node.gpus)
        policy, _ = _policy_options(config)
        storage = _storage_spec(config, catalog, node)
        if getattr(policy, "needs_storage", False) and storage is None:
            raise InvalidReference("checkpoint.storage", f"policy {config.checkpoint.policy!r} writes to "
                                   f"storage, and node {topology.node!r} has none: name a catalog storage")
        if config.failures.mtbf is not None and config.failures.mtbf <= 0:
            raise InvalidReference("failures.mtbf", "must be > 0 (leave it out for no drawn failures)")
        replicas = config.checkpoint.replicas
        if "replicas" in config.checkpoint.model_fields_set and replicas > topology.nodes:
            raise InvalidReference("checkpoint.replicas", f"{replicas} copies of each checkpoint need "
                                   f"{replicas} nodes, the cluster has {topology.nodes}")
        for i, failure in enumerate(config.failures.at):
            if failure.node >= topology.nodes:
                raise InvalidReference(f"failures.at.{i}.node", f"node {failure.node} does not exist "
                                       f"(the cluster has {topology.nodes})")

    @staticmethod
    def _check_layout(config: MoETrainingConfig, nodes: int, gpus: int) -> int:
        world = nodes * gpus
        ep = config.parallelism.expert_parallel or world
        experts = config.model.experts
        if ep > world or world % ep:
            raise InvalidReference("parallelism.expert_parallel", f"{ep} must divide the {world} GPUs")
        if ep % gpus and gpus % ep:
            raise InvalidReference("parallelism.expert_parallel",
                                   f"{ep} must be a multiple or a divisor of the {gpus} GPUs per node")
        if experts % ep:
            raise InvalidReference("model.experts", f"{experts} experts cannot be spread evenly over "
                                   f"{ep} expert-parallel GPUs")
        if config.global_batch % world:
            raise InvalidReference("global_batch", f"{config.global_batch} sequences do not split evenly "
                                   f"over the {world} data-parallel GPUs (every GPU trains whole sequences)")
        return ep

    def __init__(self, config: MoETrainingConfig, context: RunContext) -> None:
        super().__init__(config, context)
        network = context.network
        topology = network.topology
        nodes, gpus = self._cluster_shape(topology)
        spec = context.node
        assert spec is not None and spec.gpu is not None
        self.node_spec = spec
        ep = self._check_layout(config, nodes, gpus)
        self.layout = Layout(nodes, gpus, ep)
        self.model = MoEModel(config.model, self.layout, config.global_batch, spec.gpu, context.cost_model,
                              config.parallelism.zero_shard_dense)
        self.phases = iteration_phases(config.model.layers, config.model.moe_layers)
        sim = self.sim
        storage_spec = _storage_spec(config, context.catalog, spec)
        self.storage = self._storage(storage_spec, nodes)
        state = self.model.checkpoint_params_per_gpu() * config.checkpoint.bytes_per_param
        pieces = math.ceil(state / (config.checkpoint.buffer / 2))  # the executor's pieces per GPU
        if pieces > MAX_COUNT:
            raise InvalidReference("checkpoint.buffer", f"a buffer of {format_size(config.checkpoint.buffer)} "
                                   f"cuts each GPU's {format_size(state)} checkpoint into {pieces} pieces, "
                                   f"more than the limit of {MAX_COUNT}: use a larger buffer")
        copy_rates = self._copy_rates(topology, nodes, gpus)
        self.facts = ClusterFacts(
            nodes=nodes,
            gpus_per_node=gpus,
            layers=config.model.layers,
            phases=self.phases,
            state_bytes=state,
            buffer_bytes=config.checkpoint.buffer,
            replicas=min(config.checkpoint.replicas, nodes),
            pcie_rate=copy_rates[0],
            copy_rates=tuple(copy_rates),
            storage_rate=storage_spec.bandwidth if storage_spec else 0.0,
            host_memory=spec.host_memory,
            every=config.checkpoint.every,
        )
        policy_class, options = _policy_options(config)
        self.policy = policy_class(self.facts, options)
        self.gpus = [Device(sim, f"n{i}.gpu{j}", spec.gpu.memory_capacity) for i in range(nodes) for j in range(gpus)]
        self.hosts = [Device(sim, f"n{i}.host", spec.host_memory) for i in range(nodes)]
        self.store = CheckpointStore(sim, network, nodes, gpus, state, config.checkpoint.buffer, self.hosts,
                                     self.storage)
        nvlink = topology.link("n0.gpu0", "n0.nvswitch")
        self.comm = TrainingComm(sim, network, nodes, gpus, ep, nvlink.bandwidth, nvlink.latency)
        loads = ExpertLoads(sim.rng("moe.loads"), len(config.model.moe_layers), config.model.experts, config.dynamicity,
                            config.loads.skew, config.loads.start)
        self.trainer = Trainer(sim, self.model, loads, self.comm, self.phases, self.policy, self.store,
                               config.iterations, config.profile_overhead)
        self.failures = FailureInjector(sim, config.failures, self.trainer, self.store, network, self.storage,
                                        nodes, gpus)

    @staticmethod
    def _cluster_shape(topology: Any) -> tuple[int, int]:
        """Nodes and GPUs per node of a gpu_cluster topology."""
        per_node = Counter(topology.node_of(e) for e in topology.endpoints if ".gpu" in e)
        return len(per_node), per_node["n0"]

    def _storage(self, spec: StorageSpec | None, nodes: int) -> list[Storage]:
        if spec is None:
            return []
        if spec.shared:
            server = Storage(self.sim, spec.name, spec)
            return [server] * nodes
        return [Storage(self.sim, f"n{i}.{spec.name}", spec) for i in range(nodes)]

    @staticmethod
    def _copy_rates(topology: Any, nodes: int, gpus: int) -> list[float]:
        """Per-GPU rate when every GPU copies to its host and to ``p`` ring peers' hosts at once,
        for ``p`` from 0 to ``nodes - 1``: the smallest fair share (bandwidth / flows) over the
        links the copies use (each ``p`` adds one peer's copies to the links' counts)."""
        bandwidth = topology.capacities
        users = np.zeros(bandwidth.size, dtype=np.int64)
        rates = []
        for k in range(nodes):
            links = [link for i in range(nodes) for j in range(gpus)
                     for link in topology.path(f"n{i}.gpu{j}", f"n{(i + k) % nodes}.cpu")]
            np.add.at(users, np.array(links, dtype=np.int64), 1)
            used = users > 0
            rates.append(float((bandwidth[used] / users[used]).min()))
        return rates

    def start(self) -> None:
        self.sim.process(self._boot())

    def _boot(self) -> Generator[Any, Any, None]:
        """Reserve GPU memory (model states and the checkpoint buffer), then train."""
        training = self.model.training_state_bytes()
        for gpu in self.gpus:
            gpu.memory.allocate(training, "weights, gradients and optimizer state")
            if self.config.checkpoint.policy != "none":
                gpu.memory.allocate(self.config.checkpoint.buffer, "checkpoint buffer")
        self.trainer.start()
        self.failures.start()
        yield self.sim.timeout(0)

    def summary(self) -> dict[str, Any]:
        return summarise(self)

    def iteration_times(self) -> np.ndarray:
        """Durations of the executions that count (status ``done``), in order."""
        return np.array([r.duration for r in self.trainer.records if r.status == "done"], dtype=float)
