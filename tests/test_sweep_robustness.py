"""Sweeps that meet a hostile file system or dying workers: one-line errors, no lost or stale runs."""

import csv
import os
import signal
import sqlite3
from collections import deque
from concurrent.futures import Future
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.report.sweep_plot import plot_sweep
from simhpc.sweep import ExecutorConfig, executors, load_plan, run_sweep, worker


def scenario(latency: str = "1 us") -> dict:
    return {
        "name": "tiny",
        "seed": 0,
        "network": {"mode": "analytic", "topology": {"kind": "single_switch", "hosts": 4,
                                                     "bandwidth": "100 Gb/s", "latency": latency}},
        "workload": {"kind": "collective", "collective": "all_reduce", "size": "1 MiB", "iterations": 1},
    }


def write(folder: Path, sweep: dict, latency: str = "1 us") -> Path:
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({**scenario(latency), "sweep": sweep}, sort_keys=False), encoding="utf-8")
    return path


def sweep(path: Path, out: Path, *extra: str):
    return CliRunner().invoke(main, ["sweep", str(path), "-o", str(out), "-q", "--workers", "1", *extra])


def csv_keys(out: Path) -> list[str]:
    with (out / "results.csv").open(newline="") as handle:
        return [row["key"] for row in csv.DictReader(handle)]


def stored_count(out: Path) -> int:
    with sqlite3.connect(out / "results.sqlite") as db:
        return db.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_read_only_store_is_one_line_exit_2(tmp_path, monkeypatch):
    path = write(tmp_path, {"seeds": [0, 1]})
    out = tmp_path / "out"
    assert sweep(path, out).exit_code == 0
    store = out / "results.sqlite"
    store.chmod(0o444)
    if os.geteuid() == 0 or os.access(store, os.W_OK):  # root writes anyway: open it read-only instead
        connect = sqlite3.connect

        def read_only(database, *args, **kwargs):
            if Path(database) == store:
                return connect(f"file:{database}?mode=ro", *args, uri=True, **kwargs)
            return connect(database, *args, **kwargs)

        monkeypatch.setattr(sqlite3, "connect", read_only)
    path = write(tmp_path, {"seeds": [0, 1, 2]})
    result = sweep(path, out)
    store.chmod(0o644)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {store}: cannot write to the result store (attempt to write a readonly")
    assert stored_count(out) == 2


def test_export_and_plot_hold_only_the_current_version_of_the_scenario(tmp_path):
    out = tmp_path / "out"
    first = write(tmp_path, {"seeds": [0, 1]})
    old_keys = [point.key for point in load_plan(first).points]
    assert sweep(first, out).exit_code == 0
    assert csv_keys(out) == old_keys

    changed = write(tmp_path, {"seeds": [0, 1]}, latency="2 us")  # a base parameter changed
    new_keys = [point.key for point in load_plan(changed).points]
    assert not set(new_keys) & set(old_keys)
    result = sweep(changed, out)
    assert result.exit_code == 0 and "2 runs: 2 ran (2 ok), 0 already stored" in result.output
    assert csv_keys(out) == new_keys  # not the runs of the first version
    assert stored_count(out) == 4  # the older runs stay in the store, a cache

    figure = plot_sweep(out, "seed", "workload.mean_time_s")
    assert [group.n for group in figure.groups] == [1, 1]
    assert any("left out 2 stored runs of earlier versions" in note for note in figure.notes)
    result = CliRunner().invoke(main, ["plot", str(out), "--x", "seed", "--y", "workload.mean_time_s"])
    assert result.exit_code == 0 and "(2 points)" in result.output

    back = write(tmp_path, {"seeds": [0, 1]})  # back to the first version: served from the store
    result = sweep(back, out)
    assert result.exit_code == 0 and "0 ran, 2 already stored" in result.output
    assert csv_keys(out) == old_keys


def test_a_failure_is_not_masked_by_the_export_on_the_way_out(tmp_path):
    path = write(tmp_path, {"seeds": [0, 1]})
    out = tmp_path / "out"
    assert sweep(path, out).exit_code == 0
    (out / "sweep.yaml.tmp").mkdir()  # the spec cannot be written, and neither can the tables
    (out / "results.csv.tmp").mkdir()
    result = sweep(write(tmp_path, {"seeds": [0, 1, 2]}), out)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [f"error: {out / 'sweep.yaml.tmp'}: Is a directory"]


def test_a_run_failure_mid_sweep_is_reported_not_the_export(tmp_path, monkeypatch):
    from simhpc.sweep import driver
    from simhpc.sweep.errors import SweepError

    path = write(tmp_path, {"seeds": [0, 1, 2]})
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv.tmp").mkdir()
    record = driver.ResultStore.record
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise SweepError("disk gone")
        return record(self, *args, **kwargs)

    monkeypatch.setattr(driver.ResultStore, "record", failing)
    with pytest.raises(SweepError, match="disk gone"):
        run_sweep(load_plan(path), out, ExecutorConfig(workers=1), progress=False)
    assert stored_count(out) == 1  # the run finished before the failure is kept


def _crash_some(data: dict, source: str, outdir: str | None = None) -> worker.RunOutcome:
    """run_point, but the run of seed 1 kills its process (``CRASH``: how; ``ONCE``: first time only)."""
    if data.get("seed") == 1:
        once = os.environ.get("CRASH_ONCE")
        if not once or not os.path.exists(once):
            if once:
                Path(once).touch()
            if os.environ.get("CRASH") == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(7)
    return worker.run_point(data, source, outdir)


@pytest.mark.parametrize(("workers", "how", "cause"), [(1, "exit", "exit code 7"), (2, "exit", "exit code 7"),
                                                       (2, "kill", "signal SIGKILL")])
def test_a_point_that_kills_its_worker_is_stored_as_an_error(tmp_path, monkeypatch, workers, how, cause):
    monkeypatch.setattr(executors, "run_point", _crash_some)  # forked workers inherit it
    monkeypatch.setenv("CRASH", how)
    monkeypatch.delenv("CRASH_ONCE", raising=False)
    path = write(tmp_path, {"seeds": [0, 1, 2, 3, 4]})
    plan = load_plan(path)
    out = tmp_path / "out"
    report = run_sweep(plan, out, ExecutorConfig(workers=workers, start_method="fork"), progress=False)
    assert report.ran == 5 and dict(report.counts) == {"ok": 4, "error": 1}
    [(point, message)] = report.failed
    assert point.seed == 1
    assert message.startswith(f"worker died ({cause}) twice while running this point")
    with sqlite3.connect(out / "results.sqlite") as db:
        statuses = dict(db.execute("SELECT seed, status FROM runs").fetchall())
    assert statuses == {0: "ok", 1: "error", 2: "ok", 3: "ok", 4: "ok"}
    assert len(csv_keys(out)) == 5

    again = run_sweep(plan, out, ExecutorConfig(workers=workers, start_method="fork"), progress=False)
    assert (again.ran, again.skipped, len(again.failed)) == (0, 5, 1)  # stored: not run again


class _StrandedPool:
    """A pool that broke while a run was being submitted: the run stays pending and the pool's
    manager thread is gone (CPython 3.11 marks a pool broken without the lock ``submit`` takes)."""

    _executor_manager_thread = None

    def submit(self, *args: object) -> Future:
        return Future()  # never finishes


def test_runs_a_broken_pool_left_pending_are_suspects_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "POOL_POLL_S", 0.01)
    points = load_plan(write(tmp_path, {"seeds": [0, 1, 2]})).points
    local = executors.LocalExecutor(workers=1, start_method="fork")
    local._pool = _StrandedPool()
    pooled = local._run_pooled(deque(points), "s.yaml", None)
    with pytest.raises(StopIteration) as stopped:
        next(pooled)
    assert [point.seed for point in stopped.value.value] == [0, 1]  # the two in flight; seed 2 waits


def test_a_worker_that_dies_once_is_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "run_point", _crash_some)
    monkeypatch.setenv("CRASH", "exit")
    monkeypatch.setenv("CRASH_ONCE", str(tmp_path / "crashed"))
    path = write(tmp_path, {"seeds": [0, 1, 2, 3]})
    report = run_sweep(load_plan(path), tmp_path / "out", ExecutorConfig(workers=2, start_method="fork"),
                       progress=False)
    assert (tmp_path / "crashed").exists()
    assert report.ran == 4 and dict(report.counts) == {"ok": 4} and not report.failed


def test_a_large_plan_says_it_is_validating(tmp_path: Path, monkeypatch):
    """Validating 100,000 points takes most of a minute: the sweep says so before it is silent."""
    monkeypatch.setattr("simhpc.sweep.plan.MANY_POINTS", 4)
    path = write(tmp_path, {"grid": {"workload.iterations": [1, 2]}, "seeds": [0, 1]})
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep: validating 4 points before any run starts" in result.stderr


def test_points_do_not_share_swept_values(tmp_path: Path):
    """Each point's scenario is its own: a swept mapping is copied, not shared between points."""
    path = write(tmp_path, {"grid": {"workload.algorithm": ["ring", "tree"], "outputs": [{"trace": False}]}})
    plan = load_plan(path)
    first, second = (point.data["outputs"] for point in plan.points)
    assert first == second == {"trace": False} and first is not second


@pytest.mark.parametrize(("damage", "expected"), [
    ("UPDATE runs SET params = '[1, 2]'", "damaged record (params is not a mapping)"),
    ("UPDATE runs SET summary = '{'", "damaged record (Expecting property name"),
    ("UPDATE runs SET summary = NULL", "damaged record (status ok without a summary)"),
    (None, "cannot read the result store (database disk image is malformed)"),
])
def test_a_damaged_store_is_one_line_for_plot_and_sweep(tmp_path: Path, damage, expected):
    path, out = write(tmp_path, {"grid": {"workload.iterations": list(range(1, 41))}}), tmp_path / "out"
    assert sweep(path, out).exit_code == 0
    store = out / "results.sqlite"
    if damage is None:  # pages in the middle of the file overwritten
        with store.open("r+b") as handle:
            handle.seek(5000)
            handle.write(b"\xff" * 4000)
    else:
        with sqlite3.connect(store) as db:
            db.execute(damage)
    for result in (CliRunner().invoke(main, ["plot", str(out), "--x", "workload.iterations",
                                             "--y", "workload.mean_time_s"]), sweep(path, out)):
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [result.stderr.strip()]
        assert result.stderr.startswith(f"error: {store}: ") and expected in result.stderr, result.stderr


def test_a_folder_in_place_of_the_store_is_named(tmp_path: Path):
    (tmp_path / "out" / "results.sqlite").mkdir(parents=True)
    result = CliRunner().invoke(main, ["plot", str(tmp_path / "out"), "--x", "seed", "--y", "workload.mean_time_s"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'out' / 'results.sqlite'}: not a file " \
                                    "(a sweep's result store is an SQLite file)"


def test_a_point_too_large_for_the_host_is_an_error_that_says_so(tmp_path, monkeypatch):
    """A run that exhausts the worker's memory is stored as an error naming the cause (as ``simhpc
    run`` reports it), not as an empty ``MemoryError:``."""
    import simhpc.runner

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(simhpc.runner, "simulate", exhausted)
    plan = load_plan(write(tmp_path, {"seeds": [0]}))
    outcome = worker.run_point(plan.points[0].data, "sweep.yaml")
    assert outcome.status == "error"
    assert outcome.error == "out of memory: too large to simulate on this machine (reduce the counts or sizes)"


@pytest.mark.parametrize(("extra", "path", "expected"), [
    (["--set", "workload.size=2 MiB"], "workload.size",
     "the sweep sets it at every point (sweep.grid: workload.size), so --set 'workload.size=2 MiB' would have "
     "no effect"),
    (["--grid", "workload.iterations=1,2", "--set", "workload.iterations=3"], "workload.iterations",
     "the sweep sets it at every point (sweep.grid: workload.iterations)"),
    (["--set", "sweep.grid.workload.size=[1 MiB]"], "sweep.grid.workload.size",
     "--set cannot name a swept path (its dots would split it): give the values with --grid PATH=V1,V2"),
])
def test_a_set_the_sweep_would_override_or_split_is_refused(tmp_path, extra, path, expected):
    """A ``--set`` of a swept path is replaced at every point; refusing it beats running without it."""
    scenario_file = write(tmp_path, {"grid": {"workload.size": ["1 MiB", "2 MiB"]}})
    result = sweep(scenario_file, tmp_path / "out", *extra)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {scenario_file}: {path}: {expected}"), line
    assert not (tmp_path / "out").exists()


def test_messages_count_one_run_in_the_singular(tmp_path):
    result = CliRunner().invoke(main, ["sweep", str(write(tmp_path, {"seeds": [4]})), "-o", str(tmp_path / "out"),
                                       "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "sweep: 1 run in " in result.stderr and "sweep: 1 run: 1 ran (1 ok)" in result.output
