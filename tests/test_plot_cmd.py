"""``simhpc plot``: figures and their data from a sweep folder; clear errors for bad requests."""

import csv
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.report.sweep_plot import PlotError, plot_sweep
from simhpc.sweep import ResultStore

SCENARIO = {
    "name": "tiny",
    "seed": 0,
    "network": {"mode": "analytic", "topology": {"kind": "single_switch", "hosts": 4,
                                                 "bandwidth": "100 Gb/s", "latency": "1 us"}},
    "workload": {"kind": "collective", "collective": "all_reduce", "size": "1 MiB", "iterations": 1},
    "sweep": {"grid": {"workload.size": ["1 MiB", "4 MiB", "64 MiB"], "workload.algorithm": ["ring", "tree"]},
              "seeds": [0, 1]},
}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plot")
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False), encoding="utf-8")
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(folder / "out"), "--workers", "2", "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out"


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_line_plot_with_hue(sweep_dir):
    result = CliRunner().invoke(main, ["plot", str(sweep_dir), "--x", "workload.size", "--y",
                                       "workload.mean_time_s", "--hue", "workload.algorithm"])
    assert result.exit_code == 0, result.output
    png, data = sweep_dir / "plot_workload.mean_time_s.png", sweep_dir / "plot_workload.mean_time_s.csv"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read_csv(data)
    assert [(r["workload.algorithm"], r["workload.size"]) for r in rows] == [
        ("ring", "1 MiB"), ("ring", "4 MiB"), ("ring", "64 MiB"), ("tree", "1 MiB"), ("tree", "4 MiB"),
        ("tree", "64 MiB")]
    assert all(r["n"] == "2" for r in rows)
    assert float(rows[0]["x_value"]) == 2**20
    ring = [float(r["mean"]) for r in rows[:3]]
    assert ring == sorted(ring)  # bigger buffers take longer


def test_bar_plot_for_categorical_x_and_note_about_other_params(sweep_dir):
    result = CliRunner().invoke(main, ["plot", str(sweep_dir), "--x", "workload.algorithm", "--y",
                                       "workload.busbw_Bps", "--errorbar", "std", "--name", "bars"])
    assert result.exit_code == 0, result.output
    assert "averaged over other swept parameters too: workload.size" in result.output
    rows = read_csv(sweep_dir / "bars.csv")
    assert [r["workload.algorithm"] for r in rows] == ["ring", "tree"] and rows[0]["n"] == "6"
    filtered = plot_sweep(sweep_dir, "workload.algorithm", "workload.busbw_Bps",
                          where=["workload.size=64 MiB"], name="filtered")
    assert [g.n for g in filtered.groups] == [2, 2] and not any("averaged" in n for n in filtered.notes)
    for spelling in ("64MiB", "67108864", "0.0625 GiB"):  # the same size, however written
        again = plot_sweep(sweep_dir, "workload.algorithm", "workload.busbw_Bps", where=[f"workload.size={spelling}"],
                           name="filtered")
        assert [g.n for g in again.groups] == [2, 2], spelling


@pytest.mark.parametrize(("args", "message"), [
    (["--x", "workload.sizee", "--y", "workload.mean_time_s"], "--x workload.sizee: not a scenario field"),
    (["--x", "workload.size", "--y", "workload.mean"], "--y workload.mean: no such metric"),
    (["--x", "workload.size", "--y", "workload.algorithm"], "--y workload.algorithm: not a number"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--hue", "foo"],
     "--hue foo: not a scenario field"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--where", "workload.size=3 MiB"],
     "no runs match"),
    (["--x", "workload.algorithm", "--y", "workload.mean_time_s", "--kind", "line"], "needs numeric --x"),
    (["--x", "workload", "--y", "workload.mean_time_s"], "--x workload: a section of the scenario, not a field"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--name", ".."], "--name '..': not a file name"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--name", "../out"], "--name '../out': not a file name"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--name", "/tmp/o"], "--name '/tmp/o': not a file name"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--name", ""], "--name '': not a file name"),
    (["--x", "workload.size", "--y", "workload.mean_time_s", "--name", "a\nb"], "--name 'a\\nb': not a file name"),
    (["--x", "workload.size", "--y", "workload"], "--y workload: a section of the summary, not a metric"),
])
def test_bad_requests_are_one_line_exit_2(sweep_dir, args, message):
    result = CliRunner().invoke(main, ["plot", str(sweep_dir), *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output


def test_missing_sweep_dir(tmp_path):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "results.sqlite").write_text("")
    for folder, expected in ((tmp_path, "no sweep results here (no results.sqlite)"),
                             (tmp_path / "nope", "no such folder"), (tmp_path / "a_file", "not a folder"),
                             (tmp_path / "sweep" / "results.sqlite",
                              f"is the result store itself; give the sweep folder, {tmp_path / 'sweep'}")):
        result = CliRunner().invoke(main, ["plot", str(folder), "--x", "a", "--y", "b"])
        assert result.exit_code == 2 and result.stderr.startswith(f"error: {folder}: {expected}"), result.output


def test_error_bars_are_the_95_ci_of_the_mean_over_seeds(tmp_path):
    values = {0: [1.0, 2.0, 3.0], 1: [10.0, 10.0, 13.0]}
    with ResultStore(tmp_path) as store:
        for x, samples in values.items():
            for seed, value in enumerate(samples):
                store.record(f"k{x}{seed}", {"workload.iterations": x + 1}, seed,
                             {"seed": seed, "workload": {"iterations": x + 1}}, "ok",
                             {"status": "ok", "metric": {"t": value}}, None, 0.1)
        store.record("bad", {"workload.iterations": 1}, 9, {"seed": 9, "workload": {"iterations": 1}},
                     "error", None, "boom", 0.1)
    figure = plot_sweep(tmp_path, "workload.iterations", "metric.t")
    first, second = figure.groups
    assert (first.n, first.mean, first.std) == (3, 2.0, 1.0)
    assert math.isclose(first.ci95, 4.302652729911275 * 1.0 / math.sqrt(3))  # t(0.975, 2)
    assert math.isclose(second.mean, 11.0) and math.isclose(second.std, math.sqrt(3))
    assert any("left out 1 runs" in note for note in figure.notes)
    assert plot_sweep(tmp_path, "seed", "metric.t", name="by_seed").groups[0].n == 2
    with pytest.raises(PlotError):
        plot_sweep(tmp_path, "workload.iterations", "metric")


def test_a_run_whose_metric_is_nan_is_left_out_with_a_note(tmp_path):
    """A ratio of nothing in one run (NaN) does not stop the figure; NaN in every run does."""
    with ResultStore(tmp_path) as store:
        for seed, value in enumerate([1.0, 3.0, math.nan]):
            store.record(f"k{seed}", {"workload.iterations": 1}, seed, {"seed": seed, "workload": {"iterations": 1}},
                         "ok", {"status": "ok", "metric": {"t": value, "u": math.nan}}, None, 0.1)
    figure = plot_sweep(tmp_path, "workload.iterations", "metric.t")
    assert [(group.n, group.mean) for group in figure.groups] == [(2, 2.0)]
    assert any(note.startswith("left out 1 runs whose metric.t is not a number (NaN), e.g. k2")
               for note in figure.notes)
    with pytest.raises(PlotError, match=r"--y metric.u: not a number \(nan\)"):
        plot_sweep(tmp_path, "workload.iterations", "metric.u")
