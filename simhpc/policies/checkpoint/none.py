"""``none``: no checkpoint at all (the baseline every policy is compared to)."""

from __future__ import annotations

from simhpc.policies.checkpoint.base import CheckpointPolicy
from simhpc.registry import register
from simhpc.workloads.moe.plan import CheckpointPlan


@register("checkpoint", "none")
class NoCheckpoint(CheckpointPolicy):
    """Never checkpoints; a failure restarts training from the beginning."""

    def plan(self, iteration: int) -> CheckpointPlan:
        return CheckpointPlan(take=False, interval=0)

    def stats(self) -> dict[str, int]:
        return {"interval": 0}
