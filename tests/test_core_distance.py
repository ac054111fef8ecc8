"""Where the two cores were during a capture against during its calibration (simhpc.trace.core_distance)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from simhpc.cli.main import main
from simhpc.costs.calibration_file import load_calibration
from simhpc.trace.core_distance import calibration_round_trip, capture_round_trips, distance_warning
from simhpc.trace.readers import TraceError, parse_trace

HOST = Path(__file__).resolve().parents[1] / "validation" / "calibration" / "host.json"
EVENTS = [
    {"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000, "cat": "user_annotation"},
    {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 500, "cat": "cpu_op",
     "args": {"Input Dims": [[64, 512], [512, 256]], "Input type": ["float", "float"]}},
]


def _trace(readings: object, threads: int = 2) -> dict:
    return {"traceEvents": EVENTS, "num_threads": threads,
            "simhpc_capture": {"model": "toy", "threads": threads, "peer_round_trip_s": readings}}


def test_capture_round_trips_are_read_and_checked() -> None:
    assert capture_round_trips(parse_trace(_trace([60e-9, 330e-9]))) == [60e-9, 330e-9]
    assert capture_round_trips(parse_trace({"traceEvents": EVENTS})) is None
    assert capture_round_trips(parse_trace({"traceEvents": EVENTS, "simhpc_capture": {"model": "toy"}})) is None
    for bad in ([], ["60 ns"], [0.0], [-1e-9], [True], [2.0], 6e-8, None):
        with pytest.raises(TraceError, match=r"simhpc_capture\.peer_round_trip_s"):
            capture_round_trips(parse_trace(_trace(bad)))


def test_calibration_round_trip_is_the_median_its_kept_points_read() -> None:
    """The median of the rows' ``round_trip_s`` (the readings before the measurements kept), else
    the probe at the start of the run, else None."""
    cal = load_calibration(HOST)
    start = cal.data["probes"]["peer round trip"]["round_trip_s"]
    assert calibration_round_trip(cal) == start  # a file without readings before its points
    rows = [{"threads": 2, "time_s": 1.0, "round_trip_s": reading} for reading in (60e-9, 61e-9, 330e-9)]
    read = {**cal.data["kernels"], "extra": rows}
    assert calibration_round_trip(replace(cal, data={**cal.data, "kernels": read})) == 61e-9
    assert calibration_round_trip(replace(cal, data={**cal.data, "probes": {}})) is None


def test_distance_warning_needs_two_threads_and_cores_twice_as_far_either_way() -> None:
    far = distance_warning([70e-9, 330e-9], 60e-9, threads=2)
    assert far is not None and "70 ns and 330 ns" in far and "60 ns" in far and "during the capture" in far
    assert distance_warning([70e-9, 330e-9], 60e-9, threads=1) is None
    slow = distance_warning([50e-9, 55e-9], 320e-9, threads=2)  # the calibration's cores were the far ones
    assert slow is not None and "farther apart during the calibration" in slow and "too slow" in slow
    assert distance_warning([70e-9, 115e-9], 60e-9, threads=2) is None  # under 2x
    assert distance_warning(None, 60e-9, threads=2) is None
    assert distance_warning([330e-9], None, threads=2) is None


def test_compare_reports_where_the_cores_were(tmp_path: Path) -> None:
    """``--json`` carries both round trips; a capture with the cores far apart warns, a malformed
    record is a clear error (exit status 2)."""
    calibration = load_calibration(HOST).data["probes"]["peer round trip"]["round_trip_s"]
    for name, readings, warned in (("near", [calibration, calibration], False),
                                   ("far", [calibration, 3 * calibration], True)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(_trace(readings)))
        result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(HOST), "--json",
                                           "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["capture_round_trips_s"] == readings
        assert summary["calibration_round_trip_s"] == calibration
        assert any("round trip between two cores" in text for text in summary["warnings"]) is warned
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_trace(["far"])))
    result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(HOST), "-o", str(tmp_path / "b")])
    assert result.exit_code == 2 and "simhpc_capture.peer_round_trip_s" in result.output
    assert "Traceback" not in result.output


def test_capture_keeps_the_repeat_taken_with_the_cores_nearer(tmp_path: Path) -> None:
    """``capture.py``'s min-of-N rule: at 2 threads a repeat taken with the cores over twice as far
    apart never replaces one taken nearer, whichever is faster; otherwise (and at 1 thread) the faster wins."""
    pytest.importorskip("torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("capture", HOST.parents[1] / "traces" / "capture.py")
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)

    def written(name: str, step_us: float, readings: list[float] | None) -> Path:
        steps = [{"ph": "X", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": i * 1e5, "dur": step_us}
                 for i in range(3)]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"traceEvents": steps, "simhpc_capture": {"peer_round_trip_s": readings}}))
        return path

    near_slow, far_fast = written("near", 30e3, [60e-9, 65e-9]), written("far", 28e3, [60e-9, 330e-9])
    assert not capture._better(far_fast, near_slow, threads=2)
    assert capture._better(near_slow, far_fast, threads=2)
    assert capture._better(far_fast, near_slow, threads=1)
    assert capture._better(written("close", 29e3, [100e-9, 110e-9]), near_slow, threads=2)
    assert capture._better(written("unprobed", 29e3, None), near_slow, threads=2)
    assert capture.median_step_s(near_slow) == pytest.approx(0.03)
