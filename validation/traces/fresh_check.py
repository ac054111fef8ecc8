"""The calibrate-then-capture accuracy check in one command (needs torch, like ``capture.py``).

Calibrates this machine, captures the four models at 1 and 2 threads right after, compares every
capture with that calibration and prints the table and whether each meets the targets (step-time
error and GEMM MAPE at most 15 %, the issue's), with the wall time of each part, the median ratio of
the large products' measured to predicted time (how far the host's speed moved between calibrating and
capturing: ``Comparison.product_speed_ratio``), the cores' round trip around each capture, the fresh
pages a step ``compare`` charged beside the page faults the capture counted, and ``simhpc compare``'s
warning where a 2-thread capture's cores were over twice as far apart as the calibration's, or the
other way round. Exits 1 when a capture misses a target, 2 when a part fails. About 4.5 minutes on
the 2-core reference machines.

    .venv/bin/python validation/traces/fresh_check.py [--out DIR] [--repeat 3] [--target 15]

``DIR`` (default: a new temporary folder) keeps ``calibration.json``, ``captures/`` and
``report.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import compare_captures  # this folder's report.py (the script's folder is on sys.path)

from simhpc.costs.calibration_file import load_calibration
from simhpc.trace.compare import Comparison
from simhpc.trace.core_distance import calibration_round_trip, capture_round_trips, distance_warning

HERE = Path(__file__).resolve().parent


def _run(what: str, command: list[str]) -> tuple[float, list[str]]:
    """Run a part; its wall seconds and the warnings it printed (exit 2 with its output when it fails)."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"error: {what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}", file=sys.stderr)
        sys.exit(2)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    return time.perf_counter() - start, warnings


def _shared_core_line(probes: dict) -> str:
    """How many calibration points the L1 probe saw measured on a shared core, if it ran."""
    probe = probes.get("L1 probe")
    if not probe:
        return ""
    return (f"; {probe['shared_points']} of {probe['samples']} calibration points measured on a shared core "
            f"(L1 probe over {probe['slowdown_threshold']}x its fastest)")


def _trips(readings: list[float] | None) -> str:
    """The cores' round trips a capture recorded before and after its steps."""
    return " / ".join(f"{value * 1e9:.0f} ns" for value in readings) if readings else "-"


def _trip_line(reading: float | None) -> str:
    """The cores' round trip while the calibration's multi-thread points were measured, if probed."""
    return "" if reading is None else f"; cores' round trip {reading * 1e9:.0f} ns in the calibration"


def _faults(result: Comparison) -> str:
    """The fresh pages a step ``compare`` charged, and the page faults the capture counted."""
    counted = result.capture_page_faults_per_step
    return f"{result.fresh_pages_per_step:.0f} / " + ("-" if counted is None else f"{counted:.0f}")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="captures per model (capture.py --repeat)")
    parser.add_argument("--target", type=float, default=15.0, help="largest |step error| and GEMM MAPE, %%")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="simhpc-fresh-"))
    out.mkdir(parents=True, exist_ok=True)
    calibration, captures = out / "calibration.json", out / "captures"
    calibrate_s, warnings = _run("simhpc calibrate",
                                 [sys.executable, "-m", "simhpc", "calibrate", "-o", str(calibration)])
    capture_s, _ = _run("capture.py", [sys.executable, str(HERE / "capture.py"), "--gzip", "--out", str(captures),
                                       "--repeat", str(args.repeat)])
    cal = load_calibration(calibration)
    lines = ["| capture | threads | measured step | predicted step | step error | GEMM MAPE | GEMM repeats "
             "| large products, measured / predicted | cores' round trip | fresh pages / page faults a step "
             "| meets target |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    misses = 0
    calibration_trip, far = calibration_round_trip(cal), []
    for path, threads, _, result, trace in compare_captures(cal, sorted(captures.glob("*.json.gz"))):
        trips = capture_round_trips(trace)
        warning = distance_warning(trips, calibration_trip, threads)
        if warning:
            far.append(f"{path.name.split('.')[0]}: {warning}")
        step, gemm = result.step_error_pct, result.kinds.get("gemm", {})
        mape = gemm.get("mape_pct")
        meets = step is not None and abs(step) <= args.target and (mape is None or mape <= args.target)
        misses += not meets
        lines.append(f"| {path.name.split('.')[0]} | {threads} | {result.measured_step_s * 1e3:.1f} ms | "
                     f"{result.predicted_step_s * 1e3:.1f} ms | {step:+.1f} % | {_pct(mape)} | "
                     f"{_pct(gemm.get('repeat_mape_pct'))} | {_ratio(result.product_speed_ratio)} | "
                     f"{_trips(trips)} | {_faults(result)} | "
                     f"{'yes' if meets else 'no'} |")
    lines.append(f"\n{cal.host.cpu_model}: calibrate {calibrate_s:.0f} s, captures {capture_s:.0f} s; "
                 f"{len(lines) - 2 - misses} of {len(lines) - 2} captures within {args.target:g} %"
                 + _shared_core_line(cal.data.get("probes") or {}) + _trip_line(calibration_trip))
    lines.extend(f"calibrate {line}" for line in warnings)
    lines.extend(far)
    report = "\n".join(lines)
    (out / "report.md").write_text(report + "\n", encoding="utf-8")
    print(report)
    print(f"wrote {out}/calibration.json, {out}/captures/, {out}/report.md")
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()
