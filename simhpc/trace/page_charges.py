"""What a profiled step pays for its pages: the page faults of the memory its ops write fresh
(charged to those ops) and the unmapping of the pages freed memory gives back to the kernel (charged
to the step). The calibration's loops keep freed memory, so neither is in a kernel's own points; the
fresh bytes come from :mod:`simhpc.trace.fresh_pages` (memory events), :mod:`simhpc.trace.fresh_memory`
(shapes, glibc's mapped blocks and heap) and :mod:`simhpc.trace.trimmed_pages` (heap trims).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simhpc.costs.model import CostModel
from simhpc.trace.fresh_memory import allocator_recorded, fresh_writes, heap_writes, largest_heap_writes
from simhpc.trace.fresh_pages import PAGE_BYTES, fresh_writes_from_events, unmapped_blocks
from simhpc.trace.readers import Trace
from simhpc.trace.trimmed_pages import trimmed_part

if TYPE_CHECKING:
    from simhpc.trace.op_predictions import OpPrediction


def add_first_touch(trace: Trace, predictions: list[OpPrediction], model: CostModel, threads: int) -> None:
    """Charge each op the page faults of the freshly mapped memory it writes first: from the trace's
    memory events where it has them (:mod:`simhpc.trace.fresh_pages`), else the blocks glibc maps
    on their own, by the ops' shapes (:mod:`simhpc.trace.fresh_memory`). In a plain script's trace
    also each step's largest heap blocks, as a trace without events is charged
    (:func:`~simhpc.trace.fresh_memory.largest_heap_writes`), where its events show the op fewer
    fresh bytes: they show where a block lands, not that glibc gave the pages there back to the
    system in between (its heap trims). In two surveys of thirty plain captures on a Zen 5 guest
    the events alone found 0.86x the page faults ``getrusage`` counted (median), and the steps
    read 16.3 / 22.4 % off on average, 11.0 / 17.2 % with these blocks. Of such a block, only the
    part its events let a trim have given back is charged (:mod:`simhpc.trace.trimmed_pages`). The
    first profiled step is charged too: the unprofiled steps before it ran the same loop and
    trimmed the same way (``getrusage`` counted 0-4.2x a later step's faults in it, median 0.81x,
    over 110 plain captures); left out, it lowered the predicted mean step (in four surveys of
    thirty the mean absolute step error went 7.5 / 10.2 / 13.9 / 6.9 % -> 6.5 / 8.7 / 12.6 / 6.8 %
    with it; validation/README.md, session 53)."""
    first_touch = getattr(model.efficiency, "first_touch_s", None)
    if first_touch is None:
        return
    kernels = {p.op.index: p.kernel for p in predictions if p.kernel is not None}
    carrying = {p.op.index: p for p in predictions if p.op.index in kernels}
    grown: dict[int, float] = {}
    if trace.memory:
        fresh = fresh_writes_from_events(trace, kernels, first_touch(PAGE_BYTES, threads))
    else:
        fresh = fresh_writes(trace, kernels)
    if not allocator_recorded(trace):
        grown = {index: nbytes for index, nbytes in trimmed_part(trace, largest_heap_writes(trace, kernels)).items()
                 if nbytes > fresh.get(index, 0.0)}
        fresh.update(grown)
    for index, nbytes in fresh.items():
        prediction = carrying[index]
        prediction.fresh_bytes = nbytes
        prediction.first_touch_s = first_touch(nbytes, threads)
        prediction.predicted_s += prediction.first_touch_s
        if index in grown:
            prediction.heap_growth_s = prediction.first_touch_s


HEAP_GROWTH = "shapes and heap growth"
"""``Comparison.first_touch_basis`` of a plain script's trace without memory events: the blocks of
32 MiB or more and each profiled step's largest heap blocks
(:func:`~simhpc.trace.fresh_memory.largest_heap_writes`)."""
EVENTS_AND_HEAP_GROWTH = "memory events and heap growth"
"""``Comparison.first_touch_basis`` of a plain script's trace with memory events where some op was
charged its step's largest heap block beyond what the events show (:func:`add_first_touch`)."""


def first_touch_basis(trace: Trace, predictions: list[OpPrediction]) -> str:
    """What :func:`add_first_touch` found ``trace``'s fresh pages by (``Comparison.first_touch_basis``)."""
    if trace.memory:
        return EVENTS_AND_HEAP_GROWTH if any(p.heap_growth_s > 0 for p in predictions) else "memory events"
    return "shapes" if allocator_recorded(trace) else HEAP_GROWTH


def heap_faults_if_fresh(trace: Trace, predictions: list[OpPrediction], model: CostModel, threads: int,
                       steps: int) -> float | None:
    """Per step, the page faults of every heap block of 1 to 32 MiB if all were written fresh, beyond
    those the op writing it is charged already, for a trace that does not record its allocator
    settings (None for one that does, or without page-fault points). Its memory events cannot say
    either: the pages of a heap glibc trimmed come back at the same addresses."""
    first_touch = getattr(model.efficiency, "first_touch_s", None)
    if first_touch is None or allocator_recorded(trace):
        return None
    kernels = {p.op.index: p.kernel for p in predictions if p.kernel is not None}
    charged = {p.op.index: p.first_touch_s for p in predictions}
    return sum(max(0.0, first_touch(nbytes, threads) - charged.get(index, 0.0))
               for index, nbytes in heap_writes(trace, kernels).items()) / steps


def unmap_seconds(trace: Trace, predictions: list[OpPrediction], model: CostModel, threads: int) -> tuple[float, float]:
    """Seconds, over the profiler steps (the whole trace without them), that giving the pages the
    steps wrote back to the kernel takes, and the part of it that is the pages charged as heap growth
    (``heap_growth_s``): between ops or inside them, as memory is freed. The calibration's loops
    keep freed memory, so no op's prediction has it; each page costs the calibration's ``unmap``.

    - A block glibc mapped on its own is unmapped when it is freed
      (:func:`~simhpc.trace.fresh_pages.unmapped_blocks`): on the EPYC Zen 5 guest a 224 x 224
      CNN's 98 MiB batch-norm blocks took 7.5 ms each to free.
    - In a plain script's trace (glibc's defaults: :func:`allocator_recorded` is false) the heap's
      trims also give pages back. A page written fresh in every step was given back once a step, so
      every fresh page the ops are charged counts, the blocks mapped on their own among them. On
      that guest, with trims turned off (``MALLOC_TRIM_THRESHOLD_``), a plain regression MLP's
      AdamW step lost 3400 page faults and 4.7 ms: 1.38 us each, against 1.12 for the fault alone
      and 0.21 for its unmapping (session 49)."""
    unmap = getattr(model.efficiency, "unmap_s", None)
    first_touch = getattr(model.efficiency, "first_touch_s", None)
    if unmap is None or first_touch is None:
        return 0.0, 0.0
    spans = [(step.start, step.start + step.duration) for step in trace.steps]

    def in_steps(time: float) -> bool:
        return not spans or any(start <= time < end for start, end in spans)

    if allocator_recorded(trace):
        return sum(unmap(event.size, threads) for event in unmapped_blocks(trace, first_touch(PAGE_BYTES, threads))
                   if in_steps(event.time)), 0.0
    returned = [(unmap(p.fresh_bytes, threads), p.heap_growth_s > 0) for p in predictions
                if p.fresh_bytes > 0 and in_steps(p.op.start)]
    return sum(seconds for seconds, _ in returned), sum(seconds for seconds, grown in returned if grown)
