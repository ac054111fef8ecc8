"""Traced ``sort``, ``arange``, ``tril``, ``triu`` and embedding bags: their kernels and their calibrated times."""

from __future__ import annotations

import copy
import math

import pytest

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import Calibration, host_specs, load_calibration, validate
from simhpc.costs.kernels import Elementwise, FrameworkOp
from simhpc.costs.model import CostModel
from simhpc.costs.opmap import kernel_for
from simhpc.costs.opnames import classify
from simhpc.hardware.host import COMMITTED_CALIBRATION
from simhpc.trace.compare import compare_trace
from simhpc.trace.readers import parse_trace


def _kernel(name: str, dims: list, types: list, concrete: list, children: tuple[str, ...] = ()):
    return kernel_for(name, classify(name, "cpu_op"), dims, types, concrete, bool(children), None, children)


RANGES = [  # (Input Dims, Input type, Concrete Inputs) of each overload, as torch 2.13 records them
    ([[], [], [], [0]], ["Scalar", "Scalar", "Scalar", "long int"], ["2", "100", "3", ""], 33, "fp64"),
    ([[], [0]], ["Scalar", "float"], ["10", ""], 10, "fp32"),
    ([[]] * 5, ["Scalar", "", "", "", "Scalar"], ["64", "", "", "", "False"], 64, "fp64"),
    ([[]] * 5, ["Scalar", "Scalar", "", "", "Scalar"], ["10", "6", "", "", "False"], 10, "fp32"),
    ([[]] * 6, ["Scalar", "Scalar", "Scalar", "Scalar", "", ""], ["5", "50", "4", "0", "", ""], 45, "fp64"),
    ([[]] * 7, ["Scalar"] * 3 + ["", "", "", "Scalar"], ["0.", "1.", "0.01", "", "", "", "False"], 100, "fp32"),
]


@pytest.mark.parametrize(("dims", "types", "concrete", "n", "dtype"), RANGES)
def test_arange_writes_one_element_per_step_of_its_range(dims, types, concrete, n, dtype) -> None:
    """The ``out`` form's tensor is recorded empty (a child resizes it): the range sets the work."""
    kernel = _kernel("aten::arange", dims, types, concrete, ("aten::resize_",)).kernel
    assert kernel == Elementwise(dtype=dtype, n=n, op="arange", inputs=0, outputs=1)


def test_arange_wrappers_empty_ranges_and_unreadable_bounds() -> None:
    wrapper = _kernel("aten::arange", *RANGES[2][:3], ("aten::empty", "aten::arange"))
    assert wrapper.kernel is None and wrapper.reason == ""  # its child of the same name does the work
    assert _kernel("aten::arange", [[], [0]], ["Scalar", "long int"], ["0", ""]).reason == ""  # nothing to write
    zero_step = _kernel("aten::arange", [[], [], [], [0]], ["Scalar", "Scalar", "Scalar", "long int"],
                        ["0", "10", "0", ""])
    assert zero_step.kernel is None and "zero step" in zero_step.reason
    unread = _kernel("aten::arange", [[], [0]], ["Scalar", "long int"], ["", ""])
    assert unread.kernel is None and "range not recorded" in unread.reason
    for bounds in (["0", "1e30", "1e-30"], ["0", "inf", "1"], ["0", "nan", "1"]):  # a mutated trace's
        absurd = _kernel("aten::arange", [[], [], [], [0]], ["Scalar", "Scalar", "Scalar", "long int"], [*bounds, ""])
        assert absurd.kernel is None and absurd.reason


@pytest.mark.parametrize("op", ["tril", "triu", "tril_"])
def test_triangles_copy_their_input(op: str) -> None:
    kernel = _kernel(f"aten::{op}", [[64, 64], []], ["float", "Scalar"], ["", "0"]).kernel
    assert kernel == Elementwise(dtype="fp32", n=64 * 64, op=op.rstrip("_"), inputs=1, outputs=1,
                                 in_place=op.endswith("_"))


def test_a_sort_reads_its_values_and_writes_them_with_their_indices_row_by_row() -> None:
    stable = _kernel("aten::sort", [[4, 100], [], [], []], ["float", "Scalar", "Scalar", "Scalar"],
                     ["", "False", "0", "False"], ("aten::copy_", "aten::arange", "aten::copy_")).kernel
    assert stable == FrameworkOp(dtype="fp32", op="sort@rows", nbytes=400 * (2 * 4 + 8), rows=100)  # along dim 0
    last = _kernel("aten::sort", [[12800], [], []], ["long int", "Scalar", "Scalar"], ["", "-1", "False"]).kernel
    assert last == FrameworkOp(dtype="fp64", op="sort", nbytes=12800 * 24, rows=1)  # int64 in fp64's width
    rows = _kernel("aten::sort", [[64, 1024], [], []], ["float", "Scalar", "Scalar"], ["", "-1", "True"]).kernel
    assert rows.rows == 64
    outer = _kernel("aten::sort", [[4, 100], [], []], ["float", "Scalar", "Scalar"], ["", "0", "False"],
                    ("aten::sort",))
    assert outer.kernel is None and outer.reason == ""  # the redispatch to the stable overload does it


def _sort_points(cal: Calibration, dtype: str, threads: int) -> dict[int, float]:
    return {row["input"][0]: row["time_s"] for row in cal.rows("framework")
            if row["op"] == "sort" and row["dtype"] == dtype and row["threads"] == threads}


def test_a_sort_is_timed_from_one_rows_points_its_rows_split_among_the_threads() -> None:
    cal = load_calibration(COMMITTED_CALIBRATION)
    efficiency = CalibratedEfficiency(cal, blas="torch")
    points = _sort_points(cal, "fp32", 1)
    assert len(points) >= 4
    length = sorted(points)[2]
    one_row = FrameworkOp(dtype="fp32", op="sort", nbytes=length * 16)
    assert efficiency.host_time(one_row, 1) == pytest.approx(points[length], rel=1e-6)
    many = FrameworkOp(dtype="fp32", op="sort", nbytes=8 * length * 16, rows=8)
    assert efficiency.host_time(many, 2) == pytest.approx(8 * points[length] / 2, rel=1e-6)
    assert efficiency.host_time(many, 16) == pytest.approx(points[length], rel=1e-6)  # no more threads than rows
    # the cost per element grows with the length: a sort of twice the length costs more than twice
    longer = sorted(points)[3]
    per_element = [points[n] / n for n in (length, longer)]
    assert per_element[1] > per_element[0]
    between = FrameworkOp(dtype="fp32", op="sort", nbytes=int(math.sqrt(length * longer)) * 16)
    assert points[length] < efficiency.host_time(between, 1) < points[longer]


def test_a_sort_of_several_rows_is_timed_from_the_per_row_points_else_the_one_row_ones() -> None:
    """A row of 1024 values in a 16-row sort took twice a 1-D sort of 1024 here: multi-row sorts
    have points of their own (``sort@rows``, recorded per row)."""
    cal = load_calibration(COMMITTED_CALIBRATION)
    efficiency = CalibratedEfficiency(cal, blas="torch")
    row = next(r for r in cal.rows("framework") if r["op"] == "sort@rows" and r["dtype"] == "fp32"
               and r["threads"] == 1 and r["input"] == [16, 1024])
    assert row["bytes"] == 1024 * 16  # one row's values read and written with their indices
    kernel = _kernel("aten::sort", [[64, 1024], [], []], ["float", "Scalar", "Scalar"], ["", "-1", "False"]).kernel
    assert (kernel.op, kernel.rows) == ("sort@rows", 64)
    assert efficiency.host_time(kernel, 1) == pytest.approx(64 * row["time_s"], rel=1e-6)
    one_row = _sort_points(cal, "fp32", 1)[1024]
    assert row["time_s"] > 1.5 * one_row
    data = copy.deepcopy(cal.data)
    data["kernels"]["framework"] = [r for r in data["kernels"]["framework"] if r["op"] != "sort@rows"]
    older = CalibratedEfficiency(validate(data, "1-D sorts only"), blas="torch")
    assert older.host_time(kernel, 1) == pytest.approx(64 * one_row, rel=1e-6)


def _sort_trace(length: int) -> dict:
    args = {"Input Dims": [[length], [], []], "Input type": ["long int", "Scalar", "Scalar"],
            "Concrete Inputs": ["", "-1", "False"]}
    return {"traceEvents": [{"ph": "X", "name": "aten::sort", "pid": 1, "tid": 1, "ts": 0, "dur": 500,
                             "cat": "cpu_op", "args": args}]}


def test_a_calibration_without_sort_points_lists_the_sort_as_not_modelled() -> None:
    cal = load_calibration(COMMITTED_CALIBRATION)
    trace = parse_trace(_sort_trace(12800), "sorts")
    cpu, _ = host_specs(cal)
    modelled = compare_trace(trace, CostModel(CalibratedEfficiency(cal, blas="torch", cache="cold")), cpu, 1)
    assert modelled.ops_modelled == 1
    data = copy.deepcopy(cal.data)
    data["kernels"]["framework"] = [row for row in data["kernels"]["framework"] if row["op"] != "sort"]
    without = validate(data, "no sorts")
    missing = compare_trace(trace, CostModel(CalibratedEfficiency(without, blas="torch", cache="cold")), cpu, 1)
    assert missing.ops_modelled == 0
    assert "no sort points" in missing.predictions[0].reason


def test_microbench_sort_records_the_traced_ops_bytes_and_dtype() -> None:
    pytest.importorskip("torch")
    from validation.microbench import framework
    from validation.microbench.timing import QUICK

    row = framework.measure_sort("int64", 1024, 1, QUICK)
    assert (row["op"], row["dtype"], row["input"], row["bytes"]) == ("sort", "fp64", [1024], 1024 * 24)
    assert 0 < row["time_s"] < 0.01
    rows = framework.measure_sort("fp32", 256, 1, QUICK, rows=16)  # recorded per row
    assert (rows["op"], rows["input"], rows["rows"], rows["bytes"]) == ("sort@rows", [16, 256], 16, 256 * 16)


BAG_TYPES = ["float", "long int", "long int", "Scalar", "Scalar", "Scalar", "", "Scalar", "Scalar"]
BAG_BACKWARD_TYPES = ["float", "long int", "long int", "long int", "long int", "Scalar", "Scalar", "Scalar", "",
                      "Scalar"]


def test_an_embedding_bag_is_timed_as_the_indexed_ops_of_its_accesses() -> None:
    """Its lookup gathers a row per index and writes one per bag (``index_select``'s accesses); its
    dense backward adds each index's bag gradient into the weight's row (``index_add``'s)."""
    dims = [[20000, 64], [12800], [256], *[[]] * 6]
    lookup = _kernel("aten::_embedding_bag", dims, BAG_TYPES, ["", "", "", "False", "1", "False", "", "False", "-1"],
                     ("aten::empty",)).kernel
    assert lookup == FrameworkOp(dtype="fp32", op="index_select", nbytes=(12800 + 256) * 64 * 4 + 8 * (12800 + 256))
    backward_dims = [[256, 64], [12800], [12800], [256], [256], *[[]] * 5]
    children = ("aten::sort", "aten::index_select")
    gradient = _kernel("aten::_embedding_bag_dense_backward", backward_dims, BAG_BACKWARD_TYPES,
                       ["", "", "", "", "", "20000", "False", "0", "", "-1"], children).kernel
    assert gradient == FrameworkOp(dtype="fp32", op="index_add", nbytes=3 * 12800 * 64 * 4, serial=True)
    most = _kernel("aten::_embedding_bag", dims, BAG_TYPES, ["", "", "", "False", "2", "False", "", "False", "-1"])
    assert most.kernel is None and "max mode" in most.reason
    cal = load_calibration(COMMITTED_CALIBRATION)
    row = next(r for r in cal.rows("framework") if r["op"] == "index_add" and r["threads"] == 1)
    same_bytes = FrameworkOp(dtype="fp32", op="index_add", nbytes=row["bytes"])
    efficiency = CalibratedEfficiency(cal, blas="torch")
    assert efficiency.host_time(same_bytes, 1) == pytest.approx(row["time_s"], rel=1e-6)
    serial = FrameworkOp(dtype="fp32", op="index_add", nbytes=row["bytes"], serial=True)
    assert efficiency.host_time(serial, 2) == pytest.approx(row["time_s"], rel=1e-6)  # its 1-thread point
    cold = CalibratedEfficiency(cal, blas="torch", cache="cold")  # its floor: one core's DRAM stream
    assert cold.host_time(serial, 2) == pytest.approx(cold.host_time(serial, 1), rel=1e-9)
