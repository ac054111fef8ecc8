"""What a measured trace is read into: its ops, steps and memory events (:mod:`simhpc.trace.readers`
reads them; :mod:`simhpc.trace.step_markers` finds the steps of a trace that marks none)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simhpc.errors import SimhpcError

PROFILER_STEPS = "ProfilerStep"
OPTIMIZER_STEPS = "Optimizer.step"
REPEATED_RUNS = "repetition"
"""What marked a trace's steps (:attr:`Trace.steps_from`): ``ProfilerStep`` events, the ends of
``optimizer.step()`` calls, or repeated runs of its top-level ops."""
PYTHON_FRAMES = "python_function"
"""The category of the Python frames torch.profiler records with ``with_stack=True``."""
PROFILER_SPAN = "Trace"
"""The category of the profiler's own span over the whole capture (``PyTorch Profiler (0)``)."""


class TraceError(SimhpcError):
    """A trace file is missing, unreadable, or not a Chrome trace."""


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""torch.profiler categories of work that ran on a GPU (its kernels, copies and fills)."""


@dataclass(slots=True)
class OpRecord:
    """One timed op or span of a trace. Times are seconds from the trace's origin."""

    index: int
    name: str
    kind: str
    """``gemm``, ``conv``, ``elementwise``, ``reduction``, ``view``, ``group``, ``step`` or ``unknown``."""
    start: float
    duration: float
    track: str
    category: str = ""
    shapes: list[Any] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    concrete: list[Any] = field(default_factory=list)
    """torch's ``Concrete Inputs`` (scalars and int lists as strings)."""
    args: dict[str, Any] = field(default_factory=dict)
    parent: int | None = None
    depth: int = 0
    children: list[int] = field(default_factory=list)
    step: int | None = None
    self_time: float = 0.0

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class Step:
    """A profiler step (``ProfilerStep#N``)."""

    number: int
    start: float
    duration: float
    track: str


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One CPU allocation (``size`` > 0) or free (``size`` < 0): torch.profiler's ``[memory]``
    instant events, written with ``profile_memory=True``. Seconds from the trace's origin; bytes."""

    time: float
    address: int
    size: int


@dataclass
class Trace:
    """The ops of one trace file.

    Attributes:
        source: the file.
        format: ``torch.profiler`` or ``chrome``.
        ops: every complete event, in (track, start) order; ``ops[i].index == i``.
        steps: profiler steps in time order ([] if the trace has none).
        steps_from: what marked them: ``ProfilerStep`` events, or, in a trace without any (a loop
            profiled without a ``schedule``), the ends of its ``optimizer.step()`` calls
            (:func:`~simhpc.trace.step_markers.optimizer_steps`), else the repeated runs of its top-level ops
            (:func:`~simhpc.trace.step_markers.repeated_steps`, ``repetition``).
        metadata: the file's top-level keys other than ``traceEvents``.
        skipped: counts of events not read, by reason (never silently dropped).
        notes: counts of events read but suspect, by what is wrong with them (e.g. one that
            overlaps an event of its thread without nesting in it).
        memory: CPU allocations and frees ([] unless profiled with ``profile_memory=True``).
    """

    source: str
    format: str
    ops: list[OpRecord]
    steps: list[Step]
    metadata: dict[str, Any]
    skipped: dict[str, int]
    notes: dict[str, int] = field(default_factory=dict)
    memory: list[MemoryEvent] = field(default_factory=list)
    steps_from: str = PROFILER_STEPS

    @property
    def tracks(self) -> list[str]:
        """Track labels in first-appearance order."""
        return list(dict.fromkeys(op.track for op in self.ops))

    def span(self) -> float:
        """Seconds from the first op's start to the last op's end."""
        if not self.ops:
            return 0.0
        return max(op.end for op in self.ops) - min(op.start for op in self.ops)
