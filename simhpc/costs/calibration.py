"""The calibrated efficiency model: kernel efficiencies interpolated from measured points.

:class:`CalibratedEfficiency` implements :class:`~simhpc.costs.model.EfficiencyModel` from a
:class:`~simhpc.costs.calibration_file.Calibration`:

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

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import optimize

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.interpolation import Curve, GemmSurface, Surfaces, curve_1d, grid_2d
from simhpc.costs.kernels import (
    Attention,
    Copy,
    Elementwise,
    FrameworkOp,
    Gemm,
    HashProbe,
    Kernel,
    Recurrent,
    Reduction,
    Stencil,
    dtype_bytes,
)
from simhpc.costs.model import ConstantEfficiency, Device, EfficiencyModel
from simhpc.costs.op_arguments import CHANNELS_LAST
from simhpc.costs.product_ops import is_line
from simhpc.hardware.specs import CpuSpec

SIXTEEN_BIT = ("bf16", "fp16")
ONE_GRADIENT = ("backward_input", "backward_weight")
"""Convolution backward passes computing one gradient, measured on their own."""

TRANSCENDENTAL = {
    "tanh": ("tanh", "tanh_backward"),
    "exp": (
        "exp",
        "exp2",
        "expm1",
        "sin",  # a polynomial per element, as an exponential
        "cos",
        "glu",  # a sigmoid per output
        "glu_backward",
        "xlogy",
        "sigmoid",
        "sigmoid_backward",
        "silu",
        "silu_backward",
        "softplus",
        "log",
        "log1p",
        "log2",
        "pow",
        "elu",
        "mish",
        "logit",
        "_softmax",  # one exponential per element (plus a max and a sum pass)
        "_log_softmax",
        "_log_softmax_backward_data",  # grad - exp(output) * sum(grad): one exponential per element
        "softmax",
        "log_softmax",
    ),
    "gelu": ("gelu", "gelu_backward", "erf", "erfc", "erfinv"),
}
"""Calibrated elementwise curves and the ops that use them; every other op uses ``add`` (memory-bound)."""

_OP_CURVE = {op: curve for curve, ops in TRANSCENDENTAL.items() for op in ops}
MAX_OPS = ("max", "min", "amax", "amin", "argmax", "argmin", "maximum", "minimum")
GEMM_METHOD = "rbf"
GEMM_SMOOTHING = 0.3
"""Default GEMM interpolation: chosen by leave-one-out error on the committed calibration
(``validation/calibration/loo.py``)."""
WIDE = 64
"""Products at least this wide in every dimension run within ~30 % of each other in any operand
layout: their ``nn`` points stand in for other layouts there."""
FRAMEWORK_STAND_INS = {"_log_softmax": "_softmax", "_log_softmax_backward_data": "_softmax"}
"""ATen ops timed from the torch points of an op with the same passes, when they have none of
their own: a log-softmax is a softmax's max, exponential-and-sum and normalising passes, and its
gradient one exponential per element besides a sum."""
OWN_OP_ONLY = ("framework",)
"""Sections whose kernels are timed only from their very op's points (no other op stands in)."""
AT_SMALLEST_RATE = ("framework", "permute")
"""Sections measured from hundreds of KiB up: below, a kernel runs at the smallest size's rate."""
STREAMING = ("elementwise", "reduction", "bandwidth", "permute", "framework")
COLD = "@cold"
"""Suffix of the curve keys of points measured cold (``cache: cold`` rows)."""
COLD_BASE = {
    "elementwise": ("elementwise", "add"),
    "reduction": ("reduction", "sum"),
    "framework": ("elementwise", "add"),
    "permute": ("elementwise", "add"),
}
"""The cold curve (section, op) that bounds each section's kernels from below with ``cache="cold"``."""
ATTENTION_BLOCK = 16 << 10
"""Working set (bytes) whose measured ``exp`` rate times a fused attention's softmax: a block of
scores in L1."""
STORED_PER_CELL = (18 / 16) ** 3  # the stencil's ghost layer: 18^3 stored cells per 16^3 block


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


def cold_product_fits(rows: list[dict[str, Any]], blas: str) -> dict[int, tuple[float, float]]:
    """Threads -> (seconds, seconds per byte): the non-negative fit of ``seconds + bytes x seconds
    per byte`` to the ``gemm_cold`` points' cold-less-warm times, in least squares of the log of
    their ratio, which weighs a fit twice a point's time as it does one half of it.

    Least squares of the relative error ``fit / measured - 1`` did not: it costs at most 1 where
    the fit is below a point, without bound where it is above, so the few points a flush barely
    slowed (6.6 us over the loop for a 512 x 4 x 512 product on the EPYC Zen 5 guest, against 20-170
    us for the other products of about 1 MB) held the fit under most of them: 4.3 us + 15 ps per
    byte there, under half of 31 of its 38 points (median fit-to-point ratio 0.29; 0.76-0.95 on the
    committed files; this way 0.88 and 0.97-1.06)."""
    points: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.get("blas", "torch") == blas and "after" not in row:
            product = Gemm(dtype=row["dtype"], m=row["m"], n=row["n"], k=row["k"], batch=row.get("batch", 1))
            points[row["threads"]].append((product.bytes(), row["time_s"] - row["warm_s"]))
    fits = {}
    for threads, measured in sorted(points.items()):
        kept = [(moved, extra) for moved, extra in measured if extra > 0]
        if len(kept) < 2:
            continue
        fits[threads] = _log_ratio_fit(*(np.array(column) for column in zip(*kept)))
    return fits


def path_constants(rows: list[dict[str, Any]], blas: str) -> dict[int, float]:
    """Threads -> seconds: the median of what the ``gemm_cold`` rows with ``after`` (a small product
    right after a flush and a product of another layout) took over their loop time, the part of a
    cold call that is the kernels of the product's own layout (0 where the call was faster)."""
    extras: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("blas", "torch") == blas and "after" in row:
            extras[row["threads"]].append(max(0.0, row["time_s"] - row["warm_s"]))
    return {threads: float(np.median(values)) for threads, values in sorted(extras.items())}


def _log_ratio_fit(moved: np.ndarray, extra: np.ndarray) -> tuple[float, float]:
    """Non-negative (a, b) of ``a + b x moved`` with the least squares of ``log(fit / extra)``."""
    start = np.array([np.median(extra), np.median(extra / moved)]) / 2.0
    fit = optimize.least_squares(lambda c: np.log(np.maximum(c[0] + c[1] * moved, 1e-15)) - np.log(extra),
                                 start, bounds=(0.0, np.inf), x_scale=start)
    return float(fit.x[0]), float(fit.x[1])


POOL_OUTPUT_WORK = 6.0
"""Per output of a pooling loop, its fixed work (compare, store, index, loop) in window loads."""
POOL_INPUT_WORK = 0.7
"""Per input element of a pooling loop, its streaming cost in window loads."""


def pool_work(window: int, outputs: int, inputs: int) -> float:
    """The work of a 2-D pooling forward in window-element loads: each output loads the
    ``window`` elements under it. Fitted to ATen's max and average pooling (NCHW and channels-last,
    1 and 2 threads, 32^2 to 56^2 images) on the EPYC Zen 2 guest, relative to a 3x3 stride-2 max
    pool: 2x2 stride 2 0.68-0.80 (this model 0.72), 3x3 stride 1 3.3-3.9 (3.53), 5x5 stride 2
    1.8-2.0 (1.90); by bytes alone 1.0, 2.29 and 1.0."""
    return outputs * (window + POOL_OUTPUT_WORK) + inputs * POOL_INPUT_WORK


def _set_conflicts(rows: int, item_bytes: int) -> bool:
    """Whether a transposed block's source row stride is an even number of cache lines (64 B):
    the lines a destination row reads then fall in half the L1's sets or fewer, which the
    calibration measures apart (2.1-2.6x slower in rows of 256 elements or more, on the Xeon)."""
    return (rows * item_bytes) % 128 == 0


TRANSITION_COUNTS = {"step_start": "parameters", "backward_entry": "graph_nodes", "backward_exit": "parameters"}
"""What each transition's own work grows with beyond its code's eviction: ``zero_grad`` and the
optimizer's set-up visit every parameter tensor; the engine's set-up walks the autograd graph."""


@dataclass(frozen=True)
class TransitionCurves:
    """A transition's cost from the profiled training loops: its code evicted by the bytes moved
    since it last ran (the width sweep, at the fewest layers: interpolated in log bytes, flat
    beyond), plus its own work over what that sweep's graph holds (the depth sweep, at the
    narrowest width: its excess over the width curve, linear in the parameter or node count of
    :data:`TRANSITION_COUNTS`, 0 below the width sweep's count and extended with the last slope
    above the deepest loop)."""

    key: str
    log_bytes: tuple[float, ...]
    seconds_by_bytes: tuple[float, ...]
    counts: tuple[float, ...] = ()
    excess_s: tuple[float, ...] = ()

    @classmethod
    def from_rows(cls, what: str, rows: list[dict[str, Any]]) -> TransitionCurves:
        """Curves from a calibration's rows of ``what`` (rows without ``layers``: a width sweep alone)."""
        key = TRANSITION_COUNTS.get(what, "parameters")
        base = min(row.get("layers", 0) for row in rows)
        width_rows = sorted((row for row in rows if row.get("layers", 0) == base), key=lambda row: row["step_bytes"])
        curves = cls(key, tuple(math.log(row["step_bytes"]) for row in width_rows),
                     tuple(row["time_s"] for row in width_rows))
        narrowest = min(row.get("width", 0) for row in rows)
        depth_rows = sorted((row for row in rows if row.get("width", 0) == narrowest and key in row),
                            key=lambda row: row[key])
        if len(depth_rows) < 2:
            return curves
        excess = [max(0.0, row["time_s"] - curves.by_bytes(row["step_bytes"])) for row in depth_rows]
        return replace(curves, counts=tuple(float(row[key]) for row in depth_rows), excess_s=tuple(excess))

    def by_bytes(self, nbytes: float) -> float:
        """The width sweep's seconds at ``nbytes`` moved."""
        return float(np.interp(math.log(max(nbytes, 1.0)), self.log_bytes, self.seconds_by_bytes))

    def seconds(self, work: Any) -> float:
        """The transition after ``work`` (``touched_bytes``, ``graph_nodes``, ``parameters``)."""
        total = self.by_bytes(work.touched_bytes)
        if not self.counts:
            return total
        count, counts, excess = float(getattr(work, self.key)), self.counts, self.excess_s
        if count <= counts[-1]:
            return total + max(0.0, float(np.interp(count, counts, excess, left=0.0)))
        slope = (excess[-1] - excess[-2]) / (counts[-1] - counts[-2]) if counts[-1] > counts[-2] else 0.0
        return total + max(0.0, excess[-1] + slope * (count - counts[-1]))


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
    """

    def __init__(
        self,
        calibration: Calibration,
        fallback: EfficiencyModel | None = None,
        gemm_method: str = GEMM_METHOD,
        smoothing: float = GEMM_SMOOTHING,
        blas: str = "numpy",
        cache: str = "warm",
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
        self._gemm: dict[str, Surfaces] = defaultdict(dict)
        """GEMM surfaces by operand layout."""
        self._attention: dict[bool, Surfaces] = defaultdict(dict)
        """Fused-attention surfaces, forward (False) and backward (True)."""
        self._recurrent: dict[bool, Surfaces] = defaultdict(dict)
        """Recurrent-layer surfaces (oneDNN's LSTM), forward (False) and backward (True)."""
        self._conv: dict[tuple[str, bool, bool, bool, bool], Surfaces] = defaultdict(dict)
        """Convolution surfaces by pass, whether the convolution is strided, grouped, 1-D and 1x1."""
        self._curves: dict[tuple[str, ...], Curve] = {}
        self._smallest: dict[tuple[str, ...], float] = {}
        self._build()

    # -- construction -------------------------------------------------------------------------

    def _build(self) -> None:
        cal = self.calibration
        groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("gemm"):
            if row.get("blas", "numpy") == self.blas:
                groups[(row["dtype"], row["threads"], surface_key(row.get("layout", "nn"), row.get("interleaved", "")))
                       ].append(row)
        for (dtype, threads, layout), rows in sorted(groups.items()):
            wide_own = any(min(r["m"], r["n"], r["k"]) >= WIDE for r in rows)
            if layout != "nn" and not wide_own:  # measured narrow only: wide products differ little by layout
                rows = rows + [r for r in groups.get((dtype, threads, "nn"), []) if min(r["m"], r["n"], r["k"]) >= WIDE]
            self._gemm[layout][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.gemm_method, self.smoothing
            )
        convs: dict[tuple[str, bool, bool, bool, bool, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("conv"):
            groups = row.get("groups", 1)
            key = (row["direction"], row.get("stride", 1) > 1, groups > 1, is_line(row.get("image", ())),
                   row.get("taps") == 1, row["dtype"], row["threads"])
            convs[key].append({**row, "batch": row["passes"] * groups})
        for (direction, strided, grouped, line, pointwise, dtype, threads), rows in sorted(convs.items()):
            self._conv[(direction, strided, grouped, line, pointwise)][(dtype, threads)] = GemmSurface(
                rows, cal.peak_flops(dtype, threads), self.gemm_method, self.smoothing
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
                rows, cal.peak_flops(dtype, threads), self.gemm_method, self.smoothing
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
                rows, cal.peak_flops(dtype, threads), self.gemm_method, self.smoothing
            )
        # Memory-bound curves: seconds per byte of the descriptor's traffic vs working set.
        streams: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
        for section in ("elementwise", "reduction"):
            for row in cal.rows(section):
                op = row["op"] + (COLD if row.get("cache") == "cold" else "")
                key = (section, op, row["dtype"], str(row["threads"]))
                streams[key].append((row["bytes"], row["time_s"] / row["bytes"]))
        for row in cal.rows("bandwidth"):
            streams[("bandwidth", row["op"], "fp64", str(row["threads"]))].append(
                (row["bytes"], row["time_s"] / row["bytes"])
            )
        for row in cal.rows("permute"):
            streams[("permute", str(row["run"]), row["dtype"], str(row["threads"]))].append(
                (row["bytes"], row["time_s"] / row["bytes"])
            )
        self._pool_work: dict[str, float] = {}
        """A pooling forward's work per byte (:func:`pool_work`) in its calibrated geometry."""
        for row in cal.rows("framework"):
            streams[("framework", row["op"], row["dtype"], str(row["threads"]))].append(
                (row["bytes"], row["time_s"] / row["bytes"])
            )
            if "window" in row and not row["op"].removesuffix(CHANNELS_LAST).endswith("_backward"):
                window, stride, padding = row["window"]
                *outer, side, _ = row["input"]
                pooled = (side + 2 * padding - window) // stride + 1
                outputs, inputs = math.prod(outer) * pooled**2, math.prod(row["input"])
                self._pool_work[row["op"]] = pool_work(window * window, outputs, inputs) / row["bytes"]
        self._cold_product = cold_product_fits(cal.rows("gemm_cold"), self.blas)
        self._path_constant = path_constants(cal.rows("gemm_cold"), self.blas)
        self._page_fault_s = {row["threads"]: row["time_s"] / row["pages"] for row in cal.rows("first_touch")}
        self._dispatch_s = {row["what"]: row["time_s"] for row in cal.rows("dispatch") if "step_bytes" not in row}
        transition_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in cal.rows("dispatch"):
            if "step_bytes" in row:
                transition_rows[row["what"]].append(row)
        self._transitions = {what: TransitionCurves.from_rows(what, rows) for what, rows in transition_rows.items()}
        """A training step's framework transitions, from the profiled training loops."""
        self._page_bytes = min((row["page_bytes"] for row in cal.rows("first_touch")), default=4096)
        self._cheapest_call: dict[str, float] = {}
        """Threads -> the fastest measured ATen call (a framework op or a torch product)."""
        aten = [row for row in cal.rows("gemm") if row.get("blas") == "torch"] + list(cal.rows("framework"))
        for row in aten:
            threads_key = str(row["threads"])
            self._cheapest_call[threads_key] = min(self._cheapest_call.get(threads_key, math.inf), row["time_s"])
        for row in cal.rows("stencil"):
            streams[("stencil", "7", "fp64", str(row["threads"]))].append(
                (row["working_set"], row["time_s"] / row["cells"])
            )
        for row in cal.rows("hash_probe"):
            streams[("hash_probe", row["variant"], "int8", "1")].append(
                (row["table_bytes"], row["time_s"] / row["lines_per_probe"])
            )
        for key, points in sorted(streams.items()):
            self._curves[key] = curve_1d([p[0] for p in points], [p[1] for p in points])
            self._smallest[key] = min(p[0] for p in points)
        self._runs = sorted({int(k[1]) for k in self._curves if k[0] == "permute"})
        blocks: dict[tuple[bool, int], list[tuple[float, float, float]]] = defaultdict(list)
        for row in cal.rows("transpose"):
            key = (_set_conflicts(row["rows"], dtype_bytes(row["dtype"])), row["threads"])
            blocks[key].append((row["rows"], row["length"], row["time_s"] / row["bytes"]))
        self._transposes = {key: grid for key, points in blocks.items() if (grid := grid_2d(points))}
        """(set conflicts, threads) -> seconds per byte of a batched transpose over its blocks'
        (rows, length)."""
        self._cold = {k[0] for k in self._curves if k[1].endswith(COLD)}
        self._framework_ops = {k[1] for k in self._curves if k[0] == "framework"}
        """Ops with torch points of their own: with ``blas="torch"`` (a torch trace) a traced
        elementwise op of that name is timed from them instead of the C kernels' curves."""

    # -- the calibrated host ------------------------------------------------------------------

    def _thread_blend(self, counts: list[int], threads: int) -> list[tuple[int, float]]:
        """Measured thread counts and weights that stand for ``threads``."""
        if not counts:
            return []
        if threads <= counts[0]:
            return [(counts[0], 1.0)]
        if threads >= counts[-1]:
            return [(counts[-1], 1.0)]
        high = bisect.bisect_left(counts, threads)
        low_t, high_t = counts[high - 1], counts[high]
        if high_t == threads:
            return [(threads, 1.0)]
        weight = (threads - low_t) / (high_t - low_t)
        return [(low_t, 1.0 - weight), (high_t, weight)]

    def gemm_fraction(self, kernel: Gemm, threads: int) -> float | None:
        """Measured fraction of the host's peak a GEMM reaches on ``threads`` cores (None: no points).

        A product with transposed operands uses the points of its ``layout`` when the calibration
        has them (with the ``nn`` points of products at least ``WIDE`` in every dimension); a
        batched one with interleaved operands those of its layout and interleaving first. A
        convolution (``kernel.conv``) uses the calibration's convolution points of its pass,
        grouped (depthwise) or not, 1x1 or not, 1-D or not and strided or not like the kernel
        (else the nearest class's: grouping first, then the kernel's size, then dimensionality),
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
        if kernel.interleaved:
            candidates.insert(0, self._gemm.get(surface_key(kernel.layout, kernel.interleaved), {}))
        if kernel.conv:
            strided, grouped = kernel.stride > 1, kernel.groups > 1
            passes = (kernel.conv, "backward") if kernel.conv in ONE_GRADIENT else (kernel.conv,)
            candidates[:0] = [self._conv.get((p, s, g, line, one), {}) for g in (grouped, not grouped)
                              for one in (kernel.pointwise, not kernel.pointwise)
                              for line in (kernel.line, not kernel.line) for p in passes
                              for s in (strided, not strided)]
        return self._blended_fraction(candidates, kernel.dtype, threads, (kernel.m, kernel.n, kernel.k, kernel.batch))

    def _blended_fraction(self, candidates: list[Surfaces], dtype: str, threads: int,
                          dims: tuple[int, int, int, int]) -> float | None:
        """The fraction of peak at ``dims`` from the first candidate surfaces measured in ``dtype``
        (else the first with any points, in fp32), blended over the measured thread counts."""
        own = [c for c in candidates if any(key[0] == dtype for key in c)]
        surfaces = own[0] if own else next((c for c in candidates if c), {})
        dtype = dtype if own else "fp32"
        blend = self._thread_blend(sorted(t for d, t in surfaces if d == dtype), threads)
        if not blend:
            return None
        return sum(w * surfaces[(dtype, t)].fraction(*dims) for t, w in blend)

    def _measured(self, conv_pass: str) -> bool:
        """Whether the calibration has convolution points of ``conv_pass``."""
        return any(surfaces for (name, *_), surfaces in self._conv.items() if name == conv_pass)

    def _stream_key(self, kernel: Kernel, framework: bool = True) -> tuple[str, str, str, float, float] | None:
        """(section, op, dtype, working set, amount) of a memory-bound kernel; time = amount x curve.

        ``framework``: a traced elementwise op may use torch's points of its own name (False: the
        C kernels' curves, for the arithmetic inside a fused kernel).
        """
        if isinstance(kernel, Elementwise):
            per_tensor = kernel.op.removeprefix("_foreach_")  # a foreach op runs its per-tensor kernel on each
            if per_tensor not in self._framework_ops:
                per_tensor = FRAMEWORK_STAND_INS.get(per_tensor, per_tensor)
            if framework and self.blas == "torch" and per_tensor in self._framework_ops:
                return "framework", per_tensor, kernel.dtype, kernel.bytes(), kernel.bytes()
            op = _OP_CURVE.get(per_tensor.removesuffix("_"), "add")
            return "elementwise", op, kernel.dtype, kernel.bytes(), kernel.bytes()
        if isinstance(kernel, Reduction):
            if framework and self.blas == "torch" and kernel.op in self._framework_ops:
                return "framework", kernel.op, kernel.dtype, kernel.bytes(), kernel.bytes()
            op = "max" if kernel.op.removesuffix("_") in MAX_OPS else "sum"
            return "reduction", op, kernel.dtype, kernel.bytes(), kernel.bytes()
        if isinstance(kernel, Copy):
            if kernel.run > 0:
                return "permute", str(kernel.run), kernel.dtype, kernel.bytes(), kernel.bytes()
            return "bandwidth", "copy", "fp64", kernel.bytes(), kernel.bytes()
        if isinstance(kernel, FrameworkOp):
            op = kernel.op
            if op not in self._framework_ops:  # a variant without points (channels-last, rows): the plain op's
                op = op.split("@")[0]
            return ("framework", op, kernel.dtype, kernel.bytes() / kernel.rows,
                    kernel.bytes() * self._window_scale(op, kernel))
        if isinstance(kernel, Stencil):
            working = 2 * kernel.cells * STORED_PER_CELL * dtype_bytes(kernel.dtype)
            return "stencil", "7", "fp64", working, kernel.cells * (2 * kernel.points - 1) / 13
        if isinstance(kernel, HashProbe):
            return "hash_probe", "linear", "int8", kernel.table_bytes, kernel.probes * kernel.lines
        return None

    def _window_scale(self, op: str, kernel: FrameworkOp) -> float:
        """A pooling forward's work per byte against its calibrated geometry's (1 for other
        ops): the calibration times one window and stride per pool, and the same bytes cost
        more under a larger window or a smaller stride."""
        calibrated = self._pool_work.get(op)
        if not kernel.window or not calibrated or kernel.nbytes <= 0:
            return 1.0
        return pool_work(kernel.window, kernel.outputs, kernel.inputs) / kernel.nbytes / calibrated

    def stream_time(self, kernel: Kernel, threads: int, framework: bool = True) -> float | None:
        """Interpolated measured seconds of a memory-bound kernel on the host (None: not covered).

        ``framework=False``: arithmetic inside a fused kernel (attention's exponentials, a recurrent
        layer's gates): the C kernels' curves (see :meth:`_stream_key`), on data the fused kernel
        holds in cache, so never the cold floor."""
        key = self._stream_key(kernel, framework)
        if key is None:
            return None
        section, op, dtype, working, amount = key
        if amount <= 0:
            return 0.0
        if section == "permute":
            warm = self._transpose_time(kernel, threads) if isinstance(kernel, Copy) else None
            if warm is None:
                warm = self._permute_time(int(op), dtype, working, threads)
        elif isinstance(kernel, FrameworkOp) and (kernel.rows > 1 or kernel.serial):
            # one row on one thread (a row's sort is serial), the threads splitting the rows
            one = self._curve_time(section, op, dtype, working, amount, 1)
            warm = None if one is None else one / min(threads, kernel.rows)
        else:
            warm = self._curve_time(section, op, dtype, working, amount, threads)
        base = COLD_BASE.get(section)
        if framework and self.cache == "cold" and base is not None and base[0] in self._cold:
            streams = 1 if isinstance(kernel, FrameworkOp) and kernel.serial else threads  # the cores fetching
            cold = self._curve_time(base[0], base[1] + COLD, "fp32", working, kernel.bytes(), streams)
            if warm is not None and cold is not None:
                return max(warm, cold)
        return warm

    def _transpose_time(self, copy: Copy, threads: int) -> float | None:
        """A copy that transposes small blocks (:attr:`Copy.rows` x :attr:`Copy.length`): the
        measured batched transposes of that block shape (and of its kind of row stride, see
        :func:`_set_conflicts`), no faster than streaming its bytes (a tensor larger than the
        caches); None without a block or without such points."""
        if not copy.rows or not copy.length:
            return None
        conflicts = _set_conflicts(copy.rows, dtype_bytes(copy.dtype))
        blend = self._thread_blend(sorted(t for c, t in self._transposes if c == conflicts), threads)
        if not blend:
            return None
        moved = copy.bytes()
        per_byte = sum(w * self._transposes[(conflicts, t)](copy.rows, copy.length) for t, w in blend)
        stream = self._curve_time("bandwidth", "copy", "fp64", moved, moved, threads) or 0.0
        return max(moved * per_byte, stream)

    def _permute_time(self, run: int, dtype: str, working: float, threads: int) -> float | None:
        """A layout-changing copy: the measured curves of the two nearest runs, log-log interpolated."""
        runs = self._runs
        if not runs:
            return None
        low = max([r for r in runs if r <= run], default=runs[0])
        high = min([r for r in runs if r >= run], default=runs[-1])
        times = [self._curve_time("permute", str(r), dtype, working, working, threads) for r in (low, high)]
        if low == high or None in times:
            return times[0]
        weight = math.log(run / low) / math.log(high / low)
        return math.exp((1 - weight) * math.log(times[0]) + weight * math.log(times[1]))  # type: ignore[arg-type]

    def _curve_of(self, section: str, op: str, dtype: str) -> tuple[str, str] | None:
        """The measured (op, dtype) curve that times ``op`` in ``dtype``: its own, else fp32's (else
        any measured dtype's); an op without points of its own takes the section's first one,
        except in :data:`OWN_OP_ONLY` sections (None)."""
        available = [k for k in self._curves if k[0] == section and k[1] == op]
        if not available:
            if section in OWN_OP_ONLY:
                return None
            available = [k for k in self._curves if k[0] == section]
            if not available:
                return None
            op = sorted(available)[0][1]
        dtypes = {k[2] for k in available if k[1] == op}
        return op, dtype if dtype in dtypes else ("fp32" if "fp32" in dtypes else sorted(dtypes)[0])

    def other_dtype(self, kernel: Kernel) -> bool:
        """Whether a memory-bound kernel is timed from points of another dtype than its own (a
        bf16 pooling from fp32's, by bytes: 16-bit loops without vector code of their own can be
        several times slower per byte)."""
        key = self._stream_key(kernel)
        if key is None or key[0] == "permute":
            return False
        curve = self._curve_of(*key[:3])
        return curve is not None and curve[1] != key[2]

    def _curve_time(
        self, section: str, op: str, dtype: str, working: float, amount: float, threads: int
    ) -> float | None:
        """Seconds of ``amount`` on the measured curve of (section, op, dtype) at ``working`` bytes."""
        curve = self._curve_of(section, op, dtype)
        if curve is None:
            return None
        op, dtype = curve
        counts = sorted(int(k[3]) for k in self._curves if k[:3] == (section, op, dtype))
        blend = self._thread_blend(counts, threads)
        smallest = min(self._smallest[(section, op, dtype, str(t))] for t, _ in blend)
        floor = 0.0
        if section in AT_SMALLEST_RATE and working < smallest:
            # A framework op or a layout-changing copy is measured from a few hundred KiB up, where
            # its bytes set the time: below, it runs at its smallest size's rate, no faster than
            # the cheapest measured ATen call (dispatch and loop start-up). (A recurrent cell's
            # 8 KiB strided gate copies took 1.4 us, the 512 KiB point's time was 18 us.)
            floor = self.dispatch_floor(threads)
            working = smallest
        elif section in STREAMING and working < smallest:
            # Below the smallest measured array (a few KiB) a call costs what that array cost:
            # loop and thread start-up, not bytes, set the time.
            amount *= smallest / max(working, 1.0)
            working = smallest
        rate = sum(w / self._curves[(section, op, dtype, str(t))](max(working, 1.0)) for t, w in blend)
        return max(amount / rate, floor)

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
        if "elementwise" not in self._cold:
            return 0.0
        cold = self._curve_time("elementwise", "add" + COLD, "fp32", moved, moved, threads)
        warm = self._curve_time("elementwise", "add", "fp32", moved, moved, threads)
        if cold is None or warm is None:
            return 0.0
        return max(0.0, cold - warm)

    def cold_call_parts(self, threads: int) -> tuple[float, float] | None:
        """(seconds, seconds per byte): the ``gemm_cold`` fit of a single call after a cache flush
        over repeated calls on ``threads`` cores, its per-byte part capped at one pass at the
        roofline's DRAM bandwidth; None without ``gemm_cold`` points or with ``cache="warm"``."""
        if self.cache != "cold" or not self._cold_product:
            return None
        blend = self._thread_blend(sorted(self._cold_product), threads)
        seconds = sum(w * self._cold_product[t][0] for t, w in blend)
        per_byte = sum(w * min(self._cold_product[t][1], 1.0 / self.calibration.model_bandwidth(t)) for t, w in blend)
        return seconds, per_byte

    def path_constant(self, threads: int) -> float:
        """Of the cold call's constant (:meth:`cold_call_parts`), the seconds that are the kernels of
        the product's own layout (:func:`path_constants`); 0 without such points."""
        parts = self.cold_call_parts(threads)
        blend = self._thread_blend(sorted(self._path_constant), threads)
        if parts is None or not blend:
            return 0.0
        return min(parts[0], sum(w * self._path_constant[t] for t, w in blend))

    def product_in_step_s(self, kernel: Gemm, threads: int, call_share: float, cold_bytes: float,
                          path_share: float, cold_output_bytes: float = 0.0) -> float | None:
        """A traced BLAS product's time when it pays ``call_share`` (0-1) of the cold call's
        constant, ``path_share`` (0-1) of the part of it that is its layout's kernels
        (:meth:`path_constant`, at least ``call_share`` of it), the per-byte cost of
        ``cold_bytes`` of operands and ``cold_output_bytes`` of output lines fetched before they
        are written, at the roofline's memory bandwidth (what ran before it decides all four:
        :mod:`simhpc.trace.product_reuse`); None where :meth:`cold_call_parts` is."""
        parts = self.cold_call_parts(threads)
        warm = self._product_time(kernel, threads)
        if parts is None or warm is None:
            return None
        path = self.path_constant(threads)
        constant = call_share * (parts[0] - path) + max(call_share, path_share) * path
        fetched = cold_bytes * parts[1] + cold_output_bytes / self.calibration.model_bandwidth(threads)
        return max(warm + constant + fetched, self.dispatch_floor(threads))

    def covers(self, kernel: Kernel) -> bool:
        """Whether the calibration measured a kernel of this kind (else the fallback model times it).

        A 16-bit product needs points of its own dtype: on a CPU without 16-bit arithmetic it runs
        10-50x below fp32, which fp32's points cannot tell.
        """
        if isinstance(kernel, (Gemm, Attention, Recurrent)):
            if kernel.dtype in SIXTEEN_BIT and not any(
                    dtype == kernel.dtype for surfaces in self._gemm.values() for dtype, _ in surfaces):
                return False
            return bool(self._gemm.get("nn"))
        key = self._stream_key(kernel)
        if key is not None and key[0] in OWN_OP_ONLY:
            return any(k[:2] == key[:2] for k in self._curves)
        return key is not None and any(k[0] == key[0] for k in self._curves)

    def attention_time(self, kernel: Attention, threads: int) -> float | None:
        """Fused attention: from the calibration's ``attention`` points of its pass where it has them
        (its products' FLOPs at the interpolated fraction of peak the fused kernel reached, plus a
        product's cold-call time); else its products as a batched GEMM, plus its softmax
        exponentials at the measured ``exp`` rate of an L1-resident array."""
        fraction = self._blended_fraction([self._attention.get(kernel.backward, {})], kernel.dtype, threads,
                                          attention_dims(kernel))
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
        fraction = self._blended_fraction([self._recurrent.get(kernel.backward, {})], kernel.dtype, threads,
                                          recurrent_dims(kernel))
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
        return CalibratedEfficiency(self.calibration, self.fallback, self.gemm_method, self.smoothing, self.blas)

    def host_time(self, kernel: Kernel, threads: int) -> float | None:
        """The calibrated host's interpolated time for ``kernel`` on ``threads`` cores (None: not
        covered). With ``blas="torch"`` (a traced ATen op) no less than the cheapest measured
        ATen call: dispatch costs an op that much however little it computes."""
        seconds = self._kernel_time(kernel, threads)
        if seconds is None or self.blas != "torch":
            return seconds
        return max(seconds, self.dispatch_floor(threads))

    def dispatch_floor(self, threads: int) -> float:
        """The cheapest measured ATen call on ``threads`` cores (0 without torch points)."""
        blend = self._thread_blend(sorted(int(t) for t in self._cheapest_call), threads)
        return sum(w * self._cheapest_call[str(t)] for t, w in blend)

    @property
    def private_cache_bytes(self) -> int:
        """The largest cache one core has to itself (the L2 of current x86 cores; 1 MiB if unknown)."""
        return max((c.size for c in self.calibration.host.caches if c.shared_by == 1), default=1 << 20)

    def framework_overhead_s(self, what: str) -> float:
        """The profiled framework cost ``what`` (``no_kernel_op``: the self time of an op that
        computes nothing; ``call_gap`` / ``engine_gap``: the time between two top-level ops that
        Python / the autograd engine calls); 0 without ``dispatch`` points."""
        return self._dispatch_s.get(what, 0.0)

    def framework_transition_s(self, what: str, work: Any) -> float | None:
        """A training step's framework transition ``what`` (``step_start``, ``backward_entry``,
        ``backward_exit``: :func:`~simhpc.trace.step_ops.transition_before`) after ``work`` (a
        :class:`~simhpc.trace.step_ops.StepWork`: bytes touched, autograd nodes and parameter
        tensors since it last ran): :class:`TransitionCurves`; None without such points."""
        curves = self._transitions.get(what)
        return None if curves is None else curves.seconds(work)

    def first_touch_s(self, nbytes: float, threads: int) -> float:
        """Seconds the page faults of a first write into ``nbytes`` of freshly mapped memory take
        on ``threads`` cores (0 without ``first_touch`` points)."""
        blend = self._thread_blend(sorted(self._page_fault_s), threads)
        pages = math.ceil(nbytes / self._page_bytes)
        return pages * sum(w * self._page_fault_s[t] for t, w in blend)

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
