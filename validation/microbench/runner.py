"""Run every microbenchmark and collect the measured points of a calibration file.

:func:`plan` lists the points (one task each, so a progress bar knows the total);
:func:`run` times them in order and returns the ``kernels`` and ``probes`` sections.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from . import (
    attention,
    conv,
    dispatch,
    framework,
    gemm,
    hashprobe,
    latency,
    pages,
    permute,
    recurrent,
    rewrite,
    stencil,
    streams,
    timing,
)
from .timing import FULL, QUICK, Budget
from .watches import L1Watch, PeerWatch

SUITE_VERSION = 42
"""Bumped whenever a kernel or its accounting changes: older calibration files are then stale."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Task:
    """One measured point: ``section`` of the calibration file it goes to, a label, the call.

    ``again``: a repeat of an earlier task with this label (a later round): the faster of the
    two measurements is kept, with ``rounds`` counting them. ``retake``: a repeat :func:`run` adds
    for a point measured with the cores far apart or on a shared core, in place of any planned one.
    """

    section: str
    label: str
    call: Callable[[], dict[str, Any]]
    again: bool = False
    retake: bool = False


ROUNDS = 2
"""Rounds of the multi-thread torch GEMM points, the second after every other point (a minute or
two later); the faster round is kept, as ``validation/traces/capture.py`` keeps the fastest of its
captures. On the 2-core KVM guests a cache line's round trip between the two vCPUs moves between
about 70 ns and 330 ns or more within seconds (the host moving them), and the multi-thread products
with it (two calibrate runs on the Zen 4 guest: a 2-thread 64 x 64 x 16 product 3.8 and 8.2 us);
single-thread points stay within a few percent from run to run, so they are measured once."""


def _threads_list(cores: int) -> list[int]:
    return [1] if cores <= 1 else [1, cores]


def peers_available(cores: int) -> bool:
    """Whether the cores' round trip can be probed: a machine of ``cores`` > 1 on which this process
    may run on two CPUs (:func:`~.latency.two_cpus_available`)."""
    return cores > 1 and latency.two_cpus_available()


def plan(cores: int, llc_bytes: float, quick: bool = False, native_half: Sequence[str] = ()) -> list[Task]:
    """Every point to measure: ``cores`` threads besides 1; pointer chase up to 4 x ``llc_bytes``;
    ``native_half``: the 16-bit types the CPU computes natively (more product sizes for them)."""
    budget: Budget = QUICK if quick else FULL
    threads = _threads_list(cores)
    tasks: list[Task] = []
    repeats = 3
    tasks.append(Task("probes", "clock", partial(latency.measure_clock)))
    tasks.append(Task("probes", "fma", partial(latency.measure_fma)))
    peers = peers_available(cores)
    if peers:
        tasks.append(Task("probes", "peer round trip", partial(latency.measure_peer_round_trip)))
    for blas in gemm.backends():
        for dtype in gemm.dtypes(blas):
            for t in threads:
                for batch, m, n, k in gemm.shapes(quick, blas, dtype):
                    label = f"gemm {blas} {dtype} {t}t {batch}x{m}x{n}x{k}"
                    call = partial(gemm.measure_gemm, batch, m, n, k, dtype, t, budget, blas)
                    tasks.append(Task("gemm", label, call))
    if conv.available():
        for t in threads:
            for shape in conv.shapes(quick):
                for direction in conv.PASSES:
                    call = partial(conv.measure_conv, *shape, direction, t, budget)
                    tasks.append(Task("conv", f"conv {direction} {t}t {'x'.join(map(str, shape))}", call))
            for shape in conv.half_shapes(quick, "bf16" in native_half):
                for direction in conv.PASSES:
                    call = partial(conv.measure_conv, *shape, direction, t, budget, dtype="bf16")
                    tasks.append(Task("conv", f"conv bf16 {direction} {t}t {'x'.join(map(str, shape))}", call))
            for shape in conv.pointwise_shapes(quick):
                for direction in conv.PASSES:
                    call = partial(conv.measure_conv, *shape, direction, t, budget, kernel=1)
                    tasks.append(Task("conv", f"conv pointwise {direction} {t}t {'x'.join(map(str, shape))}", call))
            for batch, channels, size, dims, groups, kernel in conv.grouped_shapes(quick):
                if groups < channels:
                    kind, shape = "grouped", (batch, channels, size, groups)
                elif kernel == 7:
                    kind, shape = "depthwise 7x7", (batch, channels, size)
                else:
                    kind, shape = "depthwise", (batch, channels, size, dims)
                for direction in conv.PASSES:
                    call = partial(conv.measure_grouped, batch, channels, size, dims, groups, kernel, direction, t,
                                   budget)
                    tasks.append(Task("conv", f"conv {kind} {direction} {t}t {'x'.join(map(str, shape))}", call))
    if attention.available():
        for t in threads:
            for heads, length, e in attention.shapes(quick):
                for backward in (False, True):
                    call = partial(attention.measure_attention, heads, length, e, backward, t, budget)
                    name = "backward" if backward else "forward"
                    tasks.append(Task("attention", f"attention {name} {t}t {heads}x{length}x{e}", call))
    if recurrent.available():
        for t in threads:
            for shape in recurrent.shapes(quick):
                for backward in (False, True):
                    call = partial(recurrent.measure_recurrent, *shape, backward, t, budget)
                    name = "backward" if backward else "forward"
                    tasks.append(Task("recurrent", f"recurrent {name} {t}t {'x'.join(map(str, shape))}", call))
    if framework.available():
        for what in dispatch.WHAT:
            tasks.append(Task("dispatch", f"dispatch {what}", partial(dispatch.measure_dispatch, what)))
        tasks.append(Task("dispatch", "dispatch evicted_call", dispatch.measure_evicted_call))
        loops = [(width, dispatch.TRAINING_LAYERS) for width in dispatch.TRAINING_WIDTHS]
        loops += [(min(dispatch.TRAINING_WIDTHS), layers) for layers in dispatch.TRAINING_DEPTHS]
        for width, layers in loops:
            for what in dispatch.TRANSITIONS:
                call = partial(dispatch.measure_transition, what, width, layers)
                tasks.append(Task("dispatch", f"dispatch {what} in a training step, width {width}, {layers} layers",
                                  call))
        for t in threads:
            for op in framework.POOLS:
                for side in framework.QUICK_POOL_SIDES if quick else framework.POOL_SIDES:
                    for nhwc in (False, True):
                        call = partial(framework.measure_pool, op, side, t, budget, nhwc)
                        layout = " channels_last" if nhwc else ""
                        tasks.append(Task("framework", f"{op} {t}t {side}x{side}{layout}", call))
            for op in framework.RANDOM:
                for nbytes in framework.QUICK_RANDOM_BYTES if quick else framework.RANDOM_BYTES:
                    call = partial(framework.measure_random, op, nbytes, t, budget)
                    tasks.append(Task("framework", f"{op} {t}t {nbytes} B", call))
            for op in framework.POINTWISE:
                for nbytes in framework.QUICK_RANDOM_BYTES if quick else framework.POINTWISE_BYTES:
                    call = partial(framework.measure_pointwise, op, nbytes, t, budget)
                    tasks.append(Task("framework", f"{op} {t}t {nbytes} B", call))
            for op in framework.LOGICAL:
                for nbytes in framework.QUICK_RANDOM_BYTES if quick else framework.POINTWISE_BYTES:
                    call = partial(framework.measure_logical, op, nbytes, t, budget)
                    tasks.append(Task("framework", f"{op} {t}t {nbytes} B", call))
            for width in framework.OUTER_SUM_WIDTHS[2:3] if quick else framework.OUTER_SUM_WIDTHS:
                for nbytes in framework.OUTER_SUM_BYTES[:1] if quick else framework.OUTER_SUM_BYTES:
                    call = partial(framework.measure_outer_sum, width, nbytes, t, budget)
                    tasks.append(Task("framework", f"sum over rows {t}t {width} wide {nbytes} B", call))
            for op in framework.INDEXED:
                for count in framework.INDEXED_COUNTS[:1] if quick else framework.INDEXED_COUNTS:
                    call = partial(framework.measure_indexed, op, count, t, budget)
                    tasks.append(Task("framework", f"{op} {t}t {count} indices", call))
            for op in framework.RESAMPLE:
                for side in framework.QUICK_POOL_SIDES if quick else framework.POOL_SIDES:
                    call = partial(framework.measure_resample, op, side, t, budget)
                    tasks.append(Task("framework", f"{op} {t}t {side}x{side}", call))
            for dtype in framework.SORT_DTYPES:
                for length in framework.SORT_LENGTHS[1:2] if quick else framework.SORT_LENGTHS:
                    call = partial(framework.measure_sort, dtype, length, t, budget)
                    tasks.append(Task("framework", f"sort {dtype} {t}t {length} elements", call))
                for length in [] if quick else framework.SORT_LENGTHS[:-1]:
                    call = partial(framework.measure_sort, dtype, length, t, budget, framework.SORT_ROWS)
                    tasks.append(Task("framework", f"sort rows {dtype} {t}t {framework.SORT_ROWS}x{length}", call))
            norms = [(op, framework.NORM_SHAPES) for op in framework.NORMS]
            norms += [(op, framework.LAYER_NORM_SHAPES) for op in framework.LAYER_NORMS]
            for op, norm_shapes in norms:
                for shape in norm_shapes[:1] if quick else norm_shapes:
                    call = partial(framework.measure_norm, op, shape, t, budget)
                    tasks.append(Task("framework", f"{op} {t}t {'x'.join(map(str, shape))}", call))
    sizes = streams.QUICK_SIZES if quick else streams.SIZES
    dtypes = ("fp32",) if quick else tuple(streams.DTYPES)
    typed_streams = (
        ("elementwise", streams.ELEMENTWISE_OPS, streams.measure_elementwise),
        ("reduction", streams.REDUCTION_OPS, streams.measure_reduction),
    )
    for family, ops, measure in typed_streams:
        for op in ops:
            for dtype in dtypes:
                for t in threads:
                    for size in sizes:
                        call = partial(measure, op, dtype, size, t, budget)
                        tasks.append(Task(family, f"{op} {dtype} {t}t {size} B", call))
        for op in streams.COLD_OPS[family]:
            for t in threads:
                for size in sizes:
                    call = partial(measure, op, "fp32", size, t, budget, cold=True)
                    tasks.append(Task(family, f"{op} fp32 {t}t {size} B cold", call))
    for op in streams.BANDWIDTH_OPS:
        for t in threads:
            for size in sizes:
                tasks.append(
                    Task(
                        "bandwidth",
                        f"{op} {t}t {size} B",
                        partial(streams.measure_bandwidth, op, size, t, budget),
                    )
                )
    for t in threads:
        for run in permute.QUICK_RUNS if quick else permute.RUNS:
            for size in permute.QUICK_TENSOR_BYTES if quick else permute.TENSOR_BYTES:
                call = partial(permute.measure_permute, run, size, t, budget)
                tasks.append(Task("permute", f"permute copy {t}t run {run} {size} B", call))
    blocks = permute.QUICK_TRANSPOSES if quick else [
        (rows, length) for rows in permute.TRANSPOSE_ROWS for length in permute.TRANSPOSE_LENGTHS]
    for t in threads:
        for rows, length in blocks:
            call = partial(permute.measure_transpose, rows, length, t, budget)
            tasks.append(Task("transpose", f"transpose copy {t}t {rows} x {length} blocks", call))
    for t in threads:
        for size in pages.FIRST_TOUCH_SIZES:
            call = partial(pages.measure_first_touch, t, budget, size)
            tasks.append(Task("first_touch", f"first touch {t}t {size} B", call))
        tasks.append(Task("unmap", f"unmap {t}t {pages.FIRST_TOUCH_BYTES} B",
                          partial(pages.measure_unmap, t, budget)))
    for since in rewrite.SINCE_BYTES:
        call = partial(rewrite.measure_rewrite, since, budget)
        tasks.append(Task("rewrite", f"rewrite after {since} B", call))
    for size in latency.chase_sizes(llc_bytes, quick):
        tasks.append(Task("latency", f"pointer chase {size} B", partial(latency.measure_chase, size, repeats)))
    for t in threads:
        for blocks in stencil.QUICK_BLOCKS if quick else stencil.BLOCKS:
            tasks.append(
                Task(
                    "stencil",
                    f"stencil {t}t {blocks} blocks",
                    partial(stencil.measure_stencil, blocks, t, budget),
                )
            )
    for variant in hashprobe.VARIANTS:
        for size in hashprobe.QUICK_TABLE_BYTES if quick else hashprobe.TABLE_BYTES:
            tasks.append(
                Task(
                    "hash_probe",
                    f"hash {variant} {size} B",
                    partial(hashprobe.measure_hash, variant, size, repeats),
                )
            )
    if gemm.torch_available():  # one round: narrow products by operand layout
        for t in threads:
            for m, n, k, layout in gemm.layout_shapes(quick):
                call = partial(gemm.measure_gemm, 1, m, n, k, "fp32", t, budget, "torch", layout)
                tasks.append(Task("gemm", f"gemm torch fp32 {t}t 1x{m}x{n}x{k} {layout}", call))
            for kind, shapes in (("gemv", gemm.vector_shapes), ("head", gemm.head_shapes), ("ger", gemm.outer_shapes)):
                for m, n, k, layout in shapes(quick):
                    call = partial(gemm.measure_gemm, 1, m, n, k, "fp32", t, budget if quick else gemm.VECTOR_BUDGET,
                                   "torch", layout)
                    tasks.append(Task("gemm", f"{kind} torch fp32 {t}t 1x{m}x{n}x{k} {layout}", call))
            for batch, m, n, k, layout, which in gemm.interleaved_shapes(quick):
                call = partial(gemm.measure_gemm, batch, m, n, k, "fp32", t, budget, "torch", layout, which)
                tasks.append(Task("gemm", f"gemm torch fp32 {t}t {batch}x{m}x{n}x{k} {layout} interleaved {which}",
                                  call))
            for m, n, k, layout in gemm.cold_shapes(quick):
                call = partial(gemm.measure_gemm_cold, m, n, k, layout, t, budget)
                tasks.append(Task("gemm_cold", f"gemm torch fp32 {t}t 1x{m}x{n}x{k} {layout} cold", call))
            for after, layout in gemm.path_pairs(quick):
                call = partial(gemm.measure_gemm_path, after, layout, t, budget)
                m, n, k = gemm.path_shape(layout)
                tasks.append(Task("gemm_cold", f"gemm torch fp32 {t}t 1x{m}x{n}x{k} {layout} after {after}", call))
            for dtype in gemm.HALF:
                for m, n, k, layout in gemm.half_shapes(quick, dtype in native_half):
                    half_budget = budget if quick else gemm.HALF_BUDGET
                    call = partial(gemm.measure_gemm, 1, m, n, k, dtype, t, half_budget, "torch", layout)
                    tasks.append(Task("gemm", f"gemm torch {dtype} {t}t 1x{m}x{n}x{k} {layout}", call))
    if not quick:  # last, so that a run short of time drops repeats, never a point
        repeats_of = [t for t in tasks if t.section == "gemm" and t.label.startswith("gemm torch ")
                      and " 1t " not in t.label]
        tasks += [Task(t.section, t.label, t.call, again=True) for _ in range(ROUNDS - 1) for t in repeats_of]
    if peers:  # did the cores' distance change while the points were measured?
        tasks.append(Task("probes", "peer round trip at the end", partial(latency.measure_peer_round_trip)))
    return tasks


PACE_FLOOR = 0.1
"""The least share of its budget a point gets when a run falls behind its deadline."""
FIRST_ROUND_SHARE = 0.85
"""The first round (every point once) should end by this fraction of the deadline. At 0.9 the first
rounds of the Zen 4 guest's fresh checks took 158-162 s of the 170 s, and 4-86 of the points read far
were measured again; at 0.85, 155 s and 107 and 127 (validation/README.md, session 32)."""


def _pace(elapsed: float, done: int, total: int, deadline_s: float) -> float:
    """The share of their budget (:func:`~.timing.paced`) the remaining first-round points get: 1
    while the round, projected at its pace so far, ends by ``FIRST_ROUND_SHARE`` of the deadline;
    less, down to ``PACE_FLOOR``, in proportion to how far behind it is."""
    projected = elapsed * total / max(done, 1)
    target = FIRST_ROUND_SHARE * deadline_s
    if projected <= target:
        return 1.0
    return max(PACE_FLOOR, (target - elapsed) / max(projected - elapsed, 1e-9))


def threads_of(label: str) -> int:
    """The thread count a point's label names (``... 2t ...``), 1 where it names none."""
    found = re.search(r"\b(\d+)t\b", label)
    return int(found.group(1)) if found else 1


SLOWER_THAN_REFERENCE = 1.15
"""A first-round point over this many times the same point in the reference calibration (an earlier
run on this kind of machine) is measured again after the first round, the faster kept. On the Zen 4
guest a single run measured 5-14 % of its 1-thread points this much slower than the same point's
median over 25 runs, in spells of seconds that the L1 probe and the cores' round trip do not see
(``validation/README.md``, session 37)."""
SCALE_MIN_POINTS = 20
"""First-round points a section needs with a reference point for its median ratio to the reference
to scale the threshold (:func:`_retakes`)."""
REFERENCE_RETAKE_MAX_S = 1.0
"""A point whose first measurement took longer than this is not measured again for being slow: the
seconds are worth more to many short points."""
Reference = Callable[[str, dict[str, Any]], float | None]
"""The reference calibration's seconds for a row of a section (None where it has no such point)."""


RETAKE_DEFERRALS = 3
"""Times a retake whose probe still reads the cores far apart (or the core shared) is put back behind
the next retake, or one planned repeat where no other retake waits (far spells last seconds to
minutes), before it is measured anyway."""


def _seconds(row: dict[str, Any]) -> float:
    """A row's measured seconds: ``time_s``, or a pointer chase's ``latency_s``."""
    return row["time_s"] if "time_s" in row else row["latency_s"]


def _first_round_end(tasks: list[Task]) -> int:
    """Index of the first repeat in ``tasks``, or, where there is none, after the last point (the
    trailing probes stay last)."""
    boundary = next((i for i, task in enumerate(tasks) if task.again), None)
    if boundary is None:
        boundary = 1 + max((i for i, task in enumerate(tasks) if task.section != "probes"), default=-1)
    return boundary


def _retakes(first_round: list[Task], rows: dict[str, dict[str, Any]], took: dict[str, float],
             reference: Reference | None,
             flagged: set[str]) -> tuple[list[Task], list[tuple[Task, float]], dict[str, float]]:
    """The points to measure again after the first round, in order, those of them measured again
    only for being slower than the reference, with its (scaled) time, and the scale of each section.

    Without a reference: the ``flagged`` points (cores far apart, shared core) in measuring order.
    With one: first every point over :data:`SLOWER_THAN_REFERENCE` times its reference time, flagged
    or not (an unflagged one only if quick enough to repeat), the slowest relative to it first;
    then the flagged points the reference does not show slow. The reference time is scaled by the
    median ratio of the section's points to theirs (with :data:`SCALE_MIN_POINTS` of them or more):
    a reference of a guest alike in all the OS shows may run at another clock (two Zen 5 guests,
    3.75 and 4.5 GHz), and a slower one would otherwise find most of its points slow."""
    ratios: dict[str, float] = {}
    slow_only = []
    expected_of: dict[str, float] = {}
    by_section: dict[str, list[float]] = {}
    for task in first_round:
        row = rows.get(task.label)
        expected = reference(task.section, row) if reference is not None and row is not None else None
        if expected:
            expected_of[task.label] = expected
            by_section.setdefault(task.section, []).append(_seconds(row) / expected)
    scale = {section: statistics.median(found) if len(found) >= SCALE_MIN_POINTS else 1.0
             for section, found in by_section.items()}
    for task in first_round:
        if task.label not in expected_of:
            continue
        row, expected = rows[task.label], expected_of[task.label] * scale[task.section]
        if _seconds(row) <= SLOWER_THAN_REFERENCE * expected:
            continue
        if task.label in flagged or took.get(task.label, 0.0) <= REFERENCE_RETAKE_MAX_S:
            ratios[task.label] = _seconds(row) / expected
            if task.label not in flagged:
                slow_only.append((task, expected))
    over = sorted((task for task in first_round if task.label in ratios), key=lambda task: -ratios[task.label])
    rest = [task for task in first_round if task.label in flagged and task.label not in ratios]
    return [replace(task, again=True, retake=True) for task in over + rest], slow_only, scale


def _reference_summary(suspects: list[tuple[Task, float]], rows: dict[str, dict[str, Any]],
                       retaken: int, scale: dict[str, float]) -> dict[str, Any]:
    """The ``slower than reference`` entry of the calibration's probes: how many first-round points
    read over the threshold, how many were measured again in time, how many are kept over it, and
    the sections whose reference times were scaled (``scaled``: section -> median ratio)."""
    still = sum(_seconds(rows[task.label]) > SLOWER_THAN_REFERENCE * expected for task, expected in suspects)
    scaled = {section: round(ratio, 3) for section, ratio in sorted(scale.items()) if ratio != 1.0}
    return {"threshold": SLOWER_THAN_REFERENCE, "points": len(suspects), "retaken": retaken, "kept_slow": still,
            **({"scaled": scaled} if scaled else {})}


def run(tasks: list[Task], progress: Progress | None = None, deadline_s: float | None = None,
        l1_bytes: int | None = None, round_trips: bool = False, reference: Reference | None = None) -> dict[str, Any]:
    """Measure ``tasks`` in order; returns ``{"kernels": {section: [rows]}, "probes": {...},
    "repeats_skipped": n, "first_round_s": seconds}`` (the time to the first repeat: every point
    measured once).

    ``progress(label)`` is called before each task. ``deadline_s``: seconds from now by which the
    run should end; a repeat (``again``) that its first round's duration says would end later is
    skipped (the first round's measurement stands). ``l1_bytes``: the L1 data cache, to take the L1
    probe (:class:`L1Watch`) before every first-round point and retake, its reading kept in the
    point's row (``l1_probe_s``). ``round_trips``: take the cores' round trip (:class:`PeerWatch`)
    before every multi-thread point, kept in its row (``round_trip_s``). ``reference``: a point's
    time in an earlier calibration of this kind of machine.

    After the first round, the points read with the cores far apart, and those read on a shared
    core (:meth:`L1Watch.retake_labels`), are measured once more, before and instead of their
    planned repeats; a retake whose probe still reads far (or shared) waits behind another repeat,
    up to :data:`RETAKE_DEFERRALS` times. With a ``reference``, so are the points over
    :data:`SLOWER_THAN_REFERENCE` times it, and every point over it is measured again first, the
    slowest relative to it first (:func:`_retakes`), the points flagged far or shared that read
    within it last. The faster measurement is kept, as for every repeat. glibc's malloc is told to keep
    freed memory first (:func:`pages.keep_freed_memory`): the points time kernels, not page faults.
    """
    watch = L1Watch(l1_bytes) if l1_bytes else None
    peers = PeerWatch() if round_trips else None
    pages.keep_freed_memory()
    kernels: dict[str, list[dict[str, Any]]] = {}
    probes: dict[str, dict[str, Any]] = {}
    first: dict[str, dict[str, Any]] = {}
    took: dict[str, float] = {}
    counts = {"skipped": 0, "far": 0, "shared": 0, "slow": 0}
    start = time.perf_counter()

    def measure(task: Task, readings: dict[str, float] | None = None) -> None:
        """Time ``task`` (``readings``: probes taken just before it, by row field)."""
        if progress:
            progress(task.label)
        if task.again and deadline_s is not None and time.perf_counter() - start + took[task.label] > deadline_s:
            counts["skipped"] += 1
            return
        readings = dict(readings or {})
        point = task.section != "probes"
        if watch is not None and point and (task.retake or not task.again) and "l1_probe_s" not in readings:
            readings["l1_probe_s"] = watch.probe(threads_of(task.label))
        if peers is not None and point and threads_of(task.label) > 1 and "round_trip_s" not in readings:
            readings["round_trip_s"] = peers.probe()
        if not task.again:
            if watch is not None and "l1_probe_s" in readings:
                watch.readings[task.label] = readings["l1_probe_s"]
            if peers is not None and "round_trip_s" in readings:
                peers.readings[task.label] = readings["round_trip_s"]
        began = time.perf_counter()
        row = task.call()
        row.update(readings)
        took.setdefault(task.label, time.perf_counter() - began)
        if task.section == "probes":
            probes[task.label] = row
        elif task.again:
            kept = first[task.label]
            rounds = kept.get("rounds", 1) + 1
            if _seconds(row) < _seconds(kept):
                kept.clear()
                kept.update(row)
            kept["rounds"] = rounds
        else:
            first[task.label] = row
            kernels.setdefault(task.section, []).append(row)

    def still_suspect(label: str) -> tuple[bool, dict[str, float]]:
        """Probe again what flagged ``label``: whether it still reads far or shared, and the readings."""
        readings: dict[str, float] = {}
        if peers is not None and label in far:
            readings["round_trip_s"] = peers.probe()
        if watch is not None and label in shared:
            readings["l1_probe_s"] = watch.probe(threads_of(label))
        suspect = ((peers is not None and peers.is_slow(readings.get("round_trip_s")))
                   or (watch is not None and watch.is_slow(readings.get("l1_probe_s"))))
        return suspect, readings

    boundary = _first_round_end(tasks)
    first_round = tasks[:boundary]
    timing.set_pace(1.0)
    for done, task in enumerate(first_round):
        if deadline_s is not None and done >= len(first_round) // 10:
            timing.set_pace(_pace(time.perf_counter() - start, done, len(first_round), deadline_s))
        measure(task)
    timing.set_pace(1.0)
    first_round_s = time.perf_counter() - start
    far = set(peers.slow_labels()) if peers is not None else set()
    shared = set(watch.retake_labels()) if watch is not None else set()
    order, suspects, scale = _retakes(first_round, first, took, reference, far | shared)
    slow = {task.label for task, _ in suspects}
    waiting = deque((task, 0) for task in order)
    planned = deque(task for task in tasks[boundary:] if task.again and task.label not in far | shared | slow)
    while waiting or planned:
        if deadline_s is not None and time.perf_counter() - start > deadline_s:
            counts["skipped"] += len(waiting) + len(planned)  # past it, no repeat fits: probe no more
            break
        if not waiting:
            measure(planned.popleft())
            continue
        task, deferred = waiting.popleft()
        suspect, readings = still_suspect(task.label)
        if suspect and (waiting or planned) and deferred < RETAKE_DEFERRALS:
            alone = not waiting
            waiting.append((task, deferred + 1))
            if alone:  # wait behind a planned repeat, else behind the next retake
                measure(planned.popleft())
            continue
        before = counts["skipped"]
        measure(task, readings)
        if counts["skipped"] == before:
            counts["far"] += task.label in far
            counts["shared"] += task.label in shared
            counts["slow"] += task.label in slow
    for task in tasks[boundary:]:
        if not task.again:
            measure(task)
    if watch is not None and watch.readings:
        probes["L1 probe"] = watch.summary(counts["shared"])
    if peers is not None and peers.readings:
        kept = [row["round_trip_s"] for rows in kernels.values() for row in rows if "round_trip_s" in row]
        probes["round trip before points"] = peers.summary(counts["far"], kept)
    if reference is not None:
        probes["slower than reference"] = _reference_summary(suspects, first, counts["slow"], scale)
    return {"kernels": kernels, "probes": probes, "repeats_skipped": counts["skipped"],
            "first_round_s": first_round_s}
