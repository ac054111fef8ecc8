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
import sys
import threading
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Collection, Generator, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import forkserver
from typing import Any, Literal

from simhpc.sweep.errors import SweepError
from simhpc.sweep.plan import SweepPoint
from simhpc.sweep.worker import RunOutcome, init_worker, run_point

START_METHODS = ("forkserver", "spawn", "fork")
MAX_WORKER_DEATHS = 2
"""A point whose worker process dies this many times is stored as an error."""
POOL_POLL_S = 1.0
"""How often a sweep waiting on its pool checks that the pool can still finish its runs."""
DASK_MISSING = (f"the dask executor needs the 'dask' extra: {sys.executable} -m pip install -e '.[dask]' "
                "in the simhpc checkout")


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
            SweepError: unknown kind, the ``dask`` extra is not installed, or an empty scheduler
                address or one whose port is out of range.
        """
        if self.kind not in ("local", "dask"):
            raise SweepError(f"unknown executor {self.kind!r} (known: local, dask)")
        if self.kind == "local" and self.scheduler:
            raise SweepError("a Dask scheduler address needs the dask executor")
        if self.kind == "dask" and importlib.util.find_spec("distributed") is None:
            raise SweepError(DASK_MISSING)
        if self.scheduler is not None:
            port = self.scheduler.rsplit(":", 1)[-1]
            if not self.scheduler.strip() or (port.isdigit() and not 0 < int(port) < 65536):
                raise SweepError(f"Dask scheduler address {self.scheduler!r}: expected tcp://HOST:PORT, "
                                 "a port from 1 to 65535")

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
    """A process pool on this machine.

    A worker process that dies (killed, out of memory, a crash in a run) breaks the pool and
    every run in flight. Those runs are then run again one at a time, each in a process of its
    own, which tells the point that kills its process from the ones that were only beside it;
    a point whose process dies ``MAX_WORKER_DEATHS`` times is stored as an error and the sweep
    goes on in a fresh pool.
    """

    def __init__(self, workers: int, start_method: str = "forkserver") -> None:
        if start_method not in START_METHODS:
            raise SweepError(f"unknown start method {start_method!r} (known: {', '.join(START_METHODS)})")
        self.workers = workers
        self.start_method = start_method
        self._pool: ProcessPoolExecutor | None = None
        self._context: Any = None

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
        self._context = context
        self._start_pool()
        return self

    def _start_pool(self) -> None:
        """Start the pool and every one of its workers."""
        try:
            with _interrupts_held(ignore_ctrl_c=self.start_method == "spawn"):
                self._pool = ProcessPoolExecutor(self.workers, mp_context=self._context,
                                                 initializer=_init_local_worker, initargs=(os.getpid(),))
                # Start every worker now (one no-op task each): submitting the runs then spawns
                # nothing, so a Ctrl-C during the sweep never lands inside a process start.
                _wait(self._pool, [self._pool.submit(_started) for _ in range(self.workers)], ALL_COMPLETED)
        except KeyboardInterrupt:
            self.__exit__(KeyboardInterrupt)
            raise

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
        queue = deque(points)
        deaths: Counter[str] = Counter()
        idle_breaks = 0
        while queue:
            if self._pool is None:
                self._start_pool()
            before = len(queue)
            suspects = yield from self._run_pooled(queue, source, outdir)
            if suspects is None:
                idle_breaks = idle_breaks + 1 if len(queue) == before else 1
                if idle_breaks >= MAX_WORKER_DEATHS:
                    raise SweepError("the sweep's worker processes die before they run anything "
                                     "(out of memory?); finished runs are stored, re-run the sweep to resume")
                continue
            if not suspects:
                continue
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)
            if len(suspects) == 1:  # alone in flight: its run is what killed the worker
                deaths[suspects[0].key] += 1
            for point in suspects:
                yield point, self._run_alone(point, source, outdir, deaths)

    def _run_pooled(self, queue: deque[SweepPoint], source: str, outdir: str | None,
                    ) -> Generator[tuple[SweepPoint, RunOutcome], None, list[SweepPoint] | None]:
        """Run points off ``queue`` in the pool until it is empty or the pool breaks.

        At most two runs per worker (one running, one queued) are in flight, so a broken pool
        names the few points that may have killed it. Returns those points (none if the pool did
        not break), or None if it broke with no run in flight.
        """
        pool = self._pool
        assert pool is not None
        in_flight: dict[Future[RunOutcome], SweepPoint] = {}
        suspects: list[SweepPoint] = []
        while queue or in_flight:
            while queue and not suspects and len(in_flight) < 2 * self.workers:
                point = queue.popleft()
                try:
                    in_flight[pool.submit(run_point, point.data, source, outdir)] = point
                except BrokenProcessPool:
                    queue.appendleft(point)
                    break
            if not in_flight:
                break
            done = _wait(pool, in_flight, FIRST_COMPLETED)
            if not done:  # the pool can no longer finish them
                suspects.extend(in_flight.values())
                in_flight.clear()
            for future in sorted(done, key=lambda future: in_flight[future].index):
                point = in_flight.pop(future)
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    suspects.append(point)
                    continue
                except Exception as error:
                    outcome = _failed(point, error, "local executor")
                yield point, outcome
        if queue and not suspects:  # broken with no run in flight (a worker killed while idle)
            self._pool = None
            pool.shutdown(wait=True)
            return None
        return sorted(suspects, key=lambda point: point.index)

    def _run_alone(self, point: SweepPoint, source: str, outdir: str | None,
                   deaths: Counter[str]) -> RunOutcome:
        """Run one point in a process of its own, again if the process dies, up to the limit."""
        while True:
            outcome, exitcode = self._run_in_own_process(point, source, outdir)
            if outcome is not None:
                return outcome
            deaths[point.key] += 1
            count = deaths[point.key]
            if count >= MAX_WORKER_DEATHS:
                times = "twice" if count == 2 else f"{count} times"
                return RunOutcome(point.key, "error", None,
                                  f"worker died ({_death_cause(exitcode)}) {times} while running this point "
                                  "(a crash, or killed: out of memory?); stored as an error so the sweep "
                                  "goes on", 0.0)

    def _run_in_own_process(self, point: SweepPoint, source: str,
                            outdir: str | None) -> tuple[RunOutcome | None, int | None]:
        """(outcome, None), or (None, exit code) if the process died before it sent an outcome."""
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_run_in_process,
                                        args=(writer, os.getpid(), point.data, source, outdir))
        try:
            with _interrupts_held(ignore_ctrl_c=self.start_method == "spawn"):
                process.start()
            writer.close()
            try:
                outcome: RunOutcome | None = reader.recv()
            except EOFError:  # the process ended without sending its outcome
                outcome = None
            process.join()
        except BaseException:
            if process.pid is not None:
                process.terminate()
                process.join()
            raise
        finally:
            writer.close()
            reader.close()
        return outcome, (None if outcome is not None else process.exitcode)


def _run_in_process(writer: Any, sweep_pid: int, data: dict[str, Any], source: str,
                    outdir: str | None) -> None:
    """Body of a process running one point alone: run it, send the outcome to the sweep."""
    _init_local_worker(sweep_pid)
    writer.send(run_point(data, source, outdir))
    writer.close()


def _wait(pool: ProcessPoolExecutor, futures: Collection[Future[Any]], return_when: str) -> set[Future[Any]]:
    """``concurrent.futures.wait`` with no timeout, except that it gives up on a pool that can no
    longer finish the futures (:func:`_stranded`); returns those done."""
    while True:
        done, pending = wait(futures, timeout=POOL_POLL_S, return_when=return_when)
        if (done and return_when == FIRST_COMPLETED) or not pending or _stranded(pool):
            return done


def _stranded(pool: ProcessPoolExecutor) -> bool:
    """Whether the pool's manager thread is gone, so that the runs still pending never finish.

    A sweep test of a clean clone hung in that state once: no worker, no manager thread, a run
    pending after a worker's death. One way there: CPython 3.11 marks a pool broken without the
    lock ``submit`` holds, so a run submitted while a death is being handled can land after the
    pending runs were failed. Such a run's point is one of the suspects."""
    if not hasattr(pool, "_executor_manager_thread"):  # a private attribute: without it, nothing is known
        return False
    manager = pool._executor_manager_thread
    return manager is None or not manager.is_alive()


def _death_cause(exitcode: int | None) -> str:
    """``exit code 3``, or ``signal SIGKILL`` for a process a signal ended."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


CONNECT_S = 20.0
"""How long a sweep waits for the Dask scheduler it names to answer."""


def _connect(distributed: Any, address: str) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address``, or a :class:`SweepError` within about
    :data:`CONNECT_S` seconds: a service that accepts the connection but never answers as a Dask
    scheduler would hold ``Client`` for ever, and one that answers otherwise makes it fail in
    arbitrary ways (a ``MemoryError`` reading another protocol's banner as a frame length)."""
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            outcome["client"] = distributed.Client(address, timeout=f"{CONNECT_S:g}s")
        except Exception as error:  # whatever the far end did, the sweep cannot use it
            outcome["error"] = error

    thread = threading.Thread(target=attempt, name="dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_S + 5)
    if thread.is_alive():
        raise SweepError(f"cannot connect to the Dask scheduler at {address}: no answer as a Dask scheduler within "
                         f"{CONNECT_S:g} s (is one listening there?)")
    if "error" in outcome:
        error = outcome["error"]
        reason = ((str(error) or type(error).__name__) if isinstance(error, (OSError, TimeoutError, ValueError))
                  else f"what answered there is not a Dask scheduler ({type(error).__name__} reading its reply)")
        raise SweepError(f"cannot connect to the Dask scheduler at {address}: {reason}")
    return outcome["client"]


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
            self._client = _connect(distributed, self.address)
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
