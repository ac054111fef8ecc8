"""Data-parallel replicas of a pipeline: each stage's gradients all-reduced among its copies.

``data_parallel: N`` runs the same plan on ``N`` groups of GPUs, each on its own share of the
batch. A stage's copies (one per replica, and per direction of a bidirectional plan whose copies
are synchronised) hold the same weights, so their gradients are summed before the optimizer step:
an all-reduce (``gradient_all_reduce``: ring, tree or hierarchical) among the GPUs that host them,
over the network, started when the last copy has run its last backward (or ``W``) of the
iteration, as PyTorch's DDP starts a bucket's all-reduce once every rank has produced it. Stages
finish at different times (the first stage last under 1F1B), so the early stages' all-reduces
overlap the later ones' backwards. The iteration ends when every reduction has completed.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from simhpc.engine import Simulation
from simhpc.network import Communicator, Network
from simhpc.network.collectives import uneven_nodes
from simhpc.policies.pipeline.plan import PipelinePlan


class ReplicaReduction:
    """All-reduces of each stage's gradients among its copies in every replica.

    Args:
        sim: the simulation.
        network: the network the all-reduces use.
        replicas: per replica, the endpoint name of each of the plan's devices.
        plan: the plan every replica runs.
        grad_bytes: per stage, the bytes of its gradients.
        merge_directions: reduce a bidirectional plan's two copies of a stage with the replicas'
            (its ``sync_replicas``); otherwise each direction's copies apart.
        algorithm: ``ring``, ``tree`` or ``hierarchical`` (:meth:`Communicator.all_reduce`).

    Raises:
        ValueError: if the hierarchical all-reduce meets a stage whose copies are spread unevenly
            over the nodes.
    """

    def __init__(self, sim: Simulation, network: Network, replicas: Sequence[Sequence[str]], plan: PipelinePlan,
                 grad_bytes: Sequence[float], merge_directions: bool, algorithm: str = "ring") -> None:
        self.sim = sim
        self.algorithm = algorithm
        self.grad_bytes = list(grad_bytes)
        self.merge_directions = merge_directions
        self.communicators: dict[tuple[int, int], Communicator] = {}
        """Per (direction, stage) key, a communicator among the GPUs that hold a copy of the stage."""
        for s in range(plan.stages):
            for q in range(plan.pipelines):
                key = self._key(q, s)
                if key in self.communicators:
                    continue
                directions = range(plan.pipelines) if merge_directions else (q,)
                ranks = [names[plan.stage_device[p][s]] for names in replicas for p in directions]
                label = f"dp s{s}" + ("" if merge_directions or plan.pipelines == 1 else f"/p{q}")
                per_node = uneven_nodes(network, ranks) if algorithm == "hierarchical" else None
                if per_node is not None:
                    raise ValueError(f"hierarchical all-reduce needs as many copies of each stage on every "
                                     f"node; stage {s} has {per_node}")
                self.communicators[key] = Communicator(network, ranks, name=label)
        self._pending: dict[tuple[int, int], tuple[int, simpy.Event]] = {}
        self.all_reduces = 0
        self.all_reduce_bytes = 0.0
        """Bytes all-reduced (each all-reduce's buffer once)."""

    def _key(self, pipeline: int, stage: int) -> tuple[int, int]:
        return (0 if self.merge_directions else pipeline, stage)

    def ready(self, pipeline: int, stage: int) -> simpy.Event:
        """A replica's copy of ``stage`` (of direction ``pipeline``) has run its last pass of the
        iteration (a :data:`~simhpc.workloads.pipeline.engine.GradientSync`); returns the event
        its all-reduce fires, started by the last copy to come."""
        key = self._key(pipeline, stage)
        count, done = self._pending.get(key, (0, None))
        if done is None:
            done = self.sim.env.event()
        count += 1
        communicator = self.communicators[key]
        if count < communicator.size:
            self._pending[key] = (count, done)
            return done
        del self._pending[key]
        self.all_reduces += 1
        self.all_reduce_bytes += self.grad_bytes[stage]
        reduced = communicator.all_reduce(self.grad_bytes[stage], self.algorithm)
        reduced.callbacks.append(lambda _event, done=done: done.succeed())
        return done

