"""Stage costs: a model profile cut into pipeline stages on one GPU type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from simhpc.models import LayerCosts
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD


@dataclass(frozen=True)
class StageCosts:
    """Per-stage figures for one micro-batch (seconds, bytes); index = stage.

    Attributes:
        forward_s: forward pass of the stage's layers.
        backward_s: backward pass (input and weight gradients together).
        state_bytes: weights, gradients and optimizer state of the stage.
        grad_bytes: the stage's gradients (exchanged between replicas of bidirectional plans).
        stash_bytes: activations kept from forward to backward (with recomputation, the stage's
            input only).
        boundary_bytes: bytes sent to the next stage (and gradient bytes sent back); the last
            entry is 0.
        layers: layer names per stage.
        weight_grad_s: the weight-gradient part of ``backward_s`` (the ``W`` op of plans that
            split the backward; the ``B`` op takes the rest, :attr:`input_grad_s`). Empty when
            unknown: such costs run only plans that do not split the backward.
        recompute_bytes: with activation recomputation, the activations each stage's backward
            rebuilds (what its ``stash_bytes`` would be without it; 0 for a stage that does not
            recompute), held from the backward's start until the stage's last pass of that
            micro-batch ends; empty where no stage recomputes.
    """

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    state_bytes: tuple[float, ...]
    grad_bytes: tuple[float, ...]
    stash_bytes: tuple[float, ...]
    boundary_bytes: tuple[float, ...]
    layers: tuple[tuple[str, ...], ...] = ()
    weight_grad_s: tuple[float, ...] = ()
    recompute_bytes: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.weight_grad_s and (len(self.weight_grad_s) != len(self.backward_s) or any(
                not 0.0 <= w <= b * (1 + 1e-9) for w, b in zip(self.weight_grad_s, self.backward_s))):
            raise ValueError("weight_grad_s needs one entry per stage, each within 0..backward_s")

    @property
    def stages(self) -> int:
        return len(self.forward_s)

    def allocated_by(self, kind: str, stage: int) -> float:
        """Activation bytes an op allocates when it starts: a forward its stash, a recomputing
        backward the activations it rebuilds, any other op nothing."""
        if kind == FORWARD:
            return self.stash_bytes[stage]
        return self.recompute_bytes[stage] if kind == BACKWARD and self.recompute_bytes else 0.0

    def released(self, stage: int) -> float:
        """Activation bytes the stage's last pass of a micro-batch frees: its stash and any rebuild."""
        return self.stash_bytes[stage] + (self.recompute_bytes[stage] if self.recompute_bytes else 0.0)

    @property
    def input_grad_s(self) -> tuple[float, ...]:
        """The input-gradient part of the backward (the ``B`` op of split-backward plans)."""
        if not self.weight_grad_s:
            raise ValueError("stage costs without weight_grad_s cannot split the backward")
        return tuple(max(b - w, 0.0) for b, w in zip(self.backward_s, self.weight_grad_s))

    @classmethod
    def uniform(cls, stages: int, forward: float = 1.0, backward: float = 2.0,
                boundary: float = 0.0, stash: float = 0.0, state: float = 0.0,
                weight_grad: float | None = None) -> StageCosts:
        """Identical stages (for the analytic bubble formulas).

        ``weight_grad`` is the weight-gradient part of ``backward`` (default: half of it, as in a
        matmul layer, whose input- and weight-gradient GEMMs have the same FLOPs).
        """
        weight = backward / 2 if weight_grad is None else weight_grad
        return cls(forward_s=(forward,) * stages, backward_s=(backward,) * stages,
                   state_bytes=(state,) * stages, grad_bytes=(0.0,) * stages, stash_bytes=(stash,) * stages,
                   boundary_bytes=(boundary,) * (stages - 1) + (0.0,), weight_grad_s=(weight,) * stages)


def stage_costs(costs: LayerCosts, bounds: tuple[int, ...], bytes_per_param: float,
                grad_bytes_per_param: float, recompute: bool | Sequence[bool] = False) -> StageCosts:
    """Sum per-layer figures over the stages ``bounds[i]:bounds[i+1]``.

    The weight-gradient time of a stage is the summed duration of its layers' weight-gradient
    kernels (``Layer.backward_weight``: the GEMMs ``dW = X^T dY`` of the weight layers, the
    embedding's gradient scatter); the input-gradient kernels (``dX = dY W^T``, the gradients of
    activation-activation GEMMs and of elementwise layers) make the rest of the backward.

    A stage that recomputes (``recompute``: every stage, or a flag per stage) keeps only its input
    from forward to backward (the activation the previous stage sent; none for the first stage,
    whose input batch is not counted either way), and its backward first reruns its forward.
    """

    def sums(values: np.ndarray) -> tuple[float, ...]:
        return tuple(float(values[a:b].sum()) for a, b in pairwise(bounds))

    boundary = (*(float(costs.boundary_bytes[b - 1]) for b in bounds[1:-1]), 0.0)
    params = sums(costs.params.astype(float))
    forward, stash, inputs = sums(costs.forward_s), sums(costs.stash_bytes), (0.0, *boundary[:-1])
    flags = [recompute] * len(forward) if isinstance(recompute, bool) else list(recompute)
    if len(flags) != len(forward):
        raise ValueError(f"recompute: {len(flags)} flags for {len(forward)} stages")
    return StageCosts(
        forward_s=forward,
        backward_s=tuple(b + f if again else b for b, f, again in zip(sums(costs.backward_s), forward, flags)),
        state_bytes=tuple(p * bytes_per_param for p in params),
        grad_bytes=tuple(p * grad_bytes_per_param for p in params),
        stash_bytes=tuple(i if again else x for i, x, again in zip(inputs, stash, flags)),
        boundary_bytes=boundary,
        layers=tuple(costs.names[a:b] for a, b in pairwise(bounds)),
        weight_grad_s=sums(costs.backward_weight_s),
        recompute_bytes=tuple(x if again else 0.0 for x, again in zip(stash, flags)) if any(flags) else (),
    )
