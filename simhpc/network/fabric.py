"""`Network`: point-to-point transfers over a topology, analytic or flow-level.

* ``analytic``: alpha-beta. A transfer takes the path latency plus ``nbytes`` over the path's
  bottleneck bandwidth, whatever else is on the links. The transfers of one batch
  (:meth:`Network.transfer_batch`: the messages a collective step issues at once, such as an
  all-to-all's) share the links at their ends: each message's drain time is the largest of its
  bytes over the bottleneck and, for its first link (the sender's injection link) and its last
  (the receiver's ejection link), the bytes the whole batch puts through that link over its
  bandwidth. So a batch ends after the path latency plus the busiest end link's bytes over its
  bandwidth, the alpha-beta cost of a direct all-to-all; draining every message at the constant
  rate ``bytes / drain time`` meets those times without any end link over capacity. Links
  inside the fabric (switch uplinks, spines) are not shared: transfers of different batches,
  and a batch's messages meeting on an inner link, do not slow each other; unless
  ``batch_links="paths"``: then a batch's messages share every link of their paths alike (the
  batch's bytes through a spine or a NIC over its bandwidth bound each message crossing it; the
  constant rates still fit every link), while different batches still do not. One SimPy timeout
  per transfer, except where nothing else changes the times of many: a ring whose ranks' start
  times are known when it starts (:mod:`simhpc.network.analytic_ring`) and an all-to-all's batch
  (:mod:`simhpc.network.analytic_batch`) are timed in advance, their transfers that end together
  one event.
* ``flow``: a transfer waits the path latency, then its bytes drain at the max-min fair rate
  of the moment, recomputed whenever a flow starts or ends (:mod:`simhpc.network.flowmodel`).

Both count the bytes each link carries and, unless ``record_links=False``, record one trace
track per link that carried traffic with its merged busy spans (analytic: the span of each
transfer from issue to last byte; flow: while the link's load is non-zero) and, in flow mode, a
utilisation counter per link.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import simpy

from simhpc.engine import Simulation
from simhpc.network.accounting import LinkAccounting
from simhpc.network.analytic_batch import BATCH_LINKS, batch_drains, end_links
from simhpc.network.flowmodel import ActiveFlow, FlowModel
from simhpc.network.topology import Route, Topology

MODES = ("analytic", "flow")


class Network:
    """Transfers between the nodes of a topology in simulated time.

    Args:
        sim: the simulation.
        topology: nodes, links and routes.
        mode: ``"analytic"`` (alpha-beta; a batch's messages share their end links, nothing
            else contends) or ``"flow"`` (max-min fair sharing of every link).
        record_links: record link busy spans and utilisation counters in the trace.
        utilisation_counters: with ``record_links``, also the utilisation counters (flow mode; only
            the Chrome trace shows them: a run that writes none can skip them, its outputs the same).
        link_spans: with ``record_links``, keep every busy span (trace.json and timeline.png draw
            them); False keeps their count and time per link, all metrics.csv needs.
        compact_spans: with ``link_spans``, keep them in arrays, handed out as spans when read
            (a run drawing timeline.png but no trace.json: the figure reads a few links' rows).
        batch_links: analytic mode: the links a batch's messages share, ``"ends"`` (their first
            and last) or ``"paths"`` (all of them).
    """

    def __init__(
        self, sim: Simulation, topology: Topology, mode: str = "analytic", *, record_links: bool = True,
        utilisation_counters: bool = True, link_spans: bool = True, compact_spans: bool = False,
        batch_links: str = "ends",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"network mode must be one of {', '.join(MODES)}, got {mode!r}")
        if batch_links not in BATCH_LINKS:
            raise ValueError(f"batch links must be one of {', '.join(BATCH_LINKS)}, got {batch_links!r}")
        self.sim = sim
        self.topology = topology
        self.mode = mode
        self.batch_links = batch_links
        """Analytic mode: which links the messages of a batch share (``ends`` or ``paths``)."""
        self.accounting = LinkAccounting(sim, topology, record_links, utilisation_counters, link_spans, compact_spans)
        self._flows = FlowModel(sim, self.accounting) if mode == "flow" else None
        self.transfers = 0
        """Transfers issued."""
        self.bytes_sent = 0.0
        """Bytes of all transfers issued."""

    def route(self, src: str, dst: str) -> Route:
        """The route from ``src`` to ``dst`` (cached by the topology)."""
        return self.topology.route(src, dst)

    def transfer(self, src: str, dst: str, nbytes: float, name: str = "") -> simpy.Event:
        """Move ``nbytes`` from ``src`` to ``dst``.

        Args:
            src: sending node.
            dst: receiving node (``src`` itself: completes at once).
            nbytes: bytes (>= 0; 0 costs the path latency only).
            name: a label for :meth:`active_flows`.

        Returns:
            An event that fires when the last byte arrives.
        """
        route = self.checked_route(src, dst, nbytes)
        self.transfers += 1
        self.bytes_sent += nbytes
        env = self.sim.env
        if not route.path:
            return env.event().succeed()
        if self._flows is None:
            return self._analytic(route, nbytes, route.latency + nbytes / route.bandwidth)
        if nbytes == 0:
            return env.timeout(route.latency)
        done = env.event()
        start = partial(self._flows.start, route, float(nbytes), done, (name, src, dst))
        if route.latency > 0:
            env.timeout(route.latency).callbacks.append(start)
        else:
            start()
        return done

    def transfer_batch(self, batch: Sequence[tuple[str, str, float]], name: str = "") -> list[simpy.Event]:
        """Move several messages at once: the transfers one collective step issues together.

        In flow mode each is a :meth:`transfer`. In analytic mode the messages share the links
        at their ends (see the module docstring): message ``m`` drains in
        ``max(bytes_m / bottleneck_m, L(first_m) / bw(first_m), L(last_m) / bw(last_m))``,
        where ``L(link)`` is the batch's bytes whose first or last link is ``link``; with
        :attr:`batch_links` ``"paths"``, ``L(link) / bw(link)`` over every link of its path, ``L``
        the batch's bytes crossing it. A batch of one message costs what :meth:`transfer` does.

        Args:
            batch: ``(src, dst, nbytes)`` per message, as :meth:`transfer` takes them.
            name: a label for :meth:`active_flows`.

        Returns:
            One event per message, in batch order, firing when its last byte arrives.
        """
        if self._flows is not None:
            return [self.transfer(src, dst, nbytes, name) for src, dst, nbytes in batch]
        routes = [self.checked_route(src, dst, nbytes) for src, dst, nbytes in batch]
        for _, _, nbytes in batch:
            self.transfers += 1
            self.bytes_sent += nbytes
        paths = [route.path if nbytes > 0 else () for route, (_, _, nbytes) in zip(routes, batch)]
        if self.batch_links == "paths":
            shared = (np.fromiter(itertools.chain.from_iterable(paths), dtype=np.int64),
                      np.repeat(np.arange(len(paths)), [len(path) for path in paths]))
        else:
            shared = end_links(np.array([path[0] if path else -1 for path in paths], dtype=np.int64),
                               np.array([path[-1] if path else -1 for path in paths], dtype=np.int64),
                               np.array([bool(path) for path in paths], dtype=bool))
        drains = batch_drains(np.array([nbytes for _, _, nbytes in batch], dtype=float),
                              np.array([route.bandwidth for route in routes]), *shared, self.accounting.capacity)
        env = self.sim.env
        return [self._analytic(route, nbytes, route.latency + drain) if route.path else env.event().succeed()
                for route, (_, _, nbytes), drain in zip(routes, batch, drains.tolist())]

    def checked_route(self, src: str, dst: str, nbytes: float) -> Route:
        """The route of a transfer of ``nbytes`` (checked: finite, >= 0) from ``src`` to ``dst``."""
        if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
            raise ValueError(f"transfer {src} -> {dst}: nbytes must be a finite number >= 0, got {nbytes!r}")
        return self.topology.route(src, dst)

    def _analytic(self, route: Route, nbytes: float, duration: float) -> simpy.Event:
        """An analytic transfer over a non-empty route: time it; its bytes count when it completes
        (as in flow mode: a run stopped mid-transfer does not count bytes the links never carried)."""
        env = self.sim.env
        done = env.timeout(duration)
        if nbytes > 0:
            path = route.path
            done.callbacks.append(lambda _: self.accounting.carried(path, nbytes))  # before any waiter's
            if self.accounting.record:
                self.accounting.busy(path, env.now, env.now + duration)
        return done

    def active_flows(self) -> list[ActiveFlow]:
        """Flows draining now, in start order (flow mode; empty in analytic mode)."""
        return [] if self._flows is None else self._flows.active()

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried by each link so far (of completed transfers), by link index."""
        return self.accounting.bytes

    def link_utilisation(self, makespan: float | None = None) -> np.ndarray:
        """Average utilisation of each link over ``[0, makespan]`` (default: now).

        In analytic mode transfers ignore each other on the fabric's inner links and across
        batches, so a link's figure above 1 shows contention the alpha-beta model did not
        charge for.
        """
        return self.accounting.utilisation(self.sim.now if makespan is None else makespan)

    def stats(self, top: int = 10) -> dict[str, Any]:
        """Summary for the run: transfers, bytes, and the ``top`` busiest links."""
        makespan = self.sim.now
        return {
            "mode": self.mode,
            "topology": self.topology.name,
            "transfers": self.transfers,
            "flows": self.transfers if self._flows is None else self._flows.flows_started,
            "bytes": self.bytes_sent,
            "link_bytes": float(self.accounting.bytes.sum()),
            "makespan_s": makespan,
            "busiest_links": self.accounting.busiest(makespan, top),
        }
