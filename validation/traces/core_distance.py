"""2-thread torch products with the two cores near and far apart: what the cores' distance costs.

On the 2-core KVM guests the host runs the two vCPUs on near or distant cores for seconds to minutes
at a time. This script alternates the cores' round trip (``latency.quick_round_trip``) with 2-thread
timings of products from small classifier heads to large squares, for ``--seconds``, and prints, per
product, its median time over the rounds whose probes before and after both read near (under
``--near`` ns) and both read far (over ``--far`` ns), and the difference (needs torch and gcc).

``--cores`` also reads each CPU's L1 probe (``latency.measure_l1_probe_on``) before and after the
products, and prints, over the near rounds, each product's median with no core shared, with one of
them shared (its probe over 1.3x the fastest) and with both.

    .venv/bin/python validation/traces/core_distance.py [--seconds 540] [--cores] [--out rounds.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from simhpc.costs.benchsuite import load_submodule

SHAPES = (
    (1, 64, 4096, 10, "nn"), (1, 64, 4096, 10, "tn"), (1, 10, 4096, 64, "tn"), (1, 64, 10, 4096, "nt"),
    (1, 64, 512, 10, "nn"), (1, 64, 512, 16, "nt"), (1, 4096, 64, 10, "nn"), (1, 1024, 64, 16, "nn"),
    (1, 64, 64, 16, "nn"), (1, 32, 16, 256, "nt"), (1, 64, 100, 32, "nt"), (1, 16, 16, 16, "nn"),
    (1, 128, 128, 128, "nn"), (1, 256, 256, 256, "nn"), (1, 512, 512, 512, "nn"), (1, 128, 512, 512, "nt"),
    (1, 512, 512, 128, "tn"), (1, 64, 1024, 1024, "nt"), (1, 512, 2048, 512, "nn"), (1, 2048, 512, 512, "nt"),
    (8, 64, 64, 64, "nn"), (64, 128, 128, 64, "nn"), (1, 4, 512, 512, "nt"), (1, 512, 4, 512, "nn"),
)
"""(batch, m, n, k, layout) of the timed products."""
L1_BYTES = 32768
"""The L1 data cache the L1 probes cover three quarters of (this guest's 32 KiB)."""
SHARED = 1.3
"""An L1 probe over this many times the fastest: another hardware thread shared that core."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=540.0)
    parser.add_argument("--near", type=float, default=100.0, help="round trips under this many ns: near")
    parser.add_argument("--far", type=float, default=250.0, help="round trips over this many ns: far")
    parser.add_argument("--out", type=Path, default=None, help="also write every round here (JSON lines)")
    parser.add_argument("--cores", action="store_true", help="also each CPU's L1 probe: the products by shared core")
    args = parser.parse_args()
    gemm, latency = load_submodule("gemm"), load_submodule("latency")
    budget = load_submodule("timing").Budget(warmup=1, repeats=3, min_time_s=0.005, max_repeats=10)
    torch.set_num_threads(2)
    rounds = []
    end = time.perf_counter() + args.seconds
    cpus = sorted(os.sched_getaffinity(0))

    def l1() -> list[float]:
        return [latency.measure_l1_probe_on(cpu, L1_BYTES) for cpu in cpus] if args.cores else []

    while time.perf_counter() < end:
        l1_before, before = l1(), latency.quick_round_trip()
        times = {f"{b}x{m}x{n}x{k} {layout}": gemm.measure_gemm(b, m, n, k, "fp32", 2, budget, "torch",
                                                                layout)["time_s"] for b, m, n, k, layout in SHAPES}
        rounds.append({"before": before, "after": latency.quick_round_trip(), "times": times,
                       "l1": [max(pair) for pair in zip(l1_before, l1())]})
    if args.out:
        args.out.write_text("".join(json.dumps(entry) + "\n" for entry in rounds), encoding="utf-8")
    near = [r for r in rounds if max(r["before"], r["after"]) < args.near * 1e-9]
    far = [r for r in rounds if min(r["before"], r["after"]) > args.far * 1e-9]
    print(f"{len(rounds)} rounds: {len(near)} near, {len(far)} far")
    if not near or not far:
        print("the cores did not move between near and far during the run: run it longer")
        return
    print("| product (2 threads) | near | far | far - near |\n| --- | ---: | ---: | ---: |")
    for name in rounds[0]["times"]:
        n, f = (statistics.median(r["times"][name] for r in group) * 1e6 for group in (near, far))
        print(f"| {name} | {n:.1f} us | {f:.1f} us | {f - n:+.1f} us |")
    if args.cores:
        _by_shared_core(near, cpus)


def _by_shared_core(near: list[dict], cpus: list[int]) -> None:
    """Each product's median over the near rounds, by which CPUs' L1 probes read shared."""
    fastest = min(min(r["l1"]) for r in near)
    groups: dict[tuple[int, ...], list[dict]] = {}
    for r in near:
        shared = tuple(cpu for cpu, reading in zip(cpus, r["l1"]) if reading > SHARED * fastest)
        groups.setdefault(shared, []).append(r)
    keys = sorted(groups, key=lambda key: (len(key), key))
    names = ["none" if not key else "CPU " + " and ".join(map(str, key)) for key in keys]
    print(f"\nnear rounds by shared core (L1 probe over {SHARED}x the fastest, {fastest * 1e9:.2f} ns)")
    print("| product (2 threads) | " + " | ".join(f"{name} shared ({len(groups[key])})" for name, key in
                                                  zip(names, keys)) + " |")
    print("| --- |" + " ---: |" * len(keys))
    for name in near[0]["times"]:
        cells = [f"{statistics.median(r['times'][name] for r in groups[key]) * 1e6:.1f} us" for key in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
