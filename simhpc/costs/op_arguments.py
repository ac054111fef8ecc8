"""What torch.profiler records of an op's arguments, read into typed values: tensor shapes and
dtypes (``Input Dims``, ``Input type``), concrete scalars and lists (``Concrete Inputs``), and what
strides (``Input Strides``) say of a tensor's layout; and :class:`OpKernel`, what an op computes.

Integer tensors use the float type of the same width for their bytes (``long`` as fp64).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simhpc.costs.kernels import Kernel
from simhpc.costs.opnames import DTYPES


@dataclass(frozen=True)
class OpKernel:
    """What an op computes: a kernel, nothing (``kernel is None and reason == ''``), or why not modelled."""

    kernel: Kernel | None
    reason: str = ""


NOTHING = OpKernel(None)


MAX_DIM = 1 << 40
"""Largest tensor dimension or element count taken as real (4 TiB of fp32: a larger one is a
corrupt trace, not a workload)."""


def is_shape(value: Any) -> bool:
    """Whether a recorded ``Input Dims`` entry is a tensor's shape (a list of ints)."""
    return isinstance(value, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in value)


def bad_shape(shapes: list[Any]) -> Any:
    """The first recorded shape whose dimensions are not integers in ``0..MAX_DIM`` or whose
    element count exceeds ``MAX_DIM``, or None."""
    for shape in shapes:
        nested = shape if isinstance(shape, list) and shape and all(isinstance(s, list) for s in shape) else [shape]
        for candidate in nested:
            if not isinstance(candidate, list) or not candidate:
                continue
            if (any(isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DIM for d in candidate)
                    or math.prod(candidate) > MAX_DIM):
                return candidate
    return None


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


NOT_TENSORS = ("Scalar", "ScalarList", "", "None", "GenericList")
"""``Input type`` entries of arguments that are not tensors."""


def tensors_of(shapes: list[Any], dtypes: list[str]) -> list[tuple[list[int], str]]:
    """(shape, dtype) of each tensor argument; tensor lists are flattened; scalars dropped."""
    found = []
    for i, shape in enumerate(shapes):
        kind = dtypes[i] if i < len(dtypes) else ""
        if kind in NOT_TENSORS:
            continue
        if kind == "TensorList" and isinstance(shape, list):
            found.extend((s, "float") for s in shape if is_shape(s))
        elif is_shape(shape):
            found.append((shape, kind))
    return found


def dtype_of(kind: str) -> str:
    return DTYPES.get(kind, "fp32")


FLOATING = frozenset({"float", "double", "c10::Half", "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e5m2"})
"""torch's names of floating-point tensor types (indices, masks and counts are the others)."""


def data_dtype(tensors: list[tuple[list[int], str]]) -> str:
    """The dtype of the largest tensor, a floating-point one among equally large ones: a 0-dim
    operand (Adam's ``double`` step size in ``mul``) does not set the type the elementwise work
    runs in, nor does ``where``'s bool condition or ``gather``'s int64 index beside fp32 values."""
    return dtype_of(max(tensors, key=lambda tensor: (numel(tensor[0]), tensor[1] in FLOATING))[1])


def int_list(text: Any, default: list[int]) -> list[int]:
    if not isinstance(text, str) or not text.strip():
        return default
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return list(value)
    return default


SCALAR_TYPES = {0: "int8", 1: "int8", 2: "fp16", 3: "fp32", 4: "fp64", 5: "fp16", 6: "fp32", 7: "fp64", 11: "int8",
                15: "bf16"}
"""torch's ``ScalarType`` codes (a ``dtype`` argument's concrete value) -> the dtype of their width."""


def number(text: Any) -> float | None:
    """A concrete scalar argument's value (``'12800'``, ``'0.01'``), None if it is not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def floats(text: Any) -> list[float]:
    """A recorded list of numbers (``'[2., 2.]'``), [] if it is not one."""
    try:
        value = ast.literal_eval(text.strip()) if isinstance(text, str) and text.strip() else None
    except (ValueError, SyntaxError):
        return []
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return []


def is_transposed(shape: list[int], strides: Any) -> bool:
    """Whether a matrix operand (its last two dims) is stored column-major."""
    if len(shape) < 2 or not isinstance(strides, list) or len(strides) != len(shape):
        return False
    return shape[-1] > 1 and shape[-2] > 1 and strides[-2] == 1 and strides[-1] != 1


def is_interleaved(shape: list[int], strides: Any) -> bool:
    """Whether a batched operand's matrices interleave in memory: its batch stride is smaller than
    a matrix (heads sliced out of one projection's output)."""
    if len(shape) != 3 or shape[0] < 2 or not isinstance(strides, list) or len(strides) != 3:
        return False
    return 0 < strides[0] < shape[1] * shape[2]


def per_axis(values: list[int], axis: int) -> int:
    """A pooling parameter for one axis (a single value applies to both)."""
    return values[axis] if axis < len(values) else values[-1]


CHANNELS_LAST = "@channels_last"
"""Suffix of a framework op's name for its channels-last (NHWC) variant, measured on its own:
ATen pools an NHWC image across its channels, vectorised (a 3x3 max pool 10x faster here)."""


def channels_last(shape: list[int], strides: Any) -> bool:
    """Whether an ``[N, C, H, W]`` tensor with these strides is stored channels-last (NHWC)."""
    if len(shape) != 4 or not isinstance(strides, list) or len(strides) != 4 or shape[1] < 2:
        return False
    return strides[1] == 1 and strides[3] == shape[1]


def contiguous_run(shape: list[int], strides: Any) -> int:
    """Elements the source holds contiguously in row-major (destination) order: the whole tensor
    when ``strides`` are row-major or broadcast (or unknown), 1 for a transpose, the head size
    for an attention head permute."""
    total = numel(shape)
    if not isinstance(strides, list) or len(strides) != len(shape):
        return total
    if any(stride == 0 for size, stride in zip(shape, strides) if size > 1):
        return total  # a broadcast source: read from cache, streams like a copy
    run = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size > 1 and stride != run:
            return run
        run *= size
    return total


def transposed_block(shape: list[int], strides: Any) -> tuple[int, int]:
    """(rows, length) of a copy that transposes blocks: the source, in the destination's order and
    with dimensions that stay contiguous merged, is ``[..., rows, length]`` with strides ``[...,
    1, rows]`` (a channels-last ``[N, C, H, W]``: C rows of H x W); (0, 0) for any other layout."""
    if not isinstance(strides, list) or len(strides) != len(shape):
        return 0, 0
    dims: list[tuple[int, int]] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    if len(dims) < 2 or dims[-2][1] != 1 or dims[-1][1] != dims[-2][0]:
        return 0, 0
    return dims[-2][0], dims[-1][0]
