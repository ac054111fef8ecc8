"""What a traced BLAS product's call costs over the calibration's loop, from what ran before it.

The calibration times a product in a loop of repeated calls, and once more as single calls after
a 128 MiB fill (``gemm_cold``), fitted as a constant (the BLAS's code and packing buffers fetched
again) plus a cost per byte of its operands (:meth:`~simhpc.costs.calibration.CalibratedEfficiency.cold_call_parts`).
Inside a training step a product finds neither state: what ran since decides how much it pays.

- **The constant** in proportion to the share of the private caches of its ``t`` threads' cores
  that the bytes brought into them since the previous product (its own included) fill, ``t``
  times one core's (the ops in between split their tensors among as many threads): a
  classifier's backward products right after its forward one pay little of it. On the EPYC Zen 2
  guest a 16 x 64 x 10 head paid 45, 15 and 3 us over its loop time (forward after the
  convolutions, then its two backward products; 1 thread), against 32 us for a single call after
  the fill. One private cache for any ``t`` overcharged the 2-thread backward products of the
  Xeon's and the Zen 5's CNN heads. A product brings all its bytes (its operands pass through
  its packing buffers); another op only its tensors no op read within those caches' worth of
  bytes before (matched by element count, as below) and its output unless it writes in place:
  a recurrent cell's accumulation into a weight gradient the step before touched re-touches
  lines already there. Counting every op's bytes charged a GRU's per-step products 19-64 us over
  a 1-5 us measured excess (the Xeon reference; 576 KiB accumulations between them); its GEMM
  MAPE went 221 / 112 -> 109 / 57 % there, and the committed Zen 2 GRU's 60.9 / 44.3 -> 38.4 /
  14.5 %, the classifier heads moving 0-3 points. Counting only the new bytes of products too
  helped the GRU a little more (84 / 48 % on the Xeon) but hurt the classifier heads (its CNN
  8.4 / 20.4 -> 14.1 / 27.5 %).
- **The kernels of its layout** (``nn``, ``nt``, ``tn``, ``tt``; batched or not) as the constant,
  but counting the bytes since the previous product of that layout: the part of the constant they
  are is measured, per layout where the calibration has its points
  (:meth:`~simhpc.costs.calibration.CalibratedEfficiency.path_constant`, 10-11 us of 44-68 on the
  Xeon reference; on the EPYC Zen 4 guest a weight gradient's ``tn`` 6 us, ``nn`` and ``nt`` 9-10).
  A linear layer's input gradient (``nn``) right after its forward (``nt``) finds the BLAS's common
  code warm and its own kernels cold: the tiny heads of the extra models took 17-24 us over a 1-4 us
  loop time there, predicted 2-4 us without this part.
- **A matrix-vector product right after one of its own kernel** (MKL's ``gemv`` of one
  transposition: batch-1 inference's layers, one after another) finds that kernel's state where
  only streamed data pushed it, at worst in the last-level cache. A 1 x 10 x 1024 product paid
  0.9-1.2 us over its 1.8 us loop after a 4 MiB matrix-vector or 64-row product, 22-24 us after
  a 128 MiB fill (``validation/traces/cold_eviction.py``, the EPYC Zen 5 guest). Its two shares
  are then the private caches' share at the last-level cache's cost (the chase's latency there
  over memory's, :meth:`~simhpc.costs.calibration_file.Calibration.last_level_latency_share`:
  0.08 there) plus the effective last-level cache's share at memory's. The plain batch-1 MLP
  (``plain_capture.py mlp_b1 --inference 1``) went from +34.5 / +7.7 % to +22.5 / -1.9 % (1 / 2
  threads, GEMM MAPE 134 / 114 -> 29 / 22 %) against a calibration taken minutes after it. The
  bytes are those brought after the previous one ended: that product streamed its own matrix
  while its kernel ran, which kept the kernel's state warm (session 53: the MLP's 1 x 1024 x 10
  head after its 4 MiB layer took 2.3-3.1 us, predicted 6.6 when that matrix counted; four plain
  surveys' GEMM MAPE went 16.5 / 19.3 / 17.8 / 16.9 -> 14.3 / 17.8 / 16.3 / 14.6 %). Other
  products keep the private caches' rule: in a training step a small product after streaming
  still pays the whole constant (the CNN heads, ``validation/README.md`` session 36; no fresh
  check or committed capture moved).
- **The operand bytes** only for inputs the ops within the last effective cache's worth of bytes
  (:meth:`~simhpc.costs.calibration_file.Calibration.effective_cache_bytes`) did not read: an
  operand with as many elements as one of their inputs is taken to be that tensor or a view of it,
  still in cache (a layer's input written by the op before, a weight its forward read before its
  backward, transposed; a classifier's input, the last block's output flattened, which matching
  by shape charged: ``validation/README.md`` has what that moved). On ``t`` threads the
  product's threads split its operands otherwise than the ops that left them in cache did, so
  ``(t - 1) / t`` of a cached operand is in another core's private cache and pays the per-byte
  cost too: at 2 threads the committed captures' GEMM MAPE went 17.3 -> 15.1 % (CNN), 10.3 ->
  9.4 % (transformer) on the Zen 2 guest, 6.9-9.6 -> 6.2-8.1 % on the Xeon but for its CNN (22.4
  -> 25.9 %), and a fresh Zen 2 pair's four 2-thread captures 11.7-19.9 -> 11.2-16.3 %; a GRU's
  per-step products (52.5 -> 58.5 %) likely run on one thread. A matrix-vector product does run
  on one thread (MKL's ``gemv``): an operand it finds where one thread left it (another such
  product, or an op under ATen's grain size) is all on its core (session 35: a batch-1 MLP's
  inference at 2 threads, its weights read by the same products step after step, went from +41.0
  to +6.3 %).
- **The output's bytes** at the memory bandwidth when the trace says where it went
  (``profile_memory=True``, :class:`~simhpc.trace.allocations.BlockHistory`) and its block was
  freed more than its cores' private caches' worth of bytes before, for a product whose operands
  fit in those caches (the loop that timed it wrote its output into cache; a larger one streams
  it in the loop too). The allocator mostly hands back a block freed moments before, but the
  CNN classifier's input gradient gets the one the last convolution's output was freed from,
  2.2 MiB of traffic before: at 1 thread it took 150-270 us in every capture of the Xeon
  reference against 38-43 us in a loop (a 1 MiB output written into a cold buffer costs 85-90 us
  there). Without memory events an output is taken to be in cache. In cache, on ``t`` threads
  ``(t - 1) / t`` of its lines are in another core's (the ops that last touched them split them
  otherwise, as for an operand), and writing one first takes it from there: that share pays
  the memory bandwidth too (session 28). The Xeon reference's 2-thread CNN classifier's input
  gradient writes 1 MiB and paid 38-64 us over its loop time in sixteen fresh checks, its weight
  gradient (160 KiB out) 20-38 us, both charged alike before; its GEMM MAPE went 22.5 -> 20.4 %
  (median of seventeen fresh checks, 3 of 17 within 15 % against none), the committed captures'
  2-thread CNNs 20.9 -> 18.7 % (Xeon), 13.2 -> 10.5 % (Zen 4), 29.0 -> 21.2 % (Xeon SPR) but 7.3
  -> 11.8 % (Zen 5), the 2-thread bf16 MLPs 8.3 -> 6.7 % (Zen 4) and 30.2 -> 33.0 % (Zen 5); no
  1-thread product moved.
  Where the calibration has ``rewrite`` points (suite 41) they say where a block's lines are
  instead of the private caches' size: the share its distance (the bytes since its free, and its
  own) sends to memory, over the share at its loop's distance (its own bytes: a product larger
  than its private caches pays too, where its block was freed past the last-level cache), and the
  other cores' share of the lines still cached. On the EPYC Zen 5 guest written lines leave the
  32 MiB L3 at 16-32 MiB of traffic, and the CNN classifier's input gradient, its block freed 1.2
  MiB before, took 55-58 us at 2 threads whether written up to 16 MiB before or just before
  (84 us past 64 MiB), where the private caches' rule charged its whole 1 MiB at the memory's
  bandwidth (validation/README.md, session 51).

On the committed captures this took the CNN's GEMM MAPE (its 64 x 4096 x 10 classifier) from
28.2 / 19.1 % to 9.4 / 17.3 % on the Zen 2 guest and from 21.1 / 49.4 % to 27.5 / 22.4 % on the
Xeon, the tiny classifier heads of models not fitted on from 102-223 % to 17-55 %, and the large
products 0-3 points the other way (``validation/README.md``). A calibration without ``gemm_cold``
points keeps its whole cold charge on every product.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from simhpc.costs.kernels import Gemm, Kernel, dtype_bytes, vector_side
from simhpc.costs.model import CostModel
from simhpc.costs.op_arguments import is_shape
from simhpc.trace.allocations import BlockHistory
from simhpc.trace.framework_costs import private_cache


def _dims(shape: Any) -> tuple[int, ...] | None:
    """A tensor's dimensions when ``shape`` is a list of ints of at least two (matrices and up)."""
    return tuple(shape) if is_shape(shape) and len(shape) >= 2 else None


def charge_products(predictions: Sequence[Any], model: CostModel, threads: int,
                    blocks: BlockHistory | None = None) -> None:
    """Re-time every BLAS product of ``predictions`` (``OpPrediction``s, any order) by what ran
    before it (see the module docstring; ``blocks``: the trace's allocations, if it recorded
    them); nothing changes without ``gemm_cold`` points."""
    efficiency = model.efficiency
    in_step = getattr(efficiency, "product_in_step_s", None)
    if in_step is None or efficiency.cold_call_parts(threads) is None:
        return
    core_private = private_cache(model)
    private = core_private * threads  # the private caches of the product's cores
    calibration = efficiency.calibration
    window = calibration.effective_cache_bytes()
    elsewhere = (threads - 1) / threads  # of a cached operand: in another core's private cache
    from_last_level = calibration.last_level_latency_share(core_private)
    read: list[tuple[float, set[int], bool]] = []  # (bytes moved by an op's end, its inputs' element counts,
    # whether it ran on one thread)
    ends: list[tuple[float, float]] = []  # (when an op ended, bytes moved by then)
    moved = 0.0
    brought, last_brought = 0.0, -math.inf  # bytes brought into the caches (re-touched ones left out)
    last_of_layout: dict[tuple[str, bool], float] = {}
    last_vector_path: tuple[str, str] | None = None  # the previous product's, if a matrix-vector one
    after_vector = 0.0  # bytes brought by the end of the last matrix-vector product
    for p in sorted(predictions, key=lambda p: (p.op.start, p.op.index)):
        kernel = p.kernel
        if kernel is None:
            continue
        inputs = [dims for shape in p.op.shapes if (dims := _dims(shape)) is not None]
        alone = _one_thread(kernel, p.op.shapes)
        if isinstance(kernel, Gemm) and not kernel.conv:
            cold_bytes = 0.0
            for dims in inputs:
                size = math.prod(dims) * dtype_bytes(kernel.dtype)
                reader_alone = _reader_within(read, math.prod(dims), moved, window - size)
                away = 0.0 if alone and reader_alone else elsewhere
                cold_bytes += size * (1.0 if reader_alone is None else away)
            layout = (kernel.layout, kernel.batch > 1)
            since_layout = moved - last_of_layout.get(layout, -math.inf)
            path = _vector_path(kernel)
            if path is not None and path == last_vector_path:  # its kernel's state left in the caches
                share = _evicted_share(brought - after_vector, private, window, from_last_level)
                layout_share = _evicted_share(since_layout, private, window, from_last_level)
            else:
                share = min(1.0, (brought - last_brought) / private)
                layout_share = min(1.0, since_layout / private)
            last_vector_path = path
            output = _fetched_output_bytes(p.op, kernel, blocks, ends, moved, private, elsewhere,
                                           calibration.rewrite_memory_share)
            seconds = in_step(kernel, threads, share, cold_bytes, layout_share, output, alone)
            if seconds is not None:
                p.predicted_s = seconds
            last_of_layout[layout] = moved
            last_brought = brought
        brought += _bytes_brought(p.op, kernel, read, moved, private)
        if isinstance(kernel, Gemm) and not kernel.conv and _vector_path(kernel) is not None:
            after_vector = brought  # its own stream ran beside its kernel's state, which it kept warm
        moved += kernel.bytes()
        read.append((moved, {math.prod(dims) for dims in inputs}, alone))
        ends.append((p.op.end, moved))


def _vector_path(kernel: Gemm) -> tuple[str, str] | None:
    """A matrix-vector or outer product's kernel, as its layout and which operand is the vector
    (:func:`~simhpc.costs.kernels.vector_side`: MKL's ``gemv``, one routine per transposition, or a
    rank-1 update); None for any other product."""
    side = vector_side(kernel.m, kernel.n, kernel.k, kernel.batch)
    return (kernel.layout, side) if side else None


def _evicted_share(brought: float, private: float, last_level: float, from_last_level: float) -> float:
    """Of the cold call's constant (its state fetched from memory), what a product pays when
    ``brought`` bytes streamed through the caches since its kernel last ran: the share of the
    private caches they filled at the last-level cache's cost (``from_last_level``, the chase's
    latency there over memory's), and the share of the ``last_level`` cache at memory's."""
    return (from_last_level * min(1.0, brought / private)
            + (1.0 - from_last_level) * min(1.0, brought / last_level))


GRAIN_ELEMENTS = 32768
"""ATen's ``GRAIN_SIZE``: an op over fewer elements runs on the calling thread alone."""


def _one_thread(kernel: Kernel, shapes: list[Any]) -> bool:
    """Whether an op of ``kernel`` on tensors of ``shapes`` runs on one thread whatever the thread
    count: a matrix-vector or outer product (MKL's ``gemv``, a rank-1 update: their 2-thread points
    take the 1-thread time), or
    another op (not a product) whose tensors are all under :data:`GRAIN_ELEMENTS`."""
    if isinstance(kernel, Gemm):
        return bool(vector_side(kernel.m, kernel.n, kernel.k, kernel.batch)) and not kernel.conv
    return all(math.prod(shape) < GRAIN_ELEMENTS for shape in shapes if is_shape(shape))


def _bytes_brought(op: Any, kernel: Kernel, read: list[tuple[float, set[int], bool]], moved: float,
                   held: float) -> float:
    """Of an op's bytes, those it brings into its cores' private caches (``held`` bytes): all of a
    product's (its operands pass through its packing buffers); of another op, its tensors that
    no op within ``held`` bytes before read (by element count, as the operands of a product)
    and its output unless it writes in place."""
    if isinstance(kernel, Gemm):
        return kernel.bytes()
    width = dtype_bytes(kernel.dtype)
    counts = [math.prod(shape) for shape in op.shapes if is_shape(shape) and shape]
    new = sum(count * width for count in counts if _reader_within(read, count, moved, held) is None)
    output = max(0.0, kernel.bytes() - sum(counts) * width)
    return new + (0.0 if op.name.endswith("_") else output)


def _fetched_output_bytes(op: Any, kernel: Gemm, blocks: BlockHistory | None, ends: list[tuple[float, float]],
                          moved: float, held: float, elsewhere: float,
                          memory_share: Callable[[float], float | None]) -> float:
    """The bytes of a product's output lines fetched before they are written.

    With the calibration's ``rewrite`` points (``memory_share``: the share of lines written a
    given distance before that come from memory): the share its block's distance (the bytes moved
    since it was freed, and its own; known only from memory events, else the loop's) gives over
    the share at the distance its calibration loop rewrote them (its own bytes), plus, for a
    product whose bytes fit in ``held`` (its loop kept its output there), the ``elsewhere`` share of
    the lines still cached (in another of its cores' caches; see the module docstring).

    Without them (older calibrations), for a product whose operands fit in ``held`` (a larger
    one streamed its output in the calibration's loop too: 0): all of them when its block was
    freed more than ``held`` bytes before (``ends``: the earlier ops' end times and the bytes
    moved by then), else the ``elsewhere`` share."""
    size = kernel.outputs() * dtype_bytes(kernel.dtype)
    freed = blocks.reused_since(op.start, op.end, size) if blocks else None
    since = None
    if freed is not None:
        before = bisect.bisect_right(ends, (freed, math.inf))
        since = moved - (ends[before - 1][1] if before else 0.0)
    loop = memory_share(kernel.bytes())
    if loop is not None:
        step = memory_share(since + size) if since is not None else loop
        cached = elsewhere * (1.0 - step) if kernel.bytes() <= held else 0.0
        return size * (max(0.0, step - loop) + cached)
    if kernel.bytes() > held:
        return 0.0
    if since is not None and since + size > held:
        return size
    return elsewhere * size


def _reader_within(read: list[tuple[float, set[int], bool]], elements: int, moved: float,
                   window: float) -> bool | None:
    """Whether the latest op that ended at most ``window`` bytes before ``moved`` and read a tensor
    of ``elements`` ran on one thread (None: no such op)."""
    for ended, sizes, alone in reversed(read):
        if moved - ended > window:
            return None
        if elements in sizes:
            return alone
    return None
