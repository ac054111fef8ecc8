"""Persistent storage as a bandwidth server: writes and reads queue and drain one at a time.

A request interrupted (a failure gave it up) leaves the queue or stops where it is. Written
versions occupy the device's capacity (a write that would not fit is a simulated out-of-memory of
``storage.<name>``) until a newer version is complete, or, half-written, until given up. A node-local
device (NVMe) gets one server per node; a shared file system (``shared: true``
in the catalog) one server for the whole cluster, so nodes writing at once share its
bandwidth. A request first pays the latency (requests in flight pay theirs at once), then
holds the server for its bytes at full bandwidth: a batch of requests issued together finishes at
latency + total bytes / bandwidth, as sharing the bandwidth fairly would, with one SimPy event per
request and stage. Storage
traffic does not cross the compute fabric modelled by the network (DGX-class nodes reach
their file system through separate storage NICs).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from simhpc.engine import Simulation
from simhpc.hardware.devices import MemoryAccount
from simhpc.hardware.specs import StorageSpec


class Storage:
    """One storage server with the spec's bandwidth and latency.

    Args:
        sim: the simulation.
        name: trace process of its track (``storage.<name>``).
        spec: bandwidth (bytes/s), latency (s).
    """

    def __init__(self, sim: Simulation, name: str, spec: StorageSpec) -> None:
        self.sim = sim
        self.spec = spec
        self.name = name
        self._resource = simpy.Resource(sim.env, capacity=1)
        self._track = sim.trace.track(f"storage.{name}", "io")
        self.bytes_written = 0.0
        self.bytes_read = 0.0
        self.space = MemoryAccount(sim, f"storage.{name}", spec.capacity)
        """Bytes of the checkpoint versions it holds, against its capacity."""
        self._held: dict[int, float] = {}
        """Version -> bytes of it stored here (written or being written)."""

    def _serve(self, op: str, nbytes: float, label: str) -> Generator[Any, Any, float]:
        """Pay the latency, queue, then hold the server for the request's bytes; an interrupt (a
        failure gave the write or the reload up) gives the server up at once, a started transfer's
        span ending there."""
        name = f"{op} {label}".strip()
        yield self.sim.timeout(self.spec.latency)
        with self._resource.request() as request:
            yield request
            start = self.sim.now
            try:
                yield self.sim.timeout(nbytes / self.spec.bandwidth)
            except simpy.Interrupt:
                self._track.span(f"{name} (abandoned)", start, self.sim.now, "storage")
                raise
            self._track.span(name, start, self.sim.now, "storage", {"bytes": nbytes})
        return self.sim.now

    def write(self, nbytes: float, version: int, label: str = "") -> Generator[Any, Any, float]:
        """Write ``nbytes`` of checkpoint ``version`` (``yield from``); returns the completion time.
        Its space is taken when the write is issued (raises SimulatedOOM if it does not fit)."""
        self.space.allocate(nbytes, f"checkpoint v{version} ({label or self.name})")
        self._held[version] = self._held.get(version, 0.0) + nbytes
        done = yield from self._serve("write", nbytes, label)
        self.bytes_written += nbytes
        return done

    def discard(self, version: int, nbytes: float) -> None:
        """Drop ``nbytes`` of ``version`` (a write given up, or the device lost)."""
        held = self._held.pop(version, 0.0)
        nbytes = min(nbytes, held)
        if held - nbytes > 0.0:
            self._held[version] = held - nbytes
        self.space.free(min(nbytes, self.space.used))

    def retire(self, older_than: int) -> None:
        """``older_than`` is complete: every older version stored here is deleted."""
        for version in [v for v in self._held if v < older_than]:
            self.discard(version, self._held[version])

    def wipe(self) -> None:
        """The device was lost with its node: it holds nothing."""
        for version in list(self._held):
            self.discard(version, self._held[version])

    def read(self, nbytes: float, label: str = "") -> Generator[Any, Any, float]:
        """Read ``nbytes`` (``yield from``); returns the completion time."""
        done = yield from self._serve("read", nbytes, label)
        self.bytes_read += nbytes
        return done
