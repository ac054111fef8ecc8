"""Where a traced op's output lands: the allocator's blocks, from a trace's memory events.

With ``profile_memory=True`` torch.profiler records every CPU allocation and free with its address
(:class:`~simhpc.trace.readers.MemoryEvent`). An op's output is the block of its size allocated
while the op ran; that block's previous life ended when it was last freed at that address. A
block freed moments before is still in cache; one freed long before is not, and writing it fetches
its lines from memory first.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from simhpc.trace.readers import MemoryEvent


class BlockHistory:
    """The allocations and frees of a trace (``events`` in time order, as ``Trace.memory`` keeps
    them), searchable by time."""

    def __init__(self, events: Sequence[MemoryEvent]) -> None:
        self._allocations = [e for e in events if e.size > 0]
        self._times = [e.time for e in self._allocations]
        self._frees: dict[int, list[float]] = {}
        for event in events:
            if event.size < 0:
                self._frees.setdefault(event.address, []).append(event.time)

    def __bool__(self) -> bool:
        return bool(self._allocations)

    def reused_since(self, start: float, end: float, size: int) -> float | None:
        """When the block that an op running from ``start`` to ``end`` allocated for ``size`` bytes
        was last freed; None when it allocated none of that size or the block's earlier free is
        not in the trace (a block fresh from the system, or freed before profiling began)."""
        low, high = bisect.bisect_left(self._times, start), bisect.bisect_right(self._times, end)
        block = next((e for e in self._allocations[low:high] if e.size == size), None)
        if block is None:
            return None
        frees = self._frees.get(block.address, [])
        before = bisect.bisect_left(frees, start)
        return frees[before - 1] if before else None
