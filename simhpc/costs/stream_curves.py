"""Memory-bound kernels and framework ops timed from the calibration's measured curves: seconds per
byte (or per stencil cell, per probed line) interpolated over the working set (log-log PCHIP,
clamped to the measured range) per op, dtype and thread count; layout-changing copies between
the curves of the two nearest contiguous runs, batched transposes over their block shape; and
with ``cache="cold"`` no faster than the cold ``add``/``sum`` points give the bytes it fetches
(an in-place map: its inputs only; see :mod:`simhpc.costs.calibration` for the whole model)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from simhpc.costs.calibration_file import Calibration
from simhpc.costs.interpolation import Curve, curve_1d, grid_2d, thread_blend
from simhpc.costs.kernels import Copy, Elementwise, FrameworkOp, HashProbe, Kernel, Reduction, Stencil, dtype_bytes
from simhpc.costs.op_arguments import CHANNELS_LAST

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
FRAMEWORK_STAND_INS = {"_log_softmax": "_softmax", "_log_softmax_backward_data": "_softmax"}
"""ATen ops timed from the torch points of an op with the same passes, when they have none of
their own: a log-softmax is a softmax's max, exponential-and-sum and normalising passes, and its
gradient one exponential per element besides a sum."""
OWN_OP_ONLY = ("framework",)
"""Sections whose kernels are timed only from their very op's points (no other op stands in)."""
AT_SMALLEST_RATE = ("framework", "permute")
"""Sections measured from hundreds of KiB up: below, a kernel runs at the smallest size's rate."""
STREAMING = ("elementwise", "reduction", "bandwidth", "permute", "framework")
OUTER_SUM = "sum@outer"
"""Op-name prefix of the torch points of sums over rows (``sum@outer<width>``: a reduction over
leading dimensions keeping ``width`` contiguous elements, :attr:`Reduction.inner`)."""
COLD = "@cold"
"""Suffix of the curve keys of points measured cold (``cache: cold`` rows)."""
COLD_BASE = {
    "elementwise": ("elementwise", "add"),
    "reduction": ("reduction", "sum"),
    "framework": ("elementwise", "add"),
    "permute": ("elementwise", "add"),
}
"""The cold curve (section, op) that bounds each section's kernels from below with ``cache="cold"``."""
STORED_PER_CELL = (18 / 16) ** 3  # the stencil's ghost layer: 18^3 stored cells per 16^3 block


POOL_OUTPUT_WORK = 6.0
"""Per output of a pooling loop, its fixed work (compare, store, index, loop) in window loads."""
POOL_INPUT_WORK = 0.7
"""Per input element of a pooling loop, its streaming cost in window loads."""


def _between(measured: list[int], value: int, time_at: Callable[[int], float | None]) -> float | None:
    """``time_at`` log-log interpolated between the two ``measured`` values (sorted) nearest
    ``value``, clamped to the measured range; None without any."""
    if not measured:
        return None
    low = max([m for m in measured if m <= value], default=measured[0])
    high = min([m for m in measured if m >= value], default=measured[-1])
    times = [time_at(low), time_at(high)]
    if low == high or None in times:
        return times[0]
    weight = math.log(value / low) / math.log(high / low)
    return math.exp((1 - weight) * math.log(times[0]) + weight * math.log(times[1]))  # type: ignore[arg-type]


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


class StreamCurves:
    """A calibration's memory-bound and framework-op points as curves (``blas="torch"``: a traced
    elementwise op with torch points of its own name is timed from them; ``cache``: see
    :class:`~simhpc.costs.calibration.CalibratedEfficiency`)."""

    def __init__(self, calibration: Calibration, blas: str, cache: str) -> None:
        self.blas = blas
        self.cache = cache
        self._curves: dict[tuple[str, ...], Curve] = {}
        self._smallest: dict[tuple[str, ...], float] = {}
        cal = calibration
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
        counts: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for section, op, dtype, threads in sorted(self._curves, key=lambda k: (k[:3], int(k[3]))):
            counts[(section, op, dtype)].append(int(threads))
        self._thread_counts = dict(counts)
        """(section, op, dtype) -> the thread counts of its curves, in order."""
        self._times: dict[tuple[str, str, str, float, float, int], float | None] = {}
        """:meth:`curve_time`'s answers by its arguments."""
        self._cold = {k[0] for k in self._curves if k[1].endswith(COLD)}
        self._framework_ops = {k[1] for k in self._curves if k[0] == "framework"}
        """Ops with torch points of their own: with ``blas="torch"`` (a torch trace) a traced
        elementwise op of that name is timed from them instead of the C kernels' curves."""
        self._outer_widths = sorted({int(op.removeprefix(OUTER_SUM)) for op in self._framework_ops
                                     if op.startswith(OUTER_SUM)})
        """Widths of the measured sums over rows."""

    def covers(self, kernel: Kernel) -> bool:
        """Whether the calibration measured curves that time ``kernel``."""
        key = self.stream_key(kernel)
        if key is not None and key[0] in OWN_OP_ONLY:
            return any(k[:2] == key[:2] for k in self._curves)
        return key is not None and any(k[0] == key[0] for k in self._curves)

    def has_cold(self, section: str) -> bool:
        """Whether the calibration measured ``section``'s kernels cold (single calls after a flush)."""
        return section in self._cold

    def stream_key(self, kernel: Kernel, framework: bool = True) -> tuple[str, str, str, float, float] | None:
        """(section, op, dtype, working set, amount) of a memory-bound kernel; time = amount x curve.

        ``framework``: a traced elementwise op may use torch's points of its own name (False: the
        C kernels' curves, for the arithmetic inside a fused kernel).
        """
        if isinstance(kernel, Elementwise):
            per_tensor = kernel.op.removeprefix("_foreach_")  # a foreach op runs its per-tensor kernel on each
            if per_tensor not in self._framework_ops:
                per_tensor = FRAMEWORK_STAND_INS.get(per_tensor, per_tensor)
            if framework and self.blas == "torch" and per_tensor in self._framework_ops:
                return "framework", per_tensor, kernel.dtype, kernel.fetched_bytes(), kernel.bytes()
            op = _OP_CURVE.get(per_tensor.removesuffix("_"), "add")
            return "elementwise", op, kernel.dtype, kernel.fetched_bytes(), kernel.bytes()
        if isinstance(kernel, Reduction):
            if framework and self.blas == "torch" and kernel.inner and self._outer_widths:
                width = min(self._outer_widths, key=lambda w: abs(math.log(w / kernel.inner)))
                return "framework", f"{OUTER_SUM}{width}", kernel.dtype, kernel.bytes(), kernel.bytes()
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

    def stream_time(self, kernel: Kernel, threads: int, framework: bool = True,
                    cached_bytes: float = 0.0) -> float | None:
        """Interpolated measured seconds of a memory-bound kernel on the host (None: not covered).

        ``framework=False``: arithmetic inside a fused kernel (attention's exponentials, a recurrent
        layer's gates): the C kernels' curves (see :meth:`stream_key`), on data the fused kernel
        holds in cache, so never the cold floor.

        ``cached_bytes``: with ``cache="cold"``, the part of the kernel's fetched bytes already in
        cache (an input an op just wrote, :mod:`simhpc.trace.stream_reuse`): that share of the
        warm time, plus the rest's bytes at the cold rate, no less than the warm time."""
        key = self.stream_key(kernel, framework)
        if key is None:
            return None
        section, op, dtype, working, amount = key
        if amount <= 0:
            return 0.0
        if section == "permute":
            warm = self._transpose_time(kernel, threads) if isinstance(kernel, Copy) else None
            if warm is None:
                warm = self._permute_time(int(op), dtype, working, threads)
        elif op.startswith(OUTER_SUM) and isinstance(kernel, Reduction):
            warm = self._outer_sum_time(kernel.inner, dtype, working, threads)
        elif isinstance(kernel, FrameworkOp) and (kernel.rows > 1 or kernel.serial):
            # one row on one thread (a row's sort is serial), the threads splitting the rows
            one = self.curve_time(section, op, dtype, working, amount, 1)
            warm = None if one is None else one / min(threads, kernel.rows)
        else:
            warm = self.curve_time(section, op, dtype, working, amount, threads)
        base = COLD_BASE.get(section)
        if framework and self.cache == "cold" and base is not None and base[0] in self._cold:
            streams = 1 if isinstance(kernel, FrameworkOp) and kernel.serial else threads  # the cores fetching
            fetched = kernel.fetched_bytes()
            cached = min(max(cached_bytes, 0.0), fetched)
            cold = self.curve_time(base[0], base[1] + COLD, "fp32", working, fetched - cached, streams)
            if warm is not None and cold is not None:
                return max(warm, warm * (cached / fetched if cached else 0.0) + cold)
        return warm

    def _transpose_time(self, copy: Copy, threads: int) -> float | None:
        """A copy that transposes small blocks (:attr:`Copy.rows` x :attr:`Copy.length`): the
        measured batched transposes of that block shape (and of its kind of row stride, see
        :func:`_set_conflicts`), no faster than streaming its bytes (a tensor larger than the
        caches); None without a block or without such points."""
        if not copy.rows or not copy.length:
            return None
        conflicts = _set_conflicts(copy.rows, dtype_bytes(copy.dtype))
        blend = thread_blend(sorted(t for c, t in self._transposes if c == conflicts), threads)
        if not blend:
            return None
        moved = copy.bytes()
        per_byte = sum(w * self._transposes[(conflicts, t)](copy.rows, copy.length) for t, w in blend)
        stream = self.curve_time("bandwidth", "copy", "fp64", moved, moved, threads) or 0.0
        return max(moved * per_byte, stream)

    def _permute_time(self, run: int, dtype: str, working: float, threads: int) -> float | None:
        """A layout-changing copy: the measured curves of the two nearest runs, log-log interpolated."""
        return _between(self._runs, run, lambda r: self.curve_time("permute", str(r), dtype, working, working, threads))

    def _outer_sum_time(self, width: int, dtype: str, working: float, threads: int) -> float | None:
        """A sum over rows keeping ``width`` elements: the measured sums of the two nearest widths,
        log-log interpolated in the width."""
        return _between(self._outer_widths, width,
                        lambda w: self.curve_time("framework", f"{OUTER_SUM}{w}", dtype, working, working, threads))

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
        key = self.stream_key(kernel)
        if key is None or key[0] == "permute":
            return False
        curve = self._curve_of(*key[:3])
        return curve is not None and curve[1] != key[2]

    def curve_time(
        self, section: str, op: str, dtype: str, working: float, amount: float, threads: int
    ) -> float | None:
        """Seconds of ``amount`` on the measured curve of (section, op, dtype) at ``working`` bytes."""
        key = (section, op, dtype, working, amount, threads)
        if key not in self._times:  # a trace asks the same ops' times step after step
            self._times[key] = self._curve_time(section, op, dtype, working, amount, threads)
        return self._times[key]

    def _curve_time(
        self, section: str, op: str, dtype: str, working: float, amount: float, threads: int
    ) -> float | None:
        curve = self._curve_of(section, op, dtype)
        if curve is None:
            return None
        op, dtype = curve
        blend = thread_blend(self._thread_counts[(section, op, dtype)], threads)
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

    def dispatch_floor(self, threads: int) -> float:
        """The cheapest measured ATen call on ``threads`` cores (0 without torch points)."""
        blend = thread_blend(sorted(int(t) for t in self._cheapest_call), threads)
        return sum(w * self._cheapest_call[str(t)] for t, w in blend)
