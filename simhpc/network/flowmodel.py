"""The flow-level network model: bytes drain at max-min fair rates in simulated time.

Rates change only when a flow starts or ends. Changes at one simulated instant are batched:
the first marks the model dirty and schedules one zero-delay event, whose callback recomputes
the rates once for the instant. Finish times are kept in a numpy array (``inf`` for free
slots); a single pending timer fires at the earliest of them. When an earlier finish appears
a new timer is scheduled and the old one, recognised by its version, is ignored when it fires.
No SimPy event is scheduled per flow per rate change. (An array rather than a heap: a rate
update moves many finish times at once, which one vector assignment and one ``min`` handle
more cheaply than a heap push per flow and lazy deletion of the stale entries.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from simhpc.engine import Simulation
from simhpc.network.accounting import LinkAccounting
from simhpc.network.flows import FlowSolver
from simhpc.network.topology import Route

_DUE = 1e-12
"""Flows finishing within this relative distance of the timer's time complete with it."""


@dataclass(frozen=True)
class ActiveFlow:
    """A flow draining now (see :meth:`simhpc.network.Network.active_flows`)."""

    name: str
    src: str
    dst: str
    links: tuple[int, ...]
    rate: float
    """Bytes/s, as of the last rate update."""
    remaining: float
    """Bytes still to drain at the time of the query."""


class FlowModel:
    """Drains flows at max-min fair rates, completing each flow's event on its last byte.

    Args:
        sim: the simulation (clock and event queue).
        accounting: per-link byte counters and trace records.
    """

    def __init__(self, sim: Simulation, accounting: LinkAccounting) -> None:
        self.env = sim.env
        self.accounting = accounting
        self.solver = FlowSolver(accounting.topology.capacities)
        self.flows_started = 0
        size = self.solver.capacity
        self._remaining = np.zeros(size)
        self._since = np.zeros(size)
        self._rate = np.zeros(size)
        self._finish = np.full(size, math.inf)
        self._bytes = np.zeros(size)
        self._ids = np.zeros(size, dtype=np.int64)
        self._routes: list[Route | None] = [None] * size
        self._starting: list[tuple[int, int, float]] = []
        self._events: list[simpy.Event | None] = [None] * size
        self._names: list[tuple[str, str, str]] = [("", "", "")] * size
        self._resolve_pending = False
        self._timer_at = math.inf
        self._timer_version = 0

    def start(
        self,
        route: Route,
        nbytes: float,
        done: simpy.Event,
        label: tuple[str, str, str],
        _trigger: simpy.Event | None = None,
    ) -> None:
        """Start draining ``nbytes`` (> 0) over ``route`` now; ``done`` succeeds on the last byte.

        Args:
            route: the route (distinct links).
            nbytes: bytes to move.
            done: the event to succeed.
            label: (name, src, dst) for :meth:`active`.
            _trigger: the latency timeout that called this, when called back.
        """
        flow_id = self.flows_started
        self.flows_started += 1
        slot = self.solver.add(flow_id, route.links, check=False)
        if slot >= len(self._events):
            self._grow()
        self._routes[slot] = route
        self._events[slot] = done
        self._names[slot] = label
        self._starting.append((slot, flow_id, nbytes))
        self._mark_dirty()

    def active(self) -> list[ActiveFlow]:
        """The flows draining now, in the order they started (rates as of the last update)."""
        now = self.env.now
        slots = [slot for slot, event in enumerate(self._events) if event is not None]
        flows = []
        for slot in sorted(slots, key=lambda slot: int(self._ids[slot])):
            route = self._routes[slot]
            assert route is not None
            rate = float(self._rate[slot])
            remaining = float(self._remaining[slot]) - rate * (now - float(self._since[slot]))
            name, src, dst = self._names[slot]
            flows.append(ActiveFlow(name, src, dst, route.path, rate, max(remaining, 0.0)))
        return flows

    def _grow(self) -> None:
        extra = self.solver.capacity - self._finish.size
        self._remaining = np.concatenate([self._remaining, np.zeros(extra)])
        self._since = np.concatenate([self._since, np.zeros(extra)])
        self._rate = np.concatenate([self._rate, np.zeros(extra)])
        self._finish = np.concatenate([self._finish, np.full(extra, math.inf)])
        self._bytes = np.concatenate([self._bytes, np.zeros(extra)])
        self._ids = np.concatenate([self._ids, np.zeros(extra, dtype=np.int64)])
        self._routes += [None] * extra
        self._events += [None] * extra
        self._names += [("", "", "")] * extra

    def _mark_dirty(self) -> None:
        if not self._resolve_pending:
            self._resolve_pending = True
            self.env.timeout(0).callbacks.append(self._resolve)

    def _resolve(self, _event: simpy.Event) -> None:
        """Recompute the rates once for this instant and move the affected finish times."""
        self._resolve_pending = False
        now = self.env.now
        if self._starting:
            slots, ids, nbytes = (np.array(column) for column in zip(*self._starting))
            self._starting.clear()
            self._remaining[slots] = nbytes
            self._bytes[slots] = nbytes
            self._ids[slots] = ids
            self._since[slots] = now
            self._rate[slots] = 0.0
        changed, links = self.solver.update()
        if changed.size:
            old = self._rate[changed]
            remaining = self._remaining[changed] - old * (now - self._since[changed])
            np.maximum(remaining, 0.0, out=remaining)
            new = self.solver.rate_array[changed]
            self._remaining[changed] = remaining
            self._since[changed] = now
            self._rate[changed] = new
            self._finish[changed] = now + remaining / new
        if links.size and self.accounting.record:
            self.accounting.loads_changed(links, self.solver.link_load[links], now)
        self._schedule_timer()

    def _schedule_timer(self) -> None:
        earliest = float(self._finish.min())
        if earliest < self._timer_at:
            self._timer_at = earliest
            self._timer_version += 1
            timer = self.env.timeout(max(earliest - self.env.now, 0.0), self._timer_version)
            timer.callbacks.append(self._on_timer)

    def _on_timer(self, timer: simpy.Event) -> None:
        """Complete the flows due now; a timer superseded by an earlier one does nothing."""
        if timer.value != self._timer_version:
            return
        self._timer_at = math.inf
        now = self.env.now
        due = np.flatnonzero(self._finish <= now + _DUE * abs(now))
        if not due.size:
            self._schedule_timer()
            return
        due = due[np.argsort(self._ids[due], kind="stable")]
        self._finish[due] = math.inf
        self._rate[due] = 0.0
        accounting = self.accounting
        for slot, flow_id, nbytes in zip(due.tolist(), self._ids[due].tolist(), self._bytes[due].tolist()):
            self.solver.remove(flow_id)
            route, event = self._routes[slot], self._events[slot]
            assert route is not None and event is not None
            accounting.carried(route.path, nbytes)
            self._routes[slot] = None
            self._events[slot] = None
            event.succeed()
        self._mark_dirty()
