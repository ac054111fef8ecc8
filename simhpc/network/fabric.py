"""`Network`: point-to-point transfers over a topology, analytic or flow-level.

* ``analytic``: alpha-beta. A transfer takes the path latency plus ``nbytes`` over the path's
  bottleneck bandwidth, whatever else is on the links. One SimPy timeout per transfer.
* ``flow``: a transfer waits the path latency, then its bytes drain at the max-min fair rate
  of the moment, recomputed whenever a flow starts or ends (:mod:`simhpc.network.flowmodel`).

Both count the bytes each link carries and, unless ``record_links=False``, record one trace
track per link that carried traffic with its merged busy spans (analytic: the span of each
transfer from issue to last byte; flow: while the link's load is non-zero) and, in flow mode, a
utilisation counter per link.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np
import simpy

from simhpc.engine import Simulation
from simhpc.network.accounting import LinkAccounting
from simhpc.network.flowmodel import ActiveFlow, FlowModel
from simhpc.network.topology import Route, Topology

MODES = ("analytic", "flow")


class Network:
    """Transfers between the nodes of a topology in simulated time.

    Args:
        sim: the simulation.
        topology: nodes, links and routes.
        mode: ``"analytic"`` (alpha-beta, no contention) or ``"flow"`` (max-min fair sharing).
        record_links: record link busy spans and utilisation counters in the trace.
    """

    def __init__(
        self, sim: Simulation, topology: Topology, mode: str = "analytic", *, record_links: bool = True
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"network mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.sim = sim
        self.topology = topology
        self.mode = mode
        self.accounting = LinkAccounting(sim, topology, record_links)
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
        if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
            raise ValueError(f"transfer {src} -> {dst}: nbytes must be a finite number >= 0, got {nbytes!r}")
        route = self.topology.route(src, dst)
        env = self.sim.env
        self.transfers += 1
        self.bytes_sent += nbytes
        if not route.path:
            return env.event().succeed()
        if self._flows is None:
            duration = route.latency + nbytes / route.bandwidth
            if nbytes > 0:
                self.accounting.carried(route.path, nbytes)
                if self.accounting.record:
                    self.accounting.busy(route.path, env.now, env.now + duration)
            return env.timeout(duration)
        if nbytes == 0:
            return env.timeout(route.latency)
        done = env.event()
        start = partial(self._flows.start, route, float(nbytes), done, (name, src, dst))
        if route.latency > 0:
            env.timeout(route.latency).callbacks.append(start)
        else:
            start()
        return done

    def active_flows(self) -> list[ActiveFlow]:
        """Flows draining now, in start order (flow mode; empty in analytic mode)."""
        return [] if self._flows is None else self._flows.active()

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried by each link so far (flow mode: of completed flows), by link index."""
        return self.accounting.bytes

    def link_utilisation(self, makespan: float | None = None) -> np.ndarray:
        """Average utilisation of each link over ``[0, makespan]`` (default: now).

        In analytic mode transfers ignore each other, so a link's figure above 1 shows
        contention the alpha-beta model did not charge for.
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
