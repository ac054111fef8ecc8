"""The simulation engine: clock, seeded RNG streams, trace recorder and counters."""

from simhpc.engine.recorder import TraceRecorder, Track
from simhpc.engine.simulation import Simulation

__all__ = ["Simulation", "TraceRecorder", "Track"]
