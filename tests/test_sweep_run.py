"""Running sweeps: every result stored once, errors recorded, resume, SIGKILL, local == dask."""

import contextlib
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.sweep import ExecutorConfig, ResultStore, load_plan, run_point, run_sweep
from simhpc.sweep.errors import SweepError
from simhpc.sweep.export import flatten
from simhpc.sweep.progress import SweepProgress

ROOT = Path(__file__).resolve().parents[1]


def scenario(hosts: int = 4, iterations: int = 1) -> dict:
    return {
        "name": "tiny",
        "seed": 0,
        "network": {"mode": "analytic", "topology": {"kind": "single_switch", "hosts": hosts,
                                                     "bandwidth": "100 Gb/s", "latency": "1 us"}},
        "workload": {"kind": "collective", "collective": "all_reduce", "size": "1 MiB",
                     "iterations": iterations},
    }


def write(folder: Path, sweep: dict, **base) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({**scenario(**base), "sweep": sweep}, sort_keys=False), encoding="utf-8")
    return path


def rows(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / "results.sqlite") as db:
        return db.execute("SELECT key, status, summary, error FROM runs ORDER BY key").fetchall()


def test_worker_catches_everything():
    outcome = run_point(scenario(), "x.yaml")
    assert outcome.status == "ok" and outcome.error is None and len(outcome.key) == 64
    assert outcome.summary["workload"]["ranks"] == 4
    bad = run_point({**scenario(), "workload": {**scenario()["workload"], "ranks": 9}}, "x.yaml")
    assert bad.status == "error" and "ranks" in bad.error and bad.summary is None
    broken = run_point({"workload": 1}, "x.yaml")
    assert broken.status == "error" and broken.key == ""


def test_failing_run_is_recorded_others_complete_and_resume_skips(tmp_path):
    path = write(tmp_path, {"grid": {"workload.ranks": [2, 3, 4]}, "seeds": [0, 1]})
    out = tmp_path / "out"
    plan = load_plan(path)
    # The two ranks=4 runs fail at run time: their output folders cannot be created.
    (out / "runs").mkdir(parents=True)
    blocked = [point.key for point in plan.points if point.params["workload.ranks"] == 4]
    for key in blocked:
        (out / "runs" / key).write_text("in the way")
    runner = CliRunner()
    first = runner.invoke(main, ["sweep", str(path), "-o", str(out), "--workers", "2", "--outputs"])
    assert first.exit_code == 1, first.output  # a run raised: recorded, the sweep went on
    stored = rows(out)
    assert [r[1] for r in stored].count("ok") == 4 and [r[1] for r in stored].count("error") == 2
    assert sorted(r[0] for r in stored if r[1] == "error") == sorted(blocked)
    assert all("FileExistsError" in r[3] for r in stored if r[1] == "error")
    assert "6 runs: 6 ran (2 error, 4 ok)" in first.output

    report = run_sweep(plan, out, ExecutorConfig(workers=1), progress=False)
    assert (report.ran, report.skipped, len(report.failed)) == (0, 6, 2)
    assert rows(out) == stored  # nothing rerun or rewritten

    for key in blocked:  # the fix: retry-errors reruns only the errors
        (out / "runs" / key).unlink()
    retried = run_sweep(plan, out, ExecutorConfig(workers=1), retry_errors=True, progress=False,
                        run_outputs=True)
    assert retried.ran == 2 and [r[1] for r in rows(out)] == ["ok"] * 6
    assert all((out / "runs" / key / "summary.json").exists() for key in blocked)

    csv_lines = (out / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 7
    header = csv_lines[0].split(",")
    assert header[:4] == ["key", "status", "seed", "error"]  # no wall-clock time: the same runs, the same bytes
    assert "param.workload.ranks" in header and "workload.mean_time_s" in header
    assert [line.split(",")[2] for line in csv_lines[1:]] == ["0", "1"] * 3  # sweep order
    saved = yaml.safe_load((out / "sweep.yaml").read_text())
    assert saved["sweep"] == {"grid": {"workload.ranks": [2, 3, 4]}, "seeds": [0, 1]} and saved["runs"] == 6


def test_second_writer_is_refused(tmp_path):
    with ResultStore(tmp_path / "out"):
        path = write(tmp_path, {"seeds": [0]})
        result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "another sweep is writing" in result.output


def test_plain_progress_lines():
    stream = io.StringIO()
    with SweepProgress(20, interactive=False, stream=stream) as bar:
        for index in range(20):
            bar.advance("error" if index == 3 else "ok")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10  # every 10%
    assert lines[-1].startswith("sweep: 20/20 runs done (1 error, 19 ok)")
    assert "elapsed" in lines[-1] and "0.0 s" not in stream.getvalue()  # sub-second runs in us or ms


def test_flatten_keeps_scalars():
    assert flatten({"a": 1, "b": {"c": "x", "d": [1, 2], "e": None}}) == {"a": 1, "b.c": "x", "b.e": None}


def _sweep_until_stored(tmp_path: Path, runs: int) -> tuple[subprocess.Popen, list[str], Path, Path]:
    """A 60-run sweep in a subprocess (its own session), returned once ``runs`` are stored."""
    sizes = [f"{n} MiB" for n in range(1, 16)]
    path = write(tmp_path, {"grid": {"workload.size": sizes}, "seeds": [0, 1, 2, 3]}, hosts=16, iterations=3)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "simhpc", "sweep", str(path), "-o", str(out), "--workers", "2", "-q"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    deadline = time.monotonic() + 60
    stored = 0
    while time.monotonic() < deadline and process.poll() is None:
        if (out / "results.sqlite").exists():
            try:
                with sqlite3.connect(out / "results.sqlite", timeout=5) as db:
                    stored = db.execute("SELECT count(*) FROM runs").fetchone()[0]
            except sqlite3.OperationalError:
                stored = 0
        if stored >= runs:
            break
        time.sleep(0.02)
    return process, command, path, out


def test_sigterm_stops_a_sweep_like_ctrl_c(tmp_path):
    process, _, _, out = _sweep_until_stored(tmp_path, 3)
    try:
        assert process.poll() is None, process.communicate()
        os.kill(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert b"interrupted; finished runs are stored" in stderr and b"Traceback" not in stderr
    with sqlite3.connect(out / "results.sqlite") as db:
        stored = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert (out / "results.csv").read_text().count("\n") == stored + 1  # exported on the way out
    assert not list(out.glob("*.tmp"))


def test_ctrl_c_while_workers_start_stops_cleanly(tmp_path):
    """Ctrl-C to the whole process group (as a terminal sends it) while the worker processes
    start: exit 130 and no traceback from the sweep or from a half-started worker."""
    sizes = [f"{n} MiB" for n in range(1, 16)]  # 60 runs: seconds, not over before the signal
    path = write(tmp_path, {"grid": {"workload.size": sizes}, "seeds": [0, 1, 2, 3]}, hosts=16, iterations=3)
    command = [sys.executable, "-m", "simhpc", "sweep", str(path), "-o", str(tmp_path / "out"), "--workers", "2"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        seen = b""
        while b"running" not in seen:  # the line printed just before the workers start
            line = process.stdout.readline()
            assert line, seen
            seen += line
        time.sleep(0.3)  # past the server's start (SIGINT ignored there), into the workers' (~1 s)
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    output = seen + output
    assert process.returncode == 130, output
    assert b"interrupted; finished runs are stored" in output and b"Traceback" not in output


def test_points_the_built_machine_rejects_stop_the_sweep_before_any_run(tmp_path):
    path = write(tmp_path, {"grid": {"network.topology.hosts": [16, 1]}})
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "sweep.grid.network.topology.hosts: the topology has 1 endpoint; a collective needs at least 2 ranks" in (
        result.output)
    assert not (tmp_path / "out").exists()


def test_sigkill_mid_sweep_then_resume_stores_every_run_once(tmp_path):
    total = 60
    process, command, path, out = _sweep_until_stored(tmp_path, 3)
    try:
        assert process.poll() is None, process.communicate()
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        # the workers notice their parent is gone and exit
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("worker processes outlived the killed sweep")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        before = dict(db.execute("SELECT key, summary FROM runs").fetchall())
    assert 3 <= len(before) < total

    again = CliRunner().invoke(main, command[3:])  # the same command, resumed
    assert again.exit_code == 0, again.output
    ran = total - len(before)
    assert f"{total} runs: {ran} ran ({ran} ok), {len(before)} already stored" in again.output
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        final = db.execute("SELECT key, status, summary, error, wall_s FROM runs").fetchall()
    keys = [row[0] for row in final]
    assert sorted(keys) == sorted(point.key for point in load_plan(path).points)  # each run exactly once
    for key, status, summary, error, wall_s in final:
        assert status == "ok" and error is None and wall_s > 0
        assert json.loads(summary)["workload"]["iterations_done"] == 3
        if key in before:
            assert summary == before[key]  # finished rows untouched


def test_local_and_dask_give_identical_results(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = {"workload.size": ["1 MiB", "3 MiB"], "workload.algorithm": ["ring", "tree"]}
    path = write(tmp_path, {"grid": grid, "seeds": [0, 1]}, hosts=8)
    runner = CliRunner()
    local = runner.invoke(main, ["sweep", str(path), "-o", str(tmp_path / "local"), "--workers", "2", "-q"])
    assert local.exit_code == 0, local.output
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        remote = runner.invoke(main, ["sweep", str(path), "-o", str(tmp_path / "dask"), "--executor", "dask",
                                      "--scheduler", cluster.scheduler_address, "-q"])
    assert remote.exit_code == 0, remote.output
    local_rows, dask_rows = rows(tmp_path / "local"), rows(tmp_path / "dask")
    assert len(local_rows) == 8 and local_rows == dask_rows


@pytest.mark.parametrize("answer", [None, b"SSH-2.0-OpenSSH_9.6\r\n"], ids=["silent", "not-dask"])
def test_a_scheduler_address_that_is_not_a_dask_scheduler_fails_in_bounded_time(monkeypatch, answer):
    """A service that accepts the connection and then says nothing (or something else than Dask)
    held the sweep for ever (or was reported as running out of memory): now one error, in time."""
    distributed = pytest.importorskip("distributed")
    from simhpc.sweep import executors

    monkeypatch.setattr(executors, "CONNECT_S", 1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            if answer is not None:
                connection.sendall(answer * 64)

    threading.Thread(target=serve, daemon=True).start()
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(SweepError, match=f"cannot connect to the Dask scheduler at {address}: "):
            executors._connect(distributed, address)
    finally:
        listener.close()
        for connection in accepted:
            connection.close()


def test_parquet_export_when_pyarrow_is_installed(tmp_path):
    pytest.importorskip("pyarrow")
    from simhpc.sweep.export import write_parquet

    with ResultStore(tmp_path) as store:
        store.record("k", {"workload.size": "1 MiB"}, 0, {"seed": 0}, "ok", {"status": "ok", "t": 1.5}, None,
                     0.1)
        records = store.records()
    import pyarrow.parquet as pq

    table = pq.read_table(write_parquet(records, tmp_path / "r.parquet"))
    assert table.column("t").to_pylist() == [1.5]


def test_sweep_folder_blocked_by_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder")
    path = write(tmp_path, {"seeds": [0, 1]})
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(blocker), "-q", "--workers", "1"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"error: {blocker}: a file is in the way of a folder to write"]


def test_seed_too_large_for_the_store_fails_up_front(tmp_path):
    path = write(tmp_path, {"seeds": [0, 2**64]})
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 2, result.output
    assert "sweep.seeds: seeds must be integers >= 0 (at most 9223372036854775807), got 18446744073709551616" \
        in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_simulated_oom_has_its_message_in_the_table_and_dict_values_are_json():
    from simhpc.sweep.export import table
    from simhpc.sweep.store import RunRecord

    message = "simulated out-of-memory on n0.gpu0: activations of F4@s0 needs 360 MiB"
    record = RunRecord("k", {"workload.schedule": {"kind": "prt", "k": 2}}, 0, "oom",
                       {"status": "oom", "error": {"device": "n0.gpu0", "message": message}}, None, 1.0, {})
    _, [row] = table([record])
    assert row["error"] == message
    assert row["param.workload.schedule"] == '{"k": 2, "kind": "prt"}'
