"""Reproduce PRT (pipeline reuse, CLUSTER 2025) on the simulated 8-GPU node.

For each model (scenarios/pipeline_<model>.yaml: 8 x V100 NVLink, fp32, 8 micro-batches,
50 us per-op overhead) prints the throughput of the depth = #GPU baselines (1F1B for the
unidirectional case, Chimera for the bidirectional one), of PRT at its best reuse factor k
(depth 8k; round-robin map), the gain, and the paper's "up to" figure beside ours; then the
memory imbalance (max/min peak per GPU) of 1F1B and PRT; the ceiling of the same comparison with
free GPU-GPU transfers and no per-op overhead (what the bubbles alone allow at this m); and how
the gain moves with the number of micro-batches, the per-op overhead, the link latency, the op
times' variation and the senders waiting for their sends (``p2p``).

    .venv/bin/python validation/reproduce/prt.py            # flow-level network (~85-100 s)
    .venv/bin/python validation/reproduce/prt.py --quick    # analytic network, fewer points
    .venv/bin/python validation/reproduce/prt.py --m-equals-depth  # also: PRT fed 8k micro-batches
    .venv/bin/python validation/reproduce/prt.py --two-nodes       # also: 16 GPUs of two nodes (~1 min more)

``--m-equals-depth`` adds another reading of the paper's set-up: each pipeline takes as many
micro-batches as it has stages (the baselines 8, PRT 8k), either of the same size (PRT then
trains on a k times larger batch per iteration) or k times smaller (the same batch).

``--two-nodes`` runs ``scenarios/pipeline_two_nodes.yaml`` (ResNet-152 on 2 x 8 V100, the nodes
joined by their NICs): bidirectional PRT with the plain round-robin map and with ``groups: 2``
against Chimera as m grows, then 1024 images an iteration as one pipeline of 16 GPUs or as 2, 4 or
8 data-parallel replicas, laid out ``consecutive`` or ``strided``.

The paper's figures are targets only; nothing in the simulator reads them.
"""

from __future__ import annotations

import argparse
import copy
from functools import cache
from pathlib import Path
from typing import Any

from simhpc.runner import simulate
from simhpc.scenario.loader import read_yaml, scenario_from_dict, with_overrides

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "bert-base": "pipeline_bert_base.yaml",
    "bert-large": "pipeline_bert_large.yaml",
    "resnet-50": "pipeline_resnet50.yaml",
    "resnet-101": "pipeline_resnet101.yaml",
    "resnet-152": "pipeline_resnet152.yaml",
}
PAPER_GAIN_PERCENT = {  # PRT abstract: "up to" gains per model series (validation/papers/prt.md)
    "bert": {"uni": 54.78, "bi": 30.38},
    "resnet": {"uni": 76.59, "bi": 26.45},
}
REUSE = (2, 3, 4, 6)
MODE = "flow"


def series(model: str) -> str:
    return "bert" if model.startswith("bert") else "resnet"


TWO_NODES = "pipeline_two_nodes.yaml"


@cache
def _base(model: str) -> dict[str, Any]:
    return read_yaml(ROOT / "scenarios" / MODELS.get(model, model))


FREE_LINK = {"bandwidth": "1 PB/s", "latency": "0 s"}
"""GPU-GPU links that cost nothing: with no per-op overhead, the bubble-only ceiling of a schedule."""


def run(model: str, schedule: str, *overrides: str, link: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The workload summary of one simulated run (None if it cannot run: too deep, OOM).

    ``model``: a key of ``MODELS``, or a scenario file name. ``link``: fields of the node's
    GPU-GPU link to replace (``latency``, ``bandwidth``).
    """
    source = MODELS.get(model, model)
    data = copy.deepcopy(_base(model))
    data["network"]["mode"] = MODE
    data["workload"]["iterations"] = 1
    data["outputs"] = {"trace": False, "timeline": False}
    if link is not None:  # the catalog node with other GPU-GPU link figures
        node = data["network"]["topology"]["node"]
        from simhpc.hardware.catalog import builtin_catalog

        raw = copy.deepcopy(builtin_catalog().raw["nodes"][node])
        raw["gpu_link"] = {**raw["gpu_link"], **link}
        data["hardware"] = {"nodes": {node: raw}}
    data = with_overrides(data, [f"workload.schedule={schedule}", *overrides], source)
    try:
        scenario = scenario_from_dict(data, source)
    except Exception as error:  # a configuration the model cannot take (more stages than layers)
        if "stages" in str(error):
            return None
        raise
    result = simulate(scenario, source)
    if result.summary["status"] != "ok":
        return None
    return result.summary["workload"]


def throughput(summary: dict[str, Any] | None) -> float:
    return summary["throughput_samples_per_second"] if summary else 0.0


def best_prt(
    model: str, direction: str, *overrides: str, link: dict[str, str] | None = None, reuse: tuple[int, ...] = REUSE
) -> tuple[int, dict]:
    """The reuse factor k with the highest PRT throughput, and its summary."""
    results = {k: run(model, f"{{kind: prt, k: {k}, direction: {direction}}}", *overrides, link=link)
               for k in reuse}
    k = max(results, key=lambda key: throughput(results[key]))
    return k, results[k]  # type: ignore[return-value]


def gain(prt: dict | None, baseline: dict | None) -> float:
    return 100.0 * (throughput(prt) / throughput(baseline) - 1.0)


def headline() -> None:
    print("PRT vs depth = #GPU baselines on 8 x V100 (NVLink), m = 8 micro-batches, best k in "
          f"{REUSE}, network mode {MODE}")
    header = (f"{'model':<11} {'1F1B':>8} {'PRT-uni':>8} {'k':>2} {'gain':>7} {'paper':>7} | "
              f"{'Chimera':>8} {'PRT-bi':>8} {'k':>2} {'gain':>7} {'paper':>7} | {'mem imb 1F1B':>12} {'PRT':>5}")
    print(header)
    print("-" * len(header))
    for model in MODELS:
        base = run(model, "{kind: 1f1b}")
        chimera = run(model, "{kind: chimera}")
        k_uni, uni = best_prt(model, "uni")
        k_bi, bi = best_prt(model, "bi")
        paper = PAPER_GAIN_PERCENT[series(model)]
        print(f"{model:<11} {throughput(base):8.1f} {throughput(uni):8.1f} {k_uni:>2} {gain(uni, base):+6.1f}% "
              f"{paper['uni']:+6.1f}% | {throughput(chimera):8.1f} {throughput(bi):8.1f} {k_bi:>2} "
              f"{gain(bi, chimera):+6.1f}% {paper['bi']:+6.1f}% | {base['memory_imbalance']:12.2f} "  # type: ignore[index]
              f"{uni['memory_imbalance']:5.2f}")
    print("throughput in samples/s; gain = PRT / baseline - 1; paper = the abstract's 'up to' figure "
          "for the model series")


def ceiling() -> None:
    """The same comparison with free GPU-GPU links and no per-op overhead: what bubbles alone allow."""
    print("\nCeiling: free p2p transfers (1 PB/s, 0 s) and no per-op overhead, best k in (2, 3, 4, 6, 8)")
    print(f"{'model':<11} {'uni gain':>9} {'k':>2} {'bi gain':>9} {'k':>2}")
    free = ("workload.stage_overhead=0 us",)
    for model in MODELS:
        base = run(model, "{kind: 1f1b}", *free, link=FREE_LINK)
        chimera = run(model, "{kind: chimera}", *free, link=FREE_LINK)
        k_uni, uni = best_prt(model, "uni", *free, link=FREE_LINK, reuse=(*REUSE, 8))
        k_bi, bi = best_prt(model, "bi", *free, link=FREE_LINK, reuse=(*REUSE, 8))
        print(f"{model:<11} {gain(uni, base):+8.1f}% {k_uni:>2} {gain(bi, chimera):+8.1f}% {k_bi:>2}")


def trends(models: tuple[str, ...], quick: bool) -> None:
    k = 3
    print(f"\nGain of PRT (k={k}) over its baseline as conditions change (uni: vs 1F1B, bi: vs Chimera)")
    cases: list[tuple[str, tuple[str, ...], dict[str, str] | None]] = []
    for m in (4, 8, 16) if quick else (4, 8, 16, 32):
        cases.append((f"m={m}", (f"workload.micro_batches={m}",), None))
    for overhead in ("0 us", "200 us") if quick else ("0 us", "50 us", "200 us", "500 us"):
        cases.append((f"overhead {overhead}", (f"workload.stage_overhead={overhead}",), None))
    for latency in ("20 us",) if quick else ("20 us", "100 us"):
        cases.append((f"hop latency {latency}", (), {"latency": latency}))
    for variation in (0.2,) if quick else (0.1, 0.3):  # mean throughput over 10 iterations
        cases.append((f"op times vary {variation}", (f"workload.op_time_variation={variation}",
                                                     "workload.iterations=10"), None))
    for p2p in ("blocking", "rendezvous"):  # the senders wait for their sends (and the receives)
        cases.append((f"p2p {p2p}", (f"workload.p2p={p2p}",), None))
    print(f"{'model':<11} {'condition':<20} {'uni gain':>9} {'bi gain':>9}")
    for model in models:
        for label, overrides, link in cases:
            base = run(model, "{kind: 1f1b}", *overrides, link=link)
            chimera = run(model, "{kind: chimera}", *overrides, link=link)
            uni = run(model, f"{{kind: prt, k: {k}}}", *overrides, link=link)
            bi = run(model, f"{{kind: prt, k: {k}, direction: bi}}", *overrides, link=link)
            print(f"{model:<11} {label:<20} {gain(uni, base):+8.1f}% {gain(bi, chimera):+8.1f}%")


def depth_micro_batches(reuse: tuple[int, ...] = (2, 3, 4)) -> None:
    """Gains when each pipeline takes m = its depth micro-batches: baselines 8, PRT 8k.

    Two ways to feed the deeper pipeline: micro-batches of the same size (a k times larger batch per
    iteration), or the same batch per iteration cut into k times smaller micro-batches (only where
    k divides the micro-batch size; '-' elsewhere, and where the model has too few cut points).
    """
    columns = " ".join(f"{f'k={k}':>7}" for k in reuse)
    for same_batch in (False, True):
        print("\nIf m = depth: baselines at m = 8, PRT at m = 8k, "
              + ("the same batch per iteration (micro-batches k times smaller)" if same_batch
                 else "micro-batches of the same size (a k times larger batch per iteration)"))
        print(f"{'model':<11} {'uni':<3} {columns} {'paper':>7} | {'bi':<3} {columns} {'paper':>7}")
        for model in MODELS:
            size = _base(model)["workload"]["micro_batch_size"]
            base = run(model, "{kind: 1f1b}")
            chimera = run(model, "{kind: chimera}")
            paper = PAPER_GAIN_PERCENT[series(model)]
            cells = {}
            for direction, baseline in (("uni", base), ("bi", chimera)):
                runs = []
                for k in reuse:
                    overrides = [f"workload.micro_batches={8 * k}"]
                    if same_batch:
                        overrides.append(f"workload.micro_batch_size={size // k}")
                    feasible = not same_batch or size % k == 0
                    runs.append(run(model, f"{{kind: prt, k: {k}, direction: {direction}}}", *overrides)
                                if feasible else None)
                cells[direction] = " ".join(f"{gain(summary, baseline):+6.1f}%" if summary else f"{'-':>7}"
                                            for summary in runs)
            print(f"{model:<11} {'':<3} {cells['uni']} {paper['uni']:+6.1f}% | "
                  f"{'':<3} {cells['bi']} {paper['bi']:+6.1f}%")


def two_nodes() -> None:
    """Across two nodes: the grouped map against the plain one and Chimera; pipeline or data parallelism."""
    bi = "{kind: prt, k: 2, direction: bi}"
    schedules = {"Chimera": "{kind: chimera}", "PRT-bi k=2": bi,
                 "groups: 2": "{kind: prt, k: 2, direction: bi, groups: 2}",
                 "k=3 groups: 2": "{kind: prt, k: 3, direction: bi, groups: 2}"}
    print(f"\nResNet-152 on 2 x 8 V100 ({TWO_NODES}), samples/s, network mode {MODE}")
    print(f"{'m':>3} " + " ".join(f"{name:>14}" for name in schedules))
    for m in (16, 32, 64):
        cells = [throughput(run(TWO_NODES, schedule, f"workload.micro_batches={m}")) for schedule in schedules.values()]
        print(f"{m:>3} " + " ".join(f"{cell:14.1f}" for cell in cells))
    print("\n1024 images an iteration: one pipeline of 16 GPUs or N data-parallel replicas, samples/s")
    schedules = {"1F1B": "{kind: 1f1b}", "Chimera": "{kind: chimera}", "PRT-bi k=2": bi}
    print(f"{'replicas':<9} {'layout':<12} " + " ".join(f"{name:>11}" for name in schedules))
    for replicas in (1, 2, 4, 8):
        for layout in ("consecutive", "strided") if replicas > 1 else ("consecutive",):
            overrides = (f"workload.data_parallel={replicas}", f"workload.micro_batches={32 // replicas}",
                         f"workload.replica_layout={layout}")
            cells = [throughput(run(TWO_NODES, schedule, *overrides)) for schedule in schedules.values()]
            print(f"{replicas:<9} {layout:<12} " + " ".join(f"{cell:11.1f}" if cell else f"{'-':>11}"
                                                             for cell in cells))
    print("'-': the schedule cannot run there (too few devices or micro-batches, or out of memory)")


def main() -> None:
    global MODE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="analytic network, fewer trend points")
    parser.add_argument("--m-equals-depth", action="store_true",
                        help="also the gains when PRT takes 8k micro-batches (its depth) against the baselines' 8")
    parser.add_argument("--two-nodes", action="store_true",
                        help="also 16 GPUs of two nodes: the grouped map, and pipeline or data parallelism")
    args = parser.parse_args()
    if args.quick:
        MODE = "analytic"
    headline()
    ceiling()
    trends(("bert-large", "resnet-152"), args.quick)
    if args.m_equals_depth:
        depth_micro_batches()
    if args.two_nodes:
        two_nodes()


if __name__ == "__main__":
    main()
