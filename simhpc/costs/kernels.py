"""Kernel descriptors: what a piece of work is (shape, dtype), independent of where it runs.

Each descriptor knows its floating-point work and the bytes it must move to and from memory
(compulsory traffic, assuming operands are streamed once). The cost model turns these into a
duration on a device.
"""

from __future__ import annotations

from dataclasses import dataclass

from simhpc.hardware.specs import DTYPE_BITS


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``."""
    try:
        return DTYPE_BITS[dtype] // 8
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})") from None


@dataclass(frozen=True)
class Kernel:
    """Base class of kernel descriptors."""

    dtype: str

    kind = "kernel"

    def flops(self) -> float:
        """Floating-point operations."""
        raise NotImplementedError

    def bytes(self) -> float:
        """Compulsory memory traffic in bytes."""
        raise NotImplementedError

    def fetched_bytes(self) -> float:
        """The bytes it brings into the caches from memory, each line once (its traffic, unless
        a kernel says otherwise: :meth:`Elementwise.fetched_bytes`)."""
        return self.bytes()

    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte."""
        moved = self.bytes()
        return self.flops() / moved if moved else float("inf")


LAYOUTS = ("nn", "nt", "tn", "tt")
"""GEMM operand layouts: ``t`` marks an operand stored transposed (A, then B)."""
INTERLEAVED = ("", "a", "b", "ab")
"""Operands of a batched product whose matrices interleave in memory (``a``, ``b``, both)."""
CONV_PASSES = ("", "forward", "backward", "backward_input", "backward_weight")
"""A GEMM's ``conv``: a product (``""``) or the passes of a convolution it stands for."""


@dataclass(frozen=True)
class Gemm(Kernel):
    """C[m,n] = A[m,k] @ B[k,n] (+ C), ``batch`` independent products.

    ``conv``: ``""`` for a BLAS product; for a convolution lowered to an implicit GEMM (the
    forward's ``m = N x H_out x W_out``, ``n = C_out``, ``k = C_in x k_h x k_w``), the passes it
    runs: ``"forward"``, ``"backward"`` (both gradients, ``batch`` = 2 x groups),
    ``"backward_input"`` or ``"backward_weight"`` (one gradient), which a calibration may time
    from its own convolution points. ``stride``: the convolution's largest stride (1 for a
    product). ``groups``: its groups (``batch`` = groups x passes; ``m``, ``n``, ``k`` per group).

    ``line``: a 1-D convolution (one spatial extent, or an image one pixel high under a kernel
    one tap high), whose kernels differ from 2-D ones of the same m, n, k (a depthwise 1x5 weight
    gradient ran 8x slower here than a 3x3 one of the same size). ``pointwise``: a convolution
    with a kernel of one tap (1x1), which oneDNN runs as other kernels than wider ones.
    ``native``: a convolution torch runs through its own kernels (``_slow_conv2d``: a BLAS product
    per image) instead of oneDNN's, as it does a 1x1 one of under 16 images on one thread; the
    two differ most for a head to few channels (64 -> 1 channel on 16 x 64 x 64 images, 1 thread:
    forward 25 us an image natively, 187 through oneDNN here).

    ``interleaved``: which operands of a batched product are views whose matrices interleave in
    memory (``"a"``, ``"b"``, ``"ab"``): the heads of a multi-head attention, sliced out of one
    projection's output, are rows of ``head size`` floats a whole row of heads apart (a
    ``[64, 128, 64]`` query of strides ``(64, 4096, 1)``); MKL's batched kernels ran them 4-25 %
    slower here than contiguous ones.

    ``layout``: whether ``A`` and ``B`` are stored transposed (column-major), ``"nn"``, ``"nt"``,
    ``"tn"`` or ``"tt"``: a linear layer's forward multiplies by its transposed weight (``nt``), its
    weight gradient by the transposed input (``tn``). BLAS kernels for narrow products differ by
    layout (2-3x here for ``n`` < 16); a calibration with points of that layout times it from them.
    """

    m: int = 1
    n: int = 1
    k: int = 1
    batch: int = 1
    conv: str = ""
    layout: str = "nn"
    stride: int = 1
    groups: int = 1
    line: bool = False
    pointwise: bool = False
    native: bool = False
    interleaved: str = ""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"GEMM layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.interleaved not in INTERLEAVED:
            raise ValueError(f"interleaved operands must be one of {INTERLEAVED}, got {self.interleaved!r}")
        if self.conv not in CONV_PASSES:
            raise ValueError(f"convolution pass must be one of {', '.join(map(repr, CONV_PASSES))}, got {self.conv!r}")

    kind = "gemm"

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def outputs(self) -> int:
        """Elements of ``C``, over all ``batch`` products."""
        return self.m * self.n * self.batch

    def bytes(self) -> float:
        return float(self.m * self.k + self.k * self.n + self.m * self.n) * self.batch * dtype_bytes(self.dtype)


def vector_side(m: int, n: int, k: int, batch: int) -> str:
    """Which operand of a single product is a vector: ``"m"`` (m = 1, a row vector times a matrix),
    ``"n"`` (n = 1, a matrix times a column vector), ``"k"`` (k = 1: both, an outer product), else
    ``""``. BLAS runs such a product as a matrix-vector kernel, which streams its matrix once: 5.5 us
    for a 256 x 1 x 256 product here, against 75 us for 256 x 4 x 256; torch an outer product as a
    rank-1 update, which writes its result once: 4.0 us for 128 x 512 x 1, against 13 us for
    128 x 512 x 4 and 23 us for 128 x 512 x 2 (the Zen 5 guest, session 49). Either runs on one
    thread whatever the thread count."""
    if batch != 1:
        return ""
    return "m" if m == 1 else "n" if n == 1 else "k" if k == 1 else ""


@dataclass(frozen=True)
class Attention(Kernel):
    """Fused (flash) attention over ``batch`` heads: scores ``S = Q K^T`` (``lq x lk``, head size
    ``e``), an online softmax (one exponential per score) and ``O = P V``.

    ``backward``: recomputes ``S`` and ``P`` and forms ``dV``, ``dP``, ``dQ`` and ``dK``: five
    products of the forward's size instead of two, and the same exponentials again.
    """

    batch: int = 1
    lq: int = 1
    lk: int = 1
    e: int = 1
    backward: bool = False

    kind = "attention"

    @property
    def products(self) -> int:
        """Products of ``lq x lk x e`` per head."""
        return 5 if self.backward else 2

    @property
    def exponentials(self) -> int:
        """Softmax exponentials (one per score)."""
        return self.batch * self.lq * self.lk

    def gemm(self) -> Gemm:
        """Its products as one batched GEMM descriptor."""
        return Gemm(dtype=self.dtype, m=self.lq, n=self.lk, k=self.e, batch=self.batch * self.products)

    def flops(self) -> float:
        return self.gemm().flops() + 10.0 * self.exponentials

    def bytes(self) -> float:
        tensors = (8 if self.backward else 4) * self.e * (self.lq + self.lk) / 2  # q, k, v, o (+ their grads)
        return tensors * self.batch * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Recurrent(Kernel):
    """One layer of a gated recurrent network over ``steps`` time steps (oneDNN's RNN primitive:
    an LSTM has 4 gates, a GRU 3, a plain RNN 1).

    Forward: the input projection of every step as one product (``steps x batch`` rows), then one
    small product per step with the previous hidden state (the recurrence serialises them), and
    the gate nonlinearities. Backward: the recurrent input-gradient products step by step, then
    the input gradient and both weight gradients as products over all steps: twice the forward's
    multiply-adds.
    """

    steps: int = 1
    batch: int = 1
    width: int = 1
    """Input features."""
    hidden: int = 1
    gates: int = 4
    backward: bool = False

    kind = "recurrent"

    def step_gemm(self) -> Gemm:
        """The per-step product with the hidden state (``h W_hh^T``, or its gradient ``dG W_hh``)."""
        if self.backward:
            return Gemm(dtype=self.dtype, m=self.batch, n=self.hidden, k=self.gates * self.hidden)
        return Gemm(dtype=self.dtype, m=self.batch, n=self.gates * self.hidden, k=self.hidden, layout="nt")

    def sequence_gemms(self) -> tuple[Gemm, ...]:
        """The products over all steps at once."""
        rows, wide = self.steps * self.batch, self.gates * self.hidden
        if not self.backward:
            return (Gemm(dtype=self.dtype, m=rows, n=wide, k=self.width, layout="nt"),)
        return (
            Gemm(dtype=self.dtype, m=rows, n=self.width, k=wide),  # dX = dG W_ih
            Gemm(dtype=self.dtype, m=wide, n=self.width, k=rows, layout="tn"),  # dW_ih = dG^T X
            Gemm(dtype=self.dtype, m=wide, n=self.hidden, k=rows, layout="tn"),  # dW_hh = dG^T H
        )

    @property
    def gate_elements(self) -> int:
        """Gate pre-activations of all steps (each passes a sigmoid or tanh, and its derivative backward)."""
        return self.steps * self.batch * self.gates * self.hidden

    def flops(self) -> float:
        products = self.steps * self.step_gemm().flops() + sum(g.flops() for g in self.sequence_gemms())
        return products + 10.0 * self.gate_elements

    def bytes(self) -> float:
        weights = self.gates * self.hidden * (self.width + self.hidden)
        sequences = self.steps * self.batch * (self.width + (2 + self.gates) * self.hidden)
        return float((2 if self.backward else 1) * (weights + sequences)) * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Elementwise(Kernel):
    """An elementwise map over ``n`` elements reading ``inputs`` and writing ``outputs`` arrays.

    ``in_place``: its output overwrites one of its inputs (``x.add_(y)``, ``x.relu_()``), so the
    lines it writes are those it has just read, not lines of another array fetched first."""

    n: int = 1
    op: str = "add"
    flops_per_element: float = 1.0
    inputs: int = 2
    outputs: int = 1
    in_place: bool = False

    kind = "elementwise"

    def flops(self) -> float:
        return self.flops_per_element * self.n

    def bytes(self) -> float:
        return float(self.inputs + self.outputs) * self.n * dtype_bytes(self.dtype)

    def fetched_bytes(self) -> float:
        """The distinct bytes it touches, each fetched into the caches once: its inputs, and its
        outputs unless it writes them in place (a line written first is read first)."""
        arrays = self.inputs if self.in_place else self.inputs + self.outputs
        return float(arrays) * self.n * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Reduction(Kernel):
    """Reduce ``n`` elements to ``outputs`` values (sum, max, norm).

    ``inner``: for a reduction over leading dimensions only (a linear layer's bias gradient, a sum
    of ``[rows, width]`` over its rows), the contiguous elements each reduced row keeps (``width``);
    0 when the last dimension is reduced."""

    n: int = 1
    outputs: int = 1
    op: str = "sum"
    inner: int = 0

    kind = "reduction"

    def flops(self) -> float:
        return float(self.n)

    def bytes(self) -> float:
        return float(self.n + self.outputs) * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Copy(Kernel):
    """Copy ``nbytes`` within one memory (read + write).

    ``run``: 0 for a streaming copy; else a layout-changing copy (a transpose, a permute) whose
    source holds ``run`` elements contiguously in the destination's order. ``rows`` and
    ``length``: a copy of run 1 that transposes blocks (a channels-last activation made
    contiguous: ``rows`` channels by ``length`` pixels an image), 0 when not known.
    """

    nbytes: float = 0.0
    dtype: str = "fp32"
    run: int = 0
    rows: int = 0
    length: int = 0

    kind = "copy"

    def flops(self) -> float:
        return 0.0

    def bytes(self) -> float:
        return 2.0 * self.nbytes


@dataclass(frozen=True)
class FrameworkOp(Kernel):
    """A framework op with no BLAS or streaming analogue, timed from a calibration's measurements
    of the same ``op`` by the bytes it moves: windowed pooling (``max_pool2d_with_indices``,
    ``avg_pool2d`` and their backwards), random fills (``bernoulli``, ``uniform``, ``normal``),
    sorts (``sort``), resampling, edge padding and flips (``upsample_bilinear2d``,
    ``grid_sampler_2d``, ``reflection_pad2d``, ``flip``, ...), and an embedding bag's accesses (as
    the ``index_select`` and ``index_add`` they are).

    ``nbytes``: bytes read and written, int64 pooling and sort indices included. A pooling forward
    also carries its geometry, since its loop's work is not its bytes: ``window`` (the input
    elements each output reads), ``outputs`` and ``inputs`` (elements); 0 for other ops. ``rows``:
    the independent slices the op works through one by one, its threads splitting them (a sort's
    rows: the calibration times one row of a length, whose cost per byte grows with it).
    ``serial``: the op runs on one thread whatever the thread count, so its stand-in's 1-thread
    points time it (an embedding bag's backward took 779 us at 2 threads, 616 us at 1, where
    ``index_add``'s points run twice as fast at 2).
    """

    op: str = ""
    nbytes: float = 0.0
    window: int = 0
    outputs: int = 0
    inputs: int = 0
    rows: int = 1
    serial: bool = False

    kind = "framework"

    def flops(self) -> float:
        return 0.0

    def bytes(self) -> float:
        return float(self.nbytes)


@dataclass(frozen=True)
class Stencil(Kernel):
    """A ``points``-point stencil sweep over ``cells`` cells (AMR blocks: 16^3 cells each)."""

    cells: int = 1
    points: int = 7

    kind = "stencil"

    def flops(self) -> float:
        return (2.0 * self.points - 1.0) * self.cells

    def bytes(self) -> float:
        return 2.0 * self.cells * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class HashProbe(Kernel):
    """``probes`` lookups in a hash table of ``table_bytes``; each touches ``lines`` cache lines."""

    probes: int = 1
    table_bytes: float = 0.0
    lines: float = 1.0
    dtype: str = "int8"

    kind = "hash_probe"

    def flops(self) -> float:
        return 0.0

    def bytes(self) -> float:
        return 64.0 * self.lines * self.probes
