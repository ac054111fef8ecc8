"""``kind: pipeline_training`` — a model trained pipeline-parallel on the GPUs of one node or more.

The model profile (:mod:`simhpc.models`) is cut into the schedule's number of stages (balanced on
forward + backward time: of the cuts with the smallest largest stage, the min-max search's own or
the most even one, whichever the schedule's dry run with the profiled times finishes first; with
``partition: time_and_transfer`` also the cuts that price each boundary's transfer over the two
devices the schedule's stage maps put it between, :func:`boundary_cut_costs`), the
schedule (registry family ``pipeline``) returns the per-device op lists, and
:class:`~simhpc.workloads.pipeline.engine.PipelineExecutor` runs them with activation and gradient
transfers over the cluster's links (``network``): NVLink inside a node; PCIe, the NICs and the fabric
between consecutive devices on different nodes (devices are taken node by node). The schedules plan
with each boundary's transfer time between the two devices it joins. With ``data_parallel: N`` the
plan runs on N groups of devices at once and each stage's gradients are all-reduced among its
copies (:mod:`~simhpc.workloads.pipeline.replicas`).

Summary: throughput (samples/s), iteration time, bubble fraction (``1 - busy / (devices x
iteration time)``: the devices' idle share of the iteration) and the part of it spent waiting for
activations and gradients in flight (``transfer_wait_fraction``: exposed point-to-point
communication), the gradient exchange or all-reduce left after the last op
(``exposed_gradient_sync_s``, where there is one), the stages that recompute their activations
(``recomputed_stages``), per-device peak memory and its imbalance (max / min), stage costs and
point-to-point traffic.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import yaml

from simhpc.hardware.catalog import Catalog
from simhpc.hardware.devices import Device
from simhpc.hardware.specs import GpuSpec
from simhpc.models import LayerCosts, ModelProfile, build_model, uniform_model
from simhpc.policies.pipeline import PipelinePlan, PipelineSchedule, PlanError
from simhpc.policies.pipeline.explicit import written_out
from simhpc.policies.pipeline.greedy import ScheduleStall
from simhpc.policies.pipeline.partition import balanced_partition, even_partition, smoothest_partition
from simhpc.policies.pipeline.profile import Route, StageProfile
from simhpc.policies.pipeline.timing import plan_timing
from simhpc.registry import lookup, register
from simhpc.units import counted, format_size
from simhpc.workloads.base import InvalidReference, RunContext, Workload, gpu_cluster_node
from simhpc.workloads.pipeline.config import PipelineTrainingConfig, UniformModel, bytes_per_param
from simhpc.workloads.pipeline.engine import PipelineExecutor
from simhpc.workloads.pipeline.recompute import fit_memory
from simhpc.workloads.pipeline.replicas import ReplicaReduction
from simhpc.workloads.pipeline.stages import StageCosts, stage_costs


def schedule_of(config: PipelineTrainingConfig) -> PipelineSchedule:
    """The schedule object of ``config.schedule``."""
    return lookup("pipeline", config.schedule.kind)(config.schedule)


def model_of(config: PipelineTrainingConfig) -> ModelProfile:
    """The model profile at the configured micro-batch and input shape."""
    model = config.model
    if isinstance(model, UniformModel):
        weight_grad = model.backward / 2 if model.weight_grad is None else model.weight_grad
        return uniform_model(model.layers, config.micro_batch_size, config.dtype, forward_s=model.forward,
                             backward_s=model.backward, weight_grad_s=weight_grad, params=model.params,
                             stash_bytes=model.stash, boundary_bytes=model.boundary)
    return build_model(model, config.micro_batch_size, seq_len=config.seq_len,
                       image_size=config.image_size, dtype=config.dtype)


_Planned = tuple[float, tuple[int, ...], StageCosts, StageProfile, PipelinePlan]
"""A cut planned: the estimated iteration, the cut, its stage costs and profile, the plan."""


def boundary_cut_costs(maps: tuple[tuple[int, ...], ...], boundary_bytes: np.ndarray, route: Route) -> np.ndarray:
    """PipeDream's cut cost per boundary (row) and layer (column): the activation after the layer
    sent forward and its gradient back, ``2 (latency + bytes / bandwidth)`` over the path between
    the two devices the boundary joins (free where both stages are on one device, as at a V-shaped
    map's turns); with two pipelines, the mean of their pairs (each runs half the micro-batches)."""
    rows = []
    for boundary in range(len(maps[0]) - 1):
        row = np.zeros_like(boundary_bytes, dtype=float)
        for mapping in maps:
            source, target = mapping[boundary], mapping[boundary + 1]
            if source != target:
                latency, bandwidth = route(source, target)
                row += 2 * (latency + boundary_bytes / bandwidth)
        rows.append(row / len(maps))
    return np.asarray(rows)


def _check_shapes(config: PipelineTrainingConfig, gpus: int) -> int:
    """Validate device count, schedule and model cut; return one pipeline's device count."""
    replicas = config.data_parallel
    devices = config.devices or gpus // replicas
    if not config.devices and replicas > 1 and devices < 2:
        raise InvalidReference("data_parallel", f"{replicas} replicas of a pipeline of 2 or more GPUs need "
                               f"{2 * replicas} GPUs, the cluster has {gpus}")
    if devices * replicas > gpus:  # only with devices given: by default the replicas share the GPUs
        wanted = f"{replicas} replicas of {devices}" if replicas > 1 else str(devices)
        raise InvalidReference("devices", f"{wanted} devices requested, the cluster has {gpus} GPUs")
    if devices < 2:
        raise InvalidReference("devices", "pipeline parallelism needs at least 2 devices")
    schedule = schedule_of(config)
    try:
        schedule.check(devices, config.micro_batches)
    except ValueError as error:
        raise InvalidReference("schedule", str(error)) from None
    try:
        model = model_of(config)
    except ValueError as error:
        raise InvalidReference("model", str(error)) from None
    stages = schedule.stages(devices)
    if stages > len(model.layers):
        raise InvalidReference("schedule", f"{stages} stages for {config.model}, which has only "
                               f"{len(model.layers)} layers to cut")
    cut = config.partition
    if isinstance(cut, list) and (len(cut) != stages or sum(cut) != len(model.layers)):
        raise InvalidReference("partition", f"{counted(len(cut), 'stage')} of {counted(sum(cut), 'layer')} in all, "
                               f"where the schedule has {counted(stages, 'stage')} and the model "
                               f"{counted(len(model.layers), 'layer')}")
    return devices


@register("workload", "pipeline_training")
class PipelineTrainingWorkload(Workload):
    """Pipeline-parallel training; see :mod:`simhpc.workloads.pipeline`."""

    Config = PipelineTrainingConfig
    needs_network = True
    output_names = ("plan.yaml",)

    @classmethod
    def check(cls, config: PipelineTrainingConfig, catalog: Catalog, topology: Any) -> None:
        node = gpu_cluster_node("pipeline_training", catalog, topology, config.dtype)
        _check_shapes(config, node.gpus * topology.nodes)
        gpu = node.gpu
        if gpu is not None and config.memory_capacity is not None and config.memory_capacity > gpu.memory_capacity:
            raise InvalidReference("memory_capacity", f"{format_size(config.memory_capacity)} is more than GPU "
                                   f"'{gpu.name}' has ({format_size(gpu.memory_capacity)}): it is the usable part")

    def __init__(self, config: PipelineTrainingConfig, context: RunContext) -> None:
        super().__init__(config, context)
        node = context.node
        assert node is not None and node.gpu is not None  # checked by check()
        self.gpu: GpuSpec = node.gpu
        network = context.network
        gpus = [name for name in network.topology.endpoints if ".gpu" in name]  # node by node
        count = _check_shapes(config, len(gpus))
        replicas = config.data_parallel
        self.device_names = gpus[:count * replicas]
        if config.replica_layout == "consecutive":
            groups = [self.device_names[r * count:(r + 1) * count] for r in range(replicas)]
        else:
            groups = [self.device_names[r::replicas] for r in range(replicas)]
        topology = network.topology
        names = groups[0]  # replica 0's: the plan and its profile

        @functools.cache
        def route(source: int, target: int) -> tuple[float, float]:
            path = topology.path(names[source], names[target])
            return topology.path_latency(path), topology.path_bandwidth(path)

        self.schedule = schedule_of(config)
        self.model = model_of(config)
        layer_costs = self.model.costs(context.cost_model, self.gpu)
        everywhere = config.recompute == "full"
        timed = layer_costs.recomputed() if everywhere else layer_costs  # what the cut balances
        cuts = self._cuts(timed, count, route)
        ratio = float(timed.backward_s.sum() / timed.forward_s.sum())  # for the unit-cost dry runs
        costs_of = functools.partial(stage_costs, layer_costs, bytes_per_param=bytes_per_param(
            config.dtype, config.optimizer), grad_bytes_per_param=4 if config.dtype == "fp32" else 2)

        def plan_cut(bounds: tuple[int, ...], recompute: bool | tuple[bool, ...]) -> _Planned:
            costs = costs_of(bounds, recompute=recompute)
            profile = self._profile(costs, route)
            try:
                plan = self.schedule.plan_for(count, config.micro_batches, ratio, profile)
            except ScheduleStall as error:
                raise InvalidReference("schedule", str(error)) from None
            try:
                timing = plan_timing(plan, profile.op_seconds(plan), profile.delay, config.p2p)
            except PlanError as error:  # only a rendezvous can deadlock a valid plan
                raise InvalidReference("p2p", f"{error}; with p2p: blocking every receive is posted ahead") from None
            return timing.makespan, bounds, costs, profile, plan

        # the cut the schedule's own estimate runs fastest (the first on a tie)
        chosen = min((plan_cut(bounds, everywhere) for bounds in cuts), key=lambda entry: entry[0])
        _, self.bounds, self.costs, self.profile, self.plan = chosen
        capacity = config.memory_capacity or self.gpu.memory_capacity
        self.recomputed = (everywhere,) * self.costs.stages
        if config.recompute == "auto":  # more stages recompute until the plan fits; each round replans
            def costs_with(flags: tuple[bool, ...]) -> StageCosts:
                return costs_of(self.bounds, recompute=flags)
            while (more := fit_memory(self.plan, costs_with, capacity, self.recomputed)) != self.recomputed:
                self.recomputed = more
                _, _, self.costs, self.profile, self.plan = plan_cut(self.bounds, more)
        self.devices = [Device(self.sim, name, capacity) for name in self.device_names]
        device_of = dict(zip(self.device_names, self.devices))
        self.reduction = None
        if replicas > 1:
            try:
                self.reduction = ReplicaReduction(self.sim, network, groups, self.plan, self.costs.grad_bytes,
                                                  config.sync_replicas, config.gradient_all_reduce)
            except ValueError as error:
                raise InvalidReference("gradient_all_reduce", str(error)) from None

        def sender(group: list[str]) -> Any:
            def send(src: int, dst: int, nbytes: float, label: str) -> Any:
                return network.transfer(group[src], group[dst], nbytes, label)
            return send

        self.executors = [
            PipelineExecutor(self.sim, self.plan, self.costs, [device_of[name] for name in group],
                             sender(group), overhead=config.stage_overhead, sync_replicas=config.sync_replicas,
                             gradient_sync=self.reduction.ready if self.reduction else None,
                             variation=config.op_time_variation, stream=f"pipeline.op_times.r{replica}",
                             p2p=config.p2p)
            for replica, group in enumerate(groups)]

    @property
    def stage_layer_counts(self) -> list[int]:
        """Layers of each stage: the cut that ran."""
        return [len(names) for names in self.costs.layers]

    def output_files(self) -> dict[str, str]:
        """``plan.yaml``: the op order each device ran and the cut, as the workload fields that
        replay them (an ``explicit`` schedule and a ``partition`` list)."""
        fields = {"schedule": written_out(self.plan), "partition": self.stage_layer_counts}
        header = ("# The plan this run executed: each device's ops in order (F, B, W of micro-batch j on stage s:\n"
                  "# F3@s5), each pipeline's stage -> device map and the layers of each stage. Put these two fields\n"
                  "# in a scenario's workload section to run the same plan again (or in another framework).\n")
        return {"plan.yaml": header + yaml.safe_dump(fields, sort_keys=False, default_flow_style=None, width=120)}

    def _cuts(self, layer_costs: LayerCosts, devices: int, route: Route) -> list[tuple[int, ...]]:
        """The cuts of ``partition`` for the schedule on ``devices`` GPUs; the workload runs the one
        the schedule's estimate finds fastest."""
        partition, stages = self.config.partition, self.schedule.stages(devices)
        if isinstance(partition, list):  # as checked by _check_shapes
            return [(0, *itertools.accumulate(partition))]
        if partition == "even":
            return [even_partition(len(layer_costs), stages)]
        if partition == "parameters":
            return [balanced_partition(layer_costs.params.astype(float), stages)]
        objectives: list[tuple[np.ndarray | None, bool]] = [(None, False)]
        if partition == "time_and_transfer":  # a cut's transfer added to its stage, or overlapping it
            cut_costs = boundary_cut_costs(self.schedule.stage_maps(devices), layer_costs.boundary_bytes, route)
            objectives += [(cut_costs, False), (cut_costs, True)]
        return list(dict.fromkeys(cut(layer_costs.step_s, stages, cut_costs, overlap)
                                  for cut_costs, overlap in objectives
                                  for cut in (balanced_partition, smoothest_partition)))

    def _profile(self, costs: StageCosts, route: Route) -> StageProfile:
        """``costs`` as a schedule may plan with them: op times with the per-op overhead (the engine's),
        and each boundary's transfer time over the path between the two GPUs it joins (``route``;
        between the first two where the devices are not known)."""
        latency, bandwidth = route(0, 1)
        overhead = self.config.stage_overhead

        def with_overhead(seconds: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(t + overhead for t in seconds)
        split = bool(costs.weight_grad_s)
        return StageProfile(forward=with_overhead(costs.forward_s), backward=with_overhead(costs.backward_s),
                            transfer=tuple(latency + nbytes / bandwidth for nbytes in costs.boundary_bytes),
                            boundary_bytes=tuple(costs.boundary_bytes), route=route,
                            input_grad=with_overhead(costs.input_grad_s) if split else (),
                            weight_grad=with_overhead(costs.weight_grad_s) if split else ())

    def start(self) -> None:
        for executor in self.executors:
            self.sim.process(executor.run(self.config.iterations))

    def summary(self) -> dict[str, Any]:
        c, executors = self.config, self.executors
        times = executors[0].iteration_times  # every replica ends an iteration with the last all-reduce
        mean = sum(times) / len(times) if times else None
        samples = c.micro_batches * c.micro_batch_size * c.data_parallel
        peaks = [device.memory.peak for device in self.devices]
        # replicas of equal size and iteration times: the whole run's shares are their means
        bubbles = [sum(fractions) / len(fractions)
                   for fractions in zip(*(executor.bubble_fractions() for executor in executors))]
        waits = [sum(fractions) / len(fractions)
                 for fractions in zip(*(executor.transfer_wait_fractions() for executor in executors))]
        result: dict[str, Any] = {
            "kind": "pipeline_training",
            "model": c.model if isinstance(c.model, str) else c.model.model_dump(),
            "model_params": self.model.params,
            "gpu": self.gpu.name,
            "schedule": c.schedule.model_dump(),
            "devices": len(self.devices),
            "data_parallel": c.data_parallel,
            "replica_layout": c.replica_layout,
            "stages": self.plan.stages,
            "pipelines": self.plan.pipelines,
            "micro_batches": c.micro_batches,
            "micro_batch_size": c.micro_batch_size,
            "samples_per_iteration": samples,
            "iterations_done": min(executor.iterations_done for executor in executors),
            "iteration_times_s": times,
            "iteration_time_s": mean,
            "throughput_samples_per_second": samples / mean if mean else None,
            "bubble_fraction": sum(bubbles) / len(bubbles) if bubbles else None,
            "transfer_wait_fraction": sum(waits) / len(waits) if waits else None,
            "device_names": list(self.device_names),
            "peak_memory_bytes": peaks,
            "max_peak_memory_bytes": max(peaks),
            "min_peak_memory_bytes": min(peaks),
            "memory_imbalance": max(peaks) / min(peaks) if min(peaks) > 0 else None,
            "p2p_transfers": sum(executor.transfers for executor in executors),
            "p2p_bytes": sum(executor.transfer_bytes for executor in executors),
            "stage_forward_s": list(self.costs.forward_s),
            "stage_backward_s": list(self.costs.backward_s),
            "stage_weight_grad_s": list(self.costs.weight_grad_s),
            "stage_layers": [f"{names[0]}..{names[-1]}" if len(names) > 1 else names[0]
                             for names in self.costs.layers],
            "stage_layer_counts": self.stage_layer_counts,
            "stage_device": [list(mapping) for mapping in self.plan.stage_device],
            "stage_overhead_s": c.stage_overhead,
            "op_time_variation": c.op_time_variation,
            "p2p": c.p2p,
            "recompute": c.recompute,
            "recomputed_stages": [s for s, again in enumerate(self.recomputed) if again],
        }
        if self.reduction is not None or (self.plan.pipelines > 1 and c.sync_replicas):
            syncs = [wait for executor in executors for wait in executor.sync_waits]
            result["exposed_gradient_sync_s"] = sum(syncs) / len(syncs) if syncs else None
        if self.reduction is not None:
            result["gradient_all_reduces"] = self.reduction.all_reduces
            result["gradient_all_reduce_bytes"] = self.reduction.all_reduce_bytes
        if executors[0].busy:
            for key, seconds in (("device_busy_s", "busy"), ("device_transfer_wait_s", "transfer_waits")):
                last = {device.name: value for executor in executors
                        for device, value in zip(executor.devices, getattr(executor, seconds)[-1])}
                result[key] = [last[name] for name in self.device_names]
        return result
