"""Blocking point-to-point communication: senders that wait for their sends.

By default (``overlapped``) a transfer leaves when its producer ends and a copy engine moves the
bytes while both devices compute on, as with non-blocking NCCL send/receive that only the
consumer waits for. Frameworks often wait on the sending side too:

* ``blocking``: the sender computes again only once its send has arrived. Megatron-LM passes
  activations and gradients with batched send/receive pairs (``send_forward_recv_backward`` and
  the like) and waits for them before the next op; with every receive posted ahead, the transfer
  starts when its producer ends, and its time sits on the sender's time line as well as the
  receiver's.
* ``rendezvous``: also, a transfer starts only once its receiver has posted the receive, which it
  does, with the sends of its own previous op, when that op ends (NCCL send/receive pairs issued
  op by op, each side in its own order; NCCL's buffers let a message smaller than they are go
  ahead of its receive, so this is the rule for large activations). A send then waits for its
  receiver to reach the op before the one that consumes it, and a plan can deadlock that would
  run overlapped: device 0 running F0 then F1 of a stage and device 1 running F1 then F0 of the
  next wait for each other forever (:func:`blocking_order` finds it). Megatron's interleaved
  schedule posts its receives ahead for that reason.

:func:`~simhpc.policies.pipeline.timing.plan_timing` times a plan under these rules; the SimPy
engine runs them.
"""

from __future__ import annotations

from typing import Literal

from simhpc.policies.pipeline.plan import BACKWARD, FORWARD, Op, PipelinePlan, missing_input, ordered

P2P = Literal["overlapped", "blocking", "rendezvous"]
"""How point-to-point transfers meet the devices' compute (see the module's docstring)."""


def consumer_of(op: Op, stages: int) -> Op | None:
    """The op of the next (forward) or previous (backward) stage that reads ``op``'s output."""
    kind, j, s = op
    if kind == FORWARD and s + 1 < stages:
        return Op(FORWARD, j, s + 1)
    if kind == BACKWARD and s > 0:
        return Op(BACKWARD, j, s - 1)
    return None


class BlockingSends:
    """Who waits for whom when the senders of ``plan`` wait for their sends.

    Attributes:
        rendezvous: whether a transfer also waits for its receiver to post the receive.
        previous: each op's predecessor in its device's list (absent for a device's first op).
        remote_consumer: each op whose output goes to another device -> the op that reads it.
    """

    def __init__(self, plan: PipelinePlan, rendezvous: bool) -> None:
        self.rendezvous = rendezvous
        self.previous: dict[Op, Op] = {op: ops[i - 1] for ops in plan.ops for i, op in enumerate(ops) if i}
        self.remote_consumer: dict[Op, Op] = {}
        for ops in plan.ops:
            for op in ops:
                consumer = consumer_of(op, plan.stages)
                if consumer is not None and plan.device_of(consumer) != plan.device_of(op):
                    self.remote_consumer[op] = consumer

    def posted_after(self, op: Op) -> Op | None:
        """With a rendezvous, the op whose end posts the receive of ``op``'s output: the receiver's op
        before the consumer (None: none to wait for, ``op`` sends nothing or the consumer is its
        device's first op, whose receive is posted from the start)."""
        consumer = self.remote_consumer.get(op)
        return self.previous.get(consumer) if self.rendezvous and consumer is not None else None


def waiting_senders(plan: PipelinePlan, p2p: P2P) -> BlockingSends | None:
    """Who waits for whom in ``plan`` under ``p2p`` (None: overlapped, no sender waits)."""
    return None if p2p == "overlapped" else BlockingSends(plan, rendezvous=p2p == "rendezvous")


def blocking_order(plan: PipelinePlan, sends: BlockingSends) -> list[Op]:
    """All ops of ``plan`` in an order that respects dependencies, device lists and waiting senders:
    an op comes after its inputs and after the op that posts the receive of its device's last send.

    Raises:
        PlanError: if the plan deadlocks.
    """
    ops, stages = plan.ops, plan.stages

    def waits_on(device: int, index: int, done: set[Op]) -> Op | None:
        missing = missing_input(ops[device][index], done, stages)
        if missing is None and index:
            posted = sends.posted_after(ops[device][index - 1])
            if posted is not None and posted not in done:
                return posted
        return missing

    return ordered(plan, waits_on, "deadlock with rendezvous point-to-point communication (each send waits "
                                    "for its receiver to post the receive as the op before the consumer ends)")
