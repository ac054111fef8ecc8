"""``capricorn``: dynamicity-aware in-memory checkpointing for MoE training (CLUSTER'25).

Like Gemini it keeps replicas in peers' host memory and fits checkpoint chunks into the idle
gaps of the training traffic, but its profile is per layer and kept current:

* **per-layer online profiling**: it times the phases of single layers, not whole iterations;
* **chunked partitioning overlapped with layer computation**: every iteration the checkpoint
  is re-cut from the newest per-layer profile, chunks released as each layer's gaps open;
* **speculative re-profiling**: after each iteration it predicts the next iteration's load of
  every layer from the routing metadata (temporal locality: the next load is close to the
  current one) and re-profiles only the layers whose predicted load moved more than a
  threshold from the load they were profiled at. Timing a phase costs the workload's
  ``profile_overhead``; with ``speculative: false`` every layer is profiled every iteration.

Two consequences of planning from a *predicted* load, rather than from the last timing alone:

* **re-partitioning at the prediction**: a layer's expert time follows the tokens of its
  most-loaded expert, so the plan scales each layer's profiled expert phases by the ratio of
  its predicted to its profiled peak load. Without this, a layer whose load moved at iteration
  ``i`` is re-profiled during ``i+1`` and its new timing is used only from ``i+2``: every
  re-profiled iteration would be cut from a profile two iterations old. The load comes free
  with the routing metadata; profiling still corrects the estimate (kernel efficiency is not
  exactly linear in tokens) when the load has moved past the threshold.
* **headroom from the predicted change** (``hedge: true``): the prediction has an error, which
  Capricorn measures every iteration (the relative difference between each layer's observed
  and predicted peak load, its root mean square so far). A chunk that outgrows its gap
  collides with the next all-to-all and delays every later chunk, while a gap longer than
  planned only idles the link; so the slack of the iteration (predicted gap capacity beyond
  the checkpoint's size) is taken from the expert gaps in proportion to that error
  (:func:`~simhpc.policies.checkpoint.partition.hedge_gaps`) instead of being left after the
  last chunk. With static loads the error is zero and the plan is the plain fill.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from simhpc.policies.checkpoint.base import CheckpointPolicy
from simhpc.policies.checkpoint.partition import gap_plan
from simhpc.policies.checkpoint.placement import replica_peers
from simhpc.registry import register
from simhpc.scenario.types import Number, Strict
from simhpc.workloads.moe.plan import CheckpointPlan, ClusterFacts, Observation


class CapricornOptions(Strict):
    """Options of ``capricorn``."""

    threshold: Number = Field(0.05, ge=0)
    """Relative change of a layer's predicted peak expert load that triggers re-profiling."""
    speculative: bool = True
    """Re-profile only the layers predicted to change (else every layer, every iteration)."""
    predictor: Literal["last", "trend"] = "last"
    """Next load = this load (``last``) or this load plus the last change (``trend``)."""
    placement: Literal["group", "ring"] = "group"
    fill: Number = Field(1.0, gt=0, le=1)
    """Fraction of each profiled gap the chunks may fill (headroom for latency, pipelining)."""
    hedge: bool = True
    """Take the iteration's slack from the expert gaps in proportion to the measured error of
    the load prediction (else fill the gaps in order and leave the slack at the end)."""


@register("checkpoint", "capricorn")
class Capricorn(CheckpointPolicy):
    """Per-layer profile, refreshed where the predicted expert load changes."""

    Options = CapricornOptions

    def __init__(self, facts: ClusterFacts, options: Any = None) -> None:
        super().__init__(facts, options)
        self.peers = replica_peers(facts.nodes, facts.replicas, self.options.placement)
        self.durations: dict[int, float] = {}
        self._profiled_load = np.zeros(facts.layers)
        self._previous_load: np.ndarray | None = None
        self._predicted: np.ndarray | None = None
        self._square_error = np.zeros(facts.layers)
        self._predictions = 0
        self._pending: set[int] = set(range(facts.layers))
        self._global = frozenset(p.index for p in facts.phases if p.layer is None)
        self._expert = tuple(tuple(p.index for p in facts.phases if p.layer == layer and p.part == "expert")
                             for layer in range(facts.layers))
        self._moe = np.array([bool(phases) for phases in self._expert])
        """Layers with experts: the others' loads are zero and never change."""
        self._first = True
        self._profile: frozenset[int] = frozenset()
        self.profiled_phases = 0
        self.reprofiled_layers = 0
        """Layers re-profiled because their predicted load moved past the threshold."""
        self._triggered: set[int] = set()

    def plan(self, iteration: int) -> CheckpointPlan:
        if self.facts.state_bytes <= 0:  # nothing to fit into the gaps: no phase is worth timing
            return CheckpointPlan(take=self.due(iteration), target="memory", chunks=(), profile=frozenset(),
                                  peers=self.peers, interval=self.interval)
        phases = [i for layer in sorted(self._pending) for i in self.facts.layer_phases(layer)]
        profile = frozenset(phases) | (self._global if self._first else frozenset())
        self._profile = profile
        self.profiled_phases += len(profile)
        self.reprofiled_layers += len(self._triggered)  # re-profiled in this iteration
        self._triggered = set()
        if not self.due(iteration):
            return CheckpointPlan(take=False, profile=profile, peers=self.peers, interval=self.interval)
        known = len(self.durations) == len(self.facts.phases)
        peers = len(self.peers[0]) if self.peers else 0
        if known:
            spread = self.spread() if self.options.hedge else None
            chunks = gap_plan(self.facts, self.estimate(), peers, self.options.fill, spread)
        else:
            chunks = self.eager_chunks()
        return CheckpointPlan(take=True, target="memory", chunks=chunks, profile=profile, peers=self.peers,
                              interval=self.interval)

    def estimate(self) -> dict[int, float]:
        """Predicted seconds per phase: the profile, expert phases scaled to the predicted load."""
        estimate = dict(self.durations)
        if self._predicted is None:
            return estimate
        for layer, phases in enumerate(self._expert):
            profiled = self._profiled_load[layer]
            if profiled <= 0:
                continue
            ratio = float(self._predicted[layer] / profiled)
            for phase in phases:
                if phase in estimate:
                    estimate[phase] *= ratio
        return estimate

    def spread(self) -> dict[int, float]:
        """Relative uncertainty of each expert phase: the RMS error of its layer's load prediction."""
        if not self._predictions:
            return {}
        error = np.sqrt(self._square_error / self._predictions)
        return {phase: float(error[layer]) for layer, phases in enumerate(self._expert) for phase in phases}

    def observe(self, observation: Observation) -> None:
        self.durations.update(observation.durations)
        peak = observation.gpu_loads.max(axis=1)
        if self._predicted is not None:
            reference = np.where(self._predicted > 0, self._predicted, 1.0)
            self._square_error += np.where(self._moe, peak / reference - 1.0, 0.0) ** 2
            self._predictions += 1
        profiled_layers = {p.layer for p in self.facts.phases
                           if p.index in observation.durations and p.layer is not None}
        for layer in profiled_layers:
            self._profiled_load[layer] = peak[layer]
        if observation.durations:
            self._first = False
        if self.options.predictor == "trend" and self._previous_load is not None:
            predicted = np.maximum(peak + (peak - self._previous_load), 0.0)
        else:
            predicted = peak
        self._previous_load = peak
        self._predicted = predicted
        if not self.options.speculative:
            self._pending = set(range(self.facts.layers))
            return
        reference = np.where(self._profiled_load > 0, self._profiled_load, 1.0)
        change = np.where(self._moe, np.abs(predicted / reference - 1.0), 0.0)
        self._pending = {int(layer) for layer in np.flatnonzero(change > self.options.threshold)}
        self._triggered = set(self._pending)
        missing = {p.layer for p in self.facts.phases if p.layer is not None and p.index not in self.durations}
        self._pending |= {int(layer) for layer in missing if layer is not None}

    def stats(self) -> dict[str, Any]:
        return {"interval": self.interval, "profiled_phases": self.profiled_phases,
                "reprofiled_layers": self.reprofiled_layers, "speculative": self.options.speculative}
