"""Stage costs: a model profile cut into pipeline stages on one GPU type."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from simhpc.models import LayerCosts


@dataclass(frozen=True)
class StageCosts:
    """Per-stage figures for one micro-batch (seconds, bytes); index = stage.

    Attributes:
        forward_s: forward pass of the stage's layers.
        backward_s: backward pass (input and weight gradients).
        state_bytes: weights, gradients and optimizer state of the stage.
        grad_bytes: the stage's gradients (exchanged between replicas of bidirectional plans).
        stash_bytes: activations kept from forward to backward.
        boundary_bytes: bytes sent to the next stage (and gradient bytes sent back); the last
            entry is 0.
        layers: layer names per stage.
    """

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    state_bytes: tuple[float, ...]
    grad_bytes: tuple[float, ...]
    stash_bytes: tuple[float, ...]
    boundary_bytes: tuple[float, ...]
    layers: tuple[tuple[str, ...], ...] = ()

    @property
    def stages(self) -> int:
        return len(self.forward_s)

    @classmethod
    def uniform(cls, stages: int, forward: float = 1.0, backward: float = 2.0,
                boundary: float = 0.0, stash: float = 0.0, state: float = 0.0) -> StageCosts:
        """Identical stages (for the analytic bubble formulas)."""
        return cls(forward_s=(forward,) * stages, backward_s=(backward,) * stages,
                   state_bytes=(state,) * stages, grad_bytes=(0.0,) * stages, stash_bytes=(stash,) * stages,
                   boundary_bytes=(boundary,) * (stages - 1) + (0.0,))


def stage_costs(costs: LayerCosts, bounds: tuple[int, ...], bytes_per_param: float,
                grad_bytes_per_param: float) -> StageCosts:
    """Sum per-layer figures over the stages ``bounds[i]:bounds[i+1]``."""

    def sums(values: np.ndarray) -> tuple[float, ...]:
        return tuple(float(values[a:b].sum()) for a, b in pairwise(bounds))

    boundary = (*(float(costs.boundary_bytes[b - 1]) for b in bounds[1:-1]), 0.0)
    params = sums(costs.params.astype(float))
    return StageCosts(
        forward_s=sums(costs.forward_s),
        backward_s=sums(costs.backward_s),
        state_bytes=tuple(p * bytes_per_param for p in params),
        grad_bytes=tuple(p * grad_bytes_per_param for p in params),
        stash_bytes=sums(costs.stash_bytes),
        boundary_bytes=boundary,
        layers=tuple(costs.names[a:b] for a, b in pairwise(bounds)),
    )
