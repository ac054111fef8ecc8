"""Add the points of some kernels to an existing calibration of this machine, measuring only those.

    .venv/bin/python validation/calibration/extend.py validation/calibration/host.json \\
        --only "gemm torch bf16" --only "gemm torch fp16"

Runs the tasks of the current microbenchmark suite whose label starts with one of the ``--only``
prefixes (``simhpc calibrate`` shows the labels in its progress bar), replaces the file's rows of
the same points and adds the others; every other row, the probes and the creation date are kept,
and the extension is recorded under ``microbench.extended``. For points a later suite added (the
16-bit products) or re-defined: re-measuring the whole file would also replace the points the
committed trace captures were predicted from, and this machine's speed drifts from one session
to the next. Refuses a file measured on another machine.

``--replace`` first drops every row of the sections the tasks measure (a section whose points a
later suite re-defined, such as suite 9's convolutions: one pass per gradient, more shapes).
``--rounds N`` measures every point N times and keeps the fastest; ``--keep-fastest`` keeps a
row of the file where it is faster than the new measurement (the min of several extensions, as
``simhpc calibrate --merge`` does for whole files). ``--stamp-suite`` records the current suite
version in the file: use it only when the re-measured kernels are all that changed between the
file's suite and the current one.

    .venv/bin/python validation/calibration/extend.py validation/calibration/host.json \\
        --only conv --replace --stamp-suite --rounds 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simhpc.costs.calibration_file import build_calibration, load_calibration, write_calibration  # noqa: E402
from simhpc.costs.calibration_merge import fastest_rows, row_identity, row_seconds  # noqa: E402
from simhpc.hardware.host import detect_host, native_half_types  # noqa: E402
from validation.microbench import runner  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibration", type=Path)
    parser.add_argument("--only", action="append", required=True, help="task label prefix (repeatable)")
    parser.add_argument("--rounds", type=int, default=1, help="measure every point this many times, keep the fastest")
    parser.add_argument("--replace", action="store_true", help="drop the measured sections' old rows first")
    parser.add_argument("--keep-fastest", action="store_true",
                        help="keep a file row when it is faster than the new measurement of its point")
    parser.add_argument("--stamp-suite", action="store_true", help="record the current suite version in the file")
    args = parser.parse_args()
    calibration = load_calibration(args.calibration)
    host = detect_host()
    if calibration.host.fingerprint() != host.fingerprint():
        sys.exit(f"error: {args.calibration}: measured on another machine; not extended")
    tasks = [t for t in runner.plan(host.cores, host.last_level_cache, native_half=native_half_types(host.isa_flags))
             if not t.again and any(t.label.startswith(prefix) for prefix in args.only)]
    if not tasks:
        sys.exit(f"error: no task label starts with {' or '.join(map(repr, args.only))}")
    start = time.perf_counter()
    # this machine's speed drifts: the fastest of N rounds, multi-thread points read far apart measured again
    peers = runner.peers_available(host.cores)
    measured = fastest_rows(runner.run(tasks, round_trips=peers)["kernels"] for _ in range(max(1, args.rounds)))
    wall = time.perf_counter() - start
    kernels = {section: list(rows) for section, rows in calibration.data["kernels"].items()
               if not (args.replace and section in measured)}
    for section, rows in measured.items():
        kept = kernels.setdefault(section, [])
        where = {row_identity(row): i for i, row in enumerate(kept)}
        for row in rows:
            i = where.get(row_identity(row))
            if i is None:
                kept.append(row)
            elif not (args.keep_fastest and row_seconds(kept[i]) <= row_seconds(row)):
                kept[i] = row
    microbench = dict(calibration.data.get("microbench") or {})
    created = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    extension = {"created": created, "only": args.only, "points": len(tasks), "rounds": max(1, args.rounds),
                 "wall_time_s": round(wall, 1)}
    if args.replace:
        extension["replaced"] = sorted(measured)
    if args.stamp_suite and microbench.get("suite_version") != runner.SUITE_VERSION:
        extension["suite_from"] = microbench.get("suite_version")
        microbench["suite_version"] = runner.SUITE_VERSION
    microbench["extended"] = [*microbench.get("extended", []), extension]
    data = build_calibration(calibration.host, kernels, calibration.data["probes"], microbench,
                             calibration.data.get("created", created))
    write_calibration(data, args.calibration)
    print(f"added {len(tasks)} points to {args.calibration} in {wall:.0f} s")


if __name__ == "__main__":
    main()
