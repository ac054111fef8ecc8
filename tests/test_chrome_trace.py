"""The Chrome trace writer as Perfetto reads it: whole nanoseconds, no partially overlapping slices."""

import math
from pathlib import Path

import pytest

from simhpc.engine.recorder import TraceRecorder
from simhpc.errors import SimhpcError
from simhpc.report.gantt import in_flight_waits, pipeline_spans, plot_gantt
from simhpc.runner import simulate
from simhpc.scenario.loader import load_scenario
from simhpc.trace.chrome import chrome_events, write_chrome_trace
from simhpc.trace.readers import read_chrome_trace


def perfetto_ns(value_us: float) -> int:
    """What Perfetto's JSON importer makes of a ts or dur in microseconds: llround(value * 1000)."""
    return math.floor(value_us * 1000.0 + 0.5)


def test_touching_spans_stay_disjoint_in_perfetto_nanoseconds():
    """Perfetto rounds ts and dur to nanoseconds separately and drops a complete event that starts
    before the previous one on its track ends and ends after it
    (slice_drop_overlapping_complete_event): back-to-back spans must not overlap after rounding."""
    recorder = TraceRecorder()
    track = recorder.track("n0.gpu0", "compute")
    t = 0.0
    for _ in range(200):  # sub-nanosecond boundaries, as simulated times have
        end = t + 1.2345678e-6
        track.span("op", t, end)
        track.span("profile op", end, end + 2e-5)
        t = end + 2e-5
    spans = [event for event in chrome_events(recorder) if event["ph"] == "X"]
    previous_end = None
    for event in spans:
        start = perfetto_ns(event["ts"])
        end = start + perfetto_ns(event["dur"])
        if previous_end is not None:
            assert start >= previous_end, (event, previous_end)
        previous_end = end


def test_span_ends_are_kept_to_the_nanosecond():
    recorder = TraceRecorder()
    recorder.track("p", "t").span("op", 1.0000000004, 2.0000000006)
    (event,) = [event for event in chrome_events(recorder) if event["ph"] == "X"]
    assert perfetto_ns(event["ts"]) == 1_000_000_000
    assert perfetto_ns(event["ts"]) + perfetto_ns(event["dur"]) == 2_000_000_001


def test_a_written_trace_reads_back_as_its_spans(tmp_path):
    """A finished run's trace.json gives back its tracks and spans (to the nanosecond), so its
    Gantt chart is drawn without simulating again; a file that is no trace is a one-line error."""
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "pipeline_bert_base.yaml"
    recorder = simulate(load_scenario(scenario, ["workload.iterations=1"]), str(scenario)).sim.trace
    write_chrome_trace(recorder, tmp_path / "trace.json")
    read = read_chrome_trace(tmp_path / "trace.json")
    for rows in (pipeline_spans, in_flight_waits):  # the ops, and the waits for bytes in flight
        original, again = rows(recorder), rows(read)
        assert list(original) == list(again) and len(original) == 8
        for device, spans in original.items():
            assert [(s.name, s.category, s.args) for s in spans] == [(s.name, s.category, s.args)
                                                                     for s in again[device]]
            assert all(abs(a.start - b.start) < 1e-9 and abs(a.end - b.end) < 1e-9
                       for a, b in zip(spans, again[device]))
    plot_gantt(read, tmp_path / "gantt.png")
    assert (tmp_path / "gantt.png").stat().st_size > 0
    (tmp_path / "list.json").write_text('{"traceEvents": 3}')
    with pytest.raises(SimhpcError, match="not a Chrome trace"):
        read_chrome_trace(tmp_path / "list.json")
