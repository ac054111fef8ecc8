"""Where a captured step's classifier forward spends its time, from the trace's own events.

A CNN's head is an ``aten::addmm`` with the bias: its children (``expand``, a ``copy_`` of the bias
into the output, ``resolve_conj``) run before its GEMM. For each capture, the medians over its
profiler steps of the ``addmm``'s time to its first child (its autograd wrapper and the
dispatcher), the gaps between its children, the bias ``copy_`` and the GEMM after the last child,
in microseconds, with what ``simhpc compare`` predicts for the ``addmm``'s self time (from the
calibration given, else the default one) and the part of it that is its evicted code
(``simhpc/trace/evicted_code.py``).

On the Zen 5 guest's twelve fresh-check CNN captures (session 46, ``validation/README.md``): 9.8-12.4
us to the first child, 5.7-7.0 between the children, an 8.4-10.2 us ``copy_``, the GEMM 129-134 us
on 1 thread and 75-80 on 2, against loops of 102-112 and 55-59.

    .venv/bin/python validation/traces/classifier_parts.py CAPTURE... [--calibration FILE]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from simhpc.costs.calibration import CalibratedEfficiency
from simhpc.costs.calibration_file import host_specs, load_calibration
from simhpc.costs.far_points import cores_during
from simhpc.costs.model import CostModel
from simhpc.trace.compare import compare_trace
from simhpc.trace.core_distance import capture_round_trips
from simhpc.trace.readers import Trace, read_trace

US = 1e6


def parts(trace: Trace) -> list[tuple[float, float, float, float]]:
    """(to the first child, between the children, the bias ``copy_``, after the last child), in
    seconds, of every ``aten::addmm`` with children in the trace's profiler steps."""
    found = []
    for op in trace.ops:
        if op.name != "aten::addmm" or not op.children or op.step is None:
            continue
        children = [trace.ops[index] for index in op.children]
        first, last = min(c.start for c in children), max(c.end for c in children)
        copies = sum(c.duration for c in children if c.name == "aten::copy_")
        gaps = (last - first) - sum(c.duration for c in children)
        found.append((first - op.start, gaps, copies, op.end - last))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="+", type=Path)
    parser.add_argument("--calibration", type=Path, default=None)
    args = parser.parse_args()
    calibration = load_calibration(args.calibration)
    cpu, _ = host_specs(calibration)
    print("capture | threads | to first child | between children | bias copy_ | GEMM after | "
          "addmm self: measured / predicted (evicted code)")
    for path in args.captures:
        trace = read_trace(path)
        found = parts(trace)
        if not found:
            print(f"{path.name}: no aten::addmm with children in its profiler steps")
            continue
        threads = trace.metadata.get("num_threads", 1)  # capture.py records it
        cores = cores_during(capture_round_trips(trace), calibration)
        model = CostModel(CalibratedEfficiency(calibration, blas="torch", cache="cold", cores=cores))  # as compare
        result = compare_trace(trace, model, cpu, threads)
        heads = [p for p in result.predictions
                 if p.op.name == "aten::addmm" and p.op.children and p.op.step is not None]
        medians = [statistics.median(column) * US for column in zip(*found)]
        measured = statistics.median(p.measured_s for p in heads) * US
        predicted = statistics.median(p.predicted_s for p in heads) * US
        evicted = statistics.median(p.evicted_code_s for p in heads) * US
        print(f"{path.name} | {threads} | " + " | ".join(f"{m:.1f}" for m in medians)
              + f" | {measured:.1f} / {predicted:.1f} ({evicted:.1f})")


if __name__ == "__main__":
    main()
