"""Which op of a traced step first writes memory mapped afresh for it, and how many bytes.

PyTorch's CPU allocator takes every tensor from the C library's ``malloc``. glibc's malloc maps
each block of :data:`FRESH_BLOCK_BYTES` or more afresh (32 MiB is its largest mmap threshold on
64-bit, mallopt(3): with the default dynamic threshold and with any setting) and unmaps it when it
is freed, so the first write into such a tensor takes a page fault per page, in every step. The
calibration's ``first_touch`` points say what a fault costs
(:meth:`~simhpc.costs.calibration.CalibratedEfficiency.first_touch_s`).

The first writer is the op that allocated the tensor (a ``relu``'s ``clamp_min``, a
convolution, a batch norm) unless one of its descendants writes the whole tensor in place
first: the ``fill_`` of a ``zeros``, the ``copy_`` of a ``clone`` or of ``addmm``'s bias, the
``zero_`` that starts a pooling backward. Smaller blocks come from the heap, fresh or reused
depending on what the process freed before: not modelled (``validation/traces/capture.py``
captures with glibc told to keep freed memory, so that they are reused).
"""

from __future__ import annotations

from simhpc.costs import kernels as k
from simhpc.costs.opmap import _int_list, _numel
from simhpc.costs.opnames import base_name, names
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
NEW_SIZE = names("cat stack index_select gather")
"""Elementwise-kind ops whose result is not their largest input's size (the kernel's ``n`` is)."""


def _in_place(op: OpRecord) -> bool:
    short = op.name.rsplit("::", 1)[-1]
    return short.endswith("_") and not short.endswith("__")


def _first_shape(op: OpRecord) -> list[int] | None:
    shape = op.shapes[0] if op.shapes else None
    return shape if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else None


def _output_elements(op: OpRecord, kernel: k.Kernel | None) -> int:
    """Elements of the tensor ``op`` allocates for its result (0: none, or not known)."""
    name = base_name(op.name)
    if kernel is None:
        if name not in ALLOCATING_WRAPPERS:
            return 0
        if name in SIZED_BY_ARGUMENT:
            argument = 1 if name.startswith("new_") else 0
            size = _int_list(op.concrete[argument] if len(op.concrete) > argument else "", [])
            return _numel(size) if size else 0
        shape = _first_shape(op)
        return _numel(shape) if shape is not None else 0
    if isinstance(kernel, k.FrameworkOp) and name.endswith("_backward") and len(op.shapes) > 1:
        shape = op.shapes[1]  # a pooling backward's gradient has its input's shape
        return _numel(shape) if isinstance(shape, list) else 0
    if _in_place(op) or isinstance(kernel, (k.Reduction, k.Attention, k.Recurrent, k.FrameworkOp, k.Copy)):
        return 0  # reductions' results are small; pooling forwards, fused kernels: not modelled
    if isinstance(kernel, k.Gemm):
        if kernel.conv in ("", "forward"):
            return kernel.m * kernel.n * kernel.batch
        mask = str(op.concrete[-1]) if op.concrete else ""
        if name == "convolution_backward" and len(op.shapes) > 1 and not mask.startswith("[False"):
            shape = op.shapes[1]
            return _numel(shape) if isinstance(shape, list) else 0  # the input's gradient (the weight's is small)
        return 0
    if isinstance(kernel, k.Elementwise):
        tensors = [s for s in op.shapes if isinstance(s, list) and all(isinstance(d, int) for d in s)]
        if name in NEW_SIZE:
            return kernel.n
        if name == "embedding_dense_backward":  # the whole weight gradient: what the kernel counts past the rows read
            return kernel.n - _numel(tensors[0])
        return max((_numel(s) for s in tensors), default=0)
    return 0


def fresh_writes(trace: Trace, kernels: dict[int, k.Kernel]) -> dict[int, float]:
    """Op index -> bytes of freshly mapped memory (blocks of at least :data:`FRESH_BLOCK_BYTES`)
    that op writes first, for the ops in ``kernels`` (index -> the kernel it carries)."""
    fresh: dict[int, float] = {}
    for op in trace.ops:
        kernel = kernels.get(op.index)
        elements = _output_elements(op, kernel)
        if elements <= 0:
            continue
        writer = _first_whole_writer(trace, op, elements, kernels)
        payer = writer if writer is not None else (op.index if kernel is not None else None)
        if payer is None:
            continue
        nbytes = float(elements * k.dtype_bytes(kernels[payer].dtype))
        if nbytes >= FRESH_BLOCK_BYTES:
            fresh[payer] = max(fresh.get(payer, 0.0), nbytes)
    return fresh


def _first_whole_writer(trace: Trace, op: OpRecord, elements: int, kernels: dict[int, k.Kernel]) -> int | None:
    """The first descendant of ``op`` carrying a kernel that writes a tensor of ``elements`` in place."""
    stack = list(reversed(op.children))
    while stack:
        child = trace.ops[stack.pop()]
        shape = _first_shape(child)
        if child.index in kernels and _in_place(child) and shape is not None and _numel(shape) == elements:
            return child.index
        stack.extend(reversed(child.children))
    return None
