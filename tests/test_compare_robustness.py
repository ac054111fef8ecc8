"""``simhpc compare`` on odd inputs: thread counts from recurrent layers, thread counts past the
calibration, negative and improperly nested events, gzipped calibrations, concurrent threads."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli.main import main
from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import CalibrationError, host_specs, load_calibration
from simhpc.costs.kernels import Gemm, Recurrent
from simhpc.costs.model import CostModel
from simhpc.costs.opmap import kernel_for
from simhpc.hardware.host import COMMITTED_CALIBRATION
from simhpc.trace.compare import OTHER_DTYPE, compare_trace
from simhpc.trace.irregularities import CONCURRENT_OPS, UNEVEN_STEPS, concurrent_ops
from simhpc.trace.op_predictions import traced_kernel
from simhpc.trace.readers import IMPROPER_NESTING, TraceError, parse_trace, read_trace
from simhpc.trace.thread_count import MIN_PRODUCT_S, infer_threads

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "validation" / "traces" / "captures" / "mlp_t1.json.gz"
HOST_CALIBRATION = ROOT / "validation" / "calibration" / "host.json"
RNN_CALIBRATION = ROOT / "validation" / "calibration" / "epyc-zen2.json"
"""A calibration with oneDNN LSTM (``recurrent``) points at 1 and 2 threads."""

LSTM_SHAPES = [[64, 32, 128], [1024, 128], [1024, 256], [1024], [1024], [32, 256], [32, 256], *[[]] * 9]
"""``aten::mkldnn_rnn_layer`` of nn.LSTM(128, 256) on 32 sequences of 64 steps, as torch.profiler records it."""
LSTM_TYPES = ["float"] * 7 + ["Scalar"] * 9


def _compare(tmp_path: Path, events: list, *options: str):
    """``simhpc compare`` of ``events`` with the host calibration: the JSON report with ``--json``,
    else the CLI result."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(HOST_CALIBRATION), *options,
                                       "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in options else result


def _op(name: str, ts: float, dur: float, tid: int = 1, shapes: list | None = None,
        types: list | None = None) -> dict:
    args = {"Input Dims": shapes or [[256, 512], [512, 512]], "Input type": types or ["float", "float"]}
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def _lstm_trace(threads: int, layers: int = 5) -> tuple[dict, CostModel]:
    """A trace of LSTM layers only, each measured at the calibration's ``threads``-thread time."""
    cal = load_calibration(RNN_CALIBRATION)
    cpu, _ = host_specs(cal)
    model = CostModel(CalibratedEfficiency(cal, blas="torch", cache="cold"))
    probe = parse_trace([_op("aten::mkldnn_rnn_layer", 0, 1, shapes=LSTM_SHAPES, types=LSTM_TYPES)], "probe")
    kernel = traced_kernel(probe, probe.ops[0]).kernel
    assert isinstance(kernel, Recurrent)
    seconds = model.duration(kernel, cpu, threads)
    events, ts = [], 0.0
    for _ in range(layers):
        events.append(_op("aten::mkldnn_rnn_layer", ts, seconds * 1e6, shapes=LSTM_SHAPES, types=LSTM_TYPES))
        ts += seconds * 1e6 + 10
    return {"schemaVersion": 1, "traceEvents": events}, model


@pytest.mark.parametrize("threads", [1, 2])
def test_recurrent_layers_vote_on_the_thread_count(threads: int, tmp_path: Path) -> None:
    """A trace of LSTM layers alone (no GEMM) without num_threads is predicted at the count its
    layers' times fit: a 1-thread one used to be taken for all of the 2-core host's threads."""
    data, model = _lstm_trace(threads)
    trace = parse_trace(data, "lstm")
    cpu, _ = host_specs(load_calibration(RNN_CALIBRATION))
    kernel = traced_kernel(trace, trace.ops[0]).kernel
    assert kernel is not None and model.duration(kernel, cpu, 1) > 1.2 * model.duration(kernel, cpu, 2)
    assert infer_threads(trace, model, cpu, [1, 2]) == threads
    path = tmp_path / "lstm.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(RNN_CALIBRATION), "--json",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["threads"], summary["threads_from"]) == (threads, "inferred")
    assert abs(summary["step_error_pct"]) < 5.0


@pytest.mark.parametrize(("at", "warned"), [(1.0, False), (0.5, True), (0.0, False), (1.5, False)])
def test_products_between_two_counts_predictions_say_the_count_is_a_guess(at: float, warned: bool,
                                                                          tmp_path: Path) -> None:
    """LSTM layers measured at the geometric mean of their 1- and 2-thread times (a speed-up a busy host
    gave in part) fit neither count: the report says it took the nearer as a guess. At either count's
    own time, or slower than both (cold, or a slower host: the count is not in doubt), no such warning."""
    data, model = _lstm_trace(1)
    trace = parse_trace(data, "lstm")
    cpu, _ = host_specs(load_calibration(RNN_CALIBRATION))
    kernel = traced_kernel(trace, trace.ops[0]).kernel
    one, two = model.duration(kernel, cpu, 1), model.duration(kernel, cpu, 2)
    assert one / two > 1.25**2  # so the midpoint is off by over LOOSE_FIT at both counts
    seconds = one ** at * two ** (1 - at)
    for event in data["traceEvents"]:
        event["dur"] = seconds * 1e6
    path = tmp_path / "lstm.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(RNN_CALIBRATION), "--json",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    guesses = [w for w in json.loads(result.stdout)["warnings"] if "between the thread counts" in w]
    assert len(guesses) == warned
    if warned:
        assert "1 thread " in guesses[0] and "2 threads " in guesses[0] and "--threads" in guesses[0]


def test_threads_above_the_calibrated_range_are_warned_of(tmp_path: Path) -> None:
    """--threads or a recorded num_threads above the cores the calibration measured: a warning
    naming both counts (on stderr and in the JSON report); none within the range."""
    runner = CliRunner()
    args = ["compare", str(CAPTURE), "--calibration", str(HOST_CALIBRATION), "--json", "-o", str(tmp_path / "o")]
    result = runner.invoke(main, [*args, "--threads", "8"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "calibrated range" in line]
    assert len(warned) == 1
    assert "--threads 8" in warned[0] and "threads measured: 1, 2" in warned[0] and "2 cores" in warned[0]
    assert any("--threads 8" in w for w in json.loads(result.stdout)["warnings"])
    result = runner.invoke(main, [*args, "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert "calibrated range" not in result.stderr
    assert not any("calibrated range" in w for w in json.loads(result.stdout)["warnings"])
    data = json.loads(gzip.decompress(CAPTURE.read_bytes()))
    data["num_threads"] = 64
    recorded = tmp_path / "t64.json"
    recorded.write_text(json.dumps(data))
    result = runner.invoke(main, ["compare", str(recorded), "--calibration", str(HOST_CALIBRATION), "-o",
                                  str(tmp_path / "o64")])
    assert result.exit_code == 0, result.output
    assert "num_threads (64) is above the calibrated range" in result.stderr


def test_a_negative_duration_is_its_own_reason_naming_the_event(tmp_path: Path) -> None:
    trace = parse_trace([_op("aten::mm", 0, 100), _op("aten::addmm", 200, -50), _op("aten::mm", 300, -5)], "neg")
    assert len(trace.ops) == 1
    ((reason, count),) = trace.skipped.items()
    assert count == 2 and "negative duration" in reason and "'aten::addmm'" in reason and "-50" in reason
    path = tmp_path / "neg.json"
    path.write_text(json.dumps({"traceEvents": [_op("aten::mm", 0, -50)]}))
    result = CliRunner().invoke(main, ["compare", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "negative duration" in lines[0] and "without a numeric" not in lines[0]


def test_improperly_nested_events_are_counted_in_a_note(tmp_path: Path) -> None:
    """An event that starts inside another of its thread and ends after it is read (not its child)
    and counted; properly nested and back-to-back events are not."""
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, "pid": 1, "tid": 1}
    improper = [step, _op("aten::mm", 0, 100), _op("aten::mm", 50, 100), _op("aten::mm", 120, 10)]
    trace = parse_trace(improper, "improper")
    assert trace.notes == {IMPROPER_NESTING: 1}
    assert trace.ops[2].parent == 0  # the partial overlap is the step's child, not the first product's
    proper = parse_trace([step, _op("aten::mm", 0, 100), _op("aten::mm", 10, 50), _op("aten::mm", 100, 10)], "ok")
    assert proper.notes == {}
    # with_stack=True: a Python frame straddling the step's end is how torch records it, not news
    frame = {**_op("profiler.py(932): __exit__", 990, 30), "cat": "python_function"}
    assert parse_trace([step, _op("aten::mm", 0, 100), frame], "stack").notes == {}
    assert _compare(tmp_path, improper, "--json")["notes"] == {IMPROPER_NESTING: 1}
    result = _compare(tmp_path, improper)
    assert "note: 1 complete events that start inside another" in " ".join(result.stdout.split())


def test_a_gzipped_calibration_reads_as_the_plain_one(tmp_path: Path) -> None:
    packed = tmp_path / "host.json.gz"
    packed.write_bytes(gzip.compress(HOST_CALIBRATION.read_bytes()))
    assert load_calibration(packed).data == load_calibration(HOST_CALIBRATION).data
    runs = []
    for calibration in (HOST_CALIBRATION, packed):
        result = CliRunner().invoke(main, ["compare", str(CAPTURE), "--calibration", str(calibration), "--json",
                                           "-o", str(tmp_path / f"out-{calibration.name}")])
        assert result.exit_code == 0, result.output
        runs.append(json.loads(result.stdout)["predicted_step_s"])
    assert runs[0] == runs[1]


@pytest.mark.parametrize(("content", "expected"), [
    (b"\x1f\x8b\x08\x00garbage, not deflate", "broken gzip file"),
    (gzip.compress(b"\xff\xfe\x00binary", mtime=0), "not UTF-8 text"),
    (b"\x00\x01\xff\xfe", "not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
], ids=["broken-gzip", "gzipped-binary", "binary", "deep-nesting"])
def test_an_unreadable_calibration_is_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "cal.json.gz"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["compare", str(CAPTURE), "--calibration", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {expected}"), lines


def test_ops_of_concurrent_threads_are_noted(tmp_path: Path) -> None:
    """Top-level ops of two threads that overlap in time (torch.jit.fork) are counted: the step is
    measured over the wall clock, predicted as their sum. Threads taking turns are not."""
    forked = [_op("aten::mm", 0, 100, tid=1), _op("aten::mm", 50, 100, tid=2), _op("aten::mm", 200, 10, tid=2),
              _op("aten::relu", 20, 10, tid=2)]
    trace = parse_trace(forked, "forked")
    assert concurrent_ops(trace) == 3  # the first two products and the relu; not the last product
    turns = parse_trace([_op("aten::mm", 0, 100, tid=1), _op("aten::mm", 100, 100, tid=2),
                         _op("aten::mm", 200, 10, tid=1)], "turns")
    assert concurrent_ops(turns) == 0
    assert _compare(tmp_path, forked, "--json")["notes"] == {CONCURRENT_OPS: 3}


def test_steps_that_slow_down_are_noted(tmp_path: Path) -> None:
    """A capture whose steps took from 1 to 3 ms (a profiler holding tensors, a machine slowing down)
    says so; steps within twice the fastest do not."""
    def steps(durations: list[float]) -> list[dict]:
        events, start = [], 0.0
        for i, duration in enumerate(durations):
            events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": start,
                        "dur": duration, "pid": 1, "tid": 1}, _op("aten::mm", start + 1, duration - 2)]
            start += duration
        return events

    assert _compare(tmp_path, steps([1000, 1900, 3100, 1000]), "--json")["notes"] == {UNEVEN_STEPS: 1}
    assert _compare(tmp_path, steps([1000, 1900, 1500]), "--json")["notes"] == {}
    assert f"note: 2 {UNEVEN_STEPS}" in " ".join(_compare(tmp_path, steps([1000, 2500, 3000])).output.split())


def test_devices_and_pipes_are_refused_before_reading(tmp_path: Path) -> None:
    """/dev/zero never ends and a FIFO without a writer blocks: neither is read."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(TraceError, match="not a regular file"):
            read_trace(path)
        with pytest.raises(CalibrationError, match="not a regular file"):
            load_calibration(path)


def test_a_loop_profiled_without_a_schedule_is_compared_over_its_optimizer_steps(tmp_path: Path) -> None:
    """No ProfilerStep events: the steps end where each ``optimizer.step()`` ends, or without an
    optimizer at each repeat of the top-level ops, and the report says so; the median of them is the
    step measured."""
    events = []
    for start, length in ((0, 3000), (3000, 1000), (4000, 1200)):
        events += [_op("aten::mm", start + 10, 400), _op("aten::mm", start + 500, 400),
                   {**_op("Optimizer.step#SGD.step", start + length - 50, 50), "cat": "user_annotation"}]
    data = _compare(tmp_path, events, "--threads", "1", "--json")
    assert data["steps"] == 3 and data["steps_from"] == "Optimizer.step"
    assert data["measured_step_s"] == pytest.approx(1200e-6)
    assert data["measured_total_s"] == pytest.approx(5190e-6)  # from the first op
    report = " ".join(_compare(tmp_path, events, "--threads", "1").output.split())
    assert "3 training steps (each to the end of an optimizer.step(): the trace marks no ProfilerStep" in report
    assert "step time: measured 1.2 ms" in report
    forward = [_op("aten::mm", start + at, 200) for start in (0, 3000, 4000) for at in (0, 250, 500, 750)]
    data = _compare(tmp_path, forward, "--threads", "1", "--json")
    assert (data["steps"], data["steps_from"]) == (3, "repetition")
    assert data["measured_step_s"] == pytest.approx(1000e-6)  # the second run: to the third's first op
    report = " ".join(_compare(tmp_path, forward, "--threads", "1").output.split())
    assert "3 steps (the runs of one sequence of top-level ops it repeats" in report


def test_a_tensorboard_log_folder_reads_as_its_one_trace(tmp_path: Path) -> None:
    """``tensorboard_trace_handler`` writes ``<worker>.<ns>.pt.trace.json.gz`` into a folder: the
    folder reads as that file; one with none or several is refused, naming what it holds."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "notes.txt").write_text("not a trace")
    with pytest.raises(TraceError, match="a folder with no trace file in it"):
        read_trace(logs)
    trace_path = logs / "vm_1.1796.pt.trace.json.gz"
    trace_path.write_bytes(CAPTURE.read_bytes())
    trace = read_trace(logs)
    assert trace.source == str(trace_path) and len(trace.ops) == len(read_trace(CAPTURE).ops)
    (logs / "vm_1.1797.pt.trace.json").write_text(json.dumps({"traceEvents": []}))
    refused = CliRunner().invoke(main, ["compare", str(logs)])
    assert refused.exit_code == 2
    assert refused.stderr == (f"error: {logs}: a folder of 2 trace files (vm_1.1796.pt.trace.json.gz, "
                              "vm_1.1797.pt.trace.json): name the one to read\n")


def test_against_names_what_it_skipped_and_refuses_prediction_options(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "fwd", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    b.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "bwd", "pid": 2, "tid": 2, "ts": 0, "dur": 5},
                                             {"ph": "B", "name": "open", "pid": 2, "tid": 2, "ts": 1}]}))
    result = CliRunner().invoke(main, ["compare", str(a), "--against", str(b), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["a_skipped_events"] == {} and sum(data["b_skipped_events"].values()) == 1
    assert data["warnings"] and "share no track and no span name" in data["warnings"][0]
    assert "warning: the two traces share no track" in result.stderr
    for option, value in (("--threads", "0"), ("--cache", "warm")):
        refused = CliRunner().invoke(main, ["compare", str(a), "--against", str(b), option, value])
        assert refused.exit_code == 2 and refused.stderr.startswith(f"error: {option} sets how ops are predicted")


def test_flat_input_dims_are_called_invalid_not_missing() -> None:
    """``Input Dims: [64, 64]`` (one list for the whole op) was recorded, but wrong."""
    flat = kernel_for("aten::mm", "gemm", [64, 64], ["float", "float"], [], False)
    assert flat.kernel is None and flat.reason.startswith("invalid input shapes [64, 64]")
    none = kernel_for("aten::mm", "gemm", [], [], [], False)
    assert none.kernel is None and "record_shapes=True" in none.reason


def test_ops_timed_from_another_dtypes_points_are_counted_in_a_note() -> None:
    """A bf16 elementwise or framework op without bf16 points is timed from fp32's by bytes: said,
    not silent. The fp32 model's ops all have points of their own dtype."""
    calibration = load_calibration(ROOT / "validation" / "calibration" / "epyc-zen4.json")
    efficiency = CalibratedEfficiency(calibration)
    pooled = kernel_for("aten::avg_pool2d_backward", "elementwise", [[32, 64, 16, 16], [32, 64, 32, 32]],
                        ["c10::BFloat16", "c10::BFloat16"], ["", "", "[2, 2]", "[2, 2]"], False).kernel
    assert pooled is not None and pooled.dtype == "bf16" and efficiency.other_dtype(pooled)
    fp32 = kernel_for("aten::avg_pool2d_backward", "elementwise", [[32, 64, 16, 16], [32, 64, 32, 32]],
                      ["float", "float"], ["", "", "[2, 2]", "[2, 2]"], False).kernel
    assert fp32 is not None and not efficiency.other_dtype(fp32)
    model, (cpu, _) = CostModel(efficiency), host_specs(calibration)
    bf16_capture = read_trace(ROOT / "validation" / "traces" / "captures" / "epyc-zen2" / "mlp_bf16_t1.json.gz")
    assert compare_trace(bf16_capture, model, cpu, 1).notes.get(OTHER_DTYPE, 0) > 0
    assert OTHER_DTYPE not in compare_trace(read_trace(CAPTURE), model, cpu, 1).notes


def test_thread_count_is_inferred_from_the_products_loop_times() -> None:
    """Many 100-200 us products of a 1-thread trace: priced with the cold call's constant they
    passed the vote's threshold at twice their times on one thread, and the trace was taken for a
    2-thread one; their loop times leave them out and the large ones vote for one thread."""
    cal = load_calibration(COMMITTED_CALIBRATION)
    cpu, _ = host_specs(cal)
    cold = CostModel(CalibratedEfficiency(cal, blas="torch", cache="cold"))
    loops = CostModel(CalibratedEfficiency(cal, blas="torch"))
    small, large, types = [[512, 128], [128, 128]], [[1024, 1024], [1024, 1024]], ["float", "float"]

    def product(shapes: list) -> Gemm:
        return traced_kernel(probe := parse_trace([_op("aten::mm", 0, 1, shapes=shapes, types=types)], "probe"),
                             probe.ops[0]).kernel

    assert cold.duration(product(small), cpu, 1) >= MIN_PRODUCT_S > loops.duration(product(small), cpu, 1)
    events, ts = [], 0.0
    for shapes, count in ((small, 12), (large, 3)):  # each measured at its 1-thread loop time
        seconds = loops.duration(product(shapes), cpu, 1)
        for _ in range(count):
            events.append(_op("aten::mm", ts, seconds * 1e6, shapes=shapes, types=types))
            ts += seconds * 1e6 + 10
    assert infer_threads(parse_trace(events, "one thread"), cold, cpu, [1, 2]) == 1
