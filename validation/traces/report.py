"""Compare every capture with a calibration and print a Markdown table (for validation/README.md).

    .venv/bin/python validation/traces/report.py [--calibration FILE] [--blas torch|numpy] [--cache cold|warm]
        [CAPTURE ...]

Defaults: the calibration ``simhpc compare`` uses (:func:`simhpc.hardware.host.default_calibration`:
the committed one of this kind of machine) and every file in ``captures/``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import Calibration, host_specs, load_calibration
from simhpc.costs.model import CostModel
from simhpc.errors import SimhpcError
from simhpc.trace.compare import Comparison, compare_trace, default_blas
from simhpc.trace.readers import Trace, read_trace
from simhpc.trace.thread_count import calibrated_thread_counts, infer_threads

HERE = Path(__file__).resolve().parent


def compare_captures(cal: Calibration, captures: Iterable[Path], blas: str | None = None,
                     cache: str = "cold") -> Iterator[tuple[Path, int, str, Comparison, Trace]]:
    """(capture, threads, BLAS, comparison, the trace read) of every capture against ``cal``: at the
    capture's recorded thread count (without one, the count ``simhpc compare`` infers, else all the host's
    cores), with ``simhpc compare``'s BLAS unless ``blas`` is given."""
    cpu, _ = host_specs(cal)
    models: dict[str, CostModel] = {}
    for path in captures:
        trace = read_trace(path)
        chosen = blas or default_blas(trace, cal.gemm_backends())
        if chosen not in models:
            models[chosen] = CostModel(CalibratedEfficiency(cal, blas=chosen, cache=cache))
        threads = trace.metadata.get("num_threads") or infer_threads(
            trace, models[chosen], cpu, calibrated_thread_counts(cal)) or cal.host.cores
        yield path, threads, chosen, compare_trace(trace, models[chosen], cpu, threads), trace


def main() -> None:
    try:
        report()
    except SimhpcError as error:  # an unreadable capture or calibration: one line, exit status 2
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def report() -> None:
    """Parse the arguments and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=None,
                        help="default: as simhpc compare (the committed calibration of this kind of machine)")
    parser.add_argument("--blas", choices=("torch", "numpy"), default=None, help="default: as simhpc compare")
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold", help="as simhpc compare (default cold)")
    parser.add_argument("captures", nargs="*", type=Path)
    args = parser.parse_args()
    cal = load_calibration(args.calibration)
    captures = args.captures or sorted((HERE / "captures").glob("*.json*"))
    print(
        "| capture | threads | BLAS | measured step | predicted step | step error | GEMM MAPE (ops) "
        "| GEMM repeats | conv MAPE (ops) | ops modelled |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path, threads, blas, result, _ in compare_captures(cal, captures, args.blas, args.cache):
        name = path.name.split(".")[0]
        step = "-" if result.step_error_pct is None else f"{result.step_error_pct:+.1f} %"
        cells = []
        for kind in ("gemm", "conv"):
            row = result.kinds.get(kind)
            cells.append(f"{row['mape_pct']:.1f} % ({row['ops']})" if row and row.get("mape_pct") is not None else "-")
        repeats = result.kinds.get("gemm", {}).get("repeat_mape_pct")
        print(
            f"| {name} | {threads} | {blas} | {result.measured_step_s * 1e3:.1f} ms "
            f"| {result.predicted_step_s * 1e3:.1f} ms "
            f"| {step} | {cells[0]} | {'-' if repeats is None else f'{repeats:.1f} %'} | {cells[1]} "
            f"| {result.ops_modelled}/{result.ops_total} |"
        )


if __name__ == "__main__":
    main()
