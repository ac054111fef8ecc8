"""``gemini``: in-memory replicas, chunks fitted into gaps profiled once (Wang et al., SOSP'23).

Gemini keeps checkpoints in the host memory of the local node and of peers (group placement),
and interleaves checkpoint traffic with training traffic: it times the iteration during the
first iterations, finds the idle gaps, and cuts the checkpoint into chunks that fill them,
sent through a small reserved GPU buffer. The plan is then kept: if the gaps move (MoE expert
loads drift), chunks land on busy links or spill past the iteration's end.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from simhpc.policies.checkpoint.base import CheckpointPolicy
from simhpc.policies.checkpoint.partition import gap_plan
from simhpc.policies.checkpoint.placement import replica_peers
from simhpc.registry import register
from simhpc.scenario.types import Number, PositiveInt, Strict
from simhpc.workloads.moe.plan import CheckpointPlan, Chunk, ClusterFacts, Observation


class GeminiOptions(Strict):
    """Options of ``gemini``."""

    profile_iterations: PositiveInt = 2
    """Leading iterations timed to find the gaps."""
    placement: Literal["group", "ring"] = "group"
    fill: Number = Field(1.0, gt=0, le=1)
    """Fraction of each profiled gap the chunks may fill (headroom for latency, pipelining)."""


@register("checkpoint", "gemini")
class Gemini(CheckpointPolicy):
    """Static gap profile from the first iterations; one chunk plan for the whole run."""

    Options = GeminiOptions

    def __init__(self, facts: ClusterFacts, options: Any = None) -> None:
        super().__init__(facts, options)
        self.peers = replica_peers(facts.nodes, facts.replicas, self.options.placement)
        self._sums: dict[int, float] = {}
        self._profiled = 0
        self._chunks: tuple[Chunk, ...] | None = None
        self.profiled_phases = 0

    def observe(self, observation: Observation) -> None:
        if not observation.durations:
            return
        for phase, seconds in observation.durations.items():
            self._sums[phase] = self._sums.get(phase, 0.0) + seconds
        self._profiled += 1
        if self._profiled == self.options.profile_iterations:
            mean = {phase: total / self._profiled for phase, total in self._sums.items()}
            self._chunks = gap_plan(self.facts, mean, len(self.peers[0]) if self.peers else 0, self.options.fill)

    def plan(self, iteration: int) -> CheckpointPlan:
        # nothing to fit into the gaps: no phase is worth timing
        profiling = self._profiled < self.options.profile_iterations and self.facts.state_bytes > 0
        profile = frozenset(p.index for p in self.facts.phases) if profiling else frozenset()
        if profiling:
            self.profiled_phases += len(profile)
        if not self.due(iteration):
            return CheckpointPlan(take=False, profile=profile, peers=self.peers, interval=self.interval)
        chunks = self._chunks if self._chunks is not None else self.eager_chunks()
        if self.facts.state_bytes <= 0:
            chunks = ()
        return CheckpointPlan(take=True, target="memory", chunks=chunks, profile=profile, peers=self.peers,
                              interval=self.interval)

    def stats(self) -> dict[str, Any]:
        return {"interval": self.interval, "profiled_phases": self.profiled_phases,
                "profiled_iterations": self._profiled}
