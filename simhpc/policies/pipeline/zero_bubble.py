"""ZB-H1, the memory-efficient zero-bubble schedule (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024).

The backward of a stage is split in two ops: ``B`` computes the input gradient (what the previous
stage waits for) and ``W`` the weight gradient (which nobody waits for within the iteration). ZB-H1
keeps 1F1B's warm-up and activation bound and defers ``W`` to fill the cooldown bubbles. Stage
``i`` of ``p`` (one per device) runs, with ``x`` the forward index of the steady triple
``(F_x, B_{x-(p-1-i)}, W_{x-(p-1)})``:

1. ``p-1-i`` warm-up forwards (1F1B's);
2. ``i`` pairs ``F, B`` with no ``W`` yet (the ``W`` passes start ``i`` micro-batches late);
3. steady triples ``F, B, W``;
4. ``p-1-i`` cooldown pairs ``B, W``, then the ``i`` deferred ``W``.

Every device thus holds at most ``p`` micro-batches in flight (from its forward to the end of its
``W``): the first stage's bound under 1F1B, which is the peak over all devices in both schedules.

Bubble: with ``m >= p`` micro-batches, no communication, uniform stages and ``W <= min(F, B)``,
the iteration takes ``m (F + B + W) + (p-1)(F + B - W)`` — the paper's ZB-H1 bubble of
``(p-1)(F + B - W)`` per device against 1F1B's ``(p-1)(F + B + W)``. With ``F = B = W`` that is
``(p-1)/(3m+p-1)`` of the iteration (``(p-1)/(3m)`` of the ideal compute), a third of 1F1B's
bubble time. See ``tests/test_zero_bubble.py``.
"""

from __future__ import annotations

from typing import Literal

from simhpc.policies.pipeline.base import PipelineSchedule
from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, WEIGHT, Op, PipelinePlan
from simhpc.registry import register
from simhpc.scenario.types import Strict


class ZeroBubbleH1Params(Strict):
    """ZB-H1: 1F1B with split backward; weight gradients deferred into the cooldown bubbles."""

    kind: Literal["zb-h1"]


def zb_h1_ops(devices: int, micro_batches: int, stage: int) -> tuple[Op, ...]:
    """The op list of stage (and device) ``stage`` in a ZB-H1 pipeline of depth ``devices``."""
    warmup = min(devices - 1 - stage, micro_batches)
    ops = [Op(FORWARD, j, stage) for j in range(warmup)]
    weights = 0
    for j in range(micro_batches):
        if j + warmup < micro_batches:
            ops.append(Op(FORWARD, j + warmup, stage))
        ops.append(Op(BACKWARD, j, stage))
        if j >= stage:  # W lags B by ``stage`` micro-batches
            ops.append(Op(WEIGHT, weights, stage))
            weights += 1
    ops += [Op(WEIGHT, j, stage) for j in range(weights, micro_batches)]
    return tuple(ops)


@register("pipeline", "zb-h1")
class ZeroBubbleH1(PipelineSchedule):
    """ZB-H1 (Qi et al. 2024): depth ``p``, split backward, 1F1B's peak activation memory,
    about a third of 1F1B's bubble."""

    Params = ZeroBubbleH1Params

    def stages(self, devices: int) -> int:
        return devices

    def plan(self, devices: int, micro_batches: int, backward_cost: float = 2.0) -> PipelinePlan:
        ops = tuple(zb_h1_ops(devices, micro_batches, d) for d in range(devices))
        plan = PipelinePlan("zb-h1", devices, devices, micro_batches, (tuple(range(devices)),),
                            (0,) * micro_batches, ops, split_backward=True)
        plan.validate()
        return plan
