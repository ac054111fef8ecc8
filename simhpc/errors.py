"""Exceptions that carry user-facing messages."""

from __future__ import annotations


class SimhpcError(Exception):
    """Base class for errors simhpc reports to the user without a traceback."""


class ScenarioError(SimhpcError):
    """A scenario file (or an override) is invalid.

    The message reads ``FILE: field.path: message``.
    """

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.message = message
        where = f"{source}: {path}: " if path else f"{source}: "
        super().__init__(where + message)


class SimulatedOOM(SimhpcError):
    """A workload asked a simulated device for more memory than it has."""

    def __init__(self, device: str, requested: float, used: float, capacity: float, what: str):
        from simhpc.units import format_size

        self.device = device
        self.requested = requested
        self.used = used
        self.capacity = capacity
        self.what = what
        super().__init__(
            f"simulated out-of-memory on {device}: {what} needs {format_size(requested)}, "
            f"{format_size(used)} of {format_size(capacity)} already in use"
        )
