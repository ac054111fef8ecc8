"""Run one scenario: build the machine, start the workload, simulate, collect results."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from simhpc import __version__
from simhpc.costs import CostModel
from simhpc.engine import Simulation
from simhpc.errors import ScenarioError, SimulatedOOM
from simhpc.registry import lookup, names
from simhpc.scenario.loader import scenario_catalog
from simhpc.scenario.schema import ScenarioBase
from simhpc.workloads.base import InvalidReference, RunContext, Workload


@dataclass
class RunResult:
    """The outcome of one run. ``summary`` is deterministic; ``wall_time_s`` is not."""

    summary: dict[str, Any]
    sim: Simulation
    workload: Workload
    wall_time_s: float


@cache
def default_cost_model() -> CostModel:
    """The cost model runs use.

    Kernel efficiencies are interpolated from the default calibration
    (:func:`~simhpc.hardware.host.default_calibration`: the committed one of this kind of machine)
    for the host CPU and the CPUs its fractions transfer
    to; GPUs, and every device when no calibration is committed, use :class:`ConstantEfficiency`.
    A file ``$SIMHPC_CALIBRATION`` names that is not a valid calibration is an error.
    """
    from simhpc.costs.calibration import CalibratedEfficiency
    from simhpc.costs.calibration_file import CalibrationError, load_calibration
    from simhpc.hardware.host import CALIBRATION_ENV

    try:
        return CostModel(CalibratedEfficiency(load_calibration()))
    except CalibrationError as error:
        if os.environ.get(CALIBRATION_ENV):  # the user's file: say what is wrong with it
            raise CalibrationError(f"{error} (named by ${CALIBRATION_ENV})") from None
        return CostModel()


def build(
    scenario: ScenarioBase, source: str = "<scenario>", *, trace: bool | None = None, link_spans: bool = True
) -> tuple[Simulation, Workload]:
    """Create the simulation, network and workload of ``scenario`` (nothing runs yet). ``trace``:
    whether trace.json will be written (default: ``outputs.trace``); without it the links'
    utilisation counters, which only the trace shows, are not recorded. ``link_spans=False``
    keeps only the count and time of each link's busy spans, all metrics.csv needs, for a run
    that draws neither trace.json nor timeline.png (faster, less memory); without ``trace`` the
    spans are kept in arrays, handed out as spans to timeline.png's few link rows."""
    trace = scenario.outputs.trace if trace is None else trace
    sim = Simulation(scenario.seed)
    catalog = scenario_catalog(scenario, source)
    network, node = None, None
    if scenario.network is not None:
        from simhpc.network import Network

        try:
            topology = scenario.network.topology.build(catalog)
        except ValueError as error:
            raise ScenarioError(source, "network.topology", str(error)) from None
        network = Network(sim, topology, mode=scenario.network.mode, utilisation_counters=trace,
                          link_spans=link_spans, compact_spans=not trace, batch_links=scenario.network.batch_links)
        node = catalog.nodes.get(getattr(scenario.network.topology, "node", ""))
    context = RunContext(sim=sim, catalog=catalog, cost_model=default_cost_model(), network=network, node=node)
    config = scenario.workload  # type: ignore[attr-defined]
    try:
        workload = lookup("workload", config.kind)(config, context)
    except InvalidReference as error:
        raise ScenarioError(source, error.path, str(error)) from None
    return sim, workload


def simulate(
    scenario: ScenarioBase,
    source: str = "<scenario>",
    monitor: Callable[[Simulation], AbstractContextManager[Any]] | None = None,
    *,
    trace: bool | None = None,
    link_spans: bool = True,
) -> RunResult:
    """Run ``scenario`` to completion (or ``outputs.max_time``) and summarise it.

    A simulated out-of-memory ends the run early and is reported in the summary
    (``status: "oom"``), not raised. ``monitor(sim)`` (a progress display, say) is entered
    around the simulation. ``trace``, ``link_spans``: as for :func:`build`.
    """
    started = time.perf_counter()
    sim, workload = build(scenario, source, trace=trace, link_spans=link_spans)
    workload.start()
    status, error = "ok", None
    try:
        with monitor(sim) if monitor else nullcontext():
            sim.run(until=scenario.outputs.max_time)
    except SimulatedOOM as oom:
        status, error = "oom", {"device": oom.device, "what": oom.what, "message": str(oom)}
    network = workload.ctx.network
    if network is not None:  # a run cut short leaves link spans open or recorded ahead
        network.accounting.close(sim.now)
    sim.trace.clip(sim.now)
    summary: dict[str, Any] = {
        "simhpc_version": __version__,
        "scenario": scenario.name,
        "seed": scenario.seed,
        "status": status,
        "simulated_time_s": sim.now,
        "events_processed": sim.events_processed,
    }
    if error:
        summary["error"] = error
    if scenario.outputs.max_time is not None and status == "ok":
        summary["stopped_at_max_time"] = sim.work_left
    summary["workload"] = workload.summary()
    if network is not None:
        summary["network"] = network.stats()
    return RunResult(summary, sim, workload, time.perf_counter() - started)


def write_outputs(result: RunResult, outdir: str | Path, scenario: ScenarioBase) -> list[Path]:
    """Write summary.json, metrics.csv, (if enabled) trace.json and timeline.png, and the workload's
    own files (a pipeline's plan.yaml); a disabled one left in the folder by an earlier run is
    removed, so that it is not read as this run's."""
    from simhpc.report.metrics import write_metrics_csv, write_summary_json
    from simhpc.report.timeline import plot_timeline
    from simhpc.trace.chrome import write_chrome_trace

    folder = Path(outdir)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "summary.json", folder / "metrics.csv"]
    write_summary_json(result.summary, written[0])
    write_metrics_csv(result.sim, written[1])
    if scenario.outputs.trace:
        written.append(folder / "trace.json")
        metadata = {"simhpc_version": __version__, "scenario": scenario.name, "seed": scenario.seed}
        write_chrome_trace(result.sim.trace, written[-1], metadata)
    if scenario.outputs.timeline:
        written.append(folder / "timeline.png")
        plot_timeline(result.sim.trace, written[-1], title=scenario.name)
    for name, text in result.workload.output_files().items():
        written.append(folder / name)
        written[-1].write_text(text, encoding="utf-8")
    left = {"trace.json", "timeline.png"} | {name for kind in names("workload")
                                             for name in lookup("workload", kind).output_names}
    for name in sorted(left - {path.name for path in written}):
        if (folder / name).is_file():
            (folder / name).unlink()
    return written
