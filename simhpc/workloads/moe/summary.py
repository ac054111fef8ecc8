"""The results of a ``moe_training`` run: iteration times, checkpoint accounting, failures."""

from __future__ import annotations

from typing import Any

import numpy as np


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarise(workload: Any) -> dict[str, Any]:
    """Summary of a finished (or stopped) run of a :class:`MoETrainingWorkload`."""
    config, trainer, store, model = workload.config, workload.trainer, workload.store, workload.model
    records = trainer.records
    done = [r for r in records if r.status == "done"]
    steady = [r.duration for r in done if r.iteration >= config.warmup]
    failures = workload.failures.summary()
    ends = [r.end for r in records if r.end is not None]
    ends += [e["time_s"] + e["recovery_s"] for e in failures["events"]]  # a run may end recovering
    end = max(ends, default=0.0)
    useful = float(sum(r.duration for r in done))
    ledger = store.ledger
    memory_versions = [c for c in ledger.completed if c["target"] == "memory"]
    storage_versions = [c for c in ledger.completed if c["target"] == "storage"]
    return {
        "kind": "moe_training",
        "model": {
            "name": config.model.name,
            "total_params": model.total_params,
            "dense_params": model.dense_params,
            "expert_params": model.expert_params_total,
            "moe_layers": model.moe_layer_count,
            "tokens_per_gpu": model.tokens_per_gpu,
            "experts_per_gpu": model.experts_per_gpu,
        },
        "policy": config.checkpoint.policy,
        "dynamicity": config.dynamicity,
        "iterations_done": len(done),
        "iterations_executed": len(records),
        "mean_iteration_time_s": _mean(steady) if steady else _mean([r.duration for r in done]),
        "mean_of_iterations": len(steady) if steady else len(done),  # all of them if warm-up left none
        "iteration_times_s": [r.duration for r in done],
        "stall_s": trainer.stall_time,
        "profile_s": trainer.profile_time,
        "makespan_s": end,
        # a snapshot taken near the end may persist after the last iteration: when the last one finished
        "last_checkpoint_end_s": max((c["end_s"] for c in ledger.completed), default=None),
        "useful_time_s": useful,
        "goodput": (useful - sum(r.stall for r in done)) / end if end > 0 else None,  # stalls are no progress
        "checkpoint": {
            "state_bytes_per_gpu": store.state_bytes,
            "versions_in_memory": len(memory_versions),
            "versions_persisted": len(storage_versions),
            "newest_in_memory": store.memory[0] if store.memory else None,
            "newest_persisted": store.persisted,
            "pcie_bytes": ledger.pcie_bytes,
            "peer_bytes": ledger.peer_bytes,
            "storage_bytes": ledger.storage_bytes,
            "abandoned_bytes": ledger.abandoned_bytes,
            "in_flight_bytes": float(sum(sum(run.moved.values()) for run in store.active)),
            "buffer_bytes": store.buffer_bytes,
            "buffer_peak_bytes": ledger.buffer_peak,
            "host_memory_bytes": workload.node_spec.host_memory,
            "host_peak_bytes": max((h.memory.peak for h in workload.hosts), default=0.0),
            "gpu_peak_bytes": max((g.memory.peak for g in workload.gpus), default=0.0),
            "storage_peak_bytes": max((d.space.peak for d in store.storage), default=0.0),
            "policy": workload.policy.stats(),
            "versions": ledger.completed,
        },
        "failures": failures,
    }
