"""Which op of a traced step first writes memory mapped afresh for it, and how many bytes.

PyTorch's CPU allocator takes every tensor from the C library's ``malloc``. glibc's malloc maps
each block of :data:`FRESH_BLOCK_BYTES` or more afresh (32 MiB is its largest mmap threshold on
64-bit, mallopt(3): with the default dynamic threshold and with any threshold set, unless mmap is
turned off) and unmaps it when it is freed, so the first write into such a tensor takes a page
fault per page, in every step. (It takes the block from the heap instead when a free chunk there is
large enough; in the ResNet-stem captures of ``validation/`` most such writes faulted, a batch
norm's output now and then did not; in captures with glibc's default settings a 32 MiB ``fill_``
or a 64 MiB ``copy_`` sometimes did not fault at all, which no trace records.) The calibration's
``first_touch`` points say what a fault costs (:meth:`~simhpc.costs.calibration.CalibratedEfficiency.first_touch_s`).

The first writer is the op that allocated the tensor (a ``relu``'s ``clamp_min``, a
convolution, a batch norm) unless one of its descendants writes the whole tensor in place
first: the ``fill_`` of a ``zeros``, the ``copy_`` of a ``clone`` or of ``addmm``'s bias, the
``zero_`` that starts a pooling backward; an ``empty``'s tensor is first written by the
in-place op beside it that fills it (``randn``'s ``normal_``). Smaller blocks come from the heap, fresh or reused
depending on what the process freed before (``validation/traces/capture.py`` captures with glibc
told to keep freed memory, so that they are reused); under the profiler a plain script's heap
grows, and :func:`largest_heap_writes` says which of them land on new pages; for a trace that does
not say how its malloc was set, :func:`heap_writes` lists what they may add.
"""

from __future__ import annotations

from collections.abc import Callable

from simhpc.costs import kernels as k
from simhpc.costs.op_arguments import int_list, numel
from simhpc.costs.opnames import base_name, in_place, names
from simhpc.trace.readers import OpRecord, Trace

FRESH_BLOCK_BYTES = 32 << 20
"""Blocks at least this large are mapped afresh by glibc's malloc on every allocation."""
ALLOCATING_WRAPPERS = names("""
    zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full clone _to_copy
    contiguous to reshape flatten
""")
"""Ops without a kernel of their own that allocate a tensor their children fill."""
SIZED_BY_ARGUMENT = names("zeros ones full new_zeros new_ones new_full")
"""Of those, the ones whose size is an argument (``Concrete Inputs``), not their input's."""
NEW_SIZE = names("cat stack index_select gather nll_loss_forward nll_loss2d_forward")
"""Elementwise-kind ops whose result is not their largest input's size (the kernel's ``n`` is, or
bounds it: a negative log-likelihood writes one loss per target, or their mean)."""
BOOL_RESULT = names("eq ne lt gt le ge logical_not logical_and logical_or logical_xor isnan isinf isneginf isposinf")
"""Ops whose result is a bool tensor whatever their inputs' type."""
ALLOCATORS = {"empty": 0, "new_empty": 1, "empty_strided": 0, "new_empty_strided": 1, "empty_like": None}
"""Ops that allocate without writing, and the argument holding the size (None: their input's);
the next op beside them that writes a tensor of that size in place is its first writer
(``randn``'s ``normal_``, ``dropout``'s ``bernoulli_``, ``torch.empty(...).fill_``)."""
RESIZERS = {"resize_as": None, "resize": 1}
"""Ops that allocate when they size a tensor of no elements, and the argument holding the size
(None: their second input's shape): ATen's older kernels make a gradient as ``at::empty({0})``,
``resize_as_(input)``, ``zero_()`` (``_slow_conv2d_backward``'s 8 MiB input gradient in a plain
capture: 3.3 ms of page faults in its ``fill_``, against 0.25 ms where its pages were mapped)."""


def _input_shape(op: OpRecord, position: int = 0) -> list[int] | None:
    """The shape of ``op``'s input at ``position`` (default its first), None where it is no tensor's."""
    shape = op.shapes[position] if len(op.shapes) > position else None
    return shape if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else None


def _sized(op: OpRecord, argument: int | None) -> int:
    """Elements of the size argument ``argument`` of ``op`` (None: of its first input)."""
    if argument is None:
        shape = _input_shape(op)
        return numel(shape) if shape is not None else 0
    size = int_list(op.concrete[argument] if len(op.concrete) > argument else "", [])
    return numel(size) if size else 0


def _resized(op: OpRecord, argument: int | None) -> int:
    """Elements a ``resize_as_`` or ``resize_`` (:data:`RESIZERS`) gives a tensor of no elements,
    0 where the tensor it resizes already had elements (no allocation, or not known)."""
    shape = _input_shape(op)
    if shape is None or numel(shape) != 0:
        return 0
    if argument is None:
        template = _input_shape(op, 1)
        return numel(template) if template is not None else 0
    return _sized(op, argument)


def _output_elements(trace: Trace, op: OpRecord, kernel: k.Kernel | None) -> int:
    """Elements of the tensor ``op`` allocates for its result (0: none, or not known)."""
    name = base_name(op.name)
    if op.parent is not None and in_place(trace.ops[op.parent].name):
        return 0  # the out-variant an in-place op redispatches to (``mul_`` -> ``mul``) writes its tensor
    if kernel is None:
        if name not in ALLOCATING_WRAPPERS:
            return 0
        return _sized(op, (1 if name.startswith("new_") else 0) if name in SIZED_BY_ARGUMENT else None)
    if isinstance(kernel, k.FrameworkOp) and name.endswith("_backward") and len(op.shapes) > 1:
        shape = op.shapes[1]  # a pooling backward's gradient has its input's shape
        return numel(shape) if isinstance(shape, list) else 0
    if in_place(op.name) or isinstance(kernel, (k.Reduction, k.Attention, k.Recurrent, k.FrameworkOp, k.Copy)):
        return 0  # reductions' results are small; pooling forwards, fused kernels: not modelled
    if isinstance(kernel, k.Gemm):
        if kernel.conv in ("", "forward"):
            return kernel.outputs()
        mask = str(op.concrete[-1]) if op.concrete else ""
        if name == "convolution_backward" and len(op.shapes) > 1 and not mask.startswith("[False"):
            shape = op.shapes[1]
            return numel(shape) if isinstance(shape, list) else 0  # the input's gradient (the weight's is small)
        return 0
    if isinstance(kernel, k.Elementwise):
        tensors = tensor_shapes(op)
        if name in NEW_SIZE:
            return kernel.n
        if name == "embedding_dense_backward":  # the whole weight gradient, num_weights x width
            rows = int_list(op.concrete[2] if len(op.concrete) > 2 else "", [0])[0]
            return max(0, rows) * (tensors[0][-1] if tensors and tensors[0] else 0)
        return max((numel(s) for s in tensors), default=0)
    return 0


def _element_bytes(op: OpRecord, kernel: k.Kernel) -> int:
    return 1 if base_name(op.name) in BOOL_RESULT else k.dtype_bytes(kernel.dtype)


def fresh_writes(trace: Trace, kernels: dict[int, k.Kernel], smallest: float = FRESH_BLOCK_BYTES) -> dict[int, float]:
    """Op index -> bytes of freshly mapped memory (blocks of at least ``smallest`` bytes, by
    default :data:`FRESH_BLOCK_BYTES`) that op writes first, for the ops in ``kernels`` (index ->
    the kernel it carries)."""
    fresh: dict[int, float] = {}
    roots = [op.index for op in trace.ops if op.parent is None]
    for op in trace.ops:
        kernel = kernels.get(op.index)
        name = base_name(op.name)
        if kernel is None and (name in ALLOCATORS or name in RESIZERS):
            elements = _sized(op, ALLOCATORS[name]) if name in ALLOCATORS else _resized(op, RESIZERS[name])
            siblings = trace.ops[op.parent].children if op.parent is not None else roots
            writer = _next_whole_writer(trace, op, siblings, elements, kernels) if elements > 0 else None
        else:
            elements = _output_elements(trace, op, kernel)
            if elements <= 0:
                continue
            writer = _first_whole_writer(trace, op.children, elements, kernels)
            if writer is None and kernel is not None:
                writer = op.index
        if writer is None:
            continue
        nbytes = float(elements * _element_bytes(trace.ops[writer], kernels[writer]))
        if nbytes >= smallest:
            fresh[writer] = max(fresh.get(writer, 0.0), nbytes)
    return fresh


HEAP_BLOCK_BYTES = 1 << 20
"""Blocks from this size up to :data:`FRESH_BLOCK_BYTES` come from the heap, which glibc's
default settings trim whenever more than twice the dynamic mmap threshold (the largest block
freed from an mmap so far) lies free at its top: in a process run with them, such tensors are
often written into fresh pages too (a 4 MiB Adam temporary: 4.2-4.6 ms against 0.4-0.65 ms with
freed memory kept, validation/README.md). Which of them fault depends on when tensors are freed,
which a trace does not record."""


def allocator_recorded(trace: Trace) -> bool:
    """Whether the trace says how its process's malloc was set: ``validation/traces/capture.py``
    records its capture (``simhpc_capture``), run with glibc told to keep freed memory."""
    return isinstance(trace.metadata.get("simhpc_capture"), dict)


def heap_writes(trace: Trace, kernels: dict[int, k.Kernel]) -> dict[int, float]:
    """Op index -> bytes of the heap blocks (:data:`HEAP_BLOCK_BYTES` up to
    :data:`FRESH_BLOCK_BYTES`) that op writes first: what a process with glibc's default malloc
    settings may write into fresh pages besides :func:`fresh_writes`."""
    return {index: nbytes for index, nbytes in fresh_writes(trace, kernels, HEAP_BLOCK_BYTES).items()
            if nbytes < FRESH_BLOCK_BYTES}


def largest_heap_writes(trace: Trace, kernels: dict[int, k.Kernel]) -> dict[int, float]:
    """Op index -> bytes of the heap blocks a profiled step of a plain script writes into new pages:
    in each profiler step (the whole trace where it marks none), those of its largest heap size
    (:func:`heap_writes`).

    Under the profiler a training loop's heap grows every step: the profiler's records, kept until
    the trace is exported, take the holes freed tensors leave (:mod:`simhpc.trace.fresh_pages`).
    A smaller block still finds a hole it fits in, the blocks of the step's largest size only the
    holes of their own, which the records split first. In the memory events of plain captures on
    the EPYC Zen 4 guest (``validation/traces/plain_capture.py``, one process each), a step's
    largest heap blocks came on new pages 10.4-12 of 12 times (a ViT's 1.5 MB MLP activations),
    0.7-3 of 3 (an MLP-mixer's 4 MB weight gradients and Adam temporaries at 1 and 2 threads) and
    13.5 of 14 (a two-layer encoder's 4 MB), the smaller blocks almost never; ``getrusage``
    counted 4225-4609, 3072 and 14 336 page faults a step of these models profiled without the
    events, 4608, 3072 and 14 336 pages of such blocks. Where neighbouring holes merge into one
    large enough (a small CNN's 8 MB activations: 3-4 of its 10 a step) this overcharges."""
    heap = heap_writes(trace, kernels)
    largest: dict[int | None, float] = {}
    for index, nbytes in heap.items():
        step = trace.ops[index].step
        largest[step] = max(largest.get(step, 0.0), nbytes)
    return {index: nbytes for index, nbytes in heap.items() if nbytes == largest[trace.ops[index].step]}


def _writes_whole(op: OpRecord, elements: int, kernels: dict[int, k.Kernel]) -> bool:
    shape = _input_shape(op)
    return op.index in kernels and in_place(op.name) and shape is not None and numel(shape) == elements


def first_under(trace: Trace, roots: list[int], accept: Callable[[OpRecord], bool]) -> int | None:
    """The first op of the subtrees at ``roots`` (start order, parents first) that ``accept`` takes."""
    stack = list(reversed(roots))
    while stack:
        op = trace.ops[stack.pop()]
        if accept(op):
            return op.index
        stack.extend(reversed(op.children))
    return None


def _first_whole_writer(trace: Trace, roots: list[int], elements: int, kernels: dict[int, k.Kernel]) -> int | None:
    """The first op of the subtrees at ``roots`` that carries a kernel and writes a tensor of
    ``elements`` in place."""
    return first_under(trace, roots, lambda op: _writes_whole(op, elements, kernels))


def _next_whole_writer(trace: Trace, allocation: OpRecord, siblings: list[int], elements: int,
                       kernels: dict[int, k.Kernel]) -> int | None:
    """The in-place writer of an ``empty``'s tensor: in the first later op of its ``siblings``
    (the ops beside it) that involves a tensor of its size, if that op writes one in place."""
    for index in siblings:
        if index > allocation.index and any(numel(s) == elements for s in tensor_shapes(trace.ops[index])):
            return _first_whole_writer(trace, [index], elements, kernels)
    return None


def tensor_shapes(op: OpRecord) -> list[list[int]]:
    """The shapes of ``op``'s tensor inputs (lists of ints; scalars and the unknown left out)."""
    return [s for s in op.shapes if isinstance(s, list) and all(isinstance(d, int) for d in s)]
