"""Trace readers: Chrome JSON nesting, B/E pairs, profiler steps, bad input, committed captures."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli.main import main
from simhpc.trace.readers import TraceError, parse_trace, read_trace

CAPTURES = Path(__file__).resolve().parents[1] / "validation" / "traces" / "captures"


def _x(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", **args: object) -> dict:
    return {"ph": "X", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "cat": cat, "args": args}


def test_nesting_parent_children_and_self_time() -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
        _x("aten::linear", 100, 50),
        _x("aten::t", 101, 2),
        _x("aten::addmm", 105, 40),
        _x("aten::copy_", 106, 10),
        _x("aten::relu", 160, 5),
    ]
    trace = parse_trace({"traceEvents": events}, "mem")
    by_name = {op.name: op for op in trace.ops}
    linear, addmm, copy = by_name["aten::linear"], by_name["aten::addmm"], by_name["aten::copy_"]
    assert trace.format == "torch.profiler"
    assert linear.parent is None and linear.depth == 0
    assert addmm.parent == linear.index and copy.parent == addmm.index and copy.depth == 2
    assert sorted(trace.ops[c].name for c in linear.children) == ["aten::addmm", "aten::t"]
    assert linear.self_time == pytest.approx((50 - 2 - 40) * 1e-6)
    assert addmm.self_time == pytest.approx(30e-6)
    assert by_name["aten::relu"].parent is None
    assert addmm.start == pytest.approx(5e-6)  # seconds from the first event
    assert addmm.track == "python/main"


def test_memory_events_are_read_in_time_order() -> None:
    """``profile_memory=True`` writes ``[memory]`` instants with an address and a signed size; a
    GPU's and malformed ones (an address outside a 64-bit CPU's user address space, a size beyond it) are left out,
    and an op-free trace still needs complete events."""
    def memory(ts: float, address: object, size: object, device: int = 0) -> dict:
        return {"ph": "i", "name": "[memory]", "pid": 7, "tid": 1, "ts": ts, "s": "t",
                "args": {"Addr": address, "Bytes": size, "Device Type": device, "Total Allocated": 0}}

    events = [_x("aten::mm", 100, 50), memory(130, 4096, -256), memory(110, 4096, 256), memory(120, 8192, 64, 1),
              memory(125, "0x10", 8), memory(126, 16, True), {"ph": "i", "name": "[memory]", "ts": 127},
              memory(128, -4096, 64), memory(129, 4096, 1 << 60), memory(129, 1 << 64, 64), memory(129, True, 8)]
    trace = parse_trace({"traceEvents": events}, "mem")
    assert [(e.time, e.address, e.size) for e in trace.memory] == [
        (pytest.approx(10e-6), 4096, 256), (pytest.approx(30e-6), 4096, -256)]
    assert parse_trace({"traceEvents": [_x("aten::mm", 0, 1)]}, "plain").memory == []


def test_begin_end_pairs_become_complete_events() -> None:
    events = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 11},
    ]
    trace = parse_trace(events, "list")
    assert trace.format == "chrome"
    inner = next(op for op in trace.ops if op.name == "inner")
    assert inner.duration == pytest.approx(3e-6) and inner.parent is not None
    assert trace.skipped == {"E event without a matching B": 1}


def test_an_end_events_args_are_merged_into_its_begin_events() -> None:
    """The Trace Event Format merges the args of an ``E`` event into its ``B`` event's (the
    ``E`` event's value wins a clash): shapes recorded at the end of a span are its shapes."""
    events = [
        {"ph": "B", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "args": {"Input type": ["x"]}},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5,
         "args": {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]}},
    ]
    (mm,) = parse_trace(events, "list").ops
    assert mm.shapes == [[64, 32], [32, 16]] and mm.dtypes == ["float", "float"]


def test_profiler_steps_are_recognised() -> None:
    events = [
        _x("ProfilerStep#5", 0, 100, cat="user_annotation"),
        _x("aten::mm", 10, 20),
        _x("ProfilerStep#6", 100, 100, cat="user_annotation"),
        _x("aten::mm", 120, 20),
        _x("aten::mm", 150, 10, tid=2),
    ]
    trace = parse_trace({"traceEvents": events}, "mem")
    assert [s.number for s in trace.steps] == [5, 6]
    steps = sorted((op.track, op.start, op.step) for op in trace.ops if op.name == "aten::mm")
    assert [s[2] for s in steps] == [5, 6, 6]  # the other thread's op falls in step 6 by time


def _iteration(start: float, optimizers: int = 1, between: str = "Optimizer.zero_grad#SGD.zero_grad") -> list[dict]:
    """One training iteration from ``start`` (us): zero_grad, a product, its backward on the
    autograd thread, then ``optimizers`` optimizer steps with ``between`` before each after the first."""
    events = [_x("Optimizer.zero_grad#SGD.zero_grad", start, 2, cat="user_annotation"),
              _x("aten::mm", start + 5, 20), _x("aten::mm", start + 30, 30, tid=2)]
    at = start + 70
    for number in range(optimizers):
        if number:
            events.append(_x(between, at, 2, cat="user_annotation" if between.startswith("Optimizer.") else "cpu_op"))
            at += 5
        events += [_x("Optimizer.step#SGD.step", at, 10, cat="user_annotation"), _x("aten::add_", at + 1, 5)]
        at += 12
    return events


def test_without_profiler_steps_the_optimizer_steps_mark_the_iterations() -> None:
    """torch.profiler records no ProfilerStep without a ``schedule``: each iteration then ends where
    its run of ``optimizer.step()`` calls ends (two optimizers stepping one after the other are one
    iteration, a zero_grad between them too), the next begins there, the first at the first op."""
    for optimizers, between in ((1, ""), (2, "Optimizer.zero_grad#SGD.zero_grad"), (2, "aten::detach")):
        events = [e for start in (0, 200, 400) for e in _iteration(start, optimizers, between)]
        trace = parse_trace({"traceEvents": [*events, _x("aten::item", 600, 3)]}, "loop")
        if between == "aten::detach":  # work between the optimizers: each ends an iteration
            assert len(trace.steps) == 6
            continue
        iteration_end = 70 + 12 * optimizers - 2 + (5 * (optimizers - 1))
        assert trace.steps_from == "Optimizer.step"
        bounds = [round(x * 1e6, 6) for s in trace.steps for x in (s.start, s.duration)]
        assert bounds == [0, iteration_end, iteration_end, 200, 200 + iteration_end, 200]
        assert [op.step for op in trace.ops if op.name == "aten::mm"] == [0, 1, 2, 0, 1, 2]  # by track, then time
        assert next(op for op in trace.ops if op.name == "aten::item").step is None  # after the last iteration
    once = parse_trace({"traceEvents": _iteration(0)}, "one iteration")
    assert once.steps == [] and once.steps_from == "ProfilerStep"
    marked = parse_trace({"traceEvents": [_x("ProfilerStep#3", 0, 190, cat="user_annotation"), *_iteration(0),
                                          _x("ProfilerStep#4", 200, 190, cat="user_annotation"), *_iteration(200)]})
    assert [s.number for s in marked.steps] == [3, 4] and marked.steps_from == "ProfilerStep"


def _forward(start: float, layers: int = 2) -> list[dict]:
    """One forward pass from ``start`` (us): a convolution, ``layers`` linear + ReLU pairs, a head."""
    events = [_x("aten::conv2d", start, 10)]
    for layer in range(layers):
        events += [_x("aten::linear", start + 20 + 20 * layer, 8), _x("aten::relu", start + 30 + 20 * layer, 4)]
    return [*events, _x("aten::linear", start + 20 + 20 * layers, 5)]


def test_without_steps_or_an_optimizer_the_repeated_runs_of_top_level_ops_are_the_steps() -> None:
    """Forward passes profiled in a loop without a schedule: each run of the repeated sequence of
    top-level ops (of the busiest thread) is a step, to the next run's first op (the last: to its
    own last op's end); a single pass, one whose ops do not repeat whole, or a trace torch.profiler
    did not write has none."""
    loop = parse_trace({"traceEvents": [e for start in (0, 100, 250) for e in _forward(start)]}, "loop")
    assert loop.steps_from == "repetition"
    assert [(round(s.start * 1e6, 6), round(s.duration * 1e6, 6)) for s in loop.steps] == [
        (0, 100), (100, 150), (250, 65)]
    assert [op.step for op in loop.ops if op.name == "aten::conv2d"] == [0, 1, 2]
    for events in (_forward(0, layers=6), [*_forward(0), *_forward(100), _x("aten::item", 200, 1)]):
        assert parse_trace({"traceEvents": events}).steps == []
    training = [*_iteration(0), *_iteration(200)]
    assert parse_trace({"traceEvents": training}).steps_from == "Optimizer.step"
    other = [{**e, "cat": "compute"} for start in (0, 100, 250) for e in _forward(start)]
    assert parse_trace({"traceEvents": other}).steps == []  # not torch.profiler's: its repeats are no steps


def test_steps_are_found_inside_python_frames_and_the_users_annotations() -> None:
    """``with_stack=True`` puts Python frames around every op, and a script may wrap each
    iteration in its own ``record_function``: the optimizer's calls and the repeated runs are
    found under them; a ``zero_grad`` whose ops run between two optimizers' steps is no work."""
    frame = _x("train.py(9): <module>", 0, 1000, cat="python_function")
    training = [frame]
    for start in (0, 300, 600):
        training += [_x("train_step", start + 1, 250, cat="user_annotation"), _x("aten::mm", start + 5, 100),
                     _x("Optimizer.step#SGD.step", start + 150, 20, cat="user_annotation"),
                     _x("Optimizer.zero_grad#SGD.zero_grad", start + 175, 10, cat="user_annotation"),
                     _x("aten::zero_", start + 176, 5),
                     _x("Optimizer.step#Adam.step", start + 200, 20, cat="user_annotation")]
    trace = parse_trace({"traceEvents": training}, "with_stack")
    assert trace.steps_from == "Optimizer.step"
    assert [round(s.start * 1e6 + s.duration * 1e6, 6) for s in trace.steps] == [220, 520, 820]
    inference = [frame]
    for start in (0, 300, 600):
        inference += [_x("infer", start + 1, 250, cat="user_annotation"), _x("aten::mm", start + 5, 100)]
    trace = parse_trace({"traceEvents": inference}, "annotated calls")
    assert trace.steps_from == "repetition" and [round(s.start * 1e6, 6) for s in trace.steps] == [1, 301, 601]


def test_malformed_events_are_counted_not_dropped_silently() -> None:
    events = [_x("a", 0, 1), {"ph": "X", "name": "bad", "ts": "soon"}, 3]
    trace = parse_trace({"traceEvents": events}, "mem")
    assert len(trace.ops) == 1
    assert trace.skipped == {"X event without a numeric ts/dur (a number of microseconds up to 1e15)": 1,
                             "not an object": 1}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00\x01garbage", "not valid JSON"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur"', "not valid JSON"),
        (b'{"schema": "simhpc-calibration"}', "not a Chrome trace"),
        (b"[1, 2, 3]", "no complete"),
        (b'"text"', "not a Chrome trace"),
    ],
)
def test_bad_files_raise_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "nope.json")


@pytest.mark.parametrize("content", [b"{not json", b'{"traceEvents": [', b'{"hello": 1}', b"\xff\xfe"])
def test_cli_bad_trace_exits_2_with_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["compare", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "Traceback" not in result.output


def test_gzip_traces(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": [_x("aten::mm", 0, 3)]}).encode()))
    assert read_trace(path).ops[0].name == "aten::mm"


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("*.json*"))


def test_committed_captures_exist() -> None:
    names = {p.name.split(".")[0] for p in _captures()}
    assert {"mlp_t1", "mlp_t2", "transformer_t1", "transformer_t2", "cnn_t1", "cnn_t2"} <= names


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.name)
def test_committed_captures_read(path: Path) -> None:
    trace = read_trace(path)
    assert trace.format == "torch.profiler"
    assert len(trace.steps) == 10
    assert trace.metadata["num_threads"] in (1, 2)
    gemms = [op for op in trace.ops if op.kind in ("gemm", "conv") and op.step is not None]
    assert gemms and all(op.shapes for op in gemms)
    assert all(op.self_time <= op.duration + 1e-12 for op in trace.ops)
    for step in trace.steps:  # ops of a step lie inside it
        inside = [op for op in trace.ops if op.step == step.number and op.kind != "step"]
        assert inside and all(op.start >= step.start - 1e-9 for op in inside)


def test_time_outside_any_op_is_the_steps_uncovered_time() -> None:
    """Nested ops count once; an op on another thread covers its span too; the median over steps."""
    from simhpc.trace.irregularities import outside_ops

    events = [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("aten::linear", 10, 30),
        _x("aten::addmm", 12, 20),  # inside linear: already covered
        _x("aten::relu", 60, 10),
        _x("ProfilerStep#2", 100, 100, cat="user_annotation"),
        _x("aten::mm", 110, 50),
        _x("aten::mm", 150, 30, tid=2),  # overlaps the first by 10 us
        _x("ProfilerStep#3", 200, 100, cat="user_annotation"),
    ]
    trace = parse_trace({"traceEvents": events}, "mem")
    # gaps: 100 - 40 = 60 us, 100 - 70 = 30 us, 100 us: median 60 us
    assert outside_ops(trace) == pytest.approx(60e-6)
