"""Traced upsampling, edge padding, flips and rotary sines: their kernels and calibrated times; ops
whose output size the trace does not hold."""

from __future__ import annotations

import pytest

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import host_specs, load_calibration
from simhpc.costs.kernels import Elementwise, FrameworkOp
from simhpc.costs.model import CostModel
from simhpc.costs.opmap import kernel_for
from simhpc.costs.opnames import classify
from simhpc.hardware.host import COMMITTED_CALIBRATION
from simhpc.trace.compare import compare_trace
from simhpc.trace.readers import parse_trace

MIB = 1 << 20


def _kernel(name: str, dims: list, types: list, concrete: list, children: tuple[str, ...] = ()):
    return kernel_for(name, classify(name, "cpu_op"), dims, types, concrete, bool(children), None, children)


def _bytes(name: str, dims: list, types: list, concrete: list) -> float:
    kernel = _kernel(name, dims, types, concrete).kernel
    assert isinstance(kernel, FrameworkOp) and kernel.op == name.removeprefix("aten::")
    return kernel.bytes()


def test_upsampling_moves_its_input_and_its_output() -> None:
    """The output's size from ``output_size`` (the redispatched call) or the scale factors."""
    image = [8, 16, 32, 32]  # 512 KiB of fp32; 2 MiB at twice the side
    by_size = _bytes("aten::upsample_nearest2d", [image, [], [], []], ["float", "ScalarList", "Scalar", "Scalar"],
                     ["", "[64, 64]", "2.", "2."])
    by_scale = _bytes("aten::upsample_bilinear2d", [image, [], [], []], ["float", "", "Scalar", "ScalarList"],
                      ["", "", "False", "[2., 2.]"])
    assert by_size == by_scale == MIB // 2 + 2 * MIB
    backward = _bytes("aten::upsample_bilinear2d_backward", [[8, 16, 64, 64], [], [], [], [], []],
                      ["float", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
                      ["", "[64, 64]", str(image), "False", "2.", "2."])
    assert backward == 2 * MIB + MIB // 2  # the output gradient read, the input gradient written
    outer = _kernel("aten::upsample_nearest2d", [image, [], []], ["float", "", "ScalarList"], ["", "", "[2., 2.]"],
                    ("aten::upsample_nearest2d",))
    assert outer.kernel is None and outer.reason == ""  # its redispatch does the work
    unknown = _kernel("aten::upsample_nearest2d", [image, [], []], ["float", "", ""], ["", "", ""])
    assert unknown.kernel is None and "output size" in unknown.reason


def test_edge_padding_and_flips_move_their_input_and_output() -> None:
    padded = _bytes("aten::reflection_pad2d", [[8, 3, 64, 64], []], ["float", "ScalarList"], ["", "[1, 2, 3, 4]"])
    assert padded == 8 * 3 * (64 * 64 + (64 + 7) * (64 + 3)) * 4
    backward = _bytes("aten::replication_pad2d_backward", [[8, 3, 66, 66], [8, 3, 64, 64], []],
                      ["float", "float", "ScalarList"], ["", "", "[1, 1, 1, 1]"])
    assert backward == 8 * 3 * (66 * 66 + 64 * 64) * 4
    assert _bytes("aten::flip", [[8, 16, 32, 32], []], ["float", "ScalarList"], ["", "[-1]"]) == 2 * MIB // 2
    no_pad = _kernel("aten::replication_pad2d", [[8, 3, 64, 64], []], ["float", "ScalarList"], ["", ""])
    assert no_pad.kernel is None and "padding" in no_pad.reason


def test_resampling_is_timed_from_the_points_of_its_own_op() -> None:
    cal = load_calibration(COMMITTED_CALIBRATION)
    efficiency = CalibratedEfficiency(cal, blas="torch")
    for op in ("upsample_nearest2d", "upsample_bilinear2d_backward", "reflection_pad2d", "flip"):
        row = next(r for r in cal.rows("framework") if r["op"] == op and r["threads"] == 1 and r["input"][-1] == 32)
        kernel = FrameworkOp(dtype="fp32", op=op, nbytes=row["bytes"])
        assert efficiency.host_time(kernel, 1) == pytest.approx(row["time_s"], rel=1e-6)
    rates = {r["op"]: r["bytes"] / r["time_s"] for r in cal.rows("framework") if r["threads"] == 1
             and r.get("input") == [64, 16, 32, 32] and r["op"] in ("upsample_bilinear2d_backward", "flip")}
    assert rates["flip"] > 5 * rates["upsample_bilinear2d_backward"]  # why each op has points of its own


def test_sines_use_their_own_points_else_the_exponentials() -> None:
    kernel = _kernel("aten::cos", [[2048, 512]], ["float"], [""]).kernel  # 4 MiB in, 4 MiB out
    assert kernel == Elementwise(dtype="fp32", n=2048 * 512, op="cos", flops_per_element=10.0, inputs=1)
    cal = load_calibration(COMMITTED_CALIBRATION)
    row = next(r for r in cal.rows("framework") if r["op"] == "cos" and r["threads"] == 1 and r["bytes"] == 8 * MIB)
    assert CalibratedEfficiency(cal, blas="torch").host_time(kernel, 1) == pytest.approx(row["time_s"], rel=1e-6)
    numpy_side = CalibratedEfficiency(cal, blas="numpy")  # the C kernels' curves: the exponential's
    exp = Elementwise(dtype="fp32", n=2048 * 512, op="exp", flops_per_element=10.0, inputs=1)
    assert numpy_side.host_time(kernel, 1) == pytest.approx(numpy_side.host_time(exp, 1), rel=1e-9)


def test_views_and_index_puts() -> None:
    assert _kernel("aten::unfold", [[256, 256], [], [], []], ["float", "Scalar", "Scalar", "Scalar"],
                   ["", "0", "256", "256"]).reason == ""
    put = _kernel("aten::_index_put_impl_", [[256, 256], [], [256, 128], [], []],
                  ["float", "", "float", "Scalar", "Scalar"], ["", "", "", "True", "True"], ("aten::nonzero",)).kernel
    assert put == Elementwise(dtype="fp32", n=256 * 128, op="_index_put_impl", inputs=2, outputs=1)


def _event(name: str, ts: float, dur: float, dims: list, types: list) -> dict:
    return {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "cat": "cpu_op",
            "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)}}


def test_a_boolean_index_is_listed_with_why_its_size_is_unknown() -> None:
    events = [_event("aten::index", 0, 100, [[256, 256], []], ["float", ""]),
              _event("aten::nonzero", 10, 20, [[256]], ["bool"]),
              _event("aten::empty", 12, 1, [[]], [""])]
    cal = load_calibration(COMMITTED_CALIBRATION)
    cpu, _ = host_specs(cal)
    comparison = compare_trace(parse_trace({"traceEvents": events}, "index"),
                               CostModel(CalibratedEfficiency(cal, blas="torch", cache="cold")), cpu, 1)
    reasons = {p.op.name: p.reason for p in comparison.predictions}
    assert reasons["aten::index"] == reasons["aten::nonzero"]
    assert "output's size depends on the values" in reasons["aten::index"]


def test_microbench_upsamples_a_channels_last_image_and_counts_the_traced_bytes() -> None:
    pytest.importorskip("torch")
    from validation.microbench import framework
    from validation.microbench.timing import QUICK

    for op in framework.RESAMPLE:
        row = framework.measure_resample(op, 8, 1, QUICK)
        assert row["op"] == op and row["input"] == [64, 16, 8, 8] and 0 < row["time_s"] < 0.05
    forward = framework.measure_resample("upsample_nearest2d", 8, 1, QUICK)
    assert forward["bytes"] == 64 * 16 * (8 * 8 + 16 * 16) * 4


def test_sampling_grids_gated_units_and_shuffles() -> None:
    grid = _bytes("aten::grid_sampler_2d", [[8, 3, 128, 128], [8, 32, 32, 2], [], [], []],
                  ["float", "float", "Scalar", "Scalar", "Scalar"], ["", "", "0", "0", "False"])
    assert grid == (8 * 3 * 128 * 128 + 8 * 32 * 32 * 2 + 8 * 3 * 32 * 32) * 4  # one output per grid point and channel
    types = ["float", "float", "float", "Scalar", "Scalar", "Scalar", "ScalarList"]
    dims = [[8, 3, 32, 32], [8, 3, 128, 128], [8, 32, 32, 2], [], [], [], []]
    input_only = _bytes("aten::grid_sampler_2d_backward", dims, types, ["", "", "", "0", "0", "False", "[True, False]"])
    both = _bytes("aten::grid_sampler_2d_backward", dims, types, ["", "", "", "0", "0", "False", "[True, True]"])
    assert both - input_only == 8 * 32 * 32 * 2 * 4  # the grid's gradient
    glu = _kernel("aten::glu", [[16, 64, 1024], []], ["float", "Scalar"], ["", "1"], ("aten::narrow",)).kernel
    assert glu.bytes() == 16 * 64 * 1024 * 4 * 3 // 2 and glu.flops_per_element > 1  # both halves in, one out
    glu_backward = _kernel("aten::glu_backward", [[16, 32, 512], [16, 64, 512], []], ["float", "float", "Scalar"],
                           ["", "", "1"]).kernel
    assert glu_backward.bytes() == 16 * 32 * 512 * 4 * 5  # the gradient and both halves in, both halves out
    pool = _kernel("aten::adaptive_max_pool2d", [[16, 32, 1, 512], []], ["float", "ScalarList"], ["", "[1, 4]"]).kernel
    assert (pool.n, pool.outputs) == (16 * 32 * 512, 16 * 32 * 4)
    shuffle = _kernel("aten::pixel_shuffle", [[8, 48, 32, 32], []], ["float", "Scalar"], ["", "4"],
                      ("aten::empty", "aten::resize_")).kernel
    assert (shuffle.kind, shuffle.run, shuffle.bytes()) == ("copy", 1, 2 * 8 * 48 * 32 * 32 * 4)
    for op, dims, types in (("aten::sgn", [[16, 4]], ["float"]), ("aten::xlogy", [[64], [64]], ["float", "float"])):
        assert _kernel(op, dims, types, [""] * len(dims)).kernel is not None
    assert _kernel("aten::resize_as_", [[0], [16, 64], []], ["float", "float", ""], ["", "", ""],
                   ("aten::resize_",)).reason == ""


def test_prelu_uses_its_own_points() -> None:
    """ATen's PReLU backward runs near 2 GB/s here, a tenth of a stream: a curve of its own."""
    cal = load_calibration(COMMITTED_CALIBRATION)
    efficiency = CalibratedEfficiency(cal, blas="torch")
    for op, tensors in (("_prelu_kernel", 1), ("_prelu_kernel_backward", 2)):
        row = next(r for r in cal.rows("framework") if r["op"] == op and r["threads"] == 1 and r["bytes"] > MIB)
        n = row["bytes"] // 4 // (tensors + 1)
        kernel = _kernel(f"aten::{op}", [[n]] * tensors + [[1]], ["float"] * (tensors + 1), [""] * (tensors + 1)).kernel
        assert kernel.bytes() == row["bytes"]
        assert efficiency.host_time(kernel, 1) == pytest.approx(row["time_s"], rel=1e-6)
