"""The calibrated efficiency model: kernel efficiencies interpolated from measured points.

:class:`CalibratedEfficiency` implements :class:`~simhpc.costs.model.EfficiencyModel` from a
:class:`~simhpc.costs.calibration_file.Calibration`, from its products' surfaces
(:mod:`simhpc.costs.product_surfaces`), its memory-bound curves (:mod:`simhpc.costs.stream_curves`),
the cold products' fits (:mod:`simhpc.costs.cold_products`) and a training step's transitions
(:mod:`simhpc.costs.transitions`):

- **GEMM** (and anything with a GEMM descriptor: convolutions as implicit GEMMs, timed from the
  calibration's own convolution points of their pass, stride class and grouping when it has them, a
  backward computing both gradients as its input-gradient pass then its weight-gradient pass;
  products with transposed operands from the points of their layout when it has them): the measured
  fraction of the host's peak FLOP/s, per dtype and thread count, from the points of one BLAS
  (``blas``: ``numpy``, numpy's OpenBLAS, or ``torch``, PyTorch's MKL / oneDNN: predict a
  workload with the library it multiplies with), interpolated over
  (log2 m, log2 n, log2 k, log2 batch) with a thin-plate-spline ``RBFInterpolator`` (smoothing
  0.3; or ``gemm_method="linear"``: ``LinearNDInterpolator``, nearest measured point outside the
  hull; :mod:`simhpc.costs.interpolation`), clamped to the measured range. A dtype with points
  of its own (the torch bf16/fp16 products) uses them; dtypes without points use the fp32 curve as
  a fraction of their own peak.
- **Memory-bound kernels** (elementwise, reduction, copy, layout-changing copy, stencil, hash probe): the measured time
  interpolated over the working set (log-log PCHIP, clamped to the measured range), expressed as a
  fraction of the bandwidth the roofline gives the same number of cores. A streaming kernel smaller
  than the smallest measured array (a few KiB) takes as long as that array did (a floor, not a
  rate). A layout-changing copy (``Copy.run > 0``) interpolates between the curves of the two
  measured runs nearest its own (log-log in the run); below their smallest tensor (512 KiB) it
  runs at that tensor's rate, no faster than the cheapest measured ATen call. With
  ``cache="cold"`` an elementwise or reduction kernel (and a layout-changing copy, pooling or
  random fill) takes at least what the cold ``add``/``sum`` points (single calls after a cache
  flush) give its bytes: a framework op inside a training step finds its operands out of cache.
  Those points' ``add`` writes a third array, each line of which is fetched before it is
  written, so an op that writes in place (``x.add_(y)``, ``Elementwise.in_place``) is given only
  the bytes it reads; its working set, warm or cold, is its distinct bytes. Inside a traced step
  the inputs a recent op wrote are still in cache: those bytes take their share of the warm time
  and only the rest the cold rate (:meth:`CalibratedEfficiency.stream_in_step_s`,
  :mod:`simhpc.trace.stream_reuse`).
  A BLAS product then also pays what its ``gemm_cold``
  points say a single call after a cache flush takes over repeated calls (a constant, for the
  BLAS's code and buffers, plus its bytes over a bandwidth no lower than the DRAM roofline's; 41-72 us
  a call plus 16-26 us per MB on the 2-core Xeon reference, about twice a 64 x 4096 x 10 product's
  warm time), less as the bytes brought into its cores' private caches since the previous
  product fill fewer of them, but for the part the ``gemm_cold`` points right after a product of another layout
  give its layout's kernels (10-11 us there), which counts the bytes since the previous product
  of its own layout (:mod:`simhpc.trace.product_reuse`); a calibration
  without them charges its bytes on the cold ``add`` curve less the same bytes on the warm one.
  A recurrent layer's per-step products run back to back on the same weights and do not pay it.
- **Framework ops** without a BLAS or streaming analogue (windowed pooling, random fills): the
  measured time per byte of the very op (torch points of the ``framework`` section) over bytes
  moved, like the memory-bound kernels; not covered when the calibration did not measure the op.
  A pooling forward of another window or stride than the measured one is scaled by its work per
  byte against the measured one's (:func:`pool_work`).
  Below the op's smallest measured size (32 KiB to 1 MiB) it runs at that size's rate, no faster
  than the cheapest measured ATen call. With ``blas="torch"`` (a torch trace) an elementwise
  op with torch points of its own name (ATen's ``gelu``, ``tanh``, ... ) is timed from them rather
  than from the C kernels' curves, and no op that computes takes less than that cheapest call
  (:meth:`CalibratedEfficiency.dispatch_floor`, 1.3 us here: a 4 x 4 x 4 ``torch.mm``).
- **Fused attention**: its products as one batched GEMM, plus one exponential per score at the
  measured ``exp`` rate of an L1-resident array (the C kernel's: arithmetic inside a fused kernel).
- **Recurrent layers**: from the calibration's ``recurrent`` points (suite 19: oneDNN's LSTM layer,
  forward and backward) where it has them, the layer's FLOPs at the fraction of peak interpolated
  over (batch, weights per step, steps); else the input projection as one product, one product
  with the hidden state per step, the gates of each step at the C kernel's ``tanh`` rate (15-28 %
  over a traced 128 -> 256 layer on the Zen 2 guest).
- **Threads**: thread counts between two measured ones interpolate the fractions linearly; more
  threads than measured reuse the largest measured count's fractions.

The non-binding side of the roofline gets an efficiency that keeps it non-binding, so that on the
calibrated host ``CostModel(CalibratedEfficiency(cal)).duration(kernel, host_cpu, cores)`` equals
the interpolated measured time (exactly at measured points with ``gemm_method="linear"``).
Efficiencies are fractions of the *DRAM* roofline, so kernels whose working set fits in cache get
memory efficiencies above 1.

**Other devices**: a CPU of the catalog gets the host's fractions (a transfer assumption: a
kernel reaches the same fraction of peak and of bandwidth on a similar CPU); GPUs fall back to
:class:`~simhpc.costs.model.ConstantEfficiency` (or the ``fallback`` given), since a CPU
calibration says nothing about GPU kernels.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.cold_products import cold_product_fits, path_constants
from simhpc.costs.interpolation import thread_blend
from simhpc.costs.kernels import (
    LAYOUTS,
    Attention,
    Elementwise,
    Gemm,
    Kernel,
    Recurrent,
    dtype_bytes,
)
from simhpc.costs.model import ConstantEfficiency, Device, EfficiencyModel
from simhpc.costs.product_surfaces import ProductSurfaces
from simhpc.costs.stream_curves import COLD, StreamCurves
from simhpc.costs.transitions import TransitionCurves
from simhpc.hardware.specs import CpuSpec

GEMM_METHOD = "rbf"
GEMM_SMOOTHING = 0.3
"""Default GEMM interpolation: chosen by leave-one-out error on the committed calibration
(``validation/calibration/loo.py``)."""
ATTENTION_BLOCK = 16 << 10
"""Working set (bytes) whose measured ``exp`` rate times a fused attention's softmax: a block of
scores in L1."""


class CalibratedEfficiency:
    """Efficiencies interpolated from a calibration (see the module docstring).

    Args:
        calibration: a validated calibration (:func:`~simhpc.costs.calibration_file.load_calibration`).
        fallback: the model for devices and kernels the calibration does not cover
            (default :class:`ConstantEfficiency`).
        gemm_method: ``"rbf"`` or ``"linear"`` GEMM interpolation (see :class:`GemmSurface`).
        smoothing: the RBF's smoothing (0: through every measured point).
        blas: whose GEMM points to use, ``"numpy"`` or ``"torch"`` (default ``"numpy"``); a backend
            the calibration did not measure is a :class:`ValueError`.
        cache: ``"warm"`` (default): memory-bound kernels run at the rates of repeated calls over
            the same arrays, cache-resident when they fit; ``"cold"``: no faster than the cold
            ``add``/``sum`` points (single calls after a cache flush, i.e. from DRAM), the state of
            a framework op's operands inside a training step, and BLAS products pay
            :meth:`cold_operands_s` on top. Without cold points, ``"cold"`` is ``"warm"``.
        cores: ``"near"`` (default) or ``"far"``: multi-thread products timed as with the cores
            near or far apart (:mod:`~simhpc.costs.far_points`: the points measured in the other
            state at this one's speed-up over their 1-thread points).
    """

    def __init__(
        self,
        calibration: Calibration,
        fallback: EfficiencyModel | None = None,
        gemm_method: str = GEMM_METHOD,
        smoothing: float = GEMM_SMOOTHING,
        blas: str = "numpy",
        cache: str = "warm",
        cores: str = "near",
    ) -> None:
        if cache not in ("warm", "cold"):
            raise ValueError(f"cache must be 'warm' or 'cold', got {cache!r}")
        self.cache = cache
        if gemm_method not in ("rbf", "linear"):
            raise ValueError(f"gemm_method must be 'rbf' or 'linear', got {gemm_method!r}")
        if blas not in calibration.gemm_backends():
            raise ValueError(
                f"{calibration.source} has no GEMM points measured through {blas!r} "
                f"(it has: {', '.join(calibration.gemm_backends())}); "
                "re-run 'simhpc calibrate' where that BLAS is installed"
            )
        self.blas = blas
        self.calibration = calibration
        self.fallback = fallback or ConstantEfficiency()
        self.gemm_method = gemm_method
        self.smoothing = smoothing
        self.cores = cores
        self.products = ProductSurfaces(calibration, blas, gemm_method, smoothing, cores)
        """GEMM, convolution, fused-attention and recurrent-layer surfaces."""
        self.streams = StreamCurves(calibration, blas, cache)
        """Memory-bound kernels and framework ops: measured curves over their working set."""
        self._build()

    # -- construction -------------------------------------------------------------------------

    def _build(self) -> None:
        cal = self.calibration
        self._cold_product = cold_product_fits(cal.rows("gemm_cold"), self.blas)
        self._path_constant = {layout: path_constants(cal.rows("gemm_cold"), self.blas, layout)
                               for layout in (None, *LAYOUTS)}
        faults: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for row in cal.rows("first_touch"):
            buffer = row["pages"] * row["page_bytes"]
            faults[row["threads"]].append((math.log(buffer), row["time_s"] / row["pages"]))
        self._page_fault_s = {threads: np.array(sorted(points)).T for threads, points in faults.items()}
        """Per thread count: the logarithms of the buffers' bytes, ascending, and a page's seconds in each."""
        self._unmap_s = {row["threads"]: row["time_s"] / row["pages"] for row in cal.rows("unmap")}
        self._dispatch_s = {row["what"]: row["time_s"] for row in cal.rows("dispatch") if "step_bytes" not in row}
        transition_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("dispatch"):
            if "step_bytes" in row:
                transition_rows[row["what"]].append(row)
            elif row["what"] == "evicted_call" and "product_extra_s" in row:
                self._dispatch_s["evicted_product"] = row["product_extra_s"]
        self._transitions = {what: TransitionCurves.from_rows(what, rows) for what, rows in transition_rows.items()}
        """A training step's framework transitions, from the profiled training loops."""
        self._page_bytes = min((row["page_bytes"] for row in cal.rows("first_touch")), default=4096)

    # -- the calibrated host ------------------------------------------------------------------

    def gemm_fraction(self, kernel: Gemm, threads: int) -> float | None:
        """Measured fraction of the host's peak a GEMM reaches on ``threads`` cores (None: no points;
        :meth:`~simhpc.costs.product_surfaces.ProductSurfaces.gemm_fraction`)."""
        return self.products.gemm_fraction(kernel, threads)

    def stream_time(self, kernel: Kernel, threads: int, framework: bool = True) -> float | None:
        """Interpolated measured seconds of a memory-bound kernel on the host (None: not covered;
        :meth:`~simhpc.costs.stream_curves.StreamCurves.stream_time`)."""
        return self.streams.stream_time(kernel, threads, framework)

    def other_dtype(self, kernel: Kernel) -> bool:
        """Whether a memory-bound kernel is timed from points of another dtype than its own
        (:meth:`~simhpc.costs.stream_curves.StreamCurves.other_dtype`)."""
        return self.streams.other_dtype(kernel)

    def cold_operands_s(self, kernel: Kernel, threads: int) -> float:
        """With ``cache="cold"``: the extra time of a product inside a training step over the
        calibration's repeated calls. From the ``gemm_cold`` points where the calibration has them:
        what a single call after a cache flush took over repeated ones, fitted as a constant
        (the BLAS's code and buffers fetched again) plus the product's bytes over a bandwidth
        (operands and result from DRAM), no slower than one pass over them at the roofline's DRAM
        bandwidth: a flush of 128 MiB also evicts what a step keeps (a VM's page-table entries), and
        on the 2-core EPYC Zen 2 guest the fit's 7 GB/s overcharged every product of the committed
        captures by 5-40 %. Else its bytes on the cold ``add`` curve less the same bytes on the warm
        one (0 once they outgrow the caches)."""
        if self.cache != "cold" or kernel.conv:
            return 0.0
        moved = kernel.bytes()
        parts = self.cold_call_parts(threads)
        if parts is not None:
            return parts[0] + moved * parts[1]
        if not self.streams.has_cold("elementwise"):
            return 0.0
        cold = self.streams.curve_time("elementwise", "add" + COLD, "fp32", moved, moved, threads)
        warm = self.streams.curve_time("elementwise", "add", "fp32", moved, moved, threads)
        if cold is None or warm is None:
            return 0.0
        return max(0.0, cold - warm)

    def cold_call_parts(self, threads: int) -> tuple[float, float] | None:
        """(seconds, seconds per byte): the ``gemm_cold`` fit of a single call after a cache flush
        over repeated calls on ``threads`` cores, its per-byte part capped at one pass at the
        roofline's DRAM bandwidth; None without ``gemm_cold`` points or with ``cache="warm"``."""
        if self.cache != "cold" or not self._cold_product:
            return None
        blend = thread_blend(sorted(self._cold_product), threads)
        seconds = sum(w * self._cold_product[t][0] for t, w in blend)
        per_byte = sum(w * min(self._cold_product[t][1], 1.0 / self.calibration.model_bandwidth(t)) for t, w in blend)
        return seconds, per_byte

    def path_constant(self, threads: int, layout: str | None = None) -> float:
        """Of the cold call's constant (:meth:`cold_call_parts`), the seconds that are the kernels of
        the product's own layout (:func:`~simhpc.costs.cold_products.path_constants`): from the points
        of ``layout`` where the calibration has them, else from all; 0 without such points."""
        parts = self.cold_call_parts(threads)
        measured = self._path_constant.get(layout) or self._path_constant[None]
        blend = thread_blend(sorted(measured), threads)
        if parts is None or not blend:
            return 0.0
        return min(parts[0], sum(w * measured[t] for t, w in blend))

    def product_in_step_s(self, kernel: Gemm, threads: int, call_share: float, cold_bytes: float,
                          path_share: float, cold_output_bytes: float = 0.0, one_thread: bool = False) -> float | None:
        """A traced BLAS product's time when it pays ``call_share`` (0-1) of the cold call's
        constant, ``path_share`` (0-1) of the part of it that is its layout's kernels
        (:meth:`path_constant`, at least ``call_share`` of it), the per-byte cost of
        ``cold_bytes`` of operands and ``cold_output_bytes`` of output lines fetched before they
        are written, at the roofline's memory bandwidth (what ran before it decides all four:
        :mod:`simhpc.trace.product_reuse`); None where :meth:`cold_call_parts` is. A product that
        runs on ``one_thread`` whatever the thread count (a matrix-vector or outer product) pays
        the 1-thread cold parts: only its core's caches and code are fetched again (the plain
        surveys' batch-1 MLP, regression and recommender at 2 threads: GEMM MAPE 79.8 -> 47.9,
        34.1 -> 26.7 and 34.1 -> 29.5 % against a calibration whose 2-thread constant read 23.9
        us, the 1-thread one 15.1)."""
        cold = 1 if one_thread else threads
        parts = self.cold_call_parts(cold)
        warm = self._product_time(kernel, threads)
        if parts is None or warm is None:
            return None
        path = self.path_constant(cold, kernel.layout if kernel.batch == 1 else None)
        constant = call_share * (parts[0] - path) + max(call_share, path_share) * path
        fetched = cold_bytes * parts[1] + cold_output_bytes / self.calibration.model_bandwidth(cold)
        return max(warm + constant + fetched, self.dispatch_floor(threads))

    def covers(self, kernel: Kernel) -> bool:
        """Whether the calibration measured a kernel of this kind (else the fallback model times it).

        A 16-bit product needs points of its own dtype: on a CPU without 16-bit arithmetic it runs
        10-50x below fp32, which fp32's points cannot tell.
        """
        if isinstance(kernel, (Gemm, Attention, Recurrent)):
            return self.products.covers(kernel.dtype)
        return self.streams.covers(kernel)

    def attention_time(self, kernel: Attention, threads: int) -> float | None:
        """Fused attention: from the calibration's ``attention`` points of its pass where it has them
        (its products' FLOPs at the interpolated fraction of peak the fused kernel reached, plus a
        product's cold-call time); else its products as a batched GEMM, plus its softmax
        exponentials at the measured ``exp`` rate of an L1-resident array."""
        fraction = self.products.attention_fraction(kernel, threads)
        if fraction is not None:
            peak = self.calibration.peak_flops(kernel.dtype, threads)
            return kernel.gemm().flops() / (fraction * peak) + self.cold_operands_s(kernel.gemm(), threads)
        products = self.host_time(kernel.gemm(), threads)
        if products is None:
            return None
        size = dtype_bytes(kernel.dtype)
        block = Elementwise(dtype=kernel.dtype, n=ATTENTION_BLOCK // (2 * size), op="exp", inputs=1, outputs=1)
        per_block = self.stream_time(block, threads, framework=False)
        if per_block is None:
            return products
        return products + per_block * kernel.exponentials / block.n

    def recurrent_time(self, kernel: Recurrent, threads: int) -> float | None:
        """A recurrent layer: from the calibration's ``recurrent`` points of its pass where it has
        them (oneDNN's LSTM layer: its FLOPs at the interpolated fraction of peak the layer reached);
        else its products timed as BLAS products (the per-step ones one after another), plus the
        gate nonlinearities of each step at the measured ``tanh`` rate of an array of one step's
        gates."""
        fraction = self.products.recurrent_fraction(kernel, threads)
        if fraction is not None:
            return kernel.flops() / (fraction * self.calibration.peak_flops(kernel.dtype, threads))
        products = [self.host_time(gemm, threads) for gemm in kernel.sequence_gemms()]
        step = self._product_time(kernel.step_gemm(), threads)  # back to back: operands stay in cache
        if step is None or None in products:
            return None
        gates = Elementwise(dtype=kernel.dtype, n=kernel.gate_elements // kernel.steps, op="tanh", inputs=1, outputs=1)
        per_step = self.stream_time(gates, threads, framework=False) or 0.0
        passes = 2 if kernel.backward else 1  # the backward applies each gate's derivative too
        return sum(products) + kernel.steps * (step + passes * per_step)  # type: ignore[arg-type]

    def warm(self) -> CalibratedEfficiency:
        """This calibration read as its loops measured it (``cache="warm"``): no cold call's charge."""
        if self.cache == "warm":
            return self
        return CalibratedEfficiency(self.calibration, self.fallback, self.gemm_method, self.smoothing, self.blas,
                                    cores=self.cores)

    def host_time(self, kernel: Kernel, threads: int) -> float | None:
        """The calibrated host's interpolated time for ``kernel`` on ``threads`` cores (None: not
        covered). With ``blas="torch"`` (a traced ATen op) no less than the cheapest measured
        ATen call: dispatch costs an op that much however little it computes."""
        return self._floored(self._kernel_time(kernel, threads), threads)

    def stream_in_step_s(self, kernel: Kernel, threads: int, cached_bytes: float) -> float | None:
        """A memory-bound kernel's time in a training step when ``cached_bytes`` of what it fetches
        are already in cache (:mod:`simhpc.trace.stream_reuse`; the cold rate times the rest:
        :meth:`~simhpc.costs.stream_curves.StreamCurves.stream_time`); None: not covered."""
        return self._floored(self.streams.stream_time(kernel, threads, cached_bytes=cached_bytes), threads)

    def _floored(self, seconds: float | None, threads: int) -> float | None:
        """``seconds`` no less than the cheapest measured ATen call with ``blas="torch"``."""
        if seconds is None or self.blas != "torch":
            return seconds
        return max(seconds, self.dispatch_floor(threads))

    def dispatch_floor(self, threads: int) -> float:
        """The cheapest measured ATen call on ``threads`` cores (0 without torch points)."""
        return self.streams.dispatch_floor(threads)

    @property
    def private_cache_bytes(self) -> int:
        """The largest cache one core has to itself (the L2 of current x86 cores; 1 MiB if unknown)."""
        return max((c.size for c in self.calibration.host.caches if c.shared_by == 1), default=1 << 20)

    def framework_overhead_s(self, what: str) -> float:
        """The profiled framework cost ``what`` (``no_kernel_op``: the self time of an op that
        computes nothing; ``call_gap`` / ``engine_gap``: the time between two top-level ops that
        Python / the autograd engine calls; ``evicted_call`` and its probe product's own
        ``evicted_product``); 0 without ``dispatch`` points."""
        return self._dispatch_s.get(what, 0.0)

    def framework_transition_s(self, what: str, work: Any) -> float | None:
        """A training step's framework transition ``what`` (``step_start``, ``backward_entry``,
        ``backward_exit``: :func:`~simhpc.trace.step_ops.transition_before`) after ``work`` (a
        :class:`~simhpc.trace.step_ops.StepWork`: bytes touched, autograd nodes and parameter
        tensors since it last ran): :class:`~simhpc.costs.transitions.TransitionCurves`; None without such points."""
        curves = self._transitions.get(what)
        return None if curves is None else curves.seconds(work)

    def first_touch_s(self, nbytes: float, threads: int) -> float:
        """Seconds the page faults of a first write into ``nbytes`` of freshly mapped memory take
        on ``threads`` cores: a page at the cost measured for buffers of that size, interpolated in
        the size's logarithm and held past the measured ones (on several threads a smaller
        buffer's page costs more); 0 without ``first_touch`` points."""
        if nbytes <= 0:
            return 0.0
        blend = thread_blend(sorted(self._page_fault_s), threads)
        pages = math.ceil(nbytes / self._page_bytes)
        size = math.log(nbytes)
        return pages * sum(w * float(np.interp(size, *self._page_fault_s[t])) for t, w in blend)

    def unmap_s(self, nbytes: float, threads: int) -> float:
        """Seconds unmapping ``nbytes`` of memory written on ``threads`` cores takes (glibc's
        ``free`` of a block it mapped on its own); 0 without ``unmap`` points."""
        blend = thread_blend(sorted(self._unmap_s), threads)
        return math.ceil(max(0.0, nbytes) / self._page_bytes) * sum(w * self._unmap_s[t] for t, w in blend)

    def _kernel_time(self, kernel: Kernel, threads: int) -> float | None:
        if isinstance(kernel, Attention):
            return self.attention_time(kernel, threads)
        if isinstance(kernel, Recurrent):
            return self.recurrent_time(kernel, threads)
        if isinstance(kernel, Gemm):
            seconds = self._product_time(kernel, threads)
            return None if seconds is None else seconds + self.cold_operands_s(kernel, threads)
        return self.stream_time(kernel, threads)

    def _product_time(self, kernel: Gemm, threads: int) -> float | None:
        """A product's time at its interpolated fraction of peak: repeated calls, as measured."""
        fraction = self.gemm_fraction(kernel, threads)
        if fraction is None:
            return None
        return kernel.flops() / (fraction * self.calibration.peak_flops(kernel.dtype, threads))

    # -- EfficiencyModel ----------------------------------------------------------------------

    def efficiency(self, kernel: Kernel, device: Device, cores: int | None) -> tuple[float, float]:
        """(compute, memory) efficiency of ``kernel`` on ``device`` (see the module docstring)."""
        if not isinstance(device, CpuSpec):
            return self.fallback.efficiency(kernel, device, cores)
        threads = device.cores if cores is None else cores
        seconds = self.host_time(kernel, threads)
        if seconds is None or seconds <= 0:
            return self.fallback.efficiency(kernel, device, cores)
        cal = self.calibration
        flops, moved = kernel.flops(), kernel.bytes()
        peak = cal.peak_flops(kernel.dtype if flops else "fp64", threads)
        bandwidth = cal.model_bandwidth(threads)
        compute_needed = flops / (peak * seconds) if flops else 0.0
        memory_needed = moved / (bandwidth * seconds) if moved else 0.0
        if isinstance(kernel, (Gemm, Attention, Recurrent)):
            # Compute binds; memory gets whatever keeps it from binding.
            return compute_needed, max(1.0, 1.001 * memory_needed)
        return max(1.0, 1.001 * compute_needed), memory_needed
