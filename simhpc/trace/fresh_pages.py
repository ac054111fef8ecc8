"""Which pages a traced op writes first after the C library mapped them, from the trace's memory events.

With ``profile_memory=True`` torch.profiler records the address and size of every CPU allocation
and free (:class:`~simhpc.trace.readers.MemoryEvent`). Memory the process has used before is
still mapped; a page no allocation of the trace covered before was mapped afresh for this one,
and its first write takes a page fault (the kernel zeroes the page and maps it). A training loop
reuses its heap step after step, yet its heap keeps growing under the profiler: the profiler's
own records, kept until the trace is exported, take the holes that freed tensors leave, so some
tensors of every step land on new pages (capture.py's encoder layer on the Zen 4 guest: 14 336 new pages a
step in its memory events, 14 336 page faults a step counted by ``getrusage``, its steps 17 %
slower than unprofiled).

The rules:

- a block glibc's malloc mapped on its own (at least 128 KiB, starting :data:`MAPPED_OFFSETS`
  bytes into a page, on pages no earlier block covered, away from the heap's blocks) is fresh in
  every step, and its pages are unmapped again when it is freed;
- a heap page no earlier block of the trace covered is fresh if it lies above where the heap ended
  when the trace began (``validation/traces/capture.py`` records it, ``heap_end``: its process ran
  other captures before, whose memory the heap kept);
- in a trace that does not come from ``capture.py`` (a plain profiling script), such a page is
  fresh when first covered after the trace's first profiler step (pages first covered in that
  step may have served the steps before profiling began).

A block freed sooner than its fresh pages' faults would take is given no more of them than fit
in its life (``compare`` gives the calibrated cost of a fault): a batch norm's backward allocates
a block of its input's size and frees it unwritten microseconds later (in ``cnn224``'s captures,
the pages charged a step went from 125 446 to 110 726 against 111 025 page faults counted).

Heap memory glibc returns to the system (its trim with default settings) is not seen: the
re-grown heap's pages count as touched. The fault's cost goes to the op that first writes the
block (:class:`FirstWriters`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from simhpc.costs import kernels as k
from simhpc.costs.op_arguments import numel
from simhpc.costs.opnames import in_place
from simhpc.trace.fresh_memory import first_under, tensor_shapes
from simhpc.trace.readers import MemoryEvent, OpRecord, Trace, TraceError

PAGE_BYTES = 4096
"""The page size of the traced host (x86-64 and most AArch64 Linux)."""
MAPPED_ALONE_BYTES = 128 << 10
"""glibc's smallest mmap threshold: smaller blocks always come from the heap."""
HEAP_REACH = 1 << 30
"""A block this near a heap block seen before is a heap block too, whatever its place in its page:
the heap grows by ``brk`` next to the program's data, the blocks malloc maps lie in the mmap area,
terabytes away on 64-bit Linux."""
MAPPED_OFFSETS = (16, 64)
"""Where a block mapped on its own starts in its first page: after glibc's 16-byte chunk header,
or at the next 64-byte boundary when aligned as PyTorch's CPU allocator asks (``posix_memalign``)."""


class PageSet:
    """A set of page numbers kept as sorted, disjoint, non-adjacent half-open intervals."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def covered(self, first: int, end: int) -> int:
        """How many of the pages ``first`` to ``end - 1`` are in the set."""
        index = max(0, bisect.bisect_right(self._starts, first) - 1)
        count = 0
        while index < len(self._starts) and self._starts[index] < end:
            count += max(0, min(end, self._ends[index]) - max(first, self._starts[index]))
            index += 1
        return count

    def add(self, first: int, end: int) -> None:
        """Put pages ``first`` to ``end - 1`` in the set."""
        low = bisect.bisect_left(self._ends, first)
        high = bisect.bisect_right(self._starts, end)
        if low < high:
            first, end = min(first, self._starts[low]), max(end, self._ends[high - 1])
        self._starts[low:high], self._ends[low:high] = [first], [end]

    def remove(self, first: int, end: int) -> None:
        """Take pages ``first`` to ``end - 1`` out of the set."""
        low = bisect.bisect_right(self._ends, first)
        high = bisect.bisect_left(self._starts, end)
        starts, ends = [], []
        for start, stop in zip(self._starts[low:high], self._ends[low:high], strict=True):
            if start < first:
                starts.append(start)
                ends.append(first)
            if stop > end:
                starts.append(end)
                ends.append(stop)
        self._starts[low:high], self._ends[low:high] = starts, ends


def _pages(event: MemoryEvent) -> tuple[int, int]:
    return event.address // PAGE_BYTES, (event.address + event.size - 1) // PAGE_BYTES + 1


@dataclass(frozen=True)
class HeapRule:
    """What a trace says of its process's memory before it began (:func:`heap_rule`)."""

    warm_until: float = math.inf
    """Heap pages first covered before this time (seconds) may have been touched before."""
    heap_end: int = 0
    """Heap pages below this address were touched before."""
    mapped_from: int = MAPPED_ALONE_BYTES
    """The smallest block malloc maps on its own (its mmap threshold, where the trace records it)."""


def lifetimes(events: Sequence[MemoryEvent]) -> dict[int, float]:
    """Position in ``events`` (time order) of each allocation freed in them -> seconds it lived."""
    live: dict[int, int] = {}  # address -> position of the live block's allocation
    lived: dict[int, float] = {}
    for position, event in enumerate(events):
        if event.size > 0:
            live[event.address] = position
        elif event.address in live:
            allocated = live.pop(event.address)
            lived[allocated] = event.time - events[allocated].time
    return lived


def fresh_allocations(events: Sequence[MemoryEvent], rule: HeapRule, page_fault_s: float = 0.0,
                      unmapped: list[MemoryEvent] | None = None) -> Iterator[tuple[MemoryEvent, int]]:
    """Each allocation of ``events`` (time order) with the bytes of fresh pages it covers: those of
    blocks mapped on their own, and heap pages no earlier block covered, at or above
    ``rule.heap_end``, first covered at or after ``rule.warm_until``.

    With ``page_fault_s`` (what a page fault takes), a block freed sooner than its fresh pages'
    faults would take is given only the pages that fit in its life (a batch norm's backward frees
    a block of its input's size unwritten microseconds after allocating it), and the pages it was
    not given stay fresh for the blocks that cover them later. ``unmapped`` (a list, if given)
    collects the frees of the blocks mapped on their own, each with the bytes of the pages given
    to it: glibc unmaps them."""
    lived = lifetimes(events) if page_fault_s > 0 else {}
    heap_end_page = rule.heap_end // PAGE_BYTES
    heap = (rule.heap_end, rule.heap_end) if rule.heap_end else None  # the span of the heap blocks seen
    touched = PageSet()
    mapped: dict[int, tuple[int, int]] = {}  # address -> (size, pages given) of the live blocks mapped on their own
    for position, event in enumerate(events):
        if event.size < 0:
            size, given = mapped.pop(event.address, (0, 0))
            if size:
                touched.remove(*_pages(MemoryEvent(event.time, event.address, size)))
                if unmapped is not None:
                    unmapped.append(MemoryEvent(event.time, event.address, given * PAGE_BYTES))
            continue
        first, end = _pages(event)
        new = (end - first) - touched.covered(first, end)
        near_heap = heap is not None and heap[0] - HEAP_REACH <= event.address <= heap[1] + HEAP_REACH
        alone = (new == end - first and event.size >= rule.mapped_from and not near_heap
                 and event.address % PAGE_BYTES in MAPPED_OFFSETS)
        if not alone:
            heap = (min(heap[0], event.address), max(heap[1], event.address)) if heap else (event.address,) * 2
            low = max(first, heap_end_page)
            fresh_heap = new and event.time >= rule.warm_until and low < end
            new = (end - low) - touched.covered(low, end) if fresh_heap else 0
        if position in lived and new * page_fault_s > lived[position]:
            new = int(lived[position] / page_fault_s)  # its life was too short to write them all
        else:
            touched.add(first, end)
        if alone:
            mapped[event.address] = (event.size, new)
        if new:
            yield event, new * PAGE_BYTES


def _writes_block(op: OpRecord, kernel: k.Kernel, nbytes: int) -> bool:
    """Whether ``op`` involves a tensor of ``nbytes`` (in its kernel's type)."""
    size = k.dtype_bytes(kernel.dtype)
    return any(numel(shape) * size == nbytes for shape in tensor_shapes(op))


class FirstWriters:
    """Finds the op that first writes a block allocated at some time in a trace (``kernels``: op
    index -> the kernel it carries)."""

    LOOK_AHEAD = 8
    """Ops carrying a kernel searched after an allocation made with no such op running."""

    def __init__(self, trace: Trace, kernels: dict[int, k.Kernel]) -> None:
        self.trace, self.kernels = trace, kernels
        self._roots: dict[str, list[int]] = {}
        for op in sorted((op for op in trace.ops if op.parent is None), key=lambda o: o.start):
            self._roots.setdefault(op.track, []).append(op.index)
        self._starts: dict[int | str, list[float]] = {}
        self._kernel_ops = sorted(kernels, key=lambda i: trace.ops[i].start)
        self._kernel_starts = [trace.ops[i].start for i in self._kernel_ops]

    def _innermost(self, key: int | str, roots: list[int], time: float) -> OpRecord | None:
        """The deepest op under ``roots`` (one track's, start order) running at ``time``."""
        found = None
        while roots:
            starts = self._starts.get(key)
            if starts is None:
                starts = self._starts[key] = [self.trace.ops[i].start for i in roots]
            position = bisect.bisect_right(starts, time) - 1
            if position < 0:
                break
            op = self.trace.ops[roots[position]]
            if time > op.end:
                break
            found, key, roots = op, op.index, op.children
        return found

    def writer(self, event: MemoryEvent) -> int | None:
        """The op that first writes the block ``event`` allocated: the innermost op carrying a kernel
        that was running then, unless an op under it started later fills the block in place (the
        ``copy_`` of ``addmm``'s bias, the ``fill_`` under the ``zero_`` that starts a pooling
        backward); with none running (an ``empty`` inside ``zeros``, or called from Python), the
        next op carrying a kernel that involves a tensor of the block's size."""
        running = [self._innermost(track, roots, event.time) for track, roots in self._roots.items()]
        op = max((o for o in running if o is not None), key=lambda o: o.depth, default=None)
        while op is not None and op.index not in self.kernels:
            op = self.trace.ops[op.parent] if op.parent is not None else None
        if op is not None:
            filler = self._in_place_filler(op, event)
            return op.index if filler is None else filler
        position = bisect.bisect_left(self._kernel_starts, event.time)
        for index in self._kernel_ops[position:position + self.LOOK_AHEAD]:
            if _writes_block(self.trace.ops[index], self.kernels[index], event.size):
                return index
        return None

    def _in_place_filler(self, op: OpRecord, event: MemoryEvent) -> int | None:
        """The first op under ``op`` (start order) started after ``event`` that carries a kernel and
        writes a tensor of the block's size in place."""
        return first_under(self.trace, op.children, lambda child: (
            child.start >= event.time and child.index in self.kernels and in_place(child.name)
            and _writes_block(child, self.kernels[child.index], event.size)))


def heap_rule(trace: Trace) -> HeapRule:
    """What ``trace`` says of its process's memory: for a ``capture.py`` trace, where the heap ended
    when it began (no heap page fresh in one that does not say) and malloc's mmap threshold; for
    another, the end of its first profiler step (without steps, no heap page is known fresh). A
    malformed record is a :class:`TraceError` naming the field."""
    capture = trace.metadata.get("simhpc_capture")
    if not isinstance(capture, dict):
        return HeapRule(trace.steps[0].start + trace.steps[0].duration if trace.steps else math.inf)
    malloc = capture.get("malloc") if isinstance(capture.get("malloc"), dict) else {}
    threshold = _recorded(trace, malloc, "malloc.MALLOC_MMAP_THRESHOLD_", "a size in bytes")
    heap_end = _recorded(trace, capture, "heap_end", "an address")
    return HeapRule(-math.inf if heap_end else math.inf, heap_end or 0, threshold or MAPPED_ALONE_BYTES)


def _recorded(trace: Trace, record: dict, field: str, what: str) -> int | None:
    """The positive integer ``capture.py`` recorded at ``record[field's last part]`` (a JSON number, or
    a string of digits as the environment holds it), None where it recorded none."""
    value = record.get(field.rsplit(".", 1)[-1])
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise TraceError(f"{trace.source}: simhpc_capture.{field}: {value!r} is not {what} (a positive integer)")
    return value


def capture_page_faults(trace: Trace) -> int | None:
    """The page faults ``capture.py`` counted in its process over the recorded steps
    (``simhpc_capture.page_faults``, ``getrusage``'s minor faults), or None where it counted none; a
    malformed record is a :class:`TraceError` naming the field. What the fresh pages found in the
    trace's memory events are held against: they are most of them."""
    capture = trace.metadata.get("simhpc_capture")
    if not isinstance(capture, dict) or "page_faults" not in capture:
        return None
    faults = capture["page_faults"]
    if not isinstance(faults, int) or isinstance(faults, bool) or faults < 0:
        raise TraceError(f"{trace.source}: simhpc_capture.page_faults: {faults!r} is not a count of page faults "
                         "(an integer, 0 or more)")
    return faults


def unmapped_blocks(trace: Trace, page_fault_s: float = 0.0) -> list[MemoryEvent]:
    """The frees of ``trace``'s blocks that glibc mapped on their own (:func:`fresh_allocations`),
    each with the bytes of the pages written into it (with ``page_fault_s``, a block freed moments
    after it was mapped had no time to write them all): glibc unmaps such a block when it is freed,
    a cost per page it holds."""
    unmapped: list[MemoryEvent] = []
    for _ in fresh_allocations(trace.memory, heap_rule(trace), page_fault_s, unmapped):
        pass
    return unmapped


def fresh_writes_from_events(trace: Trace, kernels: dict[int, k.Kernel], page_fault_s: float = 0.0) -> dict[int, float]:
    """Op index -> bytes of fresh pages that op writes first, from the trace's memory events
    (``kernels``: op index -> the kernel it carries; ``page_fault_s``: what a page fault takes, to
    bound a short-lived block's pages by its life, :func:`fresh_allocations`); empty for a trace
    without them."""
    writers = FirstWriters(trace, kernels)
    fresh: dict[int, float] = {}
    for event, nbytes in fresh_allocations(trace.memory, heap_rule(trace), page_fault_s):
        writer = writers.writer(event)
        if writer is not None:
            fresh[writer] = fresh.get(writer, 0.0) + nbytes
    return fresh
