"""``checkfreq``: snapshot and persist pipelined with training, with an adaptive interval.

CheckFreq (Mohan et al., FAST'21) splits a checkpoint into a *snapshot* (GPU -> host memory,
run in the background during the next iteration's forward and backward passes; the optimizer
step waits for it) and a *persist* (host -> storage, in the background). A snapshot starts only
after the previous persist is done. It profiles the iteration time and the checkpoint costs and
picks the smallest interval whose overhead stays under a bound.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from simhpc.policies.checkpoint.base import CheckpointPolicy
from simhpc.registry import register
from simhpc.scenario.types import Number, PositiveInt, Strict
from simhpc.workloads.moe.plan import CheckpointPlan, ClusterFacts, Observation


class CheckFreqOptions(Strict):
    """Options of ``checkfreq``."""

    adaptive: bool = True
    """Choose the interval from the profile (else use ``checkpoint.every``)."""
    max_overhead: Number = Field(0.035, gt=0, lt=1)
    """Overhead bound of the adaptive interval (CheckFreq's default, 3.5 %)."""
    profile_iterations: PositiveInt = 2
    """Iterations timed without checkpoints before the interval is chosen."""
    max_interval: PositiveInt = 1000


@register("checkpoint", "checkfreq")
class CheckFreq(CheckpointPolicy):
    """Background snapshot + persist; interval chosen once from profiled costs."""

    Options = CheckFreqOptions
    needs_storage = True

    def __init__(self, facts: ClusterFacts, options: Any = None) -> None:
        super().__init__(facts, options)
        self._times: list[float] = []
        self._chosen = not self.options.adaptive

    def observe(self, observation: Observation) -> None:
        if not self._chosen:
            self._times.append(observation.duration)

    def _choose(self) -> None:
        facts, opts = self.facts, self.options
        iteration = sum(self._times) / len(self._times)
        snapshot = facts.state_bytes / facts.pcie_rate
        persist = facts.gpus_per_node * facts.state_bytes / facts.storage_rate
        interval = opts.max_interval
        for k in range(max(1, facts.every), opts.max_interval + 1):
            stall = max(0.0, snapshot - iteration) + max(0.0, snapshot + persist - k * iteration)
            if stall <= opts.max_overhead * k * iteration:
                interval = k
                break
        self.interval = interval
        self._chosen = True

    def plan(self, iteration: int) -> CheckpointPlan:
        if not self._chosen:
            if len(self._times) < self.options.profile_iterations:
                return CheckpointPlan(take=False, interval=0)
            self._choose()
        if not self.due(iteration):
            return CheckpointPlan(take=False, interval=self.interval)
        return CheckpointPlan(take=True, target="storage", chunks=self.eager_chunks(), blocking=False,
                              interval=self.interval)

    def due(self, iteration: int) -> bool:
        return iteration >= 1 and iteration % self.interval == 0
