"""Op -> kernel mapping, prediction without double counting, the compare command."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli.main import main
from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.kernels import Attention, Copy, Elementwise, FrameworkOp, Gemm, Recurrent, Reduction
from simhpc.costs.model import ConstantEfficiency, CostModel
from simhpc.costs.opmap import kernel_for
from simhpc.costs.opnames import base_name, classify
from simhpc.hardware import builtin_catalog
from simhpc.trace.against import compare_traces
from simhpc.trace.compare import compare_trace, repeat_mape_pct
from simhpc.trace.readers import OpRecord, parse_trace, read_trace
from simhpc.trace.step_ops import StepWork

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "validation" / "traces" / "captures"
CALIBRATION = ROOT / "validation" / "calibration" / "host.json"


def _kernel(name: str, shapes: list, types: list | None = None, concrete: list | None = None, children: bool = False):
    kind = classify(name, "cpu_op")
    types = types or ["float" if s else "Scalar" for s in shapes]
    return kernel_for(name, kind, shapes, types, concrete or [], children).kernel


def test_gemm_layout_from_strides() -> None:
    """A column-major operand (unit stride on its rows) is transposed: a linear layer's forward
    (``nt``), its weight gradient (``tn``); row-major or unrecorded strides give ``nn``."""
    types = ["float", "float", "float", "Scalar", "Scalar"]
    shapes, strides = [[10], [64, 4096], [4096, 10], [], []], [[1], [4096, 1], [1, 4096], [], []]
    forward = kernel_for("aten::addmm", "gemm", shapes, types, [], False, strides).kernel
    assert forward == Gemm(dtype="fp32", m=64, n=10, k=4096, layout="nt")
    weight_grad = kernel_for("aten::mm", "gemm", [[10, 64], [64, 4096]], ["float"] * 2, [], False, [[1, 10], [4096, 1]])
    assert weight_grad.kernel == Gemm(dtype="fp32", m=10, n=4096, k=64, layout="tn")
    both = kernel_for("aten::bmm", "gemm", [[8, 64, 32], [8, 32, 16]], ["float"] * 2, [], False,
                      [[2048, 1, 64], [512, 1, 32]])
    assert both.kernel is not None and both.kernel.layout == "tt"
    row_major = kernel_for("aten::mm", "gemm", [[64, 10], [10, 4096]], ["float"] * 2, [], False, [[10, 1], [4096, 1]])
    assert row_major.kernel is not None and row_major.kernel.layout == "nn"
    vector_like = kernel_for("aten::mm", "gemm", [[64, 1], [1, 4096]], ["float"] * 2, [], False, [[1, 64], [1, 1]])
    assert vector_like.kernel is not None and vector_like.kernel.layout == "nn"
    with pytest.raises(ValueError, match="layout"):
        Gemm(dtype="fp32", layout="xy")


def test_interleaved_attention_operands_from_strides() -> None:
    """Heads sliced from one projection's output (batch stride smaller than a matrix) interleave:
    ``Q K^T`` of two such views is ``nt`` with both interleaved, ``P V`` ``nn`` with ``V``; a
    contiguous batch interleaves nothing."""
    scores = kernel_for("aten::bmm", "gemm", [[64, 128, 64], [64, 64, 128]], ["float"] * 2, [], False,
                        [[64, 4096, 1], [64, 1, 4096]]).kernel
    assert scores == Gemm(dtype="fp32", m=128, n=128, k=64, batch=64, layout="nt", interleaved="ab")
    values = kernel_for("aten::bmm", "gemm", [[64, 128, 128], [64, 128, 64]], ["float"] * 2, [], False,
                        [[16384, 128, 1], [64, 4096, 1]]).kernel
    assert values is not None and (values.layout, values.interleaved) == ("nn", "b")
    contiguous = kernel_for("aten::bmm", "gemm", [[64, 128, 128], [64, 128, 64]], ["float"] * 2, [], False,
                            [[16384, 128, 1], [8192, 64, 1]]).kernel
    assert contiguous is not None and (contiguous.layout, contiguous.interleaved) == ("nn", "")
    with pytest.raises(ValueError, match="interleaved"):
        Gemm(dtype="fp32", interleaved="c")


def test_pooling_and_random_fills_count_the_bytes_they_move() -> None:
    """As the calibration's ``framework`` points count them (validation/microbench/framework.py):
    max pooling reads its input and writes values and int64 indices; its backward reads the output
    gradient and indices and writes the input gradient; a random fill writes its tensor."""
    concrete = ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"]
    types = ["float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    forward = kernel_for("aten::max_pool2d_with_indices", "pool", [[64, 16, 32, 32], [], [], [], [], []], types,
                         concrete, False).kernel
    image, pooled = 64 * 16 * 32 * 32 * 4, 64 * 16 * 16 * 16 * 4
    assert forward == FrameworkOp(dtype="fp32", op="max_pool2d_with_indices", nbytes=image + 3 * pooled,
                                  window=9, outputs=pooled // 4, inputs=image // 4)
    backward = kernel_for(
        "aten::max_pool2d_with_indices_backward", "pool",
        [[64, 16, 16, 16], [64, 16, 32, 32], [], [], [], [], [], [64, 16, 16, 16]],
        ["float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "long int"],
        ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False", ""], False).kernel
    assert backward is not None and backward.bytes() == image + 3 * pooled
    average = kernel_for("aten::avg_pool2d", "pool", [[8, 16, 16, 16], [], [], [], [], [], []],
                         ["float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", ""],
                         ["", "[2, 2]", "[2, 2]", "[0, 0]", "False", "True", ""], False).kernel
    assert average is not None and average.bytes() == (8 * 16 * 16 * 16 + 8 * 16 * 8 * 8) * 4
    mask = kernel_for("aten::bernoulli_", classify("aten::bernoulli_"), [[8, 1024], [], []],
                      ["float", "Scalar", ""], ["", "0.9", ""], False).kernel
    assert mask == FrameworkOp(dtype="fp32", op="bernoulli", nbytes=8 * 1024 * 4)
    assert classify("aten::max_pool2d_with_indices") == "pool" and classify("aten::normal_") == "random"


def test_a_channels_last_pool_is_its_own_op() -> None:
    """ATen pools an NHWC image across its channels, vectorised: a channels-last pool is timed
    from points of its own (``<op>@channels_last``), from the NCHW op's where a calibration has none."""
    from simhpc.costs.calibration import CalibratedEfficiency
    from simhpc.costs.calibration_file import validate
    from simhpc.hardware.host import COMMITTED_CALIBRATION

    concrete = ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"]
    types = ["float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    shapes = [[64, 16, 32, 32], [], [], [], [], []]
    nhwc = [[16384, 1, 512, 16], [], [], [], [], []]
    nchw_kernel = kernel_for("aten::max_pool2d_with_indices", "pool", shapes, types, concrete, False).kernel
    nhwc_kernel = kernel_for("aten::max_pool2d_with_indices", "pool", shapes, types, concrete, False, nhwc).kernel
    assert nhwc_kernel == replace(nchw_kernel, op="max_pool2d_with_indices@channels_last")
    data = json.loads(COMMITTED_CALIBRATION.read_text(encoding="utf-8"))
    efficiency = CalibratedEfficiency(validate(data, "cal.json"), blas="torch")
    assert efficiency.host_time(nhwc_kernel, 1) < efficiency.host_time(nchw_kernel, 1) / 3
    data["kernels"]["framework"] = [r for r in data["kernels"]["framework"] if "@" not in r["op"]]
    without = CalibratedEfficiency(validate(data, "cal.json"), blas="torch")
    assert without.host_time(nhwc_kernel, 1) == pytest.approx(without.host_time(nchw_kernel, 1))


def test_a_pool_costs_what_its_window_and_stride_make_it_load() -> None:
    """The calibration times one window per pool (a 3x3 stride-2 max pool): the same image under
    a 2x2 stride-2 window (the same bytes, fewer loads per output) costs less, under a 3x3 stride-1
    window (four times the outputs) more than its bytes alone say, and the calibrated window
    costs exactly what its points say."""
    from simhpc.costs.calibration import CalibratedEfficiency
    from simhpc.costs.calibration_file import validate
    from simhpc.costs.stream_curves import pool_work
    from simhpc.hardware.host import COMMITTED_CALIBRATION

    efficiency = CalibratedEfficiency(validate(json.loads(COMMITTED_CALIBRATION.read_text(encoding="utf-8")),
                                               "cal.json"), blas="torch")
    types = ["float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"]

    def pool(window: int, stride: int, padding: int) -> FrameworkOp:
        concrete = ["", f"[{window}, {window}]", f"[{stride}, {stride}]", f"[{padding}, {padding}]", "[1, 1]", ""]
        return kernel_for("aten::max_pool2d_with_indices", "pool", [[64, 16, 32, 32], [], [], [], [], []], types,
                          concrete, False).kernel

    calibrated, small, dense = pool(3, 2, 1), pool(2, 2, 0), pool(3, 1, 1)
    assert small.bytes() == calibrated.bytes() and dense.outputs == 4 * calibrated.outputs
    time = {kernel: efficiency.host_time(kernel, 1) for kernel in (calibrated, small, dense)}
    assert time[calibrated] == pytest.approx(efficiency.host_time(replace(calibrated, window=0), 1))
    assert time[small] / time[calibrated] == pytest.approx(pool_work(4, small.outputs, small.inputs)
                                                          / pool_work(9, calibrated.outputs, calibrated.inputs))
    by_bytes = efficiency.host_time(replace(dense, window=0), 1)
    assert time[dense] > 1.4 * by_bytes


def test_names() -> None:
    assert base_name("aten::add_") == "add" and base_name("aten::_foreach_add_") == "_foreach_add"
    assert base_name("aten::__and__") == "__and__"
    assert classify("aten::addmm") == "gemm" and classify("aten::mkldnn_convolution") == "conv"
    assert classify("aten::t") == "view" and classify("ProfilerStep#3", "user_annotation") == "step"
    assert classify("autograd::engine::evaluate_function: MmBackward0", "cpu_op") == "group"
    assert classify("fwd L3", "compute") == "span"
    assert classify("aten::frobnicate") == "unknown"


def test_gemm_shapes() -> None:
    assert _kernel("aten::mm", [[64, 32], [32, 16]]) == Gemm(dtype="fp32", m=64, n=16, k=32)
    assert _kernel("aten::addmm", [[16], [64, 32], [32, 16], [], []]) == Gemm(dtype="fp32", m=64, n=16, k=32)
    assert _kernel("aten::bmm", [[8, 64, 32], [8, 32, 16]], ["double", "double"]) == Gemm(
        dtype="fp64", m=64, n=16, k=32, batch=8
    )
    assert _kernel("aten::linear", [[4, 10, 32], [16, 32], [16]]) == Gemm(
        dtype="fp32", m=40, n=16, k=32, layout="nt"
    )
    assert _kernel("aten::matmul", [[2, 3, 64, 32], [3, 32, 16]]) == Gemm(dtype="fp32", m=64, n=16, k=32, batch=6)
    assert _kernel("aten::matmul", [[5, 64, 32], [32, 16]]) == Gemm(dtype="fp32", m=320, n=16, k=32)
    assert _kernel("aten::mv", [[64, 32], [32]]) == Gemm(dtype="fp32", m=64, n=1, k=32)
    # composite ops with children do their work in the children
    assert _kernel("aten::linear", [[4, 32], [16, 32], [16]], children=True) is None


def test_delegating_and_redispatched_ops_do_no_work_themselves() -> None:
    """``relu`` works in its ``clamp_min`` child, ``div_`` in a ``div_`` child (a redispatch); a
    ``sum`` whose child only zero-fills its output still reduces."""
    image = [[64, 32, 32, 32]]
    assert _kernel("aten::relu", image, ["float"], children=True) is None
    assert isinstance(_kernel("aten::relu", image, ["float"]), Elementwise)
    redispatch = kernel_for("aten::div_", "elementwise", [[16, 128], []], ["float", "Scalar"], ["", "2"], True,
                            None, ["aten::div_"])
    assert redispatch.kernel is None and redispatch.reason == ""
    reduced = kernel_for("aten::sum", "reduction", [[256, 512]], ["float"], [""], True, None, ["aten::fill_"])
    assert isinstance(reduced.kernel, Reduction)


@pytest.mark.parametrize("name,kind,child", [
    ("aten::thnn_conv2d", "conv", "aten::_slow_conv2d_forward"),
    ("aten::convolution_backward", "conv", "aten::_slow_conv2d_backward"),
    ("aten::hardtanh", "elementwise", "aten::clamp"),
    ("aten::index_add_", "elementwise", "aten::scatter_add_"),
    ("aten::_foreach_addcmul_", "elementwise", "aten::addcmul_"),
    ("aten::_foreach_zero_", "elementwise", "aten::zero_"),
])
def test_an_op_whose_child_does_its_work_is_not_counted_twice(name: str, kind: str, child: str) -> None:
    """A child of the parent's kind (not a helper) does the parent's work: only the child is timed."""
    shapes = [[8, 16, 32, 32], [32, 16, 3, 3]] if kind == "conv" else [[1024, 256], [1024, 256]]
    found = kernel_for(name, kind, shapes, ["float", "float"], [], True, None, [child])
    assert found.kernel is None and found.reason == ""


def test_helper_children_leave_the_parent_its_work() -> None:
    """``addmm`` beside its bias ``copy_`` and ``native_layer_norm_backward`` beside a ``zero_``."""
    addmm = kernel_for("aten::addmm", "gemm", [[10], [64, 4096], [4096, 10]], ["float"] * 3, [], True, None,
                       ["aten::expand", "aten::copy_"])
    assert isinstance(addmm.kernel, Gemm)
    norm = kernel_for("aten::native_layer_norm_backward", "elementwise", [[16, 128, 256], [16, 128, 256]],
                      ["float", "float"], [], True, None, ["aten::empty", "aten::zero_"])
    assert isinstance(norm.kernel, Elementwise)


def test_an_embeddings_backward_counts_its_whole_weight_gradient() -> None:
    """``embedding_dense_backward(grad, indices, num_weights, ...)`` zeroes and writes the
    num_weights x width gradient, not only the rows it reads."""
    kernel = _kernel("aten::embedding_dense_backward", [[64, 128, 256], [64, 128], [], [], []],
                     ["float", "long int", "Scalar", "Scalar", "Scalar"], ["", "", "20000", "-1", "False"])
    assert kernel.bytes() == 4 * (64 * 128 * 256 + 20000 * 256)
    zeroed = kernel_for("aten::embedding_dense_backward", "elementwise", [[64, 128, 256], [64, 128], [], [], []],
                        ["float", "long int", "Scalar", "Scalar", "Scalar"], ["", "", "20000", "-1", "False"], True,
                        None, ["aten::zeros", "aten::zero_"]).kernel
    assert zeroed is not None and zeroed.bytes() == 4 * 64 * 128 * 256  # its traced zero_ child is timed on its own


def test_nll_loss_moves_one_value_per_target() -> None:
    """``nll_loss_forward`` gathers one log-probability per target of a [1024, 5000] input; the
    backward writes one gradient per target, zeroing the rest unless a traced child does."""
    types = ["float", "long int", "", "Scalar", "Scalar"]
    forward = _kernel("aten::nll_loss_forward", [[1024, 5000], [1024], [], [], []], types)
    assert forward.n == 1024
    back_shapes = [[], [1024, 5000], [1024], [], [], [], []]
    back_types = ["float", "float", "long int", "", "Scalar", "Scalar", "float"]
    zeroed = kernel_for("aten::nll_loss_backward", "elementwise", back_shapes, back_types, [], True, None,
                        ["aten::zero_"]).kernel
    assert zeroed is not None and zeroed.n == 1024
    assert _kernel("aten::nll_loss_backward", back_shapes, back_types).n == 1024 + 1024 * 5000


def test_elementwise_dtype_is_the_largest_tensors() -> None:
    """AdamW's ``mul`` of a 0-dim ``double`` step size by ``float`` moments runs in fp32, and so
    does ``where`` with a bool condition as large as its values."""
    assert _kernel("aten::mul", [[], [20000, 256], [20000, 256]], ["double", "float", "float"]).dtype == "fp32"
    assert _kernel("aten::where", [[64, 64], [64, 64], [64, 64]], ["bool", "float", "float"]).dtype == "fp32"


def test_convolution_as_implicit_gemm() -> None:
    shapes = [[64, 32, 16, 16], [64, 32, 3, 3], [64], [], [], [], []]
    types = ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    # mkldnn_convolution(input, weight, bias, padding, stride, dilation, groups)
    forward = _kernel("aten::mkldnn_convolution", shapes, types, ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"])
    assert forward == Gemm(dtype="fp32", m=64 * 16 * 16, n=64, k=32 * 9, conv="forward")
    strided = _kernel("aten::mkldnn_convolution", shapes, types, ["", "", "", "[0, 0]", "[2, 2]", "[1, 1]", "1"])
    assert strided.m == 64 * 7 * 7
    depthwise = _kernel("aten::mkldnn_convolution", [[32, 64, 1, 512], [64, 1, 1, 5], [64], [], [], [], []], types,
                        ["", "", "", "[0, 2]", "[1, 1]", "[1, 1]", "64"])
    assert (depthwise.m, depthwise.n, depthwise.k, depthwise.batch, depthwise.groups) == (32 * 512, 1, 5, 64, 64)
    assert depthwise.line and not forward.line  # a one-high image under a one-high kernel is 1-D
    too_wide = kernel_for("aten::mkldnn_convolution", "conv", [[64, 32, 4, 4], [64, 32, 7, 7], [64], [], [], [], []],
                          types, ["", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1"], False)
    assert too_wide.kernel is None and "wider than its padded input" in too_wide.reason
    back_shapes = [[64, 64, 16, 16], [64, 32, 16, 16], [64, 32, 3, 3], [], [], [], [], [], [], [], []]
    back_types = ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = ["", "", "", "[64]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    both = _kernel("aten::convolution_backward", back_shapes, back_types, [*concrete, "[True, True, True]"])
    weight_only = _kernel("aten::convolution_backward", back_shapes, back_types, [*concrete, "[False, True, True]"])
    input_only = _kernel("aten::convolution_backward", back_shapes, back_types, [*concrete, "[True, False, True]"])
    assert both.batch == 2 and weight_only.batch == 1 and both.flops() == 2 * forward.flops()
    assert (both.conv, weight_only.conv, input_only.conv) == ("backward", "backward_weight", "backward_input")
    assert forward.stride == both.stride == 1 and strided.stride == 2
    bias_only = _kernel("aten::convolution_backward", back_shapes, back_types, [*concrete, "[False, False, True]"])
    assert bias_only == weight_only  # torch computes the weight gradient to give the bias's
    nothing = kernel_for("aten::convolution_backward", "conv", back_shapes, back_types,
                         [*concrete, "[False, False, False]"], False, None, [])
    assert nothing.kernel is None and "no gradient" in nothing.reason


def test_transposed_convolution_is_priced_as_its_adjoint() -> None:
    """ConvTranspose2d(64, 32, 4, stride 2) on 16 x 64 x 16 x 16: torch runs its kernel inside
    ``_convolution`` (children only allocate), each of the 16 x 16 x 16 input pixels scattering
    64 x 32 x 4 x 4 products: the input gradient of the ordinary convolution 32 -> 64 channels."""
    shapes = [[16, 64, 16, 16], [64, 32, 4, 4], [32], [], [], [], [], [], [], [], [], [], []]
    types = ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList"] + ["Scalar"] * 5
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1", "False", "False", "True", "True"]
    helpers = ["aten::empty", "aten::as_strided_", "aten::contiguous", "aten::resize_"]
    forward = kernel_for("aten::_convolution", "conv", shapes, types, concrete, True, None, helpers).kernel
    assert forward == Gemm(dtype="fp32", m=16 * 16 * 16, n=64, k=32 * 16, conv="backward_input", stride=2)
    wrapper = kernel_for("aten::convolution", "conv", shapes[:9], types[:9], concrete[:9], True, None,
                         ["aten::_convolution"])
    assert wrapper.kernel is None and wrapper.reason == ""  # its child does the work
    ordinary = kernel_for("aten::_convolution", "conv", shapes, types, [*concrete[:6], "False", *concrete[7:]], True,
                          None, ["aten::mkldnn_convolution"])
    assert ordinary.kernel is None  # the ordinary path works in mkldnn_convolution
    # convolution_backward(grad_output [16, 32, 32, 32], input, weight, ..., transposed=True, ...)
    back = _kernel("aten::convolution_backward", [[16, 32, 32, 32], *shapes[:2], *[[]] * 8],
                   ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"],
                   ["", "", "", "[32]", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1", "[True, True, True]"])
    assert (back.m, back.n, back.k, back.batch, back.conv) == (16 * 16 * 16, 64, 32 * 16, 2, "backward")
    assert back.flops() == 2 * forward.flops()


def test_slow_convolution_paths_read_their_own_argument_order() -> None:
    """The im2col paths take ``(input, weight, kernel_size, bias, stride, padding[, dilation])``;
    ``_convolution`` over them does no work of its own."""
    types = ["float", "float", "ScalarList", "float", "ScalarList", "ScalarList", "ScalarList"]
    shapes = [[1, 8, 16, 16], [16, 8, 3, 3], [], [16], [], [], []]
    forward = _kernel("aten::_slow_conv2d_forward", shapes[:6], types[:6], ["", "", "[3, 3]", "", "[2, 2]", "[1, 1]"])
    assert (forward.m, forward.n, forward.k, forward.stride) == (8 * 8, 16, 8 * 9, 2)
    dilated = _kernel("aten::slow_conv_dilated2d", shapes, types, ["", "", "[3, 3]", "", "[1, 1]", "[0, 0]", "[2, 2]"])
    assert dilated.m == 12 * 12  # 16 - 2 x (3 - 1)
    backward = _kernel("aten::_slow_conv2d_backward", [[1, 16, 8, 8], *shapes[:2], [], [], [], []],
                       ["float"] * 3 + ["ScalarList"] * 3 + ["ScalarList"],
                       ["", "", "", "[3, 3]", "[2, 2]", "[1, 1]", "[True, True, False]"])
    assert (backward.m, backward.conv, backward.batch) == (8 * 8, "backward", 2)
    wrapper = kernel_for("aten::_convolution", "conv", [[2, 8, 20, 20], [8, 8, 3, 3], [8]], ["float"] * 3,
                         ["", "", "", "[1, 1]", "[0, 0]", "[2, 2]", "False"], True, None, ["aten::slow_conv_dilated2d"])
    assert wrapper.kernel is None and wrapper.reason == ""


def test_fused_attention() -> None:
    qkv = [[16, 4, 128, 64]] * 3
    forward = _kernel("aten::_scaled_dot_product_flash_attention_for_cpu", [*qkv, [], []],
                      ["float"] * 3 + ["Scalar"] * 2)
    assert forward == Attention(dtype="fp32", batch=64, lq=128, lk=128, e=64)
    assert forward.gemm() == Gemm(dtype="fp32", m=128, n=128, k=64, batch=128)  # Q K^T and P V per head
    backward = _kernel("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                       [*([[16, 4, 128, 64]] * 5), [16, 4, 128]], ["float"] * 6)
    assert backward.backward and backward.gemm().batch == 5 * 64 and backward.exponentials == 64 * 128 * 128


def test_elementwise_and_reduction() -> None:
    add = _kernel("aten::add_", [[256, 1024], [256, 1024], []], ["float", "float", "Scalar"])
    assert add == Elementwise(dtype="fp32", n=256 * 1024, op="add", inputs=2, outputs=1, in_place=True)
    bias = _kernel("aten::add", [[256, 1024], [1024], []], ["float", "float", "Scalar"])
    assert bias.inputs == 1  # a broadcast operand is read from cache, not streamed n times
    norm_shapes = [[2048, 256], [2048, 256], [], [2048, 1], [2048, 1], [256], [256]]
    norm = _kernel("aten::native_layer_norm_backward", norm_shapes,
                   ["float", "float", "ScalarList", "float", "float", "float", "float"])
    assert norm.inputs == 2  # the gradient and the input; the per-row statistics and weights are small
    bn_shapes = [[32, 64, 16, 16], [32, 64, 16, 16], [64], [64], [64], [64], [64], [], []]
    bn = _kernel("aten::native_batch_norm_backward", bn_shapes, ["float"] * 7 + ["Scalar"] * 2)
    assert bn.inputs == 4  # its sums run over the whole batch: gradient and input are read twice
    fill = _kernel("aten::fill_", [[1000], []], ["float", "Scalar"])
    assert fill.inputs == 0 and fill.outputs == 1
    total = _kernel(
        "aten::sum",
        [[256, 64], [], [], []],
        ["float", "ScalarList", "Scalar", "Scalar"],
        ["", "[0]", "True", ""],
    )
    assert total == Reduction(dtype="fp32", n=256 * 64, outputs=64, op="sum", inner=64)
    foreach = _kernel(
        "aten::_foreach_add_", [[[10, 10], [5]], [[10, 10], [5]], []], ["TensorList", "TensorList", "Scalar"]
    )
    assert foreach.n == 2 * 105
    assert _kernel("aten::gelu", [[8]], ["double"]).dtype == "fp64"
    # a copy out of channels-last is a layout-changing copy: the source is read one element at a time
    shapes, types = [[64, 32, 32, 32], [64, 32, 32, 32], []], ["float", "float", "Scalar"]
    channels_last = [[32768, 1024, 32, 1], [32768, 1, 1024, 32], []]
    result = kernel_for("aten::copy_", "elementwise", shapes, types, [], False, channels_last)
    assert result.kernel == Copy(nbytes=64 * 32 * 32 * 32 * 4, dtype="fp32", run=1, rows=32, length=32 * 32)
    # a 2-D transpose is one block; a permute that is not a batched transpose has none
    transposed = kernel_for("aten::copy_", "elementwise", [[10, 4096], [10, 4096], []], types, [], False,
                            [[4096, 1], [1, 10], []]).kernel
    assert (transposed.rows, transposed.length) == (10, 4096)
    rotated = kernel_for("aten::copy_", "elementwise", [[2, 3, 4], [2, 3, 4], []], types, [], False,
                         [[12, 4, 1], [1, 8, 2], []]).kernel
    assert (rotated.run, rotated.rows, rotated.length) == (1, 2, 12)
    scattered = kernel_for("aten::copy_", "elementwise", [[2, 3, 4], [2, 3, 4], []], types, [], False,
                           [[12, 4, 1], [1, 2, 6], []]).kernel  # all three dimensions reversed
    assert (scattered.run, scattered.rows, scattered.length) == (1, 0, 0)
    # merging attention heads, [B, H, S, D] <- [B, S, H, D]: runs of D = 64 elements
    heads = [[16, 4, 128, 64], [16, 4, 128, 64], []]
    split = [[32768, 8192, 64, 1], [32768, 64, 256, 1], []]
    assert kernel_for("aten::copy_", "elementwise", heads, types, [], False, split).kernel.run == 64
    broadcast = [[32768, 1024, 32, 1], [0, 1024, 32, 1], []]
    assert isinstance(kernel_for("aten::copy_", "elementwise", shapes, types, [], False, broadcast).kernel,
                      Elementwise)
    contiguous = [[32768, 1024, 32, 1], [32768, 1024, 32, 1], []]
    assert isinstance(kernel_for("aten::copy_", "elementwise", shapes, types, [], False, contiguous).kernel,
                      Elementwise)


def test_tensors_of_an_unknown_type_are_not_modelled() -> None:
    """A complex (or any unlisted) tensor type is listed with its name, not timed as fp32."""
    found = kernel_for("aten::mul", "elementwise", [[64, 64], [64, 64]],
                       ["c10::complex<float>", "c10::complex<float>"], [], False)
    assert found.kernel is None and "'c10::complex<float>' not modelled" in found.reason
    assert _kernel("aten::mul", [[64, 64], [64, 64]], ["c10::BFloat16", "c10::BFloat16"]).dtype == "bf16"


def test_indexed_ops_move_the_indexed_elements_only() -> None:
    # an embedding lookup of 2048 tokens in a 5000 x 128 table reads 2048 rows, not the table
    lookup = _kernel("aten::index_select", [[5000, 128], [], [2048]], ["float", "Scalar", "long int"], ["", "0", ""])
    assert lookup.n == 2048 * 128
    # along an inner dimension ATen gathers element by element (16x the time of the same bytes
    # as rows): no calibrated points, so listed, not priced as a stream; a leading 1 changes nothing
    types = ["float", "Scalar", "long int"]
    inner = kernel_for("aten::index_select", "elementwise", [[64, 512, 512], [], [128]], types, ["", "2", ""], False)
    assert inner.kernel is None and "index_select along dim 2 of [64, 512, 512]" in inner.reason
    assert _kernel("aten::index_select", [[1, 5000, 128], [], [2048]], types, ["", "1", ""]).n == 2048 * 128
    gathered = _kernel("aten::gather", [[5000, 64], [], [100, 64], []], ["float", "Scalar", "long int", "Scalar"])
    assert gathered.n == 100 * 64
    added = _kernel("aten::index_add_", [[5000, 64], [], [300], [300, 64], []],
                    ["float", "Scalar", "long int", "float", "Scalar"])
    assert added.n == 300 * 64


def test_onednn_lstm_layer() -> None:
    # what nn.LSTM(128, 256) runs on a CPU for 32 sequences of 64 steps (shapes as torch.profiler records them)
    shapes = [[64, 32, 128], [1024, 128], [1024, 256], [1024], [1024], [32, 256], [32, 256], *[[]] * 9]
    types = ["float"] * 7 + ["Scalar"] * 9
    forward = _kernel("aten::mkldnn_rnn_layer", shapes, types, children=True)
    assert classify("aten::mkldnn_rnn_layer") == "recurrent"
    assert forward == Recurrent(dtype="fp32", steps=64, batch=32, width=128, hidden=256, gates=4)
    assert forward.step_gemm() == Gemm(dtype="fp32", m=32, n=1024, k=256, layout="nt")
    backward = _kernel("aten::mkldnn_rnn_layer_backward", [*shapes[:7], [64, 32, 256]], ["float"] * 8)
    assert backward.backward
    gate_flops = 10.0 * 64 * 32 * 1024
    assert backward.flops() - gate_flops == pytest.approx(2 * (forward.flops() - gate_flops))


def _events() -> list[dict]:
    def x(name: str, ts: float, dur: float, dims: list, types: list | None = None, cat: str = "cpu_op") -> dict:
        types = types or ["float"] * len(dims)
        return {
            "ph": "X",
            "name": name,
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": dur,
            "cat": cat,
            "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)},
        }

    step = {
        "ph": "X",
        "name": "ProfilerStep#1",
        "pid": 1,
        "tid": 1,
        "ts": 0,
        "dur": 1000,
        "cat": "user_annotation",
    }
    return [
        step,
        x("aten::linear", 10, 500, [[256, 512], [1024, 512], [1024]]),
        x("aten::t", 12, 3, [[1024, 512]]),
        x(
            "aten::addmm",
            20,
            480,
            [[1024], [256, 512], [512, 1024], [], []],
            ["float", "float", "float", "Scalar", "Scalar"],
        ),
        x("aten::copy_", 25, 40, [[256, 1024], [256, 1024], []], ["float", "float", "Scalar"]),
        x("aten::relu", 520, 60, [[256, 1024]]),
        x("aten::frobnicate", 600, 30, [[256, 1024]]),
        x("aten::wrapped_kernel", 640, 100, [[256, 1024]]),  # unknown, with work of its own
        x("aten::empty", 641, 2, [[256, 1024]]),
        x("aten::wrapper", 750, 100, [[256, 1024]]),  # unknown, its child does the work
        x("aten::add", 751, 98, [[256, 1024], [256, 1024], []], ["float", "float", "Scalar"]),
        {
            "ph": "X",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 2000,
            "dur": 100,
            "cat": "cpu_op",
            "args": {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]},
        },
    ]


def test_prediction_counts_each_op_once() -> None:
    trace = parse_trace({"traceEvents": _events()}, "mem")
    cpu = builtin_catalog().cpus["spr-8480"]
    model = CostModel(ConstantEfficiency())
    result = compare_trace(trace, model, cpu, 4)
    by_name = {p.op.name: p for p in result.predictions}
    assert "aten::mm" not in by_name  # outside the profiler step: counted as skipped
    assert result.skipped_events == {"framework ops outside every profiler step": 1}
    assert by_name["aten::linear"].kernel is None and by_name["aten::linear"].modelled
    addmm = by_name["aten::addmm"]
    assert addmm.kernel == Gemm(dtype="fp32", m=256, n=1024, k=512)
    assert addmm.measured_s == pytest.approx(440e-6)  # self time: the bias copy is not the GEMM's
    expected = sum(model.duration(p.kernel, cpu, 4) for p in result.predictions if p.kernel is not None)
    assert result.predicted_step_s == pytest.approx(expected)
    assert result.measured_step_s == pytest.approx(1e-3)
    assert result.ops_total == 10 and result.ops_modelled == 8
    assert by_name["aten::wrapper"].modelled and by_name["aten::wrapper"].kernel is None
    assert result.unmodelled == {
        "aten::frobnicate": {
            "count": 1,
            "measured_s": pytest.approx(30e-6),
            "reason": "no cost model for this op",
        },
        "aten::wrapped_kernel": {
            "count": 1,
            "measured_s": pytest.approx(98e-6),
            "reason": "no cost model for this op's own work (its children are timed on their own)",
        },
    }
    summary = result.summary()
    for key in (
        "measured_total_s",
        "predicted_total_s",
        "total_error_pct",
        "step_error_pct",
        "gemm_mape_pct",
        "gemm_repeat_mape_pct",
        "ops_total",
        "ops_modelled",
    ):
        assert key in summary
    assert summary["kinds"]["gemm"]["ops"] == 1


def test_repeat_mape_holds_each_recurring_op_against_its_own_median() -> None:
    """An op recurs as the n-th call of its name and shapes in each step: the first product of a
    step against the other steps' first, the second against their second. Its median is what a
    perfect prediction would say; an op seen once leaves no spread and is not counted."""
    def op(index: int, step: int | None, shapes: list, name: str = "aten::mm") -> OpRecord:
        return OpRecord(index, name, "gemm", float(index), 1.0, "t", shapes=shapes, step=step)

    first, second = [[64, 10], [10, 64]], [[64, 64], [64, 64]]
    ops = [op(0, 1, first), op(1, 1, first), op(2, 2, first), op(3, 2, first), op(4, 3, first), op(5, 3, first),
           op(6, 1, second)]
    measured = [10.0, 40.0, 20.0, 40.0, 30.0, 40.0, 99.0]
    # first calls 10, 20, 30 (median 20): 1, 0, 1/3; second calls all 40: 0, 0, 0.
    assert repeat_mape_pct(ops, measured) == pytest.approx(100 * (1 + 1 / 3) / 6)
    # without steps, one group of name and shapes: median 35 of 10, 20, 30, 40 x 3
    stepless = [replace(o, step=None) for o in ops]
    expected = [abs(35 - m) / m for m in measured[:6]]
    assert repeat_mape_pct(stepless, measured) == pytest.approx(100 * sum(expected) / 6)
    assert repeat_mape_pct(ops[-1:], measured[-1:]) is None


def test_total_and_step_errors_and_nothing_measured() -> None:
    """``total_error_pct`` compares the totals it sits beside, ``step_error_pct`` the median step;
    an error against nothing measured is undefined (None), not 0."""
    def step(number: int, dur: float) -> dict:
        return {"ph": "X", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1, "ts": 10_000 * number,
                "dur": dur, "cat": "user_annotation"}

    def relu(ts: float, dur: float) -> dict:
        return {"ph": "X", "name": "aten::relu", "pid": 1, "tid": 1, "ts": ts, "dur": dur, "cat": "cpu_op",
                "args": {"Input Dims": [[256, 1024]], "Input type": ["float"]}}

    events = [step(1, 100), step(2, 100), step(3, 5000)]  # one step disturbed
    events += [relu(10_000 * n + 1, 0 if n == 1 else 50) for n in (1, 2, 3)]
    result = compare_trace(parse_trace(events, "mem"), CostModel(ConstantEfficiency()),
                           builtin_catalog().cpus["spr-8480"], 4)
    summary = result.summary()
    assert summary["measured_total_s"] == pytest.approx(5200e-6)
    assert summary["total_error_pct"] == pytest.approx(
        100 * (summary["predicted_total_s"] / summary["measured_total_s"] - 1))
    assert summary["step_error_pct"] == pytest.approx(100 * (summary["predicted_step_s"] / 100e-6 - 1))
    assert result.predictions[0].error_pct is None  # measured 0 us
    assert summary["kinds"]["elementwise"]["mape_pct"] is not None
    silent = compare_trace(parse_trace([step(1, 0), relu(10_000, 0)], "mem"), CostModel(ConstantEfficiency()),
                           builtin_catalog().cpus["spr-8480"], 4).summary()
    assert silent["total_error_pct"] is None and silent["step_error_pct"] is None
    assert silent["kinds"]["elementwise"]["mape_pct"] is None


def _with_dispatch(rows: list[dict]) -> CalibratedEfficiency:
    """The committed calibration's efficiencies with ``rows`` as its ``dispatch`` points."""
    from simhpc.costs.calibration_file import validate
    from simhpc.hardware.host import COMMITTED_CALIBRATION

    data = json.loads(COMMITTED_CALIBRATION.read_text(encoding="utf-8"))
    data["kernels"]["dispatch"] = rows
    return CalibratedEfficiency(validate(data, "cal.json"), blas="torch")


def _cpu_op(name: str, ts: int, dims: list, dur: int = 5) -> dict:
    """A torch.profiler CPU op event with float inputs of shapes ``dims`` (microseconds)."""
    return {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "cat": "cpu_op",
            "args": {"Input Dims": dims, "Input type": ["float"] * len(dims)}}


def test_ops_that_compute_nothing_and_the_gaps_between_calls_take_the_profiled_framework_costs() -> None:
    """A view or a wrapper takes the calibration's profiled self time of an op that computes
    nothing; each top-level op, the profiled gap between two calls from Python, or from the
    autograd engine for an op inside an engine node."""
    from simhpc.costs.calibration_file import host_specs

    efficiency = _with_dispatch([{"what": "no_kernel_op", "threads": 1, "time_s": 1e-6},
                                 {"what": "call_gap", "threads": 1, "time_s": 3e-6},
                                 {"what": "engine_gap", "threads": 1, "time_s": 10e-6}])
    cpu, _ = host_specs(efficiency.calibration)
    node = {"ph": "X", "name": "autograd::engine::evaluate_function: ReluBackward0", "pid": 1, "tid": 1,
            "ts": 900, "dur": 50, "cat": "cpu_op", "args": {}}
    backward = {"ph": "X", "name": "aten::threshold_backward", "pid": 1, "tid": 1, "ts": 910, "dur": 30,
                "cat": "cpu_op", "args": {"Input Dims": [[256, 1024], [256, 1024], []],
                                          "Input type": ["float", "float", "Scalar"], "Concrete Inputs": ["", "", "0"]}}
    trace = parse_trace({"traceEvents": [*_events(), node, backward]}, "mem")
    result = compare_trace(trace, CostModel(efficiency), cpu, 4)
    by_name = {p.op.name: p for p in result.predictions}
    assert by_name["aten::linear"].predicted_s == pytest.approx(1e-6) and by_name["aten::t"].predicted_s == 1e-6
    assert by_name["aten::frobnicate"].predicted_s == 0  # not modelled: no cost at all
    top_level = ("aten::linear", "aten::relu", "aten::frobnicate", "aten::wrapped_kernel", "aten::wrapper")
    assert result.call_gaps_s == pytest.approx(len(top_level) * 3e-6 + 10e-6)  # the backward op: the engine's gap
    assert result.predicted_step_s == pytest.approx(sum(p.predicted_s for p in result.predictions) + result.call_gaps_s)
    assert result.summary()["call_gaps_s"] == result.call_gaps_s


def test_framework_costs_are_cold_after_an_op_that_moved_a_private_cache() -> None:
    """With cold dispatch points, a kernel-free op costs its cold value after an op that moved at
    least a core's private cache (here 2 MiB), and the gap before a top-level op after one whose
    subtree touched that much in distinct tensors (each shape as often as one op read it); else warm."""
    from simhpc.costs.calibration_file import host_specs

    costs = {"no_kernel_op": 1e-6, "call_gap": 3e-6, "engine_gap": 10e-6,
             "no_kernel_op_cold": 5e-6, "call_gap_cold": 30e-6, "engine_gap_cold": 50e-6}
    efficiency = _with_dispatch([{"what": what, "threads": 1, "time_s": t} for what, t in costs.items()])
    assert efficiency.private_cache_bytes == 2 << 20
    cpu, _ = host_specs(efficiency.calibration)

    def op(name: str, ts: int, dims: list) -> dict:
        return {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5, "cat": "cpu_op",
                "args": {"Input Dims": dims, "Input type": ["float"] + ["Scalar"] * (len(dims) - 1)}}

    big, small = [[1024, 1024]], [[8, 8]]  # relu moves 8 MiB / 512 B
    events = [op("aten::relu", 0, big), op("aten::view", 10, [[1024, 1024], []]),
              op("aten::relu", 20, small), op("aten::view", 30, [[8, 8], []])]
    result = compare_trace(parse_trace({"traceEvents": events}, "mem"), CostModel(efficiency), cpu, 1)
    views = [p.predicted_s for p in result.predictions if p.op.name == "aten::view"]
    assert views == [pytest.approx(5e-6), pytest.approx(1e-6)]
    # before: the first op (cold: whatever ran before), the view after 8 MiB (cold), the small relu
    # after a view (warm), the view after 512 B (warm)
    assert result.call_gaps_s == pytest.approx(30e-6 + 30e-6 + 3e-6 + 3e-6)
    # a top-level op whose children move 12 MiB over the same two 256 KiB tensors (a recurrent
    # cell's loop) leaves the gap after it warm; one that moves 8 MiB of distinct tensors, cold
    def cell(ts: int, shape: list, children: int) -> list[dict]:
        parent = dict(op("aten::gru_cell", ts, [shape]), dur=10 * children + 5)
        return [parent, *(op("aten::add_", ts + 1 + 10 * i, [shape, shape]) for i in range(children))]

    recurrent = [*cell(0, [256, 256], 16), op("aten::relu", 200, small)]
    result = compare_trace(parse_trace({"traceEvents": recurrent}, "rnn"), CostModel(efficiency), cpu, 1)
    assert result.call_gaps_s == pytest.approx(30e-6 + 3e-6)
    wide = [dict(op("aten::gru_cell", 0, [[1024, 1024]]), dur=25), op("aten::add_", 1, big * 2),
            op("aten::mul_", 11, [[1024, 1024], [1024, 1024], [1024, 1024]]), op("aten::relu", 40, small)]
    result = compare_trace(parse_trace({"traceEvents": wide}, "wide"), CostModel(efficiency), cpu, 1)
    assert result.call_gaps_s == pytest.approx(30e-6 + 30e-6)


def test_a_training_steps_transitions_take_their_profiled_costs_by_the_bytes_the_step_touched() -> None:
    """The first op of a profiler step, the backward's first op (the engine's after Python's) and
    the first op Python calls after the engine's take the calibration's transition costs, which
    grow in log bytes with what the whole step touched (flat beyond the measured steps); every
    other gap stays the profiled gap between two calls, and a calibration without transition
    points charges those gaps as before."""
    from simhpc.costs.calibration_file import host_specs

    plain = [{"what": "call_gap", "threads": 1, "time_s": 3e-6}, {"what": "engine_gap", "threads": 1, "time_s": 10e-6}]
    ends = {"step_start": (100e-6, 300e-6), "backward_entry": (50e-6, 150e-6), "backward_exit": (200e-6, 600e-6)}
    efficiency = _with_dispatch(plain + [
        {"what": what, "threads": 1, "step_bytes": nbytes, "time_s": seconds}
        for what, costs in ends.items() for nbytes, seconds in zip((1e6, 1e8), costs)])

    def moved(nbytes: float) -> StepWork:
        return StepWork(nbytes, graph_nodes=0, parameters=0)

    assert efficiency.framework_transition_s("step_start", moved(1e7)) == pytest.approx(200e-6)  # halfway in log bytes
    assert efficiency.framework_transition_s("backward_exit", moved(1e3)) == pytest.approx(200e-6)
    assert efficiency.framework_transition_s("backward_exit", moved(1e12)) == pytest.approx(600e-6)
    cpu, _ = host_specs(efficiency.calibration)

    op = _cpu_op
    events = [{"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000, "cat": "user_annotation"},
              op("aten::relu", 10, [[1024, 1024]]), op("aten::relu", 20, [[8, 8]]),
              op("autograd::engine::evaluate_function: ReluBackward0", 100, [], dur=50),
              op("aten::threshold_backward", 110, [[256, 1024], [256, 1024]]),
              op("autograd::engine::evaluate_function: ReluBackward0", 200, [], dur=50),
              op("aten::threshold_backward", 210, [[256, 1024], [256, 1024]]),
              op("aten::add_", 300, [[8, 8], [8, 8]]), op("aten::add_", 310, [[8, 8], [8, 8]])]
    result = compare_trace(parse_trace({"traceEvents": events}, "step"), CostModel(efficiency), cpu, 1)
    step_bytes = 4 * (1024 * 1024 + 64 + 2 * 256 * 1024 + 2 * 256 * 1024 + 2 * 64 + 2 * 64)
    transitions = sum(efficiency.framework_transition_s(what, moved(step_bytes)) for what in ends)
    assert 300e-6 < transitions < 900e-6
    # the second relu and the second add_: Python's gap; the second backward op: the engine's
    assert result.call_gaps_s == pytest.approx(transitions + 3e-6 + 10e-6 + 3e-6)
    without = _with_dispatch(plain)
    assert without.framework_transition_s("step_start", moved(step_bytes)) is None
    before = compare_trace(parse_trace({"traceEvents": events}, "step"), CostModel(without), cpu, 1)
    assert before.call_gaps_s == pytest.approx(4 * 3e-6 + 2 * 10e-6)


def test_transitions_add_the_work_of_a_deeper_graph_over_the_width_sweeps() -> None:
    """The depth sweep's excess over the width curve, linear in parameter tensors for the step's
    start and the backward's exit and in autograd nodes for its entry: none at or below the width
    sweep's counts, interpolated between the loops, extended with the last slope beyond them."""
    from simhpc.costs.transitions import TransitionCurves

    def row(width: int, layers: int, nbytes: float, seconds: float) -> dict:
        return {"what": "step_start", "threads": 1, "width": width, "layers": layers, "step_bytes": nbytes,
                "graph_nodes": 5 * layers + 1, "parameters": 2 * layers, "time_s": seconds}

    rows = [row(64, 4, 1e6, 40e-6), row(2048, 4, 1e8, 100e-6),  # width sweep: 40 us at 1 MB, 100 us at 100 MB
            row(64, 16, 1e7, 70e-6 + 30e-6), row(64, 64, 1e7, 70e-6 + 150e-6)]  # 70 us by bytes at 10 MB
    start = TransitionCurves.from_rows("step_start", rows)
    entry = TransitionCurves.from_rows("backward_entry", [dict(r, what="backward_entry") for r in rows])
    assert (start.key, entry.key) == ("parameters", "graph_nodes")

    def work(nbytes: float, layers: int) -> StepWork:
        return StepWork(nbytes, graph_nodes=5 * layers + 1, parameters=2 * layers)

    assert start.seconds(work(1e7, 4)) == pytest.approx(70e-6)   # the width sweep's graph: bytes alone
    assert start.seconds(work(1e7, 1)) == pytest.approx(70e-6)   # a smaller graph: no credit
    assert start.seconds(work(1e7, 16)) == pytest.approx(100e-6)
    assert start.seconds(work(1e7, 40)) == pytest.approx(70e-6 + 90e-6)  # halfway from 16 to 64 layers
    assert start.seconds(work(1e7, 112)) == pytest.approx(70e-6 + 270e-6)  # 1.25 us a parameter tensor beyond
    assert entry.seconds(work(1e8, 40)) == pytest.approx(100e-6 + 90e-6)
    assert start.seconds(StepWork(1e7, graph_nodes=10_000, parameters=8)) == pytest.approx(70e-6)
    assert entry.seconds(StepWork(1e7, graph_nodes=201, parameters=8)) == pytest.approx(70e-6 + 90e-6)


def test_a_second_backward_in_a_step_pays_for_the_bytes_since_the_first() -> None:
    """With gradient accumulation a step runs several backwards: each transition after the first
    of its kind is charged by the bytes the ops touched since that kind last ran, not the step's."""
    from simhpc.costs.calibration_file import host_specs

    efficiency = _with_dispatch([{"what": what, "threads": 1, "step_bytes": nbytes, "time_s": nbytes * 1e-12}
                                 for what in ("step_start", "backward_entry", "backward_exit")
                                 for nbytes in (1e3, 1e9)])  # linear in log bytes: 1 ns .. 1 ms
    cpu, _ = host_specs(efficiency.calibration)

    op = _cpu_op
    def backward(ts: int, dims: list) -> list[dict]:
        return [op("autograd::engine::evaluate_function: ReluBackward0", ts, [], dur=50),
                op("aten::threshold_backward", ts + 10, dims)]

    big, small = [[1024, 1024]], [[16, 16]]
    events = [{"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 2000, "cat": "user_annotation"},
              op("aten::relu", 10, big), *backward(100, big), op("aten::relu", 200, small), *backward(300, small),
              op("aten::add_", 400, small)]
    result = compare_trace(parse_trace({"traceEvents": events}, "accumulate"), CostModel(efficiency), cpu, 1)
    size = {"big": 4 * 1024 * 1024, "small": 4 * 256}
    step = 2 * size["big"] + 3 * size["small"]
    def cost(what: str, nbytes: float) -> float:
        return efficiency.framework_transition_s(what, StepWork(nbytes, graph_nodes=0, parameters=0))

    expected = (cost("step_start", step) + cost("backward_entry", step) + cost("backward_exit", step)
                + cost("backward_entry", size["big"] + size["small"])  # its threshold_backward, then the relu
                + cost("backward_exit", 2 * size["small"]))
    assert result.call_gaps_s == pytest.approx(expected)
    assert cost("backward_exit", 2 * size["small"]) < cost("backward_entry", size["big"] + size["small"]) < cost(
        "backward_entry", step)


def test_every_profiled_training_step_has_one_of_each_transition() -> None:
    """In a captured training step: one start, one backward entry and one backward exit (the
    optimizer's first op), and the step's bytes are counted from its ops' shapes."""
    from simhpc.trace.framework_costs import subtree_footprint
    from simhpc.trace.op_predictions import traced_kernel
    from simhpc.trace.step_ops import step_footprints, top_level_ops, transition_before

    trace = read_trace(next(CAPTURES.glob("cnn_t1.json*")))
    top = top_level_ops(trace)
    seen, previous = [], None
    for op in top:
        what = transition_before(trace, previous, op)
        if what:
            seen.append((op.step, what, op.name))
        previous = op
    assert len(trace.steps) == 10
    for step in trace.steps:
        assert [what for number, what, _ in seen if number == step.number] == [
            "step_start", "backward_entry", "backward_exit"]
    assert {name for _, what, name in seen if what == "backward_exit"} == {"aten::add_"}
    kernels = {op.index: traced_kernel(trace, op).kernel for op in trace.ops if op.step is not None}
    per_step = step_footprints(top, subtree_footprint(trace, {i: k for i, k in kernels.items() if k is not None}, top))
    assert set(per_step) == {step.number for step in trace.steps}
    assert all(50e6 < nbytes < 200e6 for nbytes in per_step.values())  # a CNN step on 64 32x32 images


def test_compare_traces_aligns_tracks_and_names() -> None:
    a = parse_trace({"traceEvents": _events()}, "a")
    slower = [dict(e, dur=e["dur"] * 2) for e in _events()]
    b = parse_trace({"traceEvents": slower}, "b")
    result = compare_traces(a, b)
    assert result["tracks"][0]["diff_pct"] == pytest.approx(-50.0)
    assert {row["name"] for row in result["names"]} >= {"aten::addmm", "aten::relu"}
    assert all(row["diff_pct"] == pytest.approx(-50.0) for row in result["names"])
    assert result["steps"]["diff_pct"] == pytest.approx(-50.0)
    assert result["only_in_a"] == [] and result["matched_names"] == len(result["names"])


def _capture(name: str) -> Path:
    return next(CAPTURES.glob(f"{name}.json*"))


TARGET_PCT = 15.0
"""The issue's target on traces captured right after calibrating: |step error| and GEMM MAPE at most 15 %."""

MACHINES = {  # reference machine -> (its captures, the calibration taken right before them)
    "xeon": (CAPTURES, CALIBRATION),
    "epyc-zen3": (CAPTURES / "epyc-zen3", ROOT / "validation" / "calibration" / "epyc-zen3.json"),
    "epyc-zen2": (CAPTURES / "epyc-zen2", ROOT / "validation" / "calibration" / "epyc-zen2.json"),
    "epyc-zen5": (CAPTURES / "epyc-zen5", ROOT / "validation" / "calibration" / "epyc-zen5.json"),
    "epyc-zen5-4.5ghz": (CAPTURES / "epyc-zen5-4.5ghz", ROOT / "validation" / "calibration" / "epyc-zen5-4.5ghz.json"),
    "epyc-zen4": (CAPTURES / "epyc-zen4", ROOT / "validation" / "calibration" / "epyc-zen4.json"),
    "xeon-spr": (CAPTURES / "xeon-spr", ROOT / "validation" / "calibration" / "xeon-spr.json"),
}
MEASURED = {  # step-time error %, GEMM MAPE % of the committed captures (validation/README.md)
    ("xeon", "cnn_t1"): (-2.2, 8.4),
    ("xeon", "cnn_t2"): (-5.3, 18.1),
    ("xeon", "mlp_t1"): (-4.0, 6.8),
    ("xeon", "mlp_t2"): (-10.4, 10.4),
    ("xeon", "transformer_flash_t1"): (-6.9, 4.9),
    ("xeon", "transformer_flash_t2"): (-11.3, 7.8),
    ("xeon", "transformer_t1"): (-10.4, 8.4),
    ("xeon", "transformer_t2"): (-11.2, 14.5),
    ("epyc-zen3", "cnn_t1"): (0.3, 11.3),
    ("epyc-zen3", "cnn_t2"): (7.4, 10.8),
    ("epyc-zen3", "mlp_t1"): (-1.7, 3.6),
    ("epyc-zen3", "mlp_t2"): (-8.4, 10.5),
    ("epyc-zen3", "transformer_flash_t1"): (-1.4, 14.0),
    ("epyc-zen3", "transformer_flash_t2"): (4.3, 6.7),
    ("epyc-zen3", "transformer_t1"): (-5.3, 6.0),
    ("epyc-zen3", "transformer_t2"): (1.1, 8.6),
    # bf16 autocast: an extra model, its 16-bit points measured a session later
    # (the file was extended to suite 42 on a Zen 3 guest of session 55: validation/README.md)
    ("epyc-zen3", "mlp_bf16_t1"): (8.8, 16.5),
    ("epyc-zen3", "mlp_bf16_t2"): (10.7, 11.9),
    # an extra model with 51 MB activations, written into freshly mapped memory every step (its three
    # 16 x 64 x 10 classifier products take 10-20 us, at the dispatch floor: the GEMM MAPE means little;
    # at 2 threads its step pays page faults far over the calibration's probe, as on the Zen 5 guest: 34 % short)
    ("epyc-zen3", "cnn224_t1"): (-10.9, 28.9),
    ("epyc-zen3", "cnn224_t2"): (-34.0, 33.8),
    ("epyc-zen2", "cnn_t1"): (2.5, 4.0),
    ("epyc-zen2", "cnn_t2"): (1.2, 12.9),
    ("epyc-zen2", "mlp_t1"): (2.4, 7.1),
    ("epyc-zen2", "mlp_t2"): (-1.7, 7.2),
    ("epyc-zen2", "transformer_flash_t1"): (-2.6, 8.9),
    ("epyc-zen2", "transformer_flash_t2"): (0.1, 10.8),
    ("epyc-zen2", "transformer_t1"): (-5.9, 8.3),
    ("epyc-zen2", "transformer_t2"): (-7.5, 10.3),
    ("epyc-zen2", "mlp_bf16_t1"): (-2.7, 2.9),
    ("epyc-zen2", "mlp_bf16_t2"): (-4.7, 3.0),
    ("epyc-zen2", "cnn224_t1"): (13.6, 50.4),
    ("epyc-zen2", "cnn224_t2"): (7.5, 51.5),
    # an LSTM (oneDNN's RNN layer, timed from suite 19's points since): its GEMMs are a 2-way head
    ("epyc-zen2", "lstm_t1"): (-3.5, 24.9),
    ("epyc-zen2", "lstm_t2"): (7.8, 30.7),
    # 5x5 convolutions and 2x2 pools (at 2 threads its convolutions' calibrated points are slow);
    # a GRU as per-step ATen ops: small products between in-place gate and gradient updates
    ("epyc-zen2", "lenet_t1"): (4.4, 25.2),
    ("epyc-zen2", "lenet_t2"): (26.5, 21.8),
    ("epyc-zen2", "gru_t1"): (10.8, 38.4),
    ("epyc-zen2", "gru_t2"): (5.3, 14.9),
    # the EPYC Zen 5 guest (AVX-512 with native bf16); its extra models as on the Zen 2 guest, and a
    # ResNet-like network of residual blocks with batch norms
    ("epyc-zen5", "cnn_t1"): (8.4, 15.6),
    ("epyc-zen5", "cnn_t2"): (-5.6, 11.8),
    ("epyc-zen5", "mlp_t1"): (-6.3, 4.7),
    ("epyc-zen5", "mlp_t2"): (-7.4, 7.6),
    ("epyc-zen5", "transformer_flash_t1"): (-5.4, 7.4),
    ("epyc-zen5", "transformer_flash_t2"): (-1.7, 5.7),
    ("epyc-zen5", "transformer_t1"): (2.6, 6.3),
    ("epyc-zen5", "transformer_t2"): (-6.9, 15.9),
    ("epyc-zen5", "mlp_bf16_t1"): (-4.4, 12.9),
    ("epyc-zen5", "mlp_bf16_t2"): (7.2, 33.0),
    ("epyc-zen5", "cnn224_t1"): (27.4, 64.3),
    ("epyc-zen5", "cnn224_t2"): (22.9, 60.1),
    ("epyc-zen5", "lstm_t1"): (0.9, 46.8),
    ("epyc-zen5", "lstm_t2"): (-2.0, 54.8),
    ("epyc-zen5", "lenet_t1"): (30.2, 30.4),
    ("epyc-zen5", "lenet_t2"): (11.1, 44.2),
    ("epyc-zen5", "resnetish_t1"): (10.5, 47.9),
    ("epyc-zen5", "resnetish_t2"): (9.8, 28.2),
    # a Zen 5 guest alike in every fact the OS shows, at 4.5 GHz (the one above ran at 3.75); cnn224 at 2 threads
    # paid 5 us a fresh page in its steps (1.1 us at 1 thread, 0.5 us in the calibration's 2-thread probe);
    # suite 35's evicted_call added in session 46 (extend.py); suite 40's layout points (a head's products,
    # their operands read first) in session 50; suite 42's evicted_call again, with its product's own, in session 52
    ("epyc-zen5-4.5ghz", "cnn_t1"): (-2.2, 5.9),
    ("epyc-zen5-4.5ghz", "cnn_t2"): (2.6, 14.6),
    ("epyc-zen5-4.5ghz", "mlp_t1"): (-2.6, 2.8),
    ("epyc-zen5-4.5ghz", "mlp_t2"): (0.7, 3.5),
    ("epyc-zen5-4.5ghz", "transformer_flash_t1"): (0.1, 3.0),
    ("epyc-zen5-4.5ghz", "transformer_flash_t2"): (2.6, 8.6),
    ("epyc-zen5-4.5ghz", "transformer_t1"): (-2.6, 4.2),
    ("epyc-zen5-4.5ghz", "transformer_t2"): (-5.2, 5.9),
    ("epyc-zen5-4.5ghz", "mlp_bf16_t1"): (-6.3, 6.5),
    ("epyc-zen5-4.5ghz", "mlp_bf16_t2"): (12.9, 22.1),
    ("epyc-zen5-4.5ghz", "cnn224_t1"): (-7.7, 21.7),
    ("epyc-zen5-4.5ghz", "cnn224_t2"): (-40.4, 28.0),
    ("epyc-zen5-4.5ghz", "lstm_t1"): (-6.3, 9.0),
    ("epyc-zen5-4.5ghz", "lstm_t2"): (2.2, 18.2),
    ("epyc-zen5-4.5ghz", "lenet_t1"): (-0.4, 13.4),
    ("epyc-zen5-4.5ghz", "lenet_t2"): (-3.9, 16.8),
    ("epyc-zen5-4.5ghz", "resnetish_t1"): (-8.1, 23.1),
    ("epyc-zen5-4.5ghz", "resnetish_t2"): (-8.8, 16.0),
    # the EPYC Zen 4 guest (AVX-512 with native bf16): one calibrate run (suite 20, every 2-thread torch
    # product measured twice), the captures right after; its extra models as on the Zen 5 guest. The points
    # suites 21-30 added or re-defined were measured three days later (session 30, extend.py), suite 32's in
    # session 35 (its 3x3 heads to one or three channels moved the CNNs' convolutions: cnn224, lenet, resnetish),
    # suite 33's in session 36 (1x1 heads re-measured; oneDNN's padded output channels moved the same three)
    ("epyc-zen4", "cnn_t1"): (3.3, 8.8),
    ("epyc-zen4", "cnn_t2"): (3.8, 6.4),
    ("epyc-zen4", "mlp_t1"): (-0.2, 3.2),
    ("epyc-zen4", "mlp_t2"): (-0.5, 5.0),
    ("epyc-zen4", "transformer_flash_t1"): (0.8, 5.1),
    ("epyc-zen4", "transformer_flash_t2"): (1.9, 5.4),
    ("epyc-zen4", "transformer_t1"): (-1.6, 6.2),
    ("epyc-zen4", "transformer_t2"): (1.7, 6.5),
    ("epyc-zen4", "mlp_bf16_t1"): (-12.4, 8.0),
    ("epyc-zen4", "mlp_bf16_t2"): (-17.2, 6.7),
    ("epyc-zen4", "cnn224_t1"): (3.2, 34.6),
    ("epyc-zen4", "cnn224_t2"): (-18.0, 37.3),
    ("epyc-zen4", "lstm_t1"): (-1.5, 37.3),
    ("epyc-zen4", "lstm_t2"): (-2.8, 37.2),
    ("epyc-zen4", "lenet_t1"): (10.7, 20.5),
    ("epyc-zen4", "lenet_t2"): (8.5, 23.0),
    ("epyc-zen4", "resnetish_t1"): (-5.7, 19.7),
    ("epyc-zen4", "resnetish_t2"): (-6.9, 39.8),
    # a core shared with another tenant's hardware thread for 45 % of the calibration, less during the captures
    ("xeon-spr", "cnn_t1"): (19.6, 31.2),
    ("xeon-spr", "cnn_t2"): (37.8, 21.2),
    ("xeon-spr", "mlp_t1"): (9.7, 8.1),
    ("xeon-spr", "mlp_t2"): (11.2, 15.1),
    ("xeon-spr", "transformer_flash_t1"): (14.3, 15.4),
    ("xeon-spr", "transformer_flash_t2"): (18.5, 14.5),
    ("xeon-spr", "transformer_t1"): (17.5, 15.0),
    ("xeon-spr", "transformer_t2"): (-13.8, 16.3),
}
ISSUE_MODELS = ("mlp", "transformer", "transformer_flash", "cnn")
"""The models the issue's target is stated for (``capture.py``'s default ones)."""
_TINY = ("the classifier's three 0.05-0.25 ms products: what they pay over the calibration's loop varies by 2-4x "
         "between the steps of one capture and between captures (the state the VM's caches and the BLAS are left "
         "in), more than a charge by the bytes and products that ran before them can follow")
MISSES = {  # captures that miss the target, and why (measured; see validation/README.md)
    ("xeon", "cnn_t2"): "GEMM MAPE 18 %: " + _TINY,
    ("epyc-zen5", "cnn_t1"): "GEMM MAPE 16 %: " + _TINY,
    ("epyc-zen5", "transformer_t2"): "GEMM MAPE 15.9 %, counted op by op: some steps' products took up to 2x "
                                     "the same product's median over the ten steps (the VM's speed at 2 threads "
                                     "moves within seconds); against those medians the MAPE is 8.1 %",
}
_SHARED = ("the host ran another tenant on the other hardware thread of this guest's cores for 45 % of the "
           "calibration's points (its L1 probe) and less during the captures, which ran 20-35 % faster than "
           "captures taken 10 minutes before; a 64 x 64 x 64 product takes 6.5 us on a core alone, 10 us on a "
           "shared one")
MISSES.update({("xeon-spr", name): _SHARED for name in ("cnn_t1", "cnn_t2", "mlp_t2", "transformer_flash_t1",
                                                       "transformer_flash_t2", "transformer_t1", "transformer_t2")})
_SUMMARIES: dict[tuple[str, str], dict] = {}


def _summary(machine: str, name: str, outdir: Path) -> dict:
    """``simhpc compare --json`` of a committed capture against its machine's calibration (once per capture)."""
    if (machine, name) not in _SUMMARIES:
        captures, calibration = MACHINES[machine]
        trace = next(captures.glob(f"{name}.json*"))
        result = CliRunner().invoke(
            main, ["compare", str(trace), "--calibration", str(calibration), "--json", "-o", str(outdir)]
        )
        assert result.exit_code == 0, result.output
        _SUMMARIES[(machine, name)] = json.loads(result.stdout)
        assert (outdir / "predicted_vs_measured.png").stat().st_size > 1000
        assert (outdir / "ops.csv").read_text().count("\n") == _SUMMARIES[(machine, name)]["ops_total"] + 1
    return _SUMMARIES[(machine, name)]


def _ids(key: tuple[str, str]) -> str:
    return "/".join(key)


@pytest.mark.parametrize("key", sorted(MEASURED), ids=_ids)
def test_committed_captures_against_the_committed_calibration(key: tuple[str, str], tmp_path: Path) -> None:
    """The figures of validation/README.md, as a regression guard of the cost model.

    GEMMs are predicted from the calibration's torch points (the BLAS PyTorch multiplies with).
    A change to the model that moves these figures must update them there.
    """
    summary = _summary(*key, tmp_path)
    assert summary["blas"] == "torch"
    assert summary["ops_total"] >= summary["ops_modelled"] > 0.95 * summary["ops_total"]
    step, gemm = MEASURED[key]
    assert summary["step_error_pct"] == pytest.approx(step, abs=0.1)
    assert summary["gemm_mape_pct"] == pytest.approx(gemm, abs=0.1)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(key, marks=pytest.mark.xfail(strict=True, reason=MISSES[key])) if key in MISSES else key
        for key in sorted(MEASURED)
        if key[1].rsplit("_t", 1)[0] in ISSUE_MODELS
    ],
    ids=_ids,
)
def test_issue_target(key: tuple[str, str], tmp_path: Path) -> None:
    """Step-time error and GEMM MAPE within 15 % (the issue's target); the misses are xfail, with the reason."""
    summary = _summary(*key, tmp_path)
    assert abs(summary["step_error_pct"]) <= TARGET_PCT
    assert summary["gemm_mape_pct"] <= TARGET_PCT


def test_products_far_off_their_predictions_point_to_the_calibration_of_the_machine_that_ran_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The 4.5 GHz Zen 5 guest's transformer against the 3.75 GHz guest's calibration: its large
    products took under 0.83x their predicted time, and the warning names the other committed file of
    that kind of machine; against its own calibration, no such warning."""
    fast, slow = MACHINES["epyc-zen5-4.5ghz"][1], MACHINES["epyc-zen5"][1]
    trace = next(MACHINES["epyc-zen5-4.5ghz"][0].glob("transformer_t1.json*"))
    monkeypatch.setattr("simhpc.cli.compare_cmd.committed_calibrations", lambda: [slow, fast])

    def warnings(calibration: Path) -> tuple[float, list[str]]:
        result = CliRunner().invoke(main, ["compare", str(trace), "--calibration", str(calibration), "--json",
                                           "-o", str(tmp_path / calibration.stem)])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        return summary["product_speed_ratio"], [w for w in summary["warnings"] if "products of 0.5 ms" in w]

    ratio, [warning] = warnings(slow)
    assert ratio < 0.83 and "may describe a slower machine" in warning and "epyc-zen5-4.5ghz.json" in warning
    ratio, speed = warnings(fast)
    assert 0.83 <= ratio <= 1.2 and speed == []


def test_compare_report_and_against(tmp_path: Path) -> None:
    runner = CliRunner()
    report = runner.invoke(main, ["compare", str(_capture("cnn_t1")), "-o", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    assert "step time: measured" in report.output and "worst" in report.output
    against = runner.invoke(main, ["compare", str(_capture("mlp_t1")), "--against", str(_capture("mlp_t2")), "--json"])
    assert against.exit_code == 0, against.output
    data = json.loads(against.stdout)
    assert data["matched_names"] > 10 and data["steps"]["a_step_s"] > 0
    steps = [row for row in data["names"] if row["name"].startswith("ProfilerStep")]
    assert [row["name"] for row in steps] == ["ProfilerStep#*"] and None not in (steps[0]["a_count"],
                                                                                 steps[0]["b_count"])
    itself = json.loads(
        runner.invoke(main, ["compare", str(_capture("mlp_t1")), "--against", str(_capture("mlp_t1")), "--json"]).stdout
    )
    assert all(row["diff_pct"] in (0.0, None) for row in itself["names"])
    blocker = tmp_path / "a file"
    blocker.write_text("in the way")
    blocked = runner.invoke(main, ["compare", str(_capture("mlp_t1")), "-o", str(blocker)])
    assert blocked.exit_code == 2
    # (on a machine other than the Xeon reference a warning that host.json describes another one comes first)
    errors = [line for line in blocked.stderr.splitlines() if not line.startswith("warning: ")]
    assert errors == [f"error: {blocker}: cannot write the report (a file is in the way of a folder to write)"]


def test_captures_from_two_processes_align_by_thread_order(tmp_path: Path) -> None:
    """torch names a thread by its OS id (``thread 22693 (python)``); the same program captured by
    another process aligns with it, with no difference, and a trace naming nothing alike is flagged."""
    import gzip
    trace = json.loads(gzip.decompress(_capture("mlp_t1").read_bytes()))
    (pid,) = {e["pid"] for e in trace["traceEvents"] if e.get("name") == "process_name"
              and e["args"]["name"] == "python"}
    for event in trace["traceEvents"]:  # the main thread's id is the process's
        for key in ("pid", "tid"):
            if str(event.get(key)) == str(pid):
                event[key] = 99999
        if event.get("ph") == "M":
            event["args"] = {k: re.sub(rf"\b{pid}\b", "99999", v) if isinstance(v, str) else v
                             for k, v in event["args"].items()}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(trace))
    runner = CliRunner()
    data = json.loads(runner.invoke(main, ["compare", str(_capture("mlp_t1")), "--against", str(other),
                                           "--json"]).stdout)
    assert data["matched_tracks"] == len(data["tracks"]) >= 1
    assert all(row["diff_pct"] == 0.0 for row in data["tracks"])
    unlike = tmp_path / "unlike.json"
    unlike.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "fwd", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    result = runner.invoke(main, ["compare", str(_capture("mlp_t1")), "--against", str(unlike)])
    assert result.exit_code == 0 and "share no track and no span name" in " ".join(result.output.split())


def test_compare_needs_framework_ops(tmp_path: Path) -> None:
    """A trace of no framework ops is one error line; where its ops were there but malformed (every
    ``dur`` a string), the line counts the events not read and says why."""
    path = tmp_path / "sim.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "fwd", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--against" in result.output and "not read" not in result.output
    events = _events()
    ops = [event for event in events if event.get("cat") == "cpu_op"]
    for event in ops:
        event["dur"] = "abc"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{len(ops)} X event without a numeric ts/dur" in " ".join(result.output.split())


def test_compare_needs_recorded_shapes(tmp_path: Path) -> None:
    """A torch.profiler export without ``record_shapes=True``: an error naming the cause, not a -100 % report."""
    events = _events()
    for event in events:
        event.get("args", {}).pop("Input Dims", None)
    path = tmp_path / "no_shapes.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "record_shapes=True" in result.output and "Traceback" not in result.output


def test_odd_events_are_counted_not_fatal(tmp_path: Path) -> None:
    """A pid that is a list, an E with no B before it and a B never ended (B/E pairs are matched
    in time order, whatever the file's), a span past the reader's bound and async spans are
    skipped and counted; a file of nothing else is one error line."""
    odd = [{"ph": "X", "name": "aten::relu", "pid": [1], "tid": 1, "ts": 5, "dur": 1, "cat": "cpu_op"},
           {"ph": "B", "name": "a", "pid": 1, "tid": 3, "ts": 10}, {"ph": "E", "pid": 1, "tid": 3, "ts": 5},
           {"ph": "B", "name": "b", "pid": 1, "tid": 2, "ts": -1e15}, {"ph": "E", "pid": 1, "tid": 2, "ts": 1e15},
           {"ph": "b", "name": "c", "pid": 1, "id": 3, "ts": 1, "cat": "x"},
           {"ph": "e", "name": "c", "pid": 1, "id": 3, "ts": 2, "cat": "x"}]
    assert parse_trace([*_events(), *odd], "mem").skipped == {
        "event whose pid or tid is not a number or string": 1,
        "E event without a matching B": 1,
        "B event never ended": 1,
        "B/E pair ending before it begins or after 1e15 us": 1,
        "async span events (b/e/n, S/T/F), not read": 2,
    }
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(odd))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "skipped: " in result.output and "Traceback" not in result.output


def test_begin_end_pairs_in_any_file_order_and_duplicates() -> None:
    """B/E events listed out of time order pair as in time order; an X event written twice is
    read once."""
    spans = [{"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0}, {"ph": "B", "name": "inner", "pid": 1, "tid": 1,
             "ts": 2}, {"ph": "E", "pid": 1, "tid": 1, "ts": 5}, {"ph": "E", "pid": 1, "tid": 1, "ts": 9}]
    shuffled = parse_trace([spans[0], spans[3], spans[1], spans[2]], "mem")
    assert {(op.name, op.duration) for op in shuffled.ops} == {("outer", 9e-6), ("inner", 3e-6)}
    numbered = [{**e, "args": {**e.get("args", {}), "External id": i}} for i, e in enumerate(_events())]
    twice = parse_trace([*numbered, *numbered], "mem")
    once = parse_trace(numbered, "mem")
    assert len(twice.ops) == len(once.ops) and twice.skipped["duplicate X event (the same event twice)"] == len(
        once.ops)
    # Without ids, a redispatch as long as its caller (integer microseconds) is two ops.
    same = {"ph": "X", "name": "aten::div_", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 3, "dur": 2}
    assert len(parse_trace([same, dict(same)], "mem").ops) == 2


def test_ops_of_other_namespaces_empty_tensors_and_integer_products() -> None:
    """A quantized or custom operator is an op compare counts (and lists when it cannot time it);
    an op on empty tensors only dispatches; an integer product has no BLAS to be timed from."""
    assert classify("quantized::linear_dynamic", "cpu_op") == "unknown"
    assert classify("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op") == "group"
    assert classify("torch::autograd::AccumulateGrad", "cpu_op") == "group"
    assert classify("profiler::_record_function_exit._RecordFunction", "cpu_op") == "group"
    assert classify("_c10d_functional::all_reduce", "cpu_op") == "comm"
    empty = kernel_for("aten::add", "elementwise", [[0], [0], []], ["float", "float", "Scalar"], [], False)
    assert empty.kernel is None and empty.reason == ""
    integer = kernel_for("aten::mm", "gemm", [[512, 512], [512, 512]], ["long int", "long int"], [], False)
    assert integer.kernel is None and "without a BLAS" in integer.reason
    odd = kernel_for("aten::max_pool2d_with_indices", "pool", [[8, 3, 32, 32], [], [], [], [], []],
                     ["float"] + ["ScalarList"] * 4 + ["Scalar"], ["", "[2, 2]", "[0, 0]", "[0, 0]", "[1, 1]", "False"],
                     False)
    assert odd.kernel is None and "arguments not understood" in odd.reason


@pytest.mark.parametrize("threads", [1_000_000_000, 0, -1, "two", True, 2.0])
def test_an_absurd_thread_count_is_one_line(tmp_path: Path, threads: object) -> None:
    path = tmp_path / "threads.json"
    path.write_text(json.dumps({"traceEvents": _events(), "num_threads": threads}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "num_threads" in result.output and "Traceback" not in result.output
    overridden = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o"), "--threads", "1"])
    assert overridden.exit_code == 0, overridden.output


def test_without_steps_the_time_runs_from_the_first_op_to_the_last(tmp_path: Path) -> None:
    """The profiler's own span of the capture (category ``Trace``) is not an op's time."""
    ops = [e for e in _events() if not e["name"].startswith("ProfilerStep")]
    capture = {"ph": "X", "name": "PyTorch Profiler (0)", "cat": "Trace", "pid": "Spans", "tid": 1, "ts": 0,
               "dur": 5000}
    path = tmp_path / "nostep.json"
    path.write_text(json.dumps({"traceEvents": [capture, *ops], "num_threads": 1}))
    result = CliRunner().invoke(main, ["compare", str(path), "--json", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    first, last = min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops)
    assert json.loads(result.stdout)["measured_step_s"] == pytest.approx((last - first) * 1e-6)


def test_a_trace_of_zero_length_ops_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "zero.json"
    path.write_text(json.dumps({"traceEvents": [{**e, "dur": 0} for e in _events()], "num_threads": 1}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "nothing to compare" in result.output and "Traceback" not in result.output


def test_events_the_reader_skips_are_reported(tmp_path: Path) -> None:
    """An X event without a numeric ts, and one whose name is a number, appear in the report."""
    events = [*_events(), {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": "soon", "dur": 3},
              {"ph": "X", "name": 7, "cat": "cpu_op", "ts": 1, "dur": 3}]
    path = tmp_path / "skips.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "--json", "-o", str(tmp_path / "o")])
    assert json.loads(result.stdout)["skipped_events"] == {
        "X event without a numeric ts/dur (a number of microseconds up to 1e15)": 1,
        "event whose name is not a string": 1,
        "framework ops outside every profiler step": 1}
    text = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")]).output
    assert "events skipped while reading" in text


def test_shapes_too_large_or_unrecorded_lists_are_not_modelled() -> None:
    huge = kernel_for("aten::add", "elementwise", [[1 << 21, 1 << 21], [1 << 21, 1 << 21]], ["float", "float"],
                      [], False)
    assert huge.kernel is None and "element counts" in huge.reason
    listed = kernel_for("aten::cat", "elementwise", [[], []], ["TensorList", "Scalar"], [], False)
    assert listed.kernel is None and "tensor list" in listed.reason


def test_compare_refuses_a_gpu_run(tmp_path: Path) -> None:
    """A torch.profiler export of a GPU run (device kernels beside the CPU ops): an error, not a CPU prediction."""
    events = _events()
    events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7, "ts": 30,
                   "dur": 50, "args": {"device": 0, "stream": 7}})
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "ran on a GPU" in result.output and "Traceback" not in result.output
    aligned = CliRunner().invoke(main, ["compare", str(path), "--against", str(path), "--json"])
    assert aligned.exit_code == 0, aligned.output


def test_compiled_graphs_are_listed_not_dropped(tmp_path: Path) -> None:
    """A torch.compile graph call's self time is its fused kernels' work: listed as not modelled."""
    events = _events()
    events.append({"ph": "X", "cat": "user_annotation", "name": "## Call CompiledFxGraph fxabc ##", "pid": 1,
                   "tid": 1, "ts": 880, "dur": 100})
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 900, "dur": 30,
                   "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}})
    path = tmp_path / "compiled.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "--json", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    listed = summary["unmodelled"]["## Call CompiledFxGraph fxabc ##"]
    assert listed["count"] == 1 and listed["measured_s"] == pytest.approx(70e-6)
    assert "torch.compile" in listed["reason"]
    # out of the prediction, and said so: the graph's self time and the base trace's two unknown ops'
    unmodelled = sum(row["measured_s"] for row in summary["unmodelled"].values())
    assert summary["unmodelled_step_s"] == pytest.approx(unmodelled) == pytest.approx(70e-6 + 30e-6 + 98e-6)
    printed = " ".join(CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")]).output.split())
    count = summary["ops_unmodelled"]
    assert f"not in the prediction: 198 us a step measured in the {count} ops not modelled" in printed


def test_collectives_of_a_distributed_run_are_listed_not_dropped(tmp_path: Path) -> None:
    """torch.distributed's collectives (the launch on the main thread, the backend's span) are listed."""
    events = _events()
    events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": 880,
                   "dur": 50, "args": {"Input Dims": [[[524800]], [], []]}})
    events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": 940,
                   "dur": 40})
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "--json", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    unmodelled = json.loads(result.stdout)["unmodelled"]
    for name, seconds in (("c10d::allreduce_", 50e-6), ("gloo:all_reduce", 40e-6)):
        assert unmodelled[name]["measured_s"] == pytest.approx(seconds)
        assert "collective communication" in unmodelled[name]["reason"]


def test_json_is_deterministic(tmp_path: Path) -> None:
    args = ["compare", str(_capture("mlp_t1")), "--calibration", str(CALIBRATION), "--json"]
    first = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "a")]).stdout
    second = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "b")]).stdout
    assert first == second
    assert (tmp_path / "a" / "ops.csv").read_bytes() == (tmp_path / "b" / "ops.csv").read_bytes()


def test_ops_of_an_unmeasured_framework_kind_are_listed(tmp_path: Path) -> None:
    """A calibration without pooling points leaves the CNN's pooling ops unmodelled, with the reason."""
    data = json.loads(CALIBRATION.read_text())
    del data["kernels"]["framework"]
    bare = tmp_path / "no-framework.json"
    bare.write_text(json.dumps(data))
    result = CliRunner().invoke(
        main, ["compare", str(_capture("cnn_t1")), "--calibration", str(bare), "--json", "-o", str(tmp_path / "o")]
    )
    summary = json.loads(result.stdout)
    missing = summary["unmodelled"]["aten::max_pool2d_with_indices"]
    assert missing["count"] == 10 and "no max_pool2d_with_indices points" in missing["reason"]
    assert summary["ops_modelled"] == summary["ops_total"] - 20  # forward and backward, 10 steps


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("corrupt.json.gz", b"\x1f\x8b\x08\x00garbage, not deflate", "broken gzip file"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply to be a trace"),
    ("long.json", b'{"traceEvents": [{"ph": "X", "ts": ' + b"9" * 5000 + b', "dur": 1}]}', "not a trace"),
    ("huge.json", b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1' + b"0" * 400
     + b', "dur": 1}]}', "no complete"),
])
def test_unreadable_trace_is_one_line(tmp_path: Path, name: str, content: bytes, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    for extra in ([], ["--against", str(path)]):
        result = CliRunner().invoke(main, ["compare", str(path), *extra, "-o", str(tmp_path / "out")])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {expected}"), lines


@pytest.mark.parametrize("dims", [[-64, 64], [64.5, 64], [10**30, 64]])
def test_corrupt_dimensions_are_not_modelled(dims) -> None:
    """A negative, fractional or absurd dimension is a corrupt trace: listed, never timed."""
    result = kernel_for("aten::mm", "gemm", [dims, [64, 64]], ["float", "float"], ["", ""], False)
    assert result.kernel is None and "invalid input shape" in result.reason


@pytest.mark.parametrize(("op", "shapes"), [
    ("aten::mm", [[64, 32], [16, 64]]),
    ("aten::bmm", [[8, 64, 32], [8, 16, 64]]),
    ("aten::linear", [[64, 32], [10, 16]]),
    ("aten::matmul", [[64, 32], [16]]),
])
def test_products_whose_operands_do_not_contract_are_not_modelled(op, shapes) -> None:
    result = kernel_for(op, "gemm", shapes, ["float"] * len(shapes), [""] * len(shapes), False)
    assert result.kernel is None and "contracted dimension" in result.reason


def _without_thread_count(capture: Path, folder: Path) -> Path:
    data = json.loads(gzip.decompress(capture.read_bytes()))
    del data["num_threads"]
    bare = folder / capture.name.replace(".json.gz", "_bare.json")
    bare.write_text(json.dumps(data))
    return bare


def test_the_validation_report_times_a_bare_capture_at_the_count_compare_infers(tmp_path: Path) -> None:
    """``validation/traces/report.py`` (``make accuracy``) picks a capture's thread count as ``simhpc
    compare`` does: a 1-thread capture without ``num_threads`` is not timed at the host's two cores
    (which put a plain script's 1-thread steps 42-73 % under)."""
    import importlib.util

    from simhpc.costs.calibration_file import load_calibration

    spec = importlib.util.spec_from_file_location("report", ROOT / "validation" / "traces" / "report.py")
    report = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(report)  # type: ignore[union-attr]
    captures = [_without_thread_count(_capture(name), tmp_path) for name in ("mlp_t1", "mlp_t2")]
    counts = [threads for _, threads, *_ in report.compare_captures(load_calibration(CALIBRATION), captures)]
    assert counts == [1, 2]


def test_the_report_says_where_the_thread_count_came_from(tmp_path: Path) -> None:
    capture = _capture("mlp_t1")
    bare = _without_thread_count(capture, tmp_path)
    for path, extra, threads, source in ((capture, [], 1, "trace"), (bare, [], 1, "inferred"),
                                          (bare, ["--threads", "2"], 2, "option")):
        result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(CALIBRATION), "--json",
                                           "-o", str(tmp_path / source), *extra])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["threads_from"] == source and summary["threads"] == threads


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_trace_without_its_thread_count_gets_the_one_its_products_fit(machine: str, tmp_path: Path) -> None:
    """Each committed capture of the issue's models, its num_threads removed, is predicted at the
    count it recorded, chosen from how its large products' measured times fit the predictions (the
    Zen 3 guest's 2-thread cnn224 capture, whose convolutions ran at the 1-thread predictions, would
    be taken for one thread); a trace with too few large products keeps all host cores."""
    from simhpc.costs.calibration import CalibratedEfficiency
    from simhpc.costs.calibration_file import host_specs, load_calibration
    from simhpc.trace.thread_count import infer_threads

    captures, calibration = MACHINES[machine]
    cal = load_calibration(calibration)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal, blas="torch", cache="cold"))
    for capture in sorted(path for model in ISSUE_MODELS for path in captures.glob(f"{model}_t[12].json.gz")):
        data = json.loads(gzip.decompress(capture.read_bytes()))
        recorded = data.pop("num_threads")
        assert infer_threads(parse_trace(data, capture.name), model, cpu, [1, 2]) == recorded, capture.name
    tiny = parse_trace({"traceEvents": [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 0, "dur": 10, "pid": 1, "tid": 1,
         "args": {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}},
    ]}, "tiny")
    assert infer_threads(tiny, model, cpu, [1, 2]) is None


class _StepProducts:
    """An efficiency model that records what :func:`charge_products` asks of each product."""

    def __init__(self, cache_bytes: float, memory_share: Callable[[float], float | None] | None = None) -> None:
        self.asked: list[tuple[int, float, float]] = []
        self.layout_shares: list[float] = []
        self.outputs: list[float] = []
        self.one_thread: list[bool] = []
        self.private_cache_bytes = 4 << 20
        self.calibration = type("Cal", (), {
            "effective_cache_bytes": lambda self: cache_bytes,
            "last_level_latency_share": lambda self, private: 0.1,
            "rewrite_memory_share": lambda self, distance: memory_share and memory_share(distance)})()

    def cold_call_parts(self, threads: int) -> tuple[float, float]:
        return 30e-6, 1e-10

    def product_in_step_s(self, kernel: Gemm, threads: int, share: float, cold_bytes: float,
                          layout_share: float, cold_output_bytes: float, one_thread: bool) -> float:
        self.asked.append((kernel.m, share, cold_bytes))
        self.layout_shares.append(layout_share)
        self.outputs.append(cold_output_bytes)
        self.one_thread.append(one_thread)
        return 1.0


def test_products_pay_for_what_ran_before_them() -> None:
    """A classifier's forward after a large stream pays the whole cold-call constant and its weight's
    bytes (its input was just read); its two backward products right after it pay a share of the
    constant in proportion to the bytes since it, and nothing for operands it read; an operand read
    more than the effective cache's bytes ago is charged again; on t threads, (t - 1) / t of a
    cached one too, and the share is of t cores' private caches."""
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products

    def op(index: int, shapes: list) -> OpRecord:
        return OpRecord(index, "aten::op", "gemm", float(index), 0.5, "t", shapes=shapes)

    stream = Elementwise(dtype="fp32", n=(64 << 20) // 8, op="relu", inputs=1, outputs=1)  # 64 MiB moved
    forward = Gemm(dtype="fp32", m=64, n=10, k=4096, layout="nt")
    grad_input = Gemm(dtype="fp32", m=64, n=4096, k=10)
    grad_weight = Gemm(dtype="fp32", m=10, n=4096, k=64, layout="tn")
    ops = [
        (stream, [[64, 4096]]),
        (forward, [[10], [64, 4096], [4096, 10]]),
        (grad_input, [[64, 10], [10, 4096]]),  # the weight, transposed back
        (grad_weight, [[10, 64], [64, 4096]]),
        (stream, [[64, 4096]]),
        (forward, [[10], [64, 4096], [4096, 10]]),
    ]
    predictions = [OpPrediction(op(i, shapes), kernel, 1.0, 0.0, True) for i, (kernel, shapes) in enumerate(ops)]
    efficiency = _StepProducts(cache_bytes=16 << 20)
    charge_products(predictions, CostModel(efficiency), 1)  # type: ignore[arg-type]
    weight = 4096 * 10 * 4
    assert [m for m, _, _ in efficiency.asked] == [64, 64, 10, 64]
    (_, share0, cold0), (_, share1, cold1), (_, share2, cold2), (_, share3, cold3) = efficiency.asked
    assert share0 == 1.0 and cold0 == weight  # its input [64, 4096] was the stream's: in cache
    assert share1 == pytest.approx(forward.bytes() / (4 << 20)) and cold1 == 64 * 10 * 4  # the fresh gradient
    assert share2 == pytest.approx(grad_input.bytes() / (4 << 20)) and cold2 == 0  # both read just before
    assert share3 == 1.0 and cold3 == weight  # 64 MiB since the weight was read: out of the cache
    assert all(p.predicted_s == 1.0 for p in predictions if isinstance(p.kernel, Gemm))
    # the first product of each layout since the last stream finds its layout's kernels cold; the
    # second forward, 64 MiB after the first, too
    assert efficiency.layout_shares == [1.0, 1.0, 1.0, 1.0]
    # on 2 threads half of each cached operand is in the other core's cache
    efficiency = _StepProducts(cache_bytes=16 << 20)
    charge_products(predictions, CostModel(efficiency), 2)  # type: ignore[arg-type]
    activation = 64 * 4096 * 4
    assert efficiency.asked[0][2] == pytest.approx(weight + activation / 2)
    assert efficiency.asked[1][2] == pytest.approx(64 * 10 * 4 + weight / 2)  # the fresh gradient: whole
    assert efficiency.asked[2][2] == pytest.approx((64 * 10 * 4 + activation) / 2)
    # and the bytes since the last product went through both cores' private caches
    assert efficiency.asked[1][1] == pytest.approx(forward.bytes() / (2 * (4 << 20)))


def test_a_matrix_vector_product_finds_on_its_core_what_one_thread_read() -> None:
    """MKL runs a matrix-vector product on one thread. On 2 threads, its matrix last read by another
    such product (batch-1 inference's weights, step after step) or by an op under ATen's grain
    size is all on its core: no share of it is charged as in the other core's cache. One last read
    by an op the threads split is, as is any operand of a product the threads split. It pays the
    cold parts of one thread."""
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import GRAIN_ELEMENTS, charge_products

    gemv = Gemm(dtype="fp32", m=1, n=1024, k=1024, layout="nt")
    gemm = Gemm(dtype="fp32", m=8, n=1024, k=1024, layout="nt")
    small = Elementwise(dtype="fp32", n=1024, op="relu", inputs=1, outputs=1)
    wide = Elementwise(dtype="fp32", n=1024 * 1024, op="mul", inputs=1, outputs=1)
    matrix = [1024, 1024]
    ops = [
        (gemv, [[1, 1024], matrix]),   # both operands new: whole
        (small, [[1, 1024]]),          # one thread: under the grain
        (gemv, [[1, 1024], matrix]),   # the vector after a one-thread op, the matrix after a gemv: local
        (wide, [matrix]),              # the threads split the matrix
        (gemv, [[1, 1024], matrix]),   # the matrix: half in the other core's cache
        (gemm, [[8, 1024], matrix]),   # a split product: half of its cached matrix
    ]
    predictions = [OpPrediction(OpRecord(i, "aten::op", "gemm", float(i), 0.5, "t", shapes=shapes), kernel, 1.0,
                                0.0, True) for i, (kernel, shapes) in enumerate(ops)]
    efficiency = _StepProducts(cache_bytes=16 << 20)
    charge_products(predictions, CostModel(efficiency), 2)  # type: ignore[arg-type]
    matrix_bytes, vector_bytes = 1024 * 1024 * 4, 1024 * 4
    assert 1024 < GRAIN_ELEMENTS < 1024 * 1024
    assert [cold for _, _, cold in efficiency.asked] == [
        pytest.approx(matrix_bytes + vector_bytes), 0.0, pytest.approx(matrix_bytes / 2),
        pytest.approx(8 * 1024 * 4 + matrix_bytes / 2)]
    assert efficiency.one_thread == [True, True, True, False]  # the cold parts of one core, or of both


def test_a_flattened_activation_is_the_tensor_the_op_before_read() -> None:
    """A classifier's input is a view (``flatten``) of the last block's output: a ``[64, 4096]``
    operand right after an op that read ``[64, 64, 8, 8]`` is in cache, not charged its bytes."""
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products

    relu = Elementwise(dtype="fp32", n=64 * 4096, op="relu", inputs=1, outputs=1)
    forward = Gemm(dtype="fp32", m=64, n=10, k=4096, layout="nt")
    ops = [(relu, [[64, 64, 8, 8]]), (forward, [[10], [64, 4096], [4096, 10]])]
    predictions = [OpPrediction(OpRecord(i, "aten::op", "gemm", float(i), 0.5, "t", shapes=shapes), kernel, 1.0,
                                0.0, True) for i, (kernel, shapes) in enumerate(ops)]
    efficiency = _StepProducts(cache_bytes=16 << 20)
    charge_products(predictions, CostModel(efficiency), 1)  # type: ignore[arg-type]
    assert efficiency.asked[0][2] == 4096 * 10 * 4  # the weight only


def test_an_output_block_freed_long_before_is_fetched_before_it_is_written() -> None:
    """With memory events, a small product whose output block was freed 4 MiB of traffic before pays
    its output's bytes (3 MiB private caches); one whose block was freed just before, one whose
    block the trace does not say, and one too large for the caches do not. On 2 threads two caches
    hold the 5 MiB, and a small product's output in cache is half in the other core's: it pays
    that half, with memory events or without."""
    from simhpc.trace.allocations import BlockHistory
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products
    from simhpc.trace.readers import MemoryEvent

    stream = Elementwise(dtype="fp32", n=(4 << 20) // 8, op="relu", inputs=1, outputs=1)  # 4 MiB moved
    small = Gemm(dtype="fp32", m=64, n=4096, k=10)  # a 1 MiB output
    large = Gemm(dtype="fp32", m=1024, n=4096, k=10)  # 16 MiB
    out = 64 * 4096 * 4
    ops = [(stream, [[64, 4096]]), (small, [[64, 10], [10, 4096]]), (small, [[64, 10], [10, 4096]]),
           (small, [[64, 10], [10, 4096]]), (large, [[1024, 10], [10, 4096]])]
    predictions = [OpPrediction(OpRecord(i, "aten::op", "gemm", float(i), 0.5, "t", shapes=shapes), kernel, 1.0, 0.0,
                                True) for i, (kernel, shapes) in enumerate(ops)]
    events = [MemoryEvent(-1.0, 100, out), MemoryEvent(-0.5, 100, -out),  # freed before the stream
              MemoryEvent(1.2, 100, out), MemoryEvent(1.8, 100, -out),
              MemoryEvent(2.2, 100, out),  # freed at 1.8, right before
              MemoryEvent(3.2, 300, out),  # never freed before: not known
              MemoryEvent(3.9, 400, -large.m * large.n * 4), MemoryEvent(4.2, 400, large.m * large.n * 4)]

    half = [out / 2] * 3 + [0.0]
    for threads, expected in ((1, [out, 0.0, 0.0, 0.0]), (2, half)):
        efficiency = _StepProducts(cache_bytes=16 << 20)
        efficiency.private_cache_bytes = 3 << 20
        charge_products(predictions, CostModel(efficiency), threads, BlockHistory(events))  # type: ignore[arg-type]
        assert efficiency.outputs == expected, threads
    for threads, expected in ((1, [0.0] * 4), (2, half)):  # no memory events: outputs taken to be in cache
        efficiency = _StepProducts(cache_bytes=16 << 20)
        efficiency.private_cache_bytes = 3 << 20
        charge_products(predictions, CostModel(efficiency), threads)  # type: ignore[arg-type]
        assert efficiency.outputs == expected, threads


def test_with_rewrite_points_an_output_pays_the_share_of_its_lines_its_distance_sends_to_memory() -> None:
    """With the calibration's ``rewrite`` points, a product's output block freed a few MiB before
    (within the last-level cache, past the private caches) pays only what its distance's memory
    share adds over its loop's, plus, on 2 threads, the other core's half of the lines still
    cached; one freed 100 MiB before pays all of its lines. A product larger than the private
    caches pays its distance's share too, over its loop's."""
    from simhpc.trace.allocations import BlockHistory
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products
    from simhpc.trace.readers import MemoryEvent

    def share(distance: float) -> float:  # lines leave a 32 MiB cache
        return min(1.0, max(0.0, (distance - (16 << 20)) / (48 << 20)))

    stream = Elementwise(dtype="fp32", n=(4 << 20) // 8, op="relu", inputs=1, outputs=1)  # 4 MiB moved
    flood = Elementwise(dtype="fp32", n=(100 << 20) // 8, op="relu", inputs=1, outputs=1)  # 100 MiB
    small = Gemm(dtype="fp32", m=64, n=4096, k=10)  # a 1 MiB output
    large = Gemm(dtype="fp32", m=1024, n=4096, k=10)  # 16 MiB
    out, big = 64 * 4096 * 4, 1024 * 4096 * 4
    ops = [(stream, [[64, 4096]]), (small, [[64, 10], [10, 4096]]), (flood, [[64, 4096]]),
           (small, [[64, 10], [10, 4096]]), (large, [[1024, 10], [10, 4096]])]
    predictions = [OpPrediction(OpRecord(i, "aten::op", "gemm", float(i), 0.5, "t", shapes=shapes), kernel, 1.0, 0.0,
                                True) for i, (kernel, shapes) in enumerate(ops)]
    events = [MemoryEvent(-1.0, 100, out), MemoryEvent(-0.5, 100, -out),  # freed before the stream: 4 MiB
              MemoryEvent(1.2, 200, out), MemoryEvent(1.8, 200, -out),  # freed before the flood: 100 MiB
              MemoryEvent(3.2, 200, out), MemoryEvent(3.8, 200, -out),
              MemoryEvent(1.85, 300, big), MemoryEvent(1.9, 300, -big), MemoryEvent(4.2, 300, big)]
    loop = share(small.bytes())
    for threads, elsewhere in ((1, 0.0), (2, 0.5)):
        efficiency = _StepProducts(cache_bytes=16 << 20, memory_share=share)
        efficiency.private_cache_bytes = 3 << 20
        charge_products(predictions, CostModel(efficiency), threads, BlockHistory(events))  # type: ignore[arg-type]
        near = share((4 << 20) + out)
        assert near == loop == 0.0
        assert efficiency.outputs[0] == pytest.approx(elsewhere * out), threads
        assert efficiency.outputs[1] == pytest.approx(out * (1.0 - loop)), threads  # from memory: all of it
        assert efficiency.outputs[2] == pytest.approx(big * (1.0 - share(large.bytes())))


def test_a_product_of_the_layout_just_used_finds_its_kernels_warm() -> None:
    """Two backward passes of one linear layer in a row: the second pass's products follow the
    first's of the same layout within a few bytes, so they pay little of their layout's share."""
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products

    grad_input = Gemm(dtype="fp32", m=64, n=256, k=10)
    grad_weight = Gemm(dtype="fp32", m=10, n=256, k=64, layout="tn")
    shapes = {grad_input: [[64, 10], [10, 256]], grad_weight: [[10, 64], [64, 256]]}
    kernels = [grad_input, grad_weight, grad_input, grad_weight]
    predictions = [OpPrediction(OpRecord(i, "aten::mm", "gemm", float(i), 0.5, "t", shapes=shapes[kernel]),
                                kernel, 1.0, 0.0, True) for i, kernel in enumerate(kernels)]
    efficiency = _StepProducts(cache_bytes=16 << 20)
    charge_products(predictions, CostModel(efficiency), 1)  # type: ignore[arg-type]
    first, second, third, fourth = efficiency.layout_shares
    assert first == second == 1.0
    assert third == pytest.approx((grad_input.bytes() + grad_weight.bytes()) / (4 << 20))
    assert fourth == pytest.approx((grad_weight.bytes() + grad_input.bytes()) / (4 << 20))
    shares = [share for _, share, _ in efficiency.asked]
    assert shares[1] == pytest.approx(grad_input.bytes() / (4 << 20))  # the constant: since the last product


def test_a_matrix_vector_product_after_one_of_its_kernel_finds_its_state_in_the_last_level_cache() -> None:
    """Batch-1 inference: matrix-vector products in a row, each streaming its 4 MiB matrix. The
    next one of the same kernel (layout and vector side) finds what its kernel left in the caches
    at worst in the last-level one: it pays the private caches' share of the constant at that
    cache's cost (0.1 of memory's here) and the last-level cache's share at memory's, of the bytes
    brought after the previous one ended (its own matrix streamed beside its running kernel). A
    product of another kernel pays by the private caches alone, as before."""
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products

    gemv = Gemm(dtype="fp32", m=1, n=1024, k=1024, layout="nt")
    other = Gemm(dtype="fp32", m=1024, n=1, k=1024, layout="nt")  # the vector on the other side
    relu = Elementwise(dtype="fp32", n=1024, op="relu", inputs=1, outputs=1)
    ops = [(gemv, [[1, 1024], [1024, 1024]]), (relu, [[1, 1024]]), (gemv, [[1, 1024], [1024, 1024]]),
           (other, [[1024, 1024], [1024, 1]])]
    predictions = [OpPrediction(OpRecord(i, "aten::op", "gemm", float(i), 0.5, "t", shapes=shapes), kernel, 1.0,
                                0.0, True) for i, (kernel, shapes) in enumerate(ops)]
    efficiency = _StepProducts(cache_bytes=16 << 20)
    efficiency.private_cache_bytes = 1 << 20
    charge_products(predictions, CostModel(efficiency), 1)  # type: ignore[arg-type]
    first, second, third = (share for _, share, _ in efficiency.asked)
    assert gemv.bytes() > 1 << 20 and first == 1.0
    # brought since the first ended: the relu's output (its input has the vector's size)
    assert second == pytest.approx(0.1 * 1024 * 4 / (1 << 20) + 0.9 * 1024 * 4 / (16 << 20))
    assert third == 1.0  # another kernel: a private cache's worth evicts it
    assert efficiency.layout_shares[1] == pytest.approx(0.1 + 0.9 * (gemv.bytes() + relu.bytes()) / (16 << 20))


@pytest.mark.parametrize("name,written", [("aten::add_", 0), ("aten::add", 1 << 20)])
def test_tensors_the_ops_before_touched_do_not_evict_the_blas_state(name: str, written: int) -> None:
    """A recurrent cell's steps: a product, then an accumulation into a 1 MiB weight gradient the
    step before touched. The next product's share of the constant counts the bytes brought into
    the cache since the last product: that product's own (packed into its buffers), none of the
    accumulation's operands, and its output only when it is not written in place."""
    from simhpc.trace.op_predictions import OpPrediction
    from simhpc.trace.product_reuse import charge_products

    accumulate = Elementwise(dtype="fp32", n=512 * 512, op="add", inputs=2, outputs=1)
    product = Gemm(dtype="fp32", m=16, n=512, k=512)
    steps = [(name, accumulate, [[512, 512], [512, 512], []]), ("aten::mm", product, [[16, 512], [512, 512]])] * 3
    predictions = [OpPrediction(OpRecord(i, op_name, "gemm", float(i), 0.5, "t", shapes=shapes), kernel, 1.0, 0.0,
                                True) for i, (op_name, kernel, shapes) in enumerate(steps)]
    efficiency = _StepProducts(cache_bytes=16 << 20)
    charge_products(predictions, CostModel(efficiency), 1)  # type: ignore[arg-type]
    first, second, third = (share for _, share, _ in efficiency.asked)
    assert first == 1.0  # the first product of the trace
    assert second == third == pytest.approx((product.bytes() + written) / (4 << 20))


@pytest.mark.parametrize("name,shapes", [
    ("aten::hardswish", [[32, 64, 32, 32]]),
    ("aten::hardswish_backward", [[32, 64, 32, 32], [32, 64, 32, 32]]),
    ("aten::hardsigmoid", [[32, 64, 32, 32]]),
    ("aten::hardsigmoid_backward", [[32, 64, 32, 32], [32, 64, 32, 32]]),
    ("aten::log_sigmoid_forward", [[64, 512, 128]]),
    ("aten::log_sigmoid_backward", [[64, 512, 128], [64, 512, 128], [64, 512, 128]]),
    ("aten::smooth_l1_loss", [[64, 512, 128], [64, 512, 128], [], []]),
    ("aten::huber_loss", [[64, 512, 128], [64, 512, 128], [], []]),
    ("aten::softplus_backward", [[64, 512], [64, 512], [], []]),
    ("aten::elu_backward", [[64, 512], [], [], [], [], [64, 512]]),
    ("aten::mish", [[64, 512]]),
])
def test_common_activations_and_losses_are_elementwise(name: str, shapes: list) -> None:
    """MobileNet's hardswish, F.logsigmoid, smooth L1 / Huber losses and the backward passes of
    softplus and ELU are one pass over their tensors, as relu or gelu are (they were listed as
    'no cost model for this op's own work' in real captures)."""
    assert classify(name, "cpu_op") == "elementwise"
    kernel = _kernel(name, shapes)
    assert isinstance(kernel, Elementwise) and kernel.n == max(math.prod(s) for s in shapes if s)
