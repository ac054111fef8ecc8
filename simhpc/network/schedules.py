"""Message schedules of collectives, driven by transfer callbacks (no SimPy process per rank).

A schedule moves chunks between the ranks of a group. :meth:`start` tells it a rank has its
input; ``on_done(i)`` is called once rank ``i`` has sent and received everything. Schedules
chain by passing one's ``start`` as another's ``on_done`` (the phases of a hierarchical
all-reduce). Each rank sends one message at a time. A ring whose ranks all start at once
(:meth:`Ring.start_all`) is timed in advance on an analytic network.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import simpy

from simhpc.network.analytic_ring import AnalyticRing
from simhpc.network.fabric import Network

Done = Callable[[int], None]


class Ring:
    """A ring schedule of ``steps`` chunk transfers per rank.

    Rank ``i`` sends step ``k`` to ``i + 1`` once it has its input, has received step ``k - 1``
    from ``i - 1`` and has finished sending step ``k - 1``.

    Args:
        network: carries the transfers.
        ranks: endpoint names in ring order.
        steps: chunks each rank sends (and receives).
        chunk: bytes per chunk.
        name: transfer label.
        on_done: called with a rank's index when it has sent and received all ``steps``.
    """

    def __init__(
        self, network: Network, ranks: list[str], steps: int, chunk: float, name: str, on_done: Done
    ) -> None:
        self.network = network
        self.ranks = ranks
        self.steps = steps if len(ranks) > 1 else 0
        self.chunk = chunk
        self.name = name
        self.on_done = on_done
        size = len(ranks)
        self._ready = [False] * size
        self._sending = [False] * size
        self._sent = [0] * size
        self._received = [0] * size

    def start_all(self) -> None:
        """Every rank has its input now. On an analytic network the ring is timed in advance
        (:class:`~simhpc.network.analytic_ring.AnalyticRing`: the same times and records, a
        step's transfers that end together in one event)."""
        if self.network.mode == "analytic" and self.steps > 0:
            AnalyticRing(self.network, self.ranks, self.steps, self.chunk, self.on_done).start()
            return
        for i in range(len(self.ranks)):
            self.start(i)

    def start(self, i: int) -> None:
        """Rank ``i`` has its input."""
        self._ready[i] = True
        if self.steps == 0:
            self.on_done(i)
        else:
            self._advance(i)

    def _advance(self, i: int) -> None:
        k = self._sent[i]
        if self._ready[i] and not self._sending[i] and k < self.steps and self._received[i] >= k:
            self._sending[i] = True
            dst = (i + 1) % len(self.ranks)
            event = self.network.transfer(self.ranks[i], self.ranks[dst], self.chunk, self.name)
            event.callbacks.append(partial(self._arrived, i, dst))

    def _arrived(self, i: int, dst: int, _event: simpy.Event) -> None:
        self._sending[i] = False
        self._sent[i] += 1
        self._received[dst] += 1
        for rank in (dst, i) if dst != i else (i,):
            if self._sent[rank] == self._received[rank] == self.steps and self._ready[rank]:
                self.on_done(rank)
            else:
                self._advance(rank)


def _high_bit(v: int) -> int:
    """Position of the highest set bit of ``v`` (-1 for 0)."""
    return v.bit_length() - 1


def binomial_children(size: int) -> list[list[int]]:
    """Children of each rank of a binomial tree over ``size`` ranks, numbered from its root: rank
    ``v``'s are ``v + 2**k`` for ``h < k < ceil(log2 size)`` (``h``: ``v``'s highest set bit),
    nearest (largest subtree) first."""
    rounds = (size - 1).bit_length()
    return [[v + (1 << k) for k in range(_high_bit(v) + 1, rounds) if v + (1 << k) < size] for v in range(size)]


class BinomialTree:
    """A binomial tree rooted at ``root``: ``broadcast`` sends down, otherwise it reduces up.

    Relative to the root, rank ``v``'s parent is ``v - 2**h`` (``h`` its highest set bit) and
    its children are ``v + 2**k`` for ``h < k < ceil(log2 n)``. Broadcast: a rank forwards the
    full message to its children one at a time, nearest (largest subtree) first, once it has
    it. Reduce mirrors it: a rank takes its children's data one at a time, smallest subtree
    first, and sends up once it has its input and every child's data. Both take
    ``ceil(log2 n)`` rounds.

    Args:
        network: carries the transfers.
        ranks: endpoint names.
        root: index of the root in ``ranks``.
        nbytes: message size.
        broadcast: direction.
        name: transfer label.
        on_done: called with a rank's index when it has finished its part.
    """

    def __init__(
        self,
        network: Network,
        ranks: list[str],
        root: int,
        nbytes: float,
        broadcast: bool,
        name: str,
        on_done: Done,
    ) -> None:
        self.network = network
        self.ranks = ranks
        self.root = root
        self.nbytes = nbytes
        self.broadcast = broadcast
        self.name = name
        self.on_done = on_done
        size = len(ranks)
        self._children = binomial_children(size)
        self._expected = [len(children) - 1 for children in self._children]  # reduce: next child
        self._ready = [False] * size

    def _rank(self, v: int) -> int:
        return (v + self.root) % len(self.ranks)

    def _send(self, v: int, target: int) -> simpy.Event:
        src, dst = self.ranks[self._rank(v)], self.ranks[self._rank(target)]
        return self.network.transfer(src, dst, self.nbytes, self.name)

    def start(self, i: int) -> None:
        """Rank ``i`` has its input (broadcast: only the root's start matters)."""
        v = (i - self.root) % len(self.ranks)
        if self.broadcast:
            if v == 0:
                self._forward(0, 0)
        else:
            self._ready[v] = True
            self._reduce(v)

    def _forward(self, v: int, child: int, _event: simpy.Event | None = None) -> None:
        """Broadcast: ``v`` has the data; send to its ``child``-th child or finish."""
        children = self._children[v]
        if child == len(children):
            self.on_done(self._rank(v))
            return
        target = children[child]
        event = self._send(v, target)
        event.callbacks.append(partial(self._forward, v, child + 1))
        event.callbacks.append(partial(self._forward, target, 0))

    def _reduce(self, v: int) -> None:
        """Reduce: send ``v``'s partial result up once it is complete and its parent takes it."""
        if not self._ready[v] or self._expected[v] >= 0:
            return
        if v == 0:
            self.on_done(self._rank(0))
            return
        parent = v - (1 << _high_bit(v))
        expected = self._expected[parent]
        if expected < 0 or self._children[parent][expected] != v:
            return
        self._send(v, parent).callbacks.append(partial(self._reduced, v, parent))

    def _reduced(self, v: int, parent: int, _event: simpy.Event) -> None:
        self.on_done(self._rank(v))
        self._expected[parent] -= 1
        if self._expected[parent] >= 0:
            self._reduce(self._children[parent][self._expected[parent]])
        self._reduce(parent)
