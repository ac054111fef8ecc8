"""The result store: one SQLite database per sweep folder, one durable transaction per run.

``DIR/results.sqlite`` holds a row per finished run, keyed by the run key. Each row is written
in its own transaction with WAL journaling and ``synchronous=FULL``, so a row is either fully
on disk or absent, even if the sweep is killed. Only the sweep's parent process writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from simhpc.sweep.errors import SweepError

STORE_NAME = "results.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    params TEXT NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'oom', 'error')),
    summary TEXT,
    error TEXT,
    wall_s REAL NOT NULL,
    scenario TEXT NOT NULL,
    finished_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plan (
    idx INTEGER PRIMARY KEY,
    key TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class RunRecord:
    """One stored run.

    Attributes:
        key: the run key.
        params: swept path -> value as written in the spec.
        seed: the scenario seed.
        status: ``ok``, ``oom`` or ``error``.
        summary: the run summary, None for errors.
        error: the error text, None if none.
        wall_s: wall-clock seconds the run took.
        scenario: the resolved scenario (JSON data).
    """

    key: str
    params: dict[str, Any]
    seed: int
    status: str
    summary: dict[str, Any] | None
    error: str | None
    wall_s: float
    scenario: dict[str, Any]


def store_path(folder: str | Path) -> Path:
    """Where the store of a sweep folder lives."""
    return Path(folder) / STORE_NAME


def _not_a_sweep_folder(folder: Path) -> str:
    """Why ``folder`` holds no result store, in words."""
    if folder.name == STORE_NAME and folder.is_file():
        return f"is the result store itself; give the sweep folder, {folder.parent}"
    if not folder.exists():
        return "no such folder"
    if not folder.is_dir():
        return "not a folder (give a sweep's output folder)"
    return f"no sweep results here (no {STORE_NAME})"


class ResultStore:
    """A sweep folder's SQLite store. Use as a context manager; the writer holds a folder lock.

    Args:
        folder: the sweep folder (created when writing).
        readonly: open an existing store for reading (no lock; raises if there is none).
    """

    def __init__(self, folder: str | Path, readonly: bool = False) -> None:
        self.folder = Path(folder)
        self.path = store_path(folder)
        self.readonly = readonly
        self._lock: Any = None
        if readonly:
            if self.path.exists() and not self.path.is_file():
                raise SweepError(f"{self.path}: not a file (a sweep's result store is an SQLite file)")
            if not self.path.is_file():
                raise SweepError(f"{self.folder}: {_not_a_sweep_folder(self.folder)}")
            self._db = self._connect()
            try:
                self._check_version()
            except sqlite3.Error as error:
                self.close()
                raise SweepError(f"{self.path}: cannot read the result store ({error})") from None
            except BaseException:
                self.close()
                raise
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self._db = self._connect()
            with self._writing():
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._check_version()
                with self._transaction():
                    for statement in _statements():
                        self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            self.close()
            raise
        sync_folder(self.folder)

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except sqlite3.Error as error:
            raise SweepError(f"{self.path}: cannot open the result store ({error})") from None
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as error:  # no access (permissions, a folder in the way), locked
            db.close()
            raise SweepError(f"{self.path}: cannot open the result store ({error})") from None
        except sqlite3.DatabaseError as error:
            db.close()
            raise SweepError(f"{self.path}: not a sweep result store ({error})") from None
        return db

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn a SQLite failure while writing (read-only file or folder, disk full) into a SweepError."""
        try:
            yield
        except sqlite3.Error as error:
            hint = "; check the permissions of the file and its folder" if "readonly" in str(error) else ""
            raise SweepError(f"{self.path}: cannot write to the result store ({error}){hint}") from None

    def _check_version(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise SweepError(f"{self.path}: store format {version}, this simhpc reads {SCHEMA_VERSION}")
        if version == 0 and self.readonly:
            raise SweepError(f"{self.path}: not a sweep result store")

    def _take_lock(self) -> None:
        handle = (self.folder / ".lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise SweepError(f"{self.folder}: another sweep is writing to this folder") from None
        self._lock = handle

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database and release the folder lock."""
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def statuses(self) -> dict[str, str]:
        """Run key -> status of every stored run."""
        return dict(self._query("SELECT key, status FROM runs"))

    def set_plan(self, keys: Iterable[str]) -> None:
        """Record the current sweep's keys in order (exports list these runs first, in order)."""
        with self._writing(), self._transaction():
            self._db.execute("DELETE FROM plan")
            self._db.executemany("INSERT INTO plan (idx, key) VALUES (?, ?)", enumerate(keys))

    def plan(self) -> list[str]:
        """The keys of the last sweep that wrote here, in sweep order."""
        return [row[0] for row in self._query("SELECT key FROM plan ORDER BY idx")]

    def record(self, key: str, params: dict[str, Any], seed: int, scenario: dict[str, Any], status: str,
               summary: dict[str, Any] | None, error: str | None, wall_s: float,
               replace: bool = False) -> bool:
        """Store one finished run durably (one transaction, fsync'd); return False if already stored.

        ``replace`` overwrites a stored row (used to retry errors).
        """
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        row = (
            key,
            json.dumps(params, separators=(",", ":"), default=str),
            seed,
            status,
            None if summary is None else json.dumps(summary, sort_keys=True),
            error,
            float(wall_s),
            json.dumps(scenario, sort_keys=True, separators=(",", ":")),
            datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        )
        with self._writing(), self._transaction():
            cursor = self._db.execute(
                f"{verb} INTO runs (key, params, seed, status, summary, error, wall_s, scenario, finished_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        return cursor.rowcount > 0

    def records(self) -> list[RunRecord]:
        """Every stored run: the last sweep's runs in sweep order, then any others by key."""
        return self._select(
            " LEFT JOIN plan p ON p.key = r.key ORDER BY p.idx IS NULL, p.idx, r.key")

    def planned_records(self) -> list[RunRecord]:
        """The stored runs of the last sweep's plan, in sweep order (every run if no plan is recorded).

        Runs of earlier versions of the scenario or spec stay in the store (a cache a later sweep
        may hit again) but are not part of the current sweep's results.
        """
        if self._query("SELECT count(*) FROM plan")[0][0] == 0:
            return self.records()
        return self._select(" JOIN plan p ON p.key = r.key ORDER BY p.idx")

    def _select(self, tail: str) -> list[RunRecord]:
        rows = self._query(
            "SELECT r.key, r.params, r.seed, r.status, r.summary, r.error, r.wall_s, r.scenario FROM runs r" + tail)
        return [self._decoded(*row) for row in rows]

    def _decoded(self, key: str, params: Any, seed: Any, status: Any, summary: Any, error: Any, wall_s: Any,
                 scenario: Any) -> RunRecord:
        """A row as a record; a :class:`SweepError` naming the run if a field is not what simhpc writes."""
        try:
            record = RunRecord(key, json.loads(params), seed, status,
                               None if summary is None else json.loads(summary), error, wall_s, json.loads(scenario))
        except (TypeError, ValueError) as failure:  # ValueError: json's decode errors
            raise SweepError(f"{self.path}: run {str(key)[:12]}: damaged record ({failure})") from None
        for name, value in (("params", record.params), ("scenario", record.scenario), ("summary", record.summary)):
            if not isinstance(value, dict) and not (name == "summary" and value is None):
                raise SweepError(f"{self.path}: run {str(key)[:12]}: damaged record ({name} is not a mapping)")
        if record.status != "error" and record.summary is None:
            raise SweepError(f"{self.path}: run {str(key)[:12]}: damaged record (status {record.status} "
                             "without a summary)")
        return record

    def _query(self, sql: str) -> list[Any]:
        """All rows of a read; a :class:`SweepError` if SQLite finds the file damaged."""
        try:
            return self._db.execute(sql).fetchall()
        except sqlite3.DatabaseError as error:
            raise SweepError(f"{self.path}: cannot read the result store ({error}); "
                             "a damaged file: run the sweep into a new folder") from None

    def count(self) -> int:
        """How many runs are stored."""
        return int(self._query("SELECT count(*) FROM runs")[0][0])


def _statements() -> list[str]:
    return [part.strip() for part in _SCHEMA.split(";") if part.strip()]


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on an exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.db.execute("COMMIT")
            return
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already; report the first error
            self.db.execute("ROLLBACK")


def sync_folder(folder: Path) -> None:
    """fsync a folder so a newly created file's directory entry is durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
