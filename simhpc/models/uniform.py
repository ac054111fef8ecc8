"""A synthetic model of identical layers with given times: the analytic pipeline formulas end to end.

The named models' layer times come from their kernels and the cost model; a ``uniform`` model's
come from the scenario (``workload.model: {kind: uniform, layers: 32, forward: 1 ms, backward:
2 ms}``), the same on any GPU. Cut into a number of stages that divides ``layers`` it gives
identical stages, so with free GPU-GPU links and no per-op overhead a schedule's bubble fraction
is its textbook formula ((p-1)/(m+p-1) for GPipe and 1F1B, ...), and a what-if study can set a
stage's work directly.
"""

from __future__ import annotations

import numpy as np

from simhpc.models.profile import Layer, LayerCosts, ModelProfile


def uniform_model(layers: int, micro_batch: int, dtype: str, *, forward_s: float, backward_s: float,
                  weight_grad_s: float, params: int = 0, stash_bytes: float = 0.0,
                  boundary_bytes: float = 0.0) -> ModelProfile:
    """``layers`` identical layers, each with the given times and bytes per micro-batch.

    ``weight_grad_s`` is the weight-gradient part of ``backward_s`` (the ``W`` op of split-backward
    schedules such as ZB-H1).
    """
    if not 0.0 <= weight_grad_s <= backward_s:
        raise ValueError(f"weight_grad ({weight_grad_s} s) must be within 0..backward ({backward_s} s)")
    names = tuple(f"layer{index}" for index in range(layers))
    units = tuple(Layer(name, (), (), (), params, stash_bytes, boundary_bytes) for name in names)
    costs = LayerCosts(names=names, forward_s=np.full(layers, forward_s),
                       backward_input_s=np.full(layers, backward_s - weight_grad_s),
                       backward_weight_s=np.full(layers, weight_grad_s),
                       params=np.full(layers, params, dtype=np.int64), stash_bytes=np.full(layers, stash_bytes),
                       boundary_bytes=np.full(layers, boundary_bytes))
    return ModelProfile("uniform", micro_batch, dtype, units,
                        description=f"{layers} identical layers", fixed_costs=costs)
