"""An op whose code the step evicted pays the calibration's ``evicted_call`` (simhpc.trace.evicted_code)."""

from __future__ import annotations

import json

import pytest

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import host_specs, load_calibration, validate
from simhpc.costs.model import CostModel
from simhpc.hardware.host import COMMITTED_CALIBRATION
from simhpc.trace.compare import compare_trace
from simhpc.trace.readers import parse_trace
from tests.test_compare import _cpu_op, _with_dispatch

WARM, EVICTED = 1e-6, 15e-6
SIDE = 1024
"""The relus' tensors are ``SIDE`` x ``SIDE`` floats (4 MiB)."""
COSTS = [{"what": "no_kernel_op", "threads": 1, "time_s": WARM},
         {"what": "evicted_call", "threads": 1, "time_s": EVICTED}]


def _charges(events: list[dict], rows: list[dict] = COSTS) -> list[tuple[str, float, float]]:
    """(name, its evicted-code charge, its prediction) of each op of a compare of ``events``, in
    time order."""
    efficiency = _with_dispatch(rows)
    cpu, _ = host_specs(efficiency.calibration)
    result = compare_trace(parse_trace({"traceEvents": events}, "evicted"), CostModel(efficiency), cpu, 1)
    ordered = sorted(result.predictions, key=lambda p: p.op.start)
    return [(p.op.name, p.evicted_code_s, p.predicted_s) for p in ordered]


def _sweep(ts: int, distinct: bool) -> list[dict]:
    """Relus over twice the calibration's last-level cache of tensors of ``SIDE`` x ``SIDE`` floats,
    each of another shape (``distinct``), or all of the same one (the same tensor read again)."""
    tensors = int(2 * _with_dispatch(COSTS).calibration.host.last_level_cache / (4 * SIDE * SIDE)) + 1
    return [_cpu_op("aten::relu", ts + 10 * i, [[SIDE + (i if distinct else 0), SIDE]]) for i in range(tensors)]


def test_an_op_pays_its_evicted_code_only_after_distinct_bytes_past_the_last_level_cache() -> None:
    """A tiny op called again after relus over distinct tensors of twice the last-level cache
    pays ``evicted_call`` over its prediction; after relus moving as much over one tensor that
    fits in it, nothing; the relus themselves call each other back to back and pay nothing."""
    for distinct in (True, False):
        relus = _sweep(100, distinct)
        events = [_cpu_op("aten::tanh", 0, [[8, 8]]), *relus, _cpu_op("aten::tanh", relus[-1]["ts"] + 10, [[8, 8]])]
        ops = _charges(events)
        # the first tanh follows the second as the trace repeats: nothing between them
        assert [charge for name, charge, _ in ops if name == "aten::tanh"] == [0.0, EVICTED if distinct else 0.0]
        assert {charge for name, charge, _ in ops if name == "aten::relu"} == {0.0}


def test_a_kernel_free_op_whose_code_was_evicted_costs_its_warm_dispatch_and_the_evicted_call() -> None:
    """A view called once a trace that touches distinct bytes past the last-level cache costs the
    warm ``no_kernel_op`` plus ``evicted_call``; without the point, the charge is never made."""
    relus = _sweep(0, distinct=True)
    events = [*relus, _cpu_op("aten::view", relus[-1]["ts"] + 10, [[8, 8], []])]
    name, charge, predicted = _charges(events)[-1]
    assert name == "aten::view"
    assert (charge, predicted) == (pytest.approx(EVICTED), pytest.approx(WARM + EVICTED))
    assert {charge for _, charge, _ in _charges(events, COSTS[:1])} == {0.0}


def test_tensors_of_one_shape_count_as_distinct_where_the_allocator_placed_them_apart() -> None:
    """Relus over one shape touch one tensor as far as the shapes tell; with the trace's memory
    events, each writing its output into a block of its own (a network's activations, all kept for
    its backward), they touch as many: past the last-level cache, the tiny op after them pays."""
    relus = _sweep(100, distinct=False)
    events = [_cpu_op("aten::tanh", 0, [[8, 8]]), *relus, _cpu_op("aten::tanh", relus[-1]["ts"] + 10, [[8, 8]])]
    blocks = [{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": relu["ts"] + 1, "s": "t",
               "args": {"Addr": (1 << 32) + i * (8 << 20), "Bytes": 4 * SIDE * SIDE, "Device Type": 0}}
              for i, relu in enumerate(relus)]
    for memory, charged in (([], 0.0), (blocks, EVICTED)):
        ops = _charges(events + memory)
        assert [charge for name, charge, _ in ops if name == "aten::tanh"] == [0.0, charged]


def _product_charges(events: list[dict], product_extra: float | None) -> list[tuple[str, float]]:
    """(name, evicted-code charge) of each op of a compare of ``events`` against the committed
    calibration's cold products, with ``COSTS`` as its dispatch points and, where given,
    ``product_extra`` as the probe product's own ``product_extra_s``."""
    data = json.loads(COMMITTED_CALIBRATION.read_text(encoding="utf-8"))
    data["kernels"]["dispatch"] = [dict(row) for row in COSTS]
    if product_extra is not None:
        data["kernels"]["dispatch"][1]["product_extra_s"] = product_extra
    efficiency = CalibratedEfficiency(validate(data, "cal.json"), blas="torch", cache="cold")
    cpu, _ = host_specs(efficiency.calibration)
    result = compare_trace(parse_trace({"traceEvents": events}, "evicted"), CostModel(efficiency), cpu, 1)
    return [(p.op.name, p.evicted_code_s) for p in sorted(result.predictions, key=lambda p: p.op.start)]


def test_the_first_product_after_the_step_evicted_the_blas_pays_the_probe_product_less_the_cold_constant() -> None:
    """A classifier's forward ``addmm`` after relus over twice the last-level cache pays the probe
    product's ``product_extra_s`` less one thread's cold call constant, instead of ``evicted_call``;
    its input gradient right after it (an ``mm`` whose name last ran a trace before) finds the
    library warm and pays ``evicted_call``; its weight gradient right after that, nothing. Without
    ``product_extra_s`` the forward product pays ``evicted_call`` as before; with one under the
    constant, nothing over that constant."""
    relus = _sweep(100, distinct=True)
    end = relus[-1]["ts"]
    head = [_cpu_op("aten::addmm", end + 10, [[10], [16, 48], [48, 10]]),
            _cpu_op("aten::mm", end + 20, [[16, 10], [10, 48]]),
            _cpu_op("aten::mm", end + 30, [[10, 16], [16, 48]])]
    constant, _ = CalibratedEfficiency(load_calibration(COMMITTED_CALIBRATION), blas="torch",
                                       cache="cold").cold_call_parts(1)
    product_extra = constant + 30e-6
    charged = [c for name, c in _product_charges([*relus, *head], product_extra) if name != "aten::relu"]
    assert charged == [pytest.approx(30e-6), pytest.approx(EVICTED), 0.0]
    for extra in (None, constant / 2):
        charged = [c for name, c in _product_charges([*relus, *head], extra) if name != "aten::relu"]
        assert charged == [pytest.approx(EVICTED if extra is None else 0.0), pytest.approx(EVICTED), 0.0]
