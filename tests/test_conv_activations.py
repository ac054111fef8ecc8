"""A traced convolution's activations, charged at the memory bandwidth (simhpc.trace.conv_activations)."""

from __future__ import annotations

import pytest

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import host_specs, load_calibration
from simhpc.costs.model import CostModel
from simhpc.costs.opmap import kernel_for
from simhpc.hardware.host import COMMITTED_CALIBRATION
from simhpc.trace.compare import compare_trace
from simhpc.trace.conv_activations import activation_bytes
from simhpc.trace.op_predictions import traced_kernel
from simhpc.trace.readers import parse_trace

MIB = 1 << 20
FORWARD_TYPES = ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
BACKWARD_TYPES = ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]


def _event(name: str, dims: list, types: list, concrete: list, strides: list | None = None) -> dict:
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}
    if strides is not None:
        args["Input Strides"] = strides
    return {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": 0, "dur": 1000, "cat": "cpu_op", "args": args}


def _forward(image: list[int], out_channels: int, strides: list | None = None) -> dict:
    """mkldnn_convolution(input, weight, bias, padding 1, stride 1, dilation 1, groups 1), 3x3."""
    weight = [out_channels, image[1], 3, 3]
    return _event("aten::mkldnn_convolution", [image, weight, [out_channels], [], [], [], []], FORWARD_TYPES,
                  ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"], strides)


def _backward(grad: list[int], image: list[int], mask: str) -> dict:
    weight = [grad[1], image[1], 3, 3]
    return _event("aten::convolution_backward", [grad, image, weight, *[[]] * 8], BACKWARD_TYPES,
                  ["", "", "", f"[{grad[1]}]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", mask])


def _bytes(*events: dict) -> list[float]:
    for i, event in enumerate(events):  # one after another, none inside another
        event["ts"] = 2000 * i
    trace = parse_trace({"traceEvents": list(events)}, "convs")
    return [activation_bytes(op, traced_kernel(trace, op).kernel) for op in trace.ops]


def test_a_convolution_moves_its_input_and_output_images_and_a_backward_its_gradients() -> None:
    forward, both, weight_only, input_only = _bytes(
        _forward([64, 32, 16, 16], 64),
        _backward([64, 64, 16, 16], [64, 32, 16, 16], "[True, True, True]"),
        _backward([64, 64, 16, 16], [64, 32, 16, 16], "[False, True, True]"),
        _backward([64, 64, 16, 16], [64, 32, 16, 16], "[True, False, False]"))
    assert forward == 2 * MIB + 4 * MIB  # fp32: a 2 MiB input, a 4 MiB output
    assert both == 4 * MIB + 2 * 2 * MIB  # reads the output gradient and the input, writes the input gradient
    assert weight_only == input_only == 4 * MIB + 2 * MIB


def test_channels_last_and_transposed_forward_convolutions_are_not_charged() -> None:
    nhwc = [32 * 16 * 16, 1, 16 * 32, 32]
    channels_last, nchw_strides = _bytes(_forward([64, 32, 16, 16], 64, [nhwc, [288, 1, 96, 32], []]),
                                         _forward([64, 32, 16, 16], 64, [[8192, 256, 16, 1], [288, 9, 3, 1], []]))
    assert channels_last == 0 and nchw_strides == 6 * MIB
    shapes = [[16, 64, 16, 16], [64, 32, 4, 4], [32], [], [], [], [], [], [], [], [], [], []]
    types = ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList"] + ["Scalar"] * 5
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1", "False", "False", "True", "True"]
    trace = parse_trace({"traceEvents": [_event("aten::_convolution", shapes, types, concrete)]}, "t")
    op = trace.ops[0]
    kernel = kernel_for(op.name, "conv", op.shapes, op.dtypes, op.concrete, True, None, ["aten::empty"]).kernel
    assert kernel.conv == "backward_input" and activation_bytes(op, kernel) == 0


@pytest.mark.parametrize("image", [[64, 32, 16, 16], [256, 64, 64, 64]])
def test_compare_charges_at_most_the_effective_caches_worth_at_the_memory_bandwidth(image: list[int]) -> None:
    """Against the same calibration read warm, a convolution in a step costs its activations (at
    most what the effective cache held in the loop) at the roofline's memory bandwidth more."""
    calibration = load_calibration(COMMITTED_CALIBRATION)
    cpu, _ = host_specs(calibration)
    trace = parse_trace({"traceEvents": [_forward(image, 64)]}, "conv")
    (cold,) = [p for p in compare_trace(trace, CostModel(CalibratedEfficiency(calibration, blas="torch",
                                                                              cache="cold")), cpu, 1).predictions]
    (warm,) = [p for p in compare_trace(trace, CostModel(CalibratedEfficiency(calibration, blas="torch",
                                                                              cache="warm")), cpu, 1).predictions]
    moved = activation_bytes(cold.op, cold.kernel)
    held = calibration.effective_cache_bytes()
    assert moved > 0
    expected = min(moved, held) / calibration.model_bandwidth(1)
    assert cold.predicted_s - warm.predicted_s == pytest.approx(expected, rel=1e-9)
    assert (moved > held) == (image[0] == 256)


def test_compare_reports_what_the_activations_add(tmp_path) -> None:
    """``compare`` says how much of a step's prediction the activations are, text and JSON; a
    model without convolutions has none."""
    import json

    from click.testing import CliRunner

    from simhpc.cli.main import main

    captures = COMMITTED_CALIBRATION.parents[1] / "traces" / "captures"
    text = CliRunner().invoke(main, ["compare", str(captures / "cnn_t1.json.gz"), "-o", str(tmp_path / "t")])
    assert text.exit_code == 0 and "convolutions' activations:" in text.output
    summaries = {}
    for name in ("cnn_t1", "mlp_t1"):
        result = CliRunner().invoke(main, ["compare", str(captures / f"{name}.json.gz"), "--json",
                                           "-o", str(tmp_path / name)])
        summaries[name] = json.loads(result.stdout)
    cnn = summaries["cnn_t1"]
    assert 0 < cnn["conv_activations_s"] < cnn["predicted_step_s"]
    assert summaries["mlp_t1"]["conv_activations_s"] == 0
