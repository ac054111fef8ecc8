"""Cutting a model's layers into contiguous pipeline stages.

``balanced_partition`` minimises the slowest stage; ``smoothest_partition`` keeps that slowest
stage and makes the others as even as they can be. A stage's cost is the sum of its layers'
costs plus, optionally, the cost of the cut that ends it (``cut_costs[i]``: shipping the
activation after layer ``i`` forward and its gradient back, as if the send blocked the device);
without cut costs it is torchgpipe's balance-by-time. With ``overlap`` a stage costs the larger of
its layers' sum and its cut, PipeDream's objective: sends overlap compute, so a boundary's link is
a pipeline resource of its own. Where the boundaries join different pairs of devices (a pipeline
across nodes, a V-shaped map's turns on one device), ``cut_costs`` is a matrix: row ``b`` prices
the cut after each layer as boundary ``b`` (between stages ``b`` and ``b + 1``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate, pairwise

import numpy as np

_SLACK = 1 + 1e-12  # sums taken in another order differ in the last bits

CutCosts = Sequence[float] | Sequence[Sequence[float]] | np.ndarray
"""Per layer, the cost of a cut right after it: the same at every boundary (one row), or one row
per boundary (``stages - 1`` rows)."""


class _Stages:
    """Stage costs from prefix sums and cut costs."""

    def __init__(self, costs: Sequence[float], cut_costs: Sequence[float] | None) -> None:
        self.n = len(costs)
        self.prefix = [0.0, *accumulate(float(c) for c in costs)]
        self.cuts = [float(c) for c in cut_costs] if cut_costs is not None else [0.0] * self.n

    def cost(self, start: int, end: int) -> float:
        """Cost of the stage holding layers ``start:end``."""
        cut = self.cuts[end - 1] if end < self.n else 0.0
        return self.prefix[end] - self.prefix[start] + cut

    def greedy(self, cap: float) -> list[int] | None:
        """Fewest stages with no stage above ``cap``: each stage ends as late as it can.

        Optimal: a later start never makes the rest harder (layer costs are non-negative and a
        stage's cut cost depends only on where it ends). None if some layer cannot fit.
        """
        limit = cap * _SLACK
        bounds = [0]
        start = 0
        while start < self.n:
            best = None
            end = start + 1
            while end <= self.n and self.prefix[end] - self.prefix[start] <= limit:
                if self.cost(start, end) <= limit:
                    best = end
                end += 1
            if best is None:
                return None
            bounds.append(best)
            start = best
        return bounds


def balanced_partition(costs: Sequence[float], stages: int, cut_costs: CutCosts | None = None,
                       overlap: bool = False) -> tuple[int, ...]:
    """Contiguous cut of ``costs`` into ``stages`` non-empty stages minimising the costliest stage.

    Binary search over the candidate bottlenecks (every contiguous stage cost) with an optimal
    greedy feasibility check; if the optimum uses fewer stages than asked, the stages are split
    further where that raises the maximum least.

    Args:
        costs: per-layer costs (seconds), non-negative.
        stages: number of stages.
        cut_costs: per-layer cost of a cut right after that layer (default: free), or one row of
            those per boundary: then the cut comes from a dynamic program over where each stage
            ends (:func:`_min_max`).
        overlap: a stage costs the larger of its layers' sum and its cut, not their sum (also by
            the dynamic program).

    Returns:
        ``stages + 1`` boundaries: stage ``i`` holds layers ``bounds[i]:bounds[i+1]``.

    Raises:
        ValueError: if there are fewer layers than stages.
    """
    n = len(costs)
    if stages < 1:
        raise ValueError(f"need at least one stage, got {stages}")
    if n < stages:
        raise ValueError(f"cannot cut {n} layers into {stages} stages (at most one stage per layer)")
    if overlap or _per_boundary(cut_costs):
        return _min_max(_cost_matrices(costs, stages, cut_costs, overlap), stages)
    model = _Stages(costs, cut_costs)
    candidates = sorted({model.cost(i, j) for i in range(n) for j in range(i + 1, n + 1)})
    low, high = 0, len(candidates) - 1
    while low < high:
        middle = (low + high) // 2
        found = model.greedy(candidates[middle])
        if found is not None and len(found) - 1 <= stages:
            high = middle
        else:
            low = middle + 1
    bounds = model.greedy(candidates[low])
    assert bounds is not None
    while len(bounds) - 1 < stages:
        options = [(max(model.cost(bounds[i], cut), model.cost(cut, bounds[i + 1])), i, cut)
                   for i in range(len(bounds) - 1) for cut in range(bounds[i] + 1, bounds[i + 1])]
        _, i, cut = min(options)
        bounds.insert(i + 1, cut)
    return tuple(bounds)


def smoothest_partition(costs: Sequence[float], stages: int, cut_costs: CutCosts | None = None,
                        overlap: bool = False) -> tuple[int, ...]:
    """Of the cuts whose costliest stage is :func:`balanced_partition`'s, the most even one: the
    least sum of squared stage costs.

    :func:`balanced_partition` fixes only the costliest stage; the others come out as its greedy
    check and its splitting leave them. Cut into many stages, some of those are nearly empty
    (ResNet-152's 362 layers into 64 stages: the smallest 2.6 % of the mean), and the ``k``
    stages a device runs under PRT sum unevenly (the busiest device 12 % over the mean, 4 %
    here). Same arguments and result as :func:`balanced_partition`.
    """
    matrices = _cost_matrices(costs, stages, cut_costs, overlap)
    bounds = balanced_partition(costs, stages, cut_costs, overlap)
    worst = max(matrices(i)[a, b] for i, (a, b) in enumerate(pairwise(bounds)))
    return _best_path(matrices, stages, lambda best, cost: best[:, None] + np.where(cost <= worst * _SLACK,
                                                                                     cost * cost, np.inf))


def _per_boundary(cut_costs: CutCosts | None) -> bool:
    """Whether ``cut_costs`` gives each boundary its own row."""
    return cut_costs is not None and np.ndim(cut_costs) == 2


def _cost_matrices(costs: Sequence[float], stages: int, cut_costs: CutCosts | None,
                   overlap: bool = False) -> Callable[[int], np.ndarray]:
    """Stage ``i``'s cost holding layers ``start:end``, as a matrix ``[start, end]`` (infinite where
    ``end <= start``): the layers' sum plus the cut that ends it (with ``overlap``, the larger of
    the two), none after the last layer."""
    n = len(costs)
    prefix = np.asarray([0.0, *accumulate(float(c) for c in costs)])
    layers = prefix[None, :] - prefix[:, None]
    layers[np.tril_indices(n + 1)] = np.inf
    rows = np.zeros((1, n)) if cut_costs is None else np.asarray(cut_costs, dtype=float).reshape(-1, n)
    if len(rows) not in (1, stages - 1):
        raise ValueError(f"cut costs: {len(rows)} rows for {stages - 1} boundaries")

    def matrix(stage: int) -> np.ndarray:
        cost = layers.copy()
        cut = rows[min(stage, len(rows) - 1), None, :n - 1]  # no cut after the last layer
        cost[:, 1:n] = np.maximum(cost[:, 1:n], cut) if overlap else cost[:, 1:n] + cut
        return cost
    return matrix


def _best_path(matrices: Callable[[int], np.ndarray], stages: int,
               extend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[int, ...]:
    """The cut into ``stages`` stages that minimises an objective built stage by stage, by dynamic
    programming over where each stage ends: ``extend(best, cost)[start, end]`` is the objective of
    the first stages ending at ``start`` (``best[start]``) followed by one holding ``start:end``."""
    best = np.full(matrices(0).shape[0], np.inf)
    n = len(best) - 1
    best[0] = 0.0
    starts = []
    for i in range(stages):
        total = extend(best, matrices(i))
        start = np.argmin(total, axis=0)
        best = total[start, np.arange(n + 1)]
        starts.append(start)
    assert np.isfinite(best[n]), "no cut within the cap"
    bounds = [n]
    for start in reversed(starts):
        bounds.append(int(start[bounds[-1]]))
    return tuple(reversed(bounds))


def _min_max(matrices: Callable[[int], np.ndarray], stages: int) -> tuple[int, ...]:
    """The cut whose costliest stage is the cheapest (each stage priced by its own matrix)."""
    return _best_path(matrices, stages, lambda best, cost: np.maximum(best[:, None], cost))


def even_partition(layers: int, stages: int) -> tuple[int, ...]:
    """Equal layer counts per stage (the first ``layers mod stages`` stages get one more)."""
    if layers < stages:
        raise ValueError(f"cannot cut {layers} layers into {stages} stages (at most one stage per layer)")
    size, extra = divmod(layers, stages)
    bounds = [0]
    for i in range(stages):
        bounds.append(bounds[-1] + size + (1 if i < extra else 0))
    return tuple(bounds)
