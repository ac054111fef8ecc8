"""A batch of messages timed in advance, for the analytic network mode.

An analytic batch (:meth:`~simhpc.network.fabric.Network.transfer_batch`: the messages one
collective step issues at once, such as an all-to-all's) knows when each message ends as soon as it
is issued: its path latency plus the largest of its bytes over its bottleneck and the batch's bytes
through its first and last links (or every link of its path, ``batch_links="paths"``) over their
bandwidths (:func:`batch_drains`). Nothing issued later changes that. So :class:`AnalyticBatch`
times a whole batch with numpy, and its messages that end at one time are one event: an all-to-all
among 64 ranks whose senders each send as much is 64 events at most rather than 4032.

The run records what the message-by-message batch would, to the bit but for the order of sums: the
network's transfer and byte counts when the batch is issued, each link's busy span from the issue
to a message's last byte, and its bytes when the message ends (a run stopped mid-batch counts what
it would). The routes between a group's ranks are arrays built once (:class:`PairRoutes`): the
topology is fixed once a network runs on it, as its link accounting assumes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import simpy

from simhpc.network.topology import Route

if TYPE_CHECKING:
    from simhpc.network.fabric import Network


BATCH_LINKS = ("ends", "paths")
"""Which links an analytic batch's messages share (:attr:`Network.batch_links
<simhpc.network.fabric.Network.batch_links>`): their first and last links, or every link of their paths."""


def end_links(first: np.ndarray, last: np.ndarray, carrying: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The links the ``carrying`` messages share under ``ends``: each one's first link, then its
    last where that is another; and which message each is of (message after message)."""
    ends = np.stack([first, np.where(last != first, last, -1)], axis=1)
    kept = carrying[:, None] & (ends >= 0)
    return ends[kept], np.nonzero(kept)[0]


def batch_drains(nbytes: np.ndarray, bottleneck: np.ndarray, links: np.ndarray, owner: np.ndarray,
                 capacity: np.ndarray) -> np.ndarray:
    """How long each message of an analytic batch takes to drain, after its path latency.

    The largest of its bytes over its bottleneck and, over each link it shares with the batch,
    ``L(link) / bw(link)``, where ``L(link)`` is the bytes of the batch's messages sharing the link,
    summed in the order given (message after message); 0 for a message sharing none (no bytes, or
    no path).

    Args:
        nbytes: bytes per message.
        bottleneck: its path's bottleneck bandwidth (bytes/s).
        links: the links shared, message after message (:func:`end_links`, or whole paths).
        owner: which message each of ``links`` is of.
        capacity: every link's bandwidth, by link index.
    """
    load = np.zeros(capacity.size)
    np.add.at(load, links, nbytes[owner])
    drain = np.zeros(nbytes.size)
    np.maximum.at(drain, owner, load[links] / capacity[links])
    sharing = np.zeros(nbytes.size, dtype=bool)
    sharing[owner] = True
    drain[sharing] = np.maximum(drain[sharing], nbytes[sharing] / bottleneck[sharing])
    return drain


class PairRoutes:
    """The routes between every ordered pair of ``ranks`` as arrays: pair ``i * n + j`` goes from
    rank ``i`` to rank ``j`` (an empty path where ``i == j``)."""

    def __init__(self, network: Network, ranks: Sequence[str]) -> None:
        routes: list[Route] = [network.route(src, dst) for src in ranks for dst in ranks]
        self.size = len(ranks)
        self.latency = np.array([route.latency for route in routes])
        self.bottleneck = np.array([route.bandwidth for route in routes])
        self.hops = np.array([len(route.path) for route in routes], dtype=np.int64)
        self.first = np.array([route.path[0] if route.path else -1 for route in routes], dtype=np.int64)
        self.last = np.array([route.path[-1] if route.path else -1 for route in routes], dtype=np.int64)
        self.offsets = np.zeros(len(routes) + 1, dtype=np.int64)
        np.cumsum(self.hops, out=self.offsets[1:])
        self.links = np.fromiter(itertools.chain.from_iterable(route.path for route in routes), dtype=np.int64,
                                 count=int(self.offsets[-1]))
        """Every pair's path, pair after pair (pair ``p``'s at ``offsets[p]:offsets[p + 1]``)."""

    def links_of(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links of the ``pairs``' paths, pair after pair, and which of ``pairs`` each is on."""
        counts = self.hops[pairs]
        owner = np.repeat(np.arange(pairs.size), counts)
        starts = np.repeat(self.offsets[pairs] - (np.cumsum(counts) - counts), counts)
        return self.links[starts + np.arange(owner.size)], owner


class AnalyticBatch:
    """Messages between a group's ranks issued now on an analytic network, timed in advance.

    Args:
        network: an analytic-mode network.
        routes: the routes between the group's ranks.
        sizes: ``n x n`` bytes from rank ``i`` to rank ``j``: a message where it is above zero
            (the diagonal included, over the empty path), in row-major order as the batch's.
        on_done: called with a rank's index when every message it sends or receives has ended;
            at once, before :meth:`start` returns, for a rank with none.
    """

    def __init__(self, network: Network, routes: PairRoutes, sizes: np.ndarray,
                 on_done: Callable[[int], None]) -> None:
        if network.mode != "analytic":
            raise ValueError(f"an analytic batch needs an analytic network, not a {network.mode!r} one")
        self.network = network
        self.routes = routes
        self.sizes = sizes
        self.on_done = on_done
        self._links = np.zeros(0, dtype=np.int64)
        """The links of the messages that carry bytes, ordered by when the message ends."""
        self._bytes = np.zeros(0)
        """The bytes each of ``_links`` carries."""
        self._ended_at: list[int] = []
        """Per distinct end time, how many of ``_links`` have ended by then."""
        self._ended = 0
        self._counted = 0

    def start(self) -> None:
        """Issue the messages now and schedule their ends."""
        network, routes, sim = self.network, self.routes, self.network.sim
        now = sim.now
        rows, cols = np.nonzero(self.sizes)
        nbytes = self.sizes[rows, cols].astype(float)
        pairs = rows * routes.size + cols
        network.transfers += int(pairs.size)
        network.bytes_sent = float(np.cumsum(np.r_[network.bytes_sent, nbytes])[-1])  # one after another
        first = routes.first[pairs]
        carrying = (nbytes > 0) & (first >= 0)
        issued = np.flatnonzero(carrying)
        path_links, path_owner = routes.links_of(pairs[issued])
        path_owner = issued[path_owner]
        shared = (path_links, path_owner) if network.batch_links == "paths" else end_links(
            first, routes.last[pairs], carrying)
        drain = batch_drains(nbytes, routes.bottleneck[pairs], *shared, network.accounting.capacity)
        end = now + (routes.latency[pairs] + drain)
        done = np.full(routes.size, -np.inf)
        np.maximum.at(done, rows, end)
        np.maximum.at(done, cols, end)
        if network.accounting.record and path_links.size:
            network.accounting.busy_from(now, path_links, end[path_owner])
        if pairs.size:
            by_end = np.argsort(end, kind="stable")
            ended = end[by_end]
            lasts = np.flatnonzero(np.r_[ended[1:] != ended[:-1], True])  # the last message at each time
            times = ended[lasts]
            counted = by_end[carrying[by_end]]
            self._links, owner = routes.links_of(pairs[counted])
            self._bytes = nbytes[counted][owner]
            self._ended_at = np.cumsum(np.where(carrying[by_end], routes.hops[pairs[by_end]], 0))[lasts].tolist()
            finishing = np.flatnonzero(done > -np.inf)
            which = np.searchsorted(times, done[finishing])  # each rank's done time is one of them
            bounds = np.cumsum(np.bincount(which, minlength=times.size))[:-1]
            groups = np.split(finishing[np.argsort(which, kind="stable")], bounds)
            for index, (time, ranks) in enumerate(zip(times.tolist(), groups)):
                sim.at(time).callbacks.append(partial(self._end, index, ranks.tolist()))
            if self._links.size:
                network.accounting.carried_later(self._count_bytes)
        for rank in np.flatnonzero(done == -np.inf).tolist():
            self.on_done(rank)

    def _count_bytes(self, carried: np.ndarray) -> None:
        """Add the bytes of the messages ended since the last call to ``carried`` (per link)."""
        if self._ended > self._counted:
            span = slice(self._counted, self._ended)
            np.add.at(carried, self._links[span], self._bytes[span])
            self._counted = self._ended

    def _end(self, index: int, ranks: list[int], _event: simpy.Event) -> None:
        """The messages ending at the ``index``-th end time have ended: count their bytes, and the
        ``ranks`` whose last message they were are done."""
        self._ended = self._ended_at[index]
        if index + 1 == len(self._ended_at) and self._links.size:
            self.network.accounting.carried_all(self._count_bytes)
        for rank in ranks:
            self.on_done(rank)
