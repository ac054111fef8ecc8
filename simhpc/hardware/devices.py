"""Runtime devices: what a simulated run does with the hardware.

A device owns its memory account (raising :class:`~simhpc.errors.SimulatedOOM` when a workload
exceeds capacity) and its streams (serial executors whose busy spans go to the trace).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from simhpc.engine import Simulation, Track
from simhpc.errors import SimulatedOOM


class MemoryAccount:
    """Bytes in use on one device, with its peak; allocation beyond capacity is an OOM.

    Each change is sampled as a trace counter (``memory``) on the device's process.
    """

    def __init__(self, sim: Simulation, device: str, capacity: float) -> None:
        self.sim = sim
        self.device = device
        self.capacity = capacity
        self.used = 0.0
        self.peak = 0.0
        self._series = sim.trace.counter(device, "memory")

    def allocate(self, nbytes: float, what: str) -> None:
        """Reserve ``nbytes`` for ``what``; raise SimulatedOOM if it does not fit."""
        if nbytes < 0:
            raise ValueError(f"negative allocation {nbytes} for {what}")
        if self.used + nbytes > self.capacity * (1 + 1e-12):
            raise SimulatedOOM(self.device, nbytes, self.used, self.capacity, what)
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        self._series.sample(self.sim.now, {"used_bytes": self.used})

    def free(self, nbytes: float) -> None:
        """Release ``nbytes``; memory in use never goes negative."""
        if nbytes > self.used * (1 + 1e-12) + 1e-6:
            raise ValueError(f"{self.device}: freeing {nbytes} bytes but only {self.used} in use")
        self.used = max(0.0, self.used - nbytes)
        self._series.sample(self.sim.now, {"used_bytes": self.used})


class Stream:
    """A serial executor (a CUDA stream, a CPU thread): one busy interval at a time."""

    def __init__(self, sim: Simulation, device: str, name: str) -> None:
        self.sim = sim
        self.track: Track = sim.trace.track(device, name)
        self._resource = simpy.Resource(sim.env, capacity=1)

    def run(
        self, name: str, duration: float, category: str = "", args: dict[str, Any] | None = None
    ) -> Generator[Any, Any, float]:
        """Occupy the stream for ``duration`` seconds (waiting for it first); returns the end time.

        Use as ``yield from stream.run("gemm", 1e-3)`` inside a SimPy process.
        """
        with self._resource.request() as request:
            yield request
            start = self.sim.now
            if duration > 0:
                yield self.sim.env.timeout(duration)
            self.track.span(name, start, self.sim.now, category, args)
        return self.sim.now


class Device:
    """A GPU or CPU instance in a simulated run: a name, a memory account and named streams."""

    def __init__(self, sim: Simulation, name: str, memory_capacity: float) -> None:
        self.sim = sim
        self.name = name
        self.memory = MemoryAccount(sim, name, memory_capacity)
        self._streams: dict[str, Stream] = {}

    def stream(self, name: str = "compute") -> Stream:
        """The stream ``name`` of this device, created on first use."""
        stream = self._streams.get(name)
        if stream is None:
            stream = Stream(self.sim, self.name, name)
            self._streams[name] = stream
        return stream
