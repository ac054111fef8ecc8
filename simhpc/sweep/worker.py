"""What a sweep worker runs: one scenario in, one outcome out, never an exception.

``run_point`` is a top-level function of picklable arguments, so a process pool or a Dask
worker can call it. Everything a run raises is caught and returned as an ``error`` outcome.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simhpc.errors import SimhpcError

STATUSES = ("ok", "oom", "error")


@dataclass(frozen=True)
class RunOutcome:
    """The result of one run as it travels back to the parent.

    Attributes:
        key: the run key the worker computed ('' if the scenario did not validate there).
        status: ``ok``, ``oom`` (a simulated out-of-memory, from the summary) or ``error``.
        summary: the run summary (JSON data), None on error.
        error: the error text (one line for user errors, a traceback otherwise), None if none.
        wall_s: wall-clock seconds of the run (not deterministic; stored apart).
    """

    key: str
    status: str
    summary: dict[str, Any] | None
    error: str | None
    wall_s: float


def run_point(data: dict[str, Any], source: str, outdir: str | None = None) -> RunOutcome:
    """Validate and simulate one scenario mapping; write its outputs to ``outdir/<key>`` if given.

    Never raises (except for interpreter exits): errors become ``status="error"`` outcomes.
    """
    from simhpc.runner import simulate, write_outputs
    from simhpc.scenario.loader import scenario_from_dict
    from simhpc.sweep.keys import run_key

    started = time.perf_counter()
    key = ""
    try:
        scenario = scenario_from_dict(data, source)
        key = run_key(scenario)
        written = outdir is not None
        drawn = written and (scenario.outputs.trace or scenario.outputs.timeline)
        result = simulate(scenario, source, trace=written and scenario.outputs.trace, link_spans=drawn)
        summary = json.loads(json.dumps(result.summary, sort_keys=True))
        if outdir is not None:
            write_outputs(result, Path(outdir) / key, scenario)
        status = summary.get("status", "ok")
        if status not in STATUSES:
            status = "ok"
        return RunOutcome(key, status, summary, None, time.perf_counter() - started)
    except SimhpcError as error:
        return RunOutcome(key, "error", None, str(error), time.perf_counter() - started)
    except MemoryError:  # the point's size, not a simhpc bug (as ``simhpc run`` says it)
        text = "out of memory: too large to simulate on this machine (reduce the counts or sizes)"
        return RunOutcome(key, "error", None, text, time.perf_counter() - started)
    except Exception as error:
        text = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        return RunOutcome(key, "error", None, text, time.perf_counter() - started)


def _exit_with(pid: int, period_s: float) -> None:
    try:
        handle = os.pidfd_open(pid)  # readable once the process has ended (Linux >= 5.3)
    except (AttributeError, OSError):
        handle = None
    if handle is not None:
        select.select([handle], [], [])
        os._exit(1)
    while True:
        time.sleep(period_s)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass


def init_worker(sweep_pid: int, period_s: float = 1.0) -> None:
    """Process-pool initializer: exit when the sweep process ``sweep_pid`` ends.

    A sweep killed with SIGKILL leaves no workers behind (with a forkserver, a worker's parent
    is the server, which itself waits for its workers, so the parent pid cannot tell).
    """
    thread = threading.Thread(target=_exit_with, args=(sweep_pid, period_s), daemon=True)
    thread.start()


# A run small enough to be free, large enough to import what runs import lazily.
_WARMUP = {
    "name": "warm-up",
    "network": {"mode": "analytic", "topology": {"kind": "single_switch", "hosts": 2, "bandwidth": 1e9}},
    "workload": {"kind": "collective", "collective": "all_reduce", "size": 1024},
}


def preload() -> None:
    """Import what runs need and run a tiny one (in a forkserver, so forked workers start warm)."""
    import simhpc.plugins
    import simhpc.runner  # noqa: F401
    from simhpc.scenario.schema import scenario_model

    scenario_model()
    run_point(_WARMUP, "<warm-up>")  # never raises; a failure only means a colder start
