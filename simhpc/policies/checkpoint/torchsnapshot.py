"""``torchsnapshot``: stage the state in host memory, then write it to persistent storage.

TorchSnapshot's ``async_take`` copies the GPU state to host memory before returning (training
waits), then writes it to storage in the background. The next snapshot cannot start before the
previous write has finished, so checkpointing every iteration is bound by storage bandwidth.
"""

from __future__ import annotations

from simhpc.policies.checkpoint.base import CheckpointPolicy
from simhpc.registry import register
from simhpc.workloads.moe.plan import CheckpointPlan


@register("checkpoint", "torchsnapshot")
class TorchSnapshot(CheckpointPolicy):
    """Blocking GPU->host staging, asynchronous persist, one snapshot in flight."""

    needs_storage = True

    def plan(self, iteration: int) -> CheckpointPlan:
        if not self.due(iteration):
            return CheckpointPlan(take=False, interval=self.interval)
        return CheckpointPlan(take=True, target="storage", chunks=self.eager_chunks(), blocking=True,
                              interval=self.interval)
