"""Multi-thread product points measured with the cores far apart, taken at their near speed-up."""

from __future__ import annotations

import copy
import itertools
import json
import math
from pathlib import Path

import pytest

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import validate
from simhpc.costs.far_points import FAR_RATIO, MIN_POINTS, at_distance, cores_during, far_round_trip
from simhpc.costs.kernels import Gemm
from simhpc.hardware.host import COMMITTED_CALIBRATION

NEAR, FAR = 60e-9, 330e-9
SIDES = (16, 64, 256, 1024)


def _single_s(m: int, n: int, k: int) -> float:
    """A 1-thread product's time: 40 GFLOP/s, less for thin shapes, plus a call's 2 us."""
    return 2e-6 + 2.0 * m * n * k / (40e9 * min(1.0, min(m, n, k) / 64) ** 0.3)


def _speed_up(m: int, n: int, k: int) -> float:
    """What 2 threads near gain: from none on small products to 1.9x on large ones, smoothly."""
    return 1.0 + 0.9 / (1.0 + math.exp(-(math.log2(2.0 * m * n * k) - 20.0) / 2.0))


def _row(m: int, n: int, k: int, threads: int, seconds: float, round_trip: float | None = None) -> dict:
    row = {"blas": "torch", "dtype": "fp32", "layout": "nn", "threads": threads, "batch": 1, "m": m, "n": n, "k": k,
           "time_s": seconds}
    return row if round_trip is None else {**row, "round_trip_s": round_trip}


def _rows(far: dict[tuple[int, int, int], float]) -> list[dict]:
    """1- and 2-thread rows over a grid of shapes; the 2-thread ones in ``far`` (shape -> time
    measured) read far apart, the others near at their speed-up."""
    rows = []
    for m, n, k in itertools.product(SIDES, repeat=3):
        one = _single_s(m, n, k)
        rows.append(_row(m, n, k, 1, one))
        if (m, n, k) in far:
            rows.append(_row(m, n, k, 2, far[(m, n, k)], FAR))
        else:
            rows.append(_row(m, n, k, 2, one / _speed_up(m, n, k), NEAR))
    return rows


class _Cal:
    def __init__(self, probes: dict | None = None, gemm: list[dict] | None = None) -> None:
        self.data = {"probes": probes or {}}
        self.gemm = gemm or []

    def rows(self, section: str) -> list[dict]:
        return self.gemm if section == "gemm" else []


def _two_thread(rows: list[dict], shape: tuple[int, int, int]) -> float:
    return next(r["time_s"] for r in rows if r["threads"] == 2 and (r["m"], r["n"], r["k"]) == shape)


@pytest.mark.parametrize("shape", [(64, 1024, 16), (256, 256, 256), (1024, 16, 1024)])
def test_a_far_point_is_timed_at_its_shapes_near_speed_up(shape: tuple[int, int, int]) -> None:
    near_s = _single_s(*shape) / _speed_up(*shape)
    rows = _rows({shape: 2.5 * near_s})
    estimated, count = at_distance(rows, FAR_RATIO * NEAR, "near", "rbf", 0.3)
    assert count == 1
    assert _two_thread(estimated, shape) == pytest.approx(near_s, rel=0.1)  # smoothed surfaces; measured 2.5x
    assert [r for r in estimated if r["threads"] == 1 or r.get("round_trip_s") == NEAR] == [
        r for r in rows if r["threads"] == 1 or r.get("round_trip_s") == NEAR]  # the others as measured


def test_no_far_point_is_estimated_past_its_thread_count_s_speed_up() -> None:
    """Near points that read 4x their 1-thread time (smoothed surfaces dip apart by that much
    around a layout's narrow products): a far point takes 2 threads' most, half its 1-thread time."""
    shape = (64, 1024, 16)
    rows = [{**r, "time_s": _single_s(r["m"], r["n"], r["k"]) / 4} if r["threads"] == 2 else r
            for r in _rows({shape: _single_s(*shape)})]
    rows = [{**r, "time_s": _single_s(*shape)} if r["threads"] == 2 and (r["m"], r["n"], r["k"]) == shape else r
            for r in rows]
    estimated, count = at_distance(rows, FAR_RATIO * NEAR, "near", "rbf", 0.3)
    assert count == 1
    assert _two_thread(estimated, shape) == pytest.approx(_single_s(*shape) / 2, rel=1e-9)


@pytest.mark.parametrize("shape", [(1, 1024, 1024), (1024, 1, 256)])
def test_a_matrix_vector_product_read_far_keeps_its_one_thread_time(shape: tuple[int, int, int]) -> None:
    """BLAS runs a matrix-vector product on one thread: the cores' distance does not move it, and
    the speed-up of the group's products (near 2x for large ones) is not its."""
    one = 1e-9 * shape[0] * shape[1] * shape[2] / 20
    rows = [*_rows({}), _row(*shape, 1, one), _row(*shape, 2, 0.95 * one, FAR)]
    estimated, count = at_distance(rows, FAR_RATIO * NEAR, "near", "rbf", 0.3)
    assert count == 0
    assert _two_thread(estimated, shape) == 0.95 * one
    with_near_vectors = [*rows, _row(1, 256, 256, 1, 3e-6), _row(1, 256, 256, 2, 3e-6, NEAR)]
    assert at_distance(with_near_vectors, FAR_RATIO * NEAR, "near", "rbf", 0.3)[0] == with_near_vectors


def test_a_far_point_faster_than_its_estimate_and_too_few_near_points_keep_what_was_measured() -> None:
    shape = (256, 256, 256)
    near_s = _single_s(*shape) / _speed_up(*shape)
    assert at_distance(_rows({shape: 0.8 * near_s}), FAR_RATIO * NEAR, "near", "rbf", 0.3)[1] == 0
    sparse = [r for r in _rows({shape: 3 * near_s})
              if r["threads"] == 1 or r.get("round_trip_s") == FAR or r["m"] == r["n"] == 16]
    assert sum(1 for r in sparse if r.get("round_trip_s") == NEAR) < MIN_POINTS
    assert at_distance(sparse, FAR_RATIO * NEAR, "near", "rbf", 0.3) == (sparse, 0)
    assert at_distance(sparse, None, "near", "rbf", 0.3) == (sparse, 0)


def test_for_a_capture_taken_far_apart_near_points_take_the_far_speed_up_within_the_sizes_measured_far() -> None:
    """Small products measured far at 1.5x their near time: a near point among them is timed at
    that slowdown, one larger than any measured far is kept as measured."""
    small = [shape for shape in itertools.product(SIDES, repeat=3) if 2 * math.prod(shape) <= 2 * 256 ** 3]
    far = {shape: 1.5 * _single_s(*shape) / _speed_up(*shape) for shape in small if shape != (64, 256, 64)}
    rows = _rows(far)
    estimated, count = at_distance(rows, FAR_RATIO * NEAR, "far", "rbf", 0.3)
    near_s = _single_s(64, 256, 64) / _speed_up(64, 256, 64)
    assert _two_thread(estimated, (64, 256, 64)) == pytest.approx(1.5 * near_s, rel=0.1)
    large = (1024, 1024, 1024)
    assert _two_thread(estimated, large) == _two_thread(rows, large)
    assert count > 0 and all(after["time_s"] >= before["time_s"] for before, after in zip(rows, estimated, strict=True))
    with pytest.raises(ValueError, match="cores"):
        at_distance(rows, FAR_RATIO * NEAR, "apart", "rbf", 0.3)


def test_a_capture_is_far_when_every_round_trip_it_read_is() -> None:
    cal = _Cal(gemm=[_row(64, 64, 64, 2, 1e-5, 60e-9), _row(64, 64, 64, 1, 1e-5)])
    assert cores_during([330e-9, 340e-9], cal) == "far"
    assert cores_during([330e-9, 70e-9], cal) == "near"  # it moved during the steps
    assert cores_during(None, cal) == "near"
    assert cores_during([330e-9], _Cal()) == "near"  # a calibration without readings: nothing to hold it to


def test_the_far_threshold_comes_from_the_run_or_from_its_rows() -> None:
    rows = [_row(64, 64, 64, 2, 1e-5, 70e-9), _row(64, 64, 128, 2, 2e-5, 340e-9), _row(64, 64, 64, 1, 1e-5)]
    assert far_round_trip(_Cal({"round trip before points": {"fastest_s": 50e-9, "far_threshold": 2.5}}),
                          rows) == pytest.approx(125e-9)
    assert far_round_trip(_Cal(), rows) == pytest.approx(FAR_RATIO * 70e-9)  # a merged file keeps no probe
    assert far_round_trip(_Cal(), [r for r in rows if "round_trip_s" not in r]) is None


def test_compare_times_a_product_measured_far_at_its_near_speed() -> None:
    """The committed calibration with its 2-thread points marked near, but the classifier head's
    (64 x 4096 x 10) measured far at 2.5x its time: it is predicted near again, within 15 %."""
    data = json.loads(Path(COMMITTED_CALIBRATION).read_text(encoding="utf-8"))
    head = Gemm(m=64, n=4096, k=10, dtype="fp32")
    before = CalibratedEfficiency(validate(copy.deepcopy(data), "cal.json"), blas="torch")

    def head_row(row: dict) -> bool:
        return (row.get("blas") == "torch" and row["threads"] == 2 and row["dtype"] == "fp32"
                and row.get("layout", "nn") == "nn" and (row["m"], row["n"], row["k"]) == (64, 4096, 10))

    marked = copy.deepcopy(data)
    rows = [row for row in marked["kernels"]["gemm"] if row["threads"] > 1]
    assert any(head_row(row) for row in rows)
    for row in rows:
        row["round_trip_s"] = FAR if head_row(row) else NEAR
        row["time_s"] *= 2.5 if head_row(row) else 1.0
    far_kept = copy.deepcopy(marked)
    for row in far_kept["kernels"]["gemm"]:
        row.pop("round_trip_s", None)
    after = CalibratedEfficiency(validate(marked, "cal.json"), blas="torch")
    slow = CalibratedEfficiency(validate(far_kept, "cal.json"), blas="torch")
    assert after.products.distance_estimated == 1
    near = before.gemm_fraction(head, 2)  # fractions of peak: higher is faster
    assert after.gemm_fraction(head, 2) == pytest.approx(near, rel=0.15)
    assert slow.gemm_fraction(head, 2) < 0.7 * near  # as measured: far slower


def _read_near(folder: Path) -> Path:
    """The committed calibration with its multi-thread GEMM points read near, written in ``folder``."""
    data = json.loads(Path(COMMITTED_CALIBRATION).read_text(encoding="utf-8"))
    for row in data["kernels"]["gemm"]:
        if row["threads"] > 1:
            row["round_trip_s"] = NEAR
    calibration = folder / "cal.json"
    calibration.write_text(json.dumps(data))
    return calibration


@pytest.mark.parametrize("round_trips, cores", [([330e-9, 340e-9], "far"), ([60e-9, 340e-9], "near"), (None, "near")])
def test_compare_times_products_in_the_state_the_capture_read(tmp_path: Path, round_trips: list | None,
                                                              cores: str) -> None:
    from click.testing import CliRunner

    from simhpc.cli.main import main
    from tests.test_fresh_memory import _op

    calibration = _read_near(tmp_path)
    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000, "cat": "user_annotation"}
    trace = {"traceEvents": [step, _op("aten::mm", 100, 500, [[64, 512], [512, 512]])], "num_threads": 2}
    if round_trips is not None:
        trace["simhpc_capture"] = {"peer_round_trip_s": round_trips}
    path = tmp_path / "mm.json"
    path.write_text(json.dumps(trace))
    result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(calibration), "--json",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cores"] == cores


def test_cores_option_sets_the_state_a_trace_does_not_record(tmp_path: Path) -> None:
    """A 2-thread trace without round trips is timed with the cores near, and its report says how to
    time it far apart; ``--cores far`` does, with the far points of a calibration that read both
    (on the Zen 5 guest at 4.5 GHz a 64 x 512 x 512 product took longer far apart), and overrides
    what a capture recorded."""
    from click.testing import CliRunner

    from simhpc.cli.main import main
    from tests.test_fresh_memory import _op

    calibration = Path(COMMITTED_CALIBRATION).parent / "epyc-zen5-4.5ghz.json"
    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000, "cat": "user_annotation"}
    trace = {"traceEvents": [step, _op("aten::mm", 100, 500, [[64, 512], [512, 512]])], "num_threads": 2}
    path = tmp_path / "mm.json"
    path.write_text(json.dumps(trace))

    def compare(*options: str) -> tuple[dict, str]:
        args = ["compare", str(path), "--calibration", str(calibration), "-o", str(tmp_path / "out"), *options]
        text = CliRunner().invoke(main, args)
        result = CliRunner().invoke(main, [*args, "--json"])
        assert result.exit_code == 0 and text.exit_code == 0, result.output
        return json.loads(result.stdout), " ".join(text.output.split())

    near, said = compare()
    assert (near["cores"], near["cores_from"]) == ("near", "default")
    assert "--cores far times them far apart" in said
    far, said = compare("--cores", "far")
    assert (far["cores"], far["cores_from"]) == ("far", "option")
    assert "the cores far apart, as --cores says" in said
    assert far["predicted_total_s"] > near["predicted_total_s"]
    trace["simhpc_capture"] = {"peer_round_trip_s": [330e-9, 340e-9]}
    path.write_text(json.dumps(trace))
    assert compare()[0]["cores"] == "far"
    assert compare("--cores", "near")[0]["cores"] == "near"


@pytest.mark.parametrize("threads", [1, 2])
def test_the_report_names_the_cores_state_only_for_a_multi_thread_trace(tmp_path: Path, threads: int) -> None:
    """A 1-thread trace is timed from 1-thread points: its report does not say in which state the
    multi-thread ones were taken."""
    from click.testing import CliRunner

    from simhpc.cli.main import main
    from tests.test_fresh_memory import _op

    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000, "cat": "user_annotation"}
    trace = {"traceEvents": [step, _op("aten::mm", 100, 500, [[64, 512], [512, 512]])], "num_threads": threads,
             "simhpc_capture": {"peer_round_trip_s": [330e-9, 340e-9]}}
    path = tmp_path / "mm.json"
    path.write_text(json.dumps(trace))
    result = CliRunner().invoke(main, ["compare", str(path), "--calibration", str(_read_near(tmp_path)),
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert ("the cores far apart" in " ".join(result.output.split())) == (threads > 1)
