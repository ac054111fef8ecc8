"""An elementwise op or reduction in a training step pays the cold rate only for what no recent op
wrote (simhpc.trace.stream_reuse)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import load_calibration
from simhpc.costs.kernels import Elementwise, FrameworkOp, Gemm, Kernel, Reduction
from simhpc.costs.model import CostModel
from simhpc.trace.op_predictions import OpPrediction
from simhpc.trace.readers import OpRecord
from simhpc.trace.stream_reuse import charge_streams

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
IMAGE = [64, 32, 32, 32]  # 8 MiB of fp32
IMAGE_ELEMENTS = 64 * 32 * 32 * 32


class _Recorder:
    """An efficiency model that records the cached bytes :func:`charge_streams` asks about."""

    def __init__(self, cache_bytes: float, cache: str = "cold") -> None:
        self.cache = cache
        self.asked: list[tuple[str, float]] = []
        self.calibration = type("Cal", (), {"effective_cache_bytes": lambda self: cache_bytes})()

    def stream_in_step_s(self, kernel: Kernel, threads: int, cached_bytes: float) -> float:
        self.asked.append((getattr(kernel, "op", ""), cached_bytes))
        return 1.0


def _predictions(ops: list[tuple[str, Kernel, list, float, float]]) -> list[OpPrediction]:
    """(name, kernel, shapes, start, duration) -> predictions (fp32 tensors)."""
    return [OpPrediction(OpRecord(i, name, kernel.kind, start, duration, "t", shapes=shapes,
                                  dtypes=["float"] * len(shapes)), kernel, 1.0, 2.0, True)
            for i, (name, kernel, shapes, start, duration) in enumerate(ops)]


def _asked(ops: list[tuple[str, Kernel, list, float, float]], cache_bytes: float = 8 * MIB) -> dict[str, float]:
    efficiency = _Recorder(cache_bytes)
    charge_streams(_predictions(ops), CostModel(efficiency), 1)  # type: ignore[arg-type]
    return dict(efficiency.asked)


def _map(op: str, inputs: int = 1, n: int = IMAGE_ELEMENTS) -> Elementwise:
    return Elementwise(dtype="fp32", n=n, op=op, inputs=inputs, outputs=1)


def test_a_relu_finds_the_image_the_convolution_just_wrote() -> None:
    """The convolution's output (its size, no shape in the trace) is the ReLU's input: all of it in an
    8 MiB cache right after it is written, none once more than the cache's bytes went by."""
    conv = Gemm(dtype="fp32", m=64 * 32 * 32, n=32, k=27, conv="forward")
    stream = _map("other", n=(16 * MIB) // 4)
    asked = _asked([("aten::mkldnn_convolution", conv, [[64, 3, 32, 32], [32, 3, 3, 3]], 0.0, 1.0),
                    ("aten::clamp_min", _map("clamp_min"), [IMAGE], 1.0, 1.0),
                    ("aten::mul", stream, [[16 * MIB // 8], [16 * MIB // 8]], 2.0, 1.0),
                    ("aten::threshold_backward", _map("threshold_backward", 2), [IMAGE, IMAGE], 3.0, 1.0)])
    assert asked["clamp_min"] == 8 * MIB
    assert "threshold_backward" not in asked  # 24 MiB since: from memory, as before


def test_one_recent_write_makes_one_input_cached() -> None:
    """A ReLU's gradient reads the gradient just written and its forward's output, of the same shape,
    written long before: one write matches one input."""
    pool_grad = _map("max_pool2d_with_indices_backward")  # writes an image-sized gradient
    asked = _asked([("aten::clamp_min", _map("clamp_min"), [IMAGE], 0.0, 1.0),
                    ("aten::other", _map("other", n=(32 * MIB) // 4), [[(32 * MIB) // 4]], 1.0, 1.0),
                    ("aten::max_pool2d_backward", pool_grad, [IMAGE], 2.0, 1.0),
                    ("aten::threshold_backward", _map("threshold_backward", 2), [IMAGE, IMAGE], 3.0, 1.0)])
    assert asked["threshold_backward"] == 8 * MIB


def test_an_op_nested_in_a_writer_of_the_same_size_writes_the_same_tensor() -> None:
    """The ``zero_`` that clears a pooling backward's gradient and the backward that fills it write one
    tensor, not two."""
    backward = FrameworkOp(dtype="fp32", op="max_pool2d_with_indices_backward", nbytes=16 * MIB,
                           outputs=IMAGE_ELEMENTS)
    asked = _asked([("aten::clamp_min", _map("clamp_min"), [IMAGE], 0.0, 1.0),
                    ("aten::other", _map("other", n=(32 * MIB) // 4), [[(32 * MIB) // 4]], 1.0, 1.0),
                    ("aten::max_pool2d_with_indices_backward", backward, [[64, 32, 16, 16], IMAGE], 2.0, 1.0),
                    ("aten::zero_", _map("zero_", 0), [IMAGE], 2.1, 0.2),
                    ("aten::threshold_backward", _map("threshold_backward", 2), [IMAGE, IMAGE], 3.5, 1.0)])
    assert asked["threshold_backward"] == 8 * MIB
    assert "zero_" not in asked  # it overwrites its tensor: nothing to read


def test_the_share_left_in_cache_falls_with_the_bytes_since() -> None:
    """An LRU cache keeps the last-written lines of a tensor: 3 MiB of a 4 MiB tensor 5 MiB of traffic
    after it was written, in an 8 MiB cache; a tensor of another shape is another tensor."""
    size = (4 * MIB) // 4
    writer = _map("exp", n=size)
    between = _map("other", n=(5 * MIB) // 8)  # 5 MiB moved: 5/8 MiB elements, in and out of 4 bytes
    reader = _map("tanh", n=size)
    asked = _asked([("aten::exp", writer, [[1024, 1024]], 0.0, 1.0),
                    ("aten::other", between, [[(5 * MIB) // 8]], 1.0, 1.0),
                    ("aten::tanh", reader, [[1024, 1024]], 2.0, 1.0)])
    assert asked["tanh"] == pytest.approx(3 * MIB)
    asked = _asked([("aten::exp", writer, [[1024, 1024]], 0.0, 1.0),
                    ("aten::tanh", reader, [[512, 2048]], 2.0, 1.0)])
    assert "tanh" not in asked


def test_nothing_changes_with_a_warm_model_or_no_recent_write() -> None:
    efficiency = _Recorder(8 * MIB, cache="warm")
    predictions = _predictions([("aten::exp", _map("exp"), [IMAGE], 0.0, 1.0),
                                ("aten::tanh", _map("tanh"), [IMAGE], 1.0, 1.0)])
    charge_streams(predictions, CostModel(efficiency), 1)  # type: ignore[arg-type]
    assert efficiency.asked == [] and [p.predicted_s for p in predictions] == [2.0, 2.0]
    sum_ = Reduction(dtype="fp32", n=IMAGE_ELEMENTS, outputs=1, op="sum")
    asked = _asked([("aten::sum", sum_, [IMAGE], 0.0, 1.0)])
    assert asked == {}
    empty = _map("cat", n=0)  # an empty tensor (a U-Net's skip of no channels) is no input
    asked = _asked([("aten::exp", _map("exp", n=5), [[0, 5], [5]], 0.0, 1.0),
                    ("aten::cat", empty, [[0, 5]], 1.0, 1.0)])
    assert asked == {}


def test_in_place_updates_are_not_taken_for_writes() -> None:
    """An optimizer updates one state tensor per layer, all of one shape: the second layer's update
    reads its own state, not the first layer's just updated."""
    update = _map("mul_", n=1 << 20)
    asked = _asked([("aten::mul_", update, [[1024, 1024]], 0.0, 1.0),
                    ("aten::mul_", update, [[1024, 1024]], 1.0, 1.0)])
    assert asked == {}


def test_cached_bytes_run_at_the_warm_rate_and_the_rest_at_the_cold_one() -> None:
    """Against the committed Zen 4 calibration: nothing cached is the cold floor, everything cached
    the loop's time, half of it in between, falling as more is cached."""
    calibration = load_calibration(ROOT / "validation" / "calibration" / "epyc-zen4.json")
    cold = CalibratedEfficiency(calibration, blas="torch", cache="cold")
    warm = CalibratedEfficiency(calibration, blas="torch", cache="warm")
    relu = _map("clamp_min")  # 8 MiB in, 8 MiB out
    fetched = relu.fetched_bytes()
    floor = cold.host_time(relu, 1)
    loop = warm.host_time(relu, 1)
    assert floor is not None and loop is not None and floor > 2 * loop
    times = [cold.stream_in_step_s(relu, 1, share * fetched) for share in (0.0, 0.25, 0.5, 1.0)]
    assert times[0] == pytest.approx(floor)
    assert times[-1] == pytest.approx(loop)
    assert times == sorted(times, reverse=True) and loop < times[2] < floor
