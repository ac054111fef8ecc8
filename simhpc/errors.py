"""Exceptions that carry user-facing messages.

Their ``args`` are their constructor arguments, so they survive being re-raised by SimPy
(``type(e)(*e.args)``) and pickled across process pools.
"""

from __future__ import annotations


class SimhpcError(Exception):
    """Base class for errors simhpc reports to the user without a traceback."""


class ScenarioError(SimhpcError):
    """A scenario file (or an override) is invalid. Reads ``FILE: field.path: message``."""

    def __init__(self, source: str, path: str, message: str) -> None:
        super().__init__(source, path, message)
        self.source = source
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.message}" if self.path else f"{self.source}: {self.message}"


class SimulatedOOM(SimhpcError):
    """A workload asked a simulated device for more memory than it has."""

    def __init__(self, device: str, requested: float, used: float, capacity: float, what: str) -> None:
        super().__init__(device, requested, used, capacity, what)
        self.device = device
        self.requested = requested
        self.used = used
        self.capacity = capacity
        self.what = what

    def __str__(self) -> str:
        from simhpc.units import format_size

        return (
            f"simulated out-of-memory on {self.device}: {self.what} needs {format_size(self.requested)}, "
            f"{format_size(self.used)} of {format_size(self.capacity)} already in use"
        )
