"""Where a sweep's runs execute: local processes, or a Dask cluster (local or remote).

An executor takes the points still to run and yields ``(point, outcome)`` as each run
finishes, in completion order, so the parent can store every result at once.
"""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
import os
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import forkserver
from typing import Any, Literal

from simhpc.sweep.errors import SweepError
from simhpc.sweep.plan import SweepPoint
from simhpc.sweep.worker import RunOutcome, init_worker, run_point

START_METHODS = ("forkserver", "spawn", "fork")
DASK_MISSING = "the dask executor needs the 'dask' extra: pip install -e '.[dask]' in the simhpc checkout"


@dataclass(frozen=True)
class ExecutorConfig:
    """How to run a sweep.

    Attributes:
        kind: ``local`` (a process pool) or ``dask``.
        workers: processes (local, or the Dask LocalCluster); default: the CPU count.
        scheduler: a Dask scheduler address (``tcp://host:port``); None starts a LocalCluster.
        start_method: how local worker processes start (``forkserver`` preloads simhpc once).
    """

    kind: Literal["local", "dask"] = "local"
    workers: int | None = None
    scheduler: str | None = None
    start_method: str = "forkserver"

    def check(self) -> None:
        """Fail early (before anything is written) if this executor cannot be used here.

        Raises:
            SweepError: unknown kind, or the ``dask`` extra is not installed.
        """
        if self.kind not in ("local", "dask"):
            raise SweepError(f"unknown executor {self.kind!r} (known: local, dask)")
        if self.kind == "local" and self.scheduler:
            raise SweepError("a Dask scheduler address needs the dask executor")
        if self.kind == "dask" and importlib.util.find_spec("distributed") is None:
            raise SweepError(DASK_MISSING)

    @property
    def worker_count(self) -> int:
        """The number of workers to start."""
        return self.workers or os.cpu_count() or 1


class SweepExecutor(ABC):
    """Runs points and yields outcomes as they complete. A context manager."""

    @abstractmethod
    def describe(self) -> str:
        """A short description for messages (``local, 2 processes``)."""

    @abstractmethod
    def run(self, points: Sequence[SweepPoint], source: str,
            outdir: str | None = None) -> Iterator[tuple[SweepPoint, RunOutcome]]:
        """Run every point; yield each one's outcome as soon as it finishes."""

    def __enter__(self) -> SweepExecutor:
        return self

    @abstractmethod
    def __exit__(self, kind: object, *rest: object) -> None:
        """Release the workers."""


def _failed(point: SweepPoint, error: BaseException, where: str) -> RunOutcome:
    return RunOutcome(point.key, "error", None, f"{where}: {type(error).__name__}: {error}", 0.0)


def _init_local_worker(sweep_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    init_worker(sweep_pid)


def _started() -> None:
    """A no-op task: its completion says a worker is up."""


@contextmanager
def _interrupts_held(ignore_ctrl_c: bool = False) -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM while worker processes start, then raise
    KeyboardInterrupt if one came.

    A KeyboardInterrupt raised inside ``Process.start`` leaves a child the pool does not know:
    it outlives the sweep and prints a traceback when it finds the pool's queues gone.
    ``ignore_ctrl_c``: ignore SIGINT instead (a child started by exec inherits only an ignored
    disposition, not a handler; such a Ctrl-C is dropped, not held).
    """
    if threading.current_thread() is not threading.main_thread():  # handlers are the main thread's
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_ctrl_c else hold)
    signal.signal(signal.SIGTERM, hold)
    try:
        yield
    except Exception:
        if received:  # sent to the process group, the signal also killed the processes starting
            raise KeyboardInterrupt from None
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise KeyboardInterrupt


class LocalExecutor(SweepExecutor):
    """A process pool on this machine."""

    def __init__(self, workers: int, start_method: str = "forkserver") -> None:
        if start_method not in START_METHODS:
            raise SweepError(f"unknown start method {start_method!r} (known: {', '.join(START_METHODS)})")
        self.workers = workers
        self.start_method = start_method
        self._pool: ProcessPoolExecutor | None = None

    def describe(self) -> str:
        return f"local, {self.workers} process{'es' if self.workers > 1 else ''}"

    def __enter__(self) -> LocalExecutor:
        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            context.set_forkserver_preload(["simhpc.sweep.warm"])
            # Started with SIGINT ignored, the server and the workers it forks never see Ctrl-C
            # (which is the sweep's to handle), not even while they import.
            with _interrupts_held(ignore_ctrl_c=True):
                forkserver.ensure_running()
        try:
            with _interrupts_held(ignore_ctrl_c=self.start_method == "spawn"):
                self._pool = ProcessPoolExecutor(self.workers, mp_context=context,
                                                 initializer=_init_local_worker, initargs=(os.getpid(),))
                # Start every worker now (one no-op task each): submitting the runs then spawns
                # nothing, so a Ctrl-C during the sweep never lands inside a process start.
                wait([self._pool.submit(_started) for _ in range(self.workers)])
        except KeyboardInterrupt:
            self.__exit__(KeyboardInterrupt)
            raise
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        if kind is None:
            pool.shutdown(wait=True, cancel_futures=True)
            return
        # Interrupted: stop the runs in flight instead of waiting for them. The pool then sees its
        # workers die and fails the pending futures itself (cancelling them first would race it).
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=True)

    def run(self, points: Sequence[SweepPoint], source: str,
            outdir: str | None = None) -> Iterator[tuple[SweepPoint, RunOutcome]]:
        if self._pool is None:
            raise RuntimeError("LocalExecutor.run outside its 'with' block")
        futures = {self._pool.submit(run_point, point.data, source, outdir): point for point in points}
        for future in as_completed(futures):
            point = futures[future]
            try:
                outcome = future.result()
            except BrokenProcessPool:
                raise SweepError(
                    "a worker process died (killed, or out of memory) while running the sweep; "
                    "finished runs are stored, re-run the sweep to resume") from None
            except Exception as error:
                outcome = _failed(point, error, "local executor")
            yield point, outcome


class DaskExecutor(SweepExecutor):
    """A Dask cluster: a ``LocalCluster`` of worker processes, or the scheduler at ``address``.

    Workers of a remote cluster need the same simhpc installed; ``--outputs`` folders are
    written on the workers' file systems.
    """

    def __init__(self, workers: int, address: str | None = None) -> None:
        self.workers = workers
        self.address = address
        self._client: Any = None
        self._cluster: Any = None

    def describe(self) -> str:
        if self.address:
            return f"dask, scheduler {self.address}"
        return f"dask, LocalCluster of {self.workers} process{'es' if self.workers > 1 else ''}"

    def __enter__(self) -> DaskExecutor:
        try:
            import distributed
        except ImportError:
            raise SweepError(DASK_MISSING) from None
        if self.address:
            try:
                self._client = distributed.Client(self.address, timeout="20s")
            except (OSError, TimeoutError, ValueError) as error:
                raise SweepError(f"cannot connect to the Dask scheduler at {self.address}: {error}") from None
            return self
        # Ctrl-C is the sweep's to handle: worker processes started while SIGINT is ignored keep
        # ignoring it (else each prints its traceback and the sweep loses the runs in flight).
        try:
            with _interrupts_held(ignore_ctrl_c=True):
                self._cluster = distributed.LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                    dashboard_address=None, silence_logs=logging.ERROR)  # no warning per run an interrupt cancels
                self._client = distributed.Client(self._cluster)
        except (OSError, RuntimeError, TimeoutError) as error:
            self.__exit__(type(error))
            raise SweepError(f"cannot start a Dask LocalCluster: {error}") from None
        except KeyboardInterrupt:  # a SIGTERM held while the cluster started
            self.__exit__(KeyboardInterrupt)
            raise
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    def run(self, points: Sequence[SweepPoint], source: str,
            outdir: str | None = None) -> Iterator[tuple[SweepPoint, RunOutcome]]:
        if self._client is None:
            raise RuntimeError("DaskExecutor.run outside its 'with' block")
        from distributed import as_completed as dask_as_completed

        points = list(points)
        futures = self._client.map(run_point, [point.data for point in points], source=source, outdir=outdir,
                                   pure=False)
        by_key = {future.key: point for future, point in zip(futures, points)}
        try:
            for future in dask_as_completed(futures):
                point = by_key[future.key]
                try:
                    outcome = future.result()
                except Exception as error:  # a worker died (KilledWorker), or the result was lost
                    outcome = _failed(point, error, "dask executor")
                future.release()  # stored by the caller: a worker lost later need not recompute it
                yield point, outcome
        finally:
            pending = [future for future in futures if not future.done()]
            if pending and self._client is not None:
                self._client.cancel(pending)


def open_executor(config: ExecutorConfig, runs: int | None = None) -> SweepExecutor:
    """The executor ``config`` describes (not started; use it as a context manager).

    ``runs`` caps a local pool's size at the number of runs to do.
    """
    config.check()
    workers = config.worker_count
    if config.kind == "dask":
        return DaskExecutor(workers, config.scheduler)
    return LocalExecutor(max(1, min(workers, runs or workers)), config.start_method)
