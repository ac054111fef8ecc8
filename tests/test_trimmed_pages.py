"""``simhpc.trace.trimmed_pages``: which part of a step's largest heap block a heap trim can have
given back, by the trace's memory events."""

from __future__ import annotations

from simhpc.trace.readers import MemoryEvent, OpRecord, Trace
from simhpc.trace.trimmed_pages import MAIN_HEAP_BELOW, trimmed_part

BLOCK = 1 << 20
BASE = 0x1000_0000  # a small block that stays in use: the heap's bottom


def _trace(events: list[MemoryEvent]) -> Trace:
    ops = [OpRecord(i, "aten::mm", "gemm", 2.0 * i, 1.0, "t") for i in range(4)]
    return Trace("t.json", "torch.profiler", ops, [], {}, {}, memory=[MemoryEvent(0.0, BASE, 4096), *events])


def _freed_and_taken_again(address: int, between: list[MemoryEvent]) -> list[MemoryEvent]:
    """A block of BLOCK bytes at ``address`` written by op 0, a 2-block neighbour above it, both freed
    after op 0 with ``between`` events, and the block taken again for op 1 (starting at 2.0)."""
    return [MemoryEvent(0.5, address, BLOCK), MemoryEvent(0.6, address + BLOCK, 2 * BLOCK), *between,
            MemoryEvent(1.5, address + BLOCK, -2 * BLOCK), MemoryEvent(1.6, address, -BLOCK),
            MemoryEvent(2.1, address, BLOCK)]


def test_a_block_whose_pages_were_the_free_top_of_the_heap_is_charged() -> None:
    """Freed with 3 blocks free above the last block in use (over twice the largest block): the
    trim could give all of its pages back."""
    trace = _trace(_freed_and_taken_again(BASE + BLOCK, []))
    assert trimmed_part(trace, {1: float(BLOCK)}) == {1: float(BLOCK)}


def test_a_block_under_a_block_in_use_is_not_charged() -> None:
    """A block in use above it the whole time: the heap's top never came down to its pages."""
    above = MemoryEvent(0.7, BASE + 4 * BLOCK, 4096)
    trace = _trace(_freed_and_taken_again(BASE + BLOCK, [above]))
    assert trimmed_part(trace, {1: float(BLOCK)}) == {}


def test_less_free_than_the_trim_threshold_keeps_the_pages() -> None:
    """Twice the largest block (here 2 MiB) must lie free above the top: with a 2-block largest, the
    3 blocks freed are not enough."""
    trace = _trace(_freed_and_taken_again(BASE + BLOCK, []))
    assert trimmed_part(trace, {1: float(BLOCK), 3: 2.0 * BLOCK}) == {3: 2.0 * BLOCK}


def test_without_an_earlier_free_or_outside_the_main_heap_the_charge_stays() -> None:
    """A block at an address the events never freed before, or above the main heap (a mapped block,
    another thread's arena), keeps the whole of its charge; so does every block of a trace without
    memory events."""
    first_use = _trace([MemoryEvent(2.1, BASE + BLOCK, BLOCK)])
    assert trimmed_part(first_use, {1: float(BLOCK)}) == {1: float(BLOCK)}
    elsewhere = _trace(_freed_and_taken_again(MAIN_HEAP_BELOW + BLOCK, [MemoryEvent(0.7, MAIN_HEAP_BELOW + 8 * BLOCK,
                                                                                    4096)]))
    assert trimmed_part(elsewhere, {1: float(BLOCK)}) == {1: float(BLOCK)}
    assert trimmed_part(_trace([]), {}) == {}
    no_events = Trace("t.json", "torch.profiler", _trace([]).ops, [], {}, {})
    assert trimmed_part(no_events, {1: float(BLOCK)}) == {1: float(BLOCK)}
