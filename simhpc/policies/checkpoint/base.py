"""The checkpoint-policy interface: two hooks, ``plan`` before and ``observe`` after an iteration."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from simhpc.scenario.types import Strict
from simhpc.workloads.moe.plan import CheckpointPlan, Chunk, ClusterFacts, Observation


class NoOptions(Strict):
    """A policy without options."""


class CheckpointPolicy(ABC):
    """Decides, iteration by iteration, what the workload does with the model state.

    Subclasses set ``Options`` (a :class:`Strict` model of their ``checkpoint.options``) and
    are registered with ``@register("checkpoint", name)``.

    Args:
        facts: the machine and job, fixed for the run.
        options: validated ``checkpoint.options``.
    """

    Options: ClassVar[type[Strict]] = NoOptions
    needs_storage: ClassVar[bool] = False
    """Whether its plans write to persistent storage (the scenario must provide one)."""

    def __init__(self, facts: ClusterFacts, options: Any = None) -> None:
        self.facts = facts
        self.options = options if options is not None else self.Options()
        self.interval = facts.every

    @abstractmethod
    def plan(self, iteration: int) -> CheckpointPlan:
        """The plan for ``iteration`` (it checkpoints the state of optimizer step ``iteration``)."""

    def observe(self, observation: Observation) -> None:
        """Learn from a finished iteration (default: nothing)."""

    def due(self, iteration: int) -> bool:
        """Whether the state entering ``iteration`` is to be checkpointed (interval rule)."""
        return iteration >= 1 and iteration % self.interval == 0

    def stats(self) -> dict[str, Any]:
        """Policy-specific results for the summary (JSON-serialisable)."""
        return {"interval": self.interval}

    def eager_chunks(self) -> tuple[Chunk, ...]:
        """The whole state released at the first phase (no knowledge of the gaps)."""
        if self.facts.state_bytes <= 0:
            return ()
        return (Chunk(0, self.facts.state_bytes),)
