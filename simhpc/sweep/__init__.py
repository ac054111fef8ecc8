"""Parameter sweeps: grid/zip expansion, executors (local processes, Dask), a resumable store.

Typical use::

    plan = load_plan("scenarios/sweep_allreduce.yaml")
    report = run_sweep(plan, "sweeps/allreduce", ExecutorConfig(workers=2))
"""

from simhpc.sweep.driver import SweepReport, export, run_sweep
from simhpc.sweep.errors import SweepError
from simhpc.sweep.executors import ExecutorConfig, open_executor
from simhpc.sweep.keys import run_key
from simhpc.sweep.plan import SweepPlan, SweepPoint, load_plan, plan_sweep
from simhpc.sweep.spec import SweepSpec, parse_grid_option, parse_spec
from simhpc.sweep.store import ResultStore, RunRecord
from simhpc.sweep.worker import RunOutcome, run_point

__all__ = [
    "ExecutorConfig",
    "ResultStore",
    "RunOutcome",
    "RunRecord",
    "SweepError",
    "SweepPlan",
    "SweepPoint",
    "SweepReport",
    "SweepSpec",
    "export",
    "load_plan",
    "open_executor",
    "parse_grid_option",
    "parse_spec",
    "plan_sweep",
    "run_key",
    "run_point",
    "run_sweep",
]
