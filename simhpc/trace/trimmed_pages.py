"""Which part of a plain script's largest heap blocks lands on pages glibc's heap trim gave back.

With glibc's default settings a ``free`` that leaves more than the trim threshold (twice the
dynamic mmap threshold, itself at least the largest heap block) free at the heap's top gives the
pages above the last block in use back to the system; the next step's blocks there are written
into fresh pages, at the same addresses, which a trace's memory events cannot show
(:mod:`simhpc.trace.fresh_memory`, ``largest_heap_writes``, charges each profiled step's blocks of
its largest heap size as fresh). With the events, a block's pages can have been given back only
where they lay above the top of the blocks in use at some moment since the block's address was
last freed, and only if the free space above that top, up to the heap's highest end so far,
reached twice the largest such block. A block is charged that part of it; one whose address the
events show no earlier free of (or outside the main heap: glibc's mapped blocks and other
threads' arenas) keeps its whole charge.

In eight plain surveys of the EPYC Zen 5 guest (``validation/README.md``, session 50) the pages
charged over the page faults ``getrusage`` counted went from a mean absolute log ratio of
0.22-0.32 to 0.16-0.24 (a residual network's 3 MiB activations 1.9 -> 1.3x, a small CNN's 1.7 ->
1.2x), and the mean absolute step error from 6.9-9.2 % to 5.1-7.9 % (25-26 -> 25-28 of 30 steps
within 15 %).
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict

import numpy as np

from simhpc.trace.readers import Trace

MAIN_HEAP_BELOW = 0x7000_0000_0000
"""Addresses under this are the main heap's (``brk``) on x86-64 Linux; glibc's mapped blocks and
other threads' arenas lie above it."""


def trimmed_part(trace: Trace, largest: dict[int, float]) -> dict[int, float]:
    """Of ``largest`` (op index -> bytes of the block of its step's largest heap size it writes
    first), the bytes that can lie on pages a trim gave back, by ``trace``'s memory events (see the
    module docstring); ``largest`` as it is for a trace without them. An op whose part is nothing
    is left out."""
    events = trace.memory
    if not events or not largest:
        return dict(largest)
    live: dict[int, int] = {}
    tops: list[tuple[int, int, int]] = []  # (-end, address, size) of live blocks, stale entries popped lazily
    top_after = np.zeros(len(events))  # the top of the live heap blocks after each event
    end_after = np.zeros(len(events))  # the highest end of any heap block so far
    frees: dict[int, list[int]] = defaultdict(list)  # address -> positions of its frees
    allocations: dict[int, list[tuple[float, int, int]]] = defaultdict(list)  # size -> (time, position, address)
    highest = 0
    for position, event in enumerate(events):
        if event.address < MAIN_HEAP_BELOW:
            if event.size > 0:
                live[event.address] = event.size
                heapq.heappush(tops, (-(event.address + event.size), event.address, event.size))
                highest = max(highest, event.address + event.size)
                allocations[event.size].append((event.time, position, event.address))
            elif live.pop(event.address, None) is not None:
                frees[event.address].append(position)
            while tops and live.get(tops[0][1]) != tops[0][2]:
                heapq.heappop(tops)
        top_after[position] = -tops[0][0] if tops else 0
        end_after[position] = highest
    threshold = 2 * max(largest.values())
    part: dict[int, float] = {}
    for index, nbytes in largest.items():
        placed = allocations.get(int(nbytes), [])
        before = bisect.bisect_right(placed, (trace.ops[index].end, len(events), 0))
        if not before:
            part[index] = nbytes
            continue
        _, position, address = placed[before - 1]
        freed = frees.get(address, [])
        last_free = bisect.bisect_left(freed, position)
        if not last_free:
            part[index] = nbytes
            continue
        start = freed[last_free - 1]
        lowest_top = top_after[start:position].min()
        if end_after[position] - lowest_top < threshold:
            continue
        above = address + nbytes - max(address, lowest_top)
        if above > 0:
            part[index] = float(min(nbytes, above))
    return part
