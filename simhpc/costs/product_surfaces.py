"""Measured products as efficiency surfaces: GEMMs by operand layout, matrix-vector products by
vector side and layout, convolutions by pass and class, fused attention and recurrent layers, each
the fraction of the host's peak FLOP/s interpolated over (log m, log n, log k, log batch) per dtype
and thread count (:class:`~simhpc.costs.interpolation.GemmSurface`), blended over the measured
thread counts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.far_points import at_distance, far_round_trip
from simhpc.costs.interpolation import GemmSurface, Surfaces, thread_blend
from simhpc.costs.kernels import Attention, Gemm, Recurrent, vector_side
from simhpc.costs.product_ops import is_line

SIXTEEN_BIT = ("bf16", "fp16")
ONE_GRADIENT = ("backward_input", "backward_weight")
"""Convolution backward passes computing one gradient, measured on their own."""
NATIVE_BACKENDS = frozenset(("Slow2d", "SlowDilated2d", "SlowTranspose2d", "Slow3d", "SlowDilated3d",
                             "SlowTranspose3d"))
"""The ``backend`` of a convolution point torch ran through its own kernels (:attr:`Gemm.native`)."""
NATIVE_LIKE_CHANNELS = 16
"""Output channels from which torch's own 1x1 kernels and oneDNN's run alike: within ~10 % an image
in six of seven shapes of 16-256 channels here (forward and both gradients, 1 thread, 8 against 16
images), 3-10x apart for heads to one or three channels. A native surface measured at heads only
borrows the oneDNN points from this width."""
WIDE = 64
"""Products at least this wide in every dimension run within ~30 % of each other in any operand
layout: their ``nn`` points stand in for other layouts there."""


def attention_dims(kernel: Attention) -> tuple[int, int, int, int]:
    """A fused attention as the (m, n, k, batch) of a GEMM surface with its products' FLOPs: the
    scores per head (``lq x lk``, one dimension: self-attention points have ``lq = lk``), the head
    size, 1, and heads x products."""
    return kernel.lq * kernel.lk, kernel.e, 1, kernel.batch * kernel.products


def recurrent_dims(kernel: Recurrent) -> tuple[int, int, int, int]:
    """A recurrent layer as the (m, n, k, batch) of a GEMM surface: the batch, the weights one step
    multiplies (gates x hidden x (input + hidden) elements), 1, and the steps."""
    return kernel.batch, kernel.gates * kernel.hidden * (kernel.width + kernel.hidden), 1, kernel.steps


def surface_key(layout: str, interleaved: str) -> str:
    """The GEMM surface of products of ``layout`` whose ``interleaved`` operands interleave."""
    return f"{layout}+{interleaved}" if interleaved else layout


class ProductSurfaces:
    """A calibration's product points of one BLAS (``blas``) as surfaces (``method``, ``smoothing``:
    :class:`~simhpc.costs.interpolation.GemmSurface`'s), its multi-thread GEMMs with the cores
    ``near`` or ``far`` apart (:mod:`simhpc.costs.far_points`)."""

    def __init__(self, calibration: Calibration, blas: str, method: str, smoothing: float,
                 cores: str = "near") -> None:
        self.blas = blas
        self.method = method
        self.smoothing = smoothing
        self._gemm: dict[str, Surfaces] = defaultdict(dict)
        """GEMM surfaces by operand layout."""
        self._vector: dict[tuple[str, str], Surfaces] = defaultdict(dict)
        """Matrix-vector and outer-product surfaces by vector side (:func:`vector_side`) and operand layout."""
        self._attention: dict[bool, Surfaces] = defaultdict(dict)
        """Fused-attention surfaces, forward (False) and backward (True)."""
        self._recurrent: dict[bool, Surfaces] = defaultdict(dict)
        """Recurrent-layer surfaces (oneDNN's LSTM), forward (False) and backward (True)."""
        self._conv: dict[tuple[str, bool, bool, bool, bool, bool], Surfaces] = defaultdict(dict)
        """Convolution surfaces by pass, whether the convolution is strided, grouped, 1-D, 1x1 and
        run by torch's own kernels."""
        cal = calibration
        self.channel_block = 16 if "avx512f" in cal.host.isa_flags else 8
        """Channels oneDNN computes together (its blocked layouts: 16 fp32 lanes with AVX-512, 8 with
        AVX2): a convolution to fewer costs as much as one to that many. Its surfaces hold the
        fraction of peak of the padded work: without its points of heads, the Zen 4 guest's 3x3
        grid (32-128 output channels) put a 64 -> 1 head on 16 x 32 x 32 at 2.8 ms at 1 thread
        (3.8 ms measured), against 0.2 ms from the unpadded fraction."""
        groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
        own = [row for row in cal.rows("gemm") if row.get("blas", "numpy") == self.blas]
        own, self.distance_estimated = at_distance(own, far_round_trip(cal, own), cores, method, smoothing)
        """How many multi-thread points measured in the other state than ``cores`` were taken at the
        speed-up of ``cores`` (:mod:`simhpc.costs.far_points`)."""
        vectors: dict[tuple[str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in own:
            side = vector_side(row["m"], row["n"], row["k"], row.get("batch", 1))
            if side:
                vectors[(side, row.get("layout", "nn"), row["dtype"], row["threads"])].append(row)
                continue
            groups[(row["dtype"], row["threads"], surface_key(row.get("layout", "nn"), row.get("interleaved", "")))
                   ].append(row)
        for (dtype, threads, layout), rows in sorted(groups.items()):
            wide_own = any(min(r["m"], r["n"], r["k"]) >= WIDE for r in rows)
            if layout != "nn" and not wide_own:  # measured narrow only: wide products differ little by layout
                rows = rows + [r for r in groups.get((dtype, threads, "nn"), []) if min(r["m"], r["n"], r["k"]) >= WIDE]
            self._gemm[layout][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.method, self.smoothing
            )
        for (side, layout, dtype, threads), rows in sorted(vectors.items()):
            self._vector[(side, layout)][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.method, self.smoothing
            )
        convs: dict[tuple[str, bool, bool, bool, bool, bool, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("conv"):
            conv_groups = row.get("groups", 1)
            key = (row["direction"], row.get("stride", 1) > 1, conv_groups > 1, is_line(row.get("image", ())),
                   row.get("taps") == 1, row.get("backend") in NATIVE_BACKENDS, row["dtype"], row["threads"])
            convs[key].append({**row, "batch": row["passes"] * conv_groups})
        for (direction, strided, grouped, line, pointwise, native, dtype, threads), rows in sorted(convs.items()):
            conv_class = (direction, strided, grouped, line, pointwise)
            if native and all(row["n"] < NATIVE_LIKE_CHANNELS for row in rows):
                rows = rows + [row for row in convs.get((*conv_class, False, dtype, threads), [])
                               if row["n"] >= NATIVE_LIKE_CHANNELS]
            elif not native and not grouped:  # the fraction of peak of the work padded to oneDNN's block
                rows = [{**row, "n": self.padded(row["n"])} for row in rows]
            self._conv[(*conv_class, native)][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.method, self.smoothing
            )
        fused: dict[tuple[bool, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("attention"):
            backward = bool(row.get("backward", False))
            measured = Attention(dtype=row["dtype"], batch=row["batch"], lq=row["lq"], lk=row["lk"], e=row["e"],
                                 backward=backward)
            m, n, k, batch = attention_dims(measured)
            fused[(backward, row["dtype"], row["threads"])].append({**row, "m": m, "n": n, "k": k, "batch": batch})
        for (backward, dtype, threads), rows in sorted(fused.items()):
            self._attention[backward][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.method, self.smoothing
            )
        layers: dict[tuple[bool, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("recurrent"):
            backward = bool(row.get("backward", False))
            measured = Recurrent(dtype=row["dtype"], steps=row["length"], batch=row["batch"], width=row["width"],
                                 hidden=row["hidden"], gates=row["gates"], backward=backward)
            m, n, k, batch = recurrent_dims(measured)
            # the surface's FLOPs are 2 m n k batch: the row's time stands for the layer's own FLOPs
            scale = 2.0 * m * n * k * batch / measured.flops()
            layers[(backward, row["dtype"], row["threads"])].append(
                {**row, "m": m, "n": n, "k": k, "batch": batch, "time_s": row["time_s"] * scale})
        for (backward, dtype, threads), rows in sorted(layers.items()):
            self._recurrent[backward][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.method, self.smoothing
            )

    def covers(self, dtype: str) -> bool:
        """Whether products of ``dtype`` can be timed: GEMM points at all, and of their own dtype for
        a 16-bit one (on a CPU without 16-bit arithmetic it runs 10-50x below fp32, which fp32's
        points cannot tell)."""
        if dtype in SIXTEEN_BIT and not any(d == dtype for surfaces in self._gemm.values() for d, _ in surfaces):
            return False
        return bool(self._gemm.get("nn"))

    def gemm_fraction(self, kernel: Gemm, threads: int) -> float | None:
        """Measured fraction of the host's peak a GEMM reaches on ``threads`` cores (None: no points).

        A product with transposed operands uses the points of its ``layout`` when the calibration
        has them (with the ``nn`` points of products at least ``WIDE`` in every dimension); a
        batched one with interleaved operands those of its layout and interleaving first. A
        convolution (``kernel.conv``) uses the calibration's convolution points of its pass,
        grouped (depthwise) or not, 1x1 or not, 1-D or not, strided or not and run by torch's own
        kernels or not like the kernel (else the nearest class's: grouping first, then the
        kernel's size, then dimensionality, stride and the backend),
        else the GEMM points; a one-gradient pass without points of its own uses those of a
        two-gradient ``backward`` (older calibrations), and a two-gradient backward with
        one-gradient points takes the time of both passes. The kernel's own dtype's points come
        first (16-bit products on a CPU without 16-bit arithmetic run 10-50x below fp32 here), in
        its layout if measured there, else ``nn``; a dtype never measured uses fp32's.
        """
        if kernel.conv == "backward" and not self._measured("backward") and all(map(self._measured, ONE_GRADIENT)):
            halves = [replace(kernel, conv=part, batch=max(1, kernel.batch // 2)) for part in ONE_GRADIENT]
            parts = [self.gemm_fraction(half, threads) for half in halves]
            if all(parts):  # the same work per pass: the time of both is 1/f_input + 1/f_weight
                return 2.0 / sum(1.0 / f for f in parts)  # type: ignore[operator]
        candidates = [self._gemm.get(kernel.layout, {}), self._gemm.get("nn", {})]
        side = "" if kernel.conv else vector_side(kernel.m, kernel.n, kernel.k, kernel.batch)
        if side:  # its own layout's matrix-vector points first, then another layout's
            candidates[:0] = [self._vector.get((side, layout), {})
                              for layout in dict.fromkeys((kernel.layout, "nn", "nt", "tn"))]
        if kernel.interleaved:
            candidates.insert(0, self._gemm.get(surface_key(kernel.layout, kernel.interleaved), {}))
        if kernel.conv:
            strided, grouped = kernel.stride > 1, kernel.groups > 1
            passes = (kernel.conv, "backward") if kernel.conv in ONE_GRADIENT else (kernel.conv,)
            candidates[:0] = [self._conv.get((p, s, g, line, one, native), {}) for g in (grouped, not grouped)
                              for one in (kernel.pointwise, not kernel.pointwise)
                              for line in (kernel.line, not kernel.line) for p in passes
                              for s in (strided, not strided) for native in (kernel.native, not kernel.native)]
        n = self.padded(kernel.n) if kernel.conv and not kernel.native and kernel.groups == 1 else kernel.n
        fraction = self._blended_fraction(candidates, kernel.dtype, threads, (kernel.m, n, kernel.k, kernel.batch))
        return None if fraction is None else fraction * kernel.n / n

    def padded(self, channels: int) -> int:
        """An ungrouped oneDNN convolution's output channels rounded up to its block (grouped ones
        block over the groups' channels together)."""
        return -(-channels // self.channel_block) * self.channel_block

    def _blended_fraction(self, candidates: list[Surfaces], dtype: str, threads: int,
                          dims: tuple[int, int, int, int]) -> float | None:
        """The fraction of peak at ``dims`` from the first candidate surfaces measured in ``dtype``
        (else the first with any points, in fp32), blended over the measured thread counts."""
        own = [c for c in candidates if any(key[0] == dtype for key in c)]
        surfaces = own[0] if own else next((c for c in candidates if c), {})
        dtype = dtype if own else "fp32"
        blend = thread_blend(sorted(t for d, t in surfaces if d == dtype), threads)
        if not blend:
            return None
        return sum(w * surfaces[(dtype, t)].fraction(*dims) for t, w in blend)

    def _measured(self, conv_pass: str) -> bool:
        """Whether the calibration has convolution points of ``conv_pass``."""
        return any(surfaces for (name, *_), surfaces in self._conv.items() if name == conv_pass)

    def attention_fraction(self, kernel: Attention, threads: int) -> float | None:
        """A fused attention's fraction of peak from the ``attention`` points of its pass (None: none)."""
        return self._blended_fraction([self._attention.get(kernel.backward, {})], kernel.dtype, threads,
                                      attention_dims(kernel))

    def recurrent_fraction(self, kernel: Recurrent, threads: int) -> float | None:
        """A recurrent layer's fraction of peak from the ``recurrent`` points of its pass (None: none)."""
        return self._blended_fraction([self._recurrent.get(kernel.backward, {})], kernel.dtype, threads,
                                      recurrent_dims(kernel))
