"""Fitting a checkpoint into the idle gaps of the training traffic (Gemini's partitioning,
also used by Capricorn on its per-layer profile)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from simhpc.workloads.moe.plan import Chunk, ClusterFacts


def fit_to_gaps(gaps: Iterable[tuple[int, float]], nbytes: float, rate: float, last: int) -> tuple[Chunk, ...]:
    """Cut ``nbytes`` into chunks that fill the gaps in order (greedy, earliest first).

    A gap of ``seconds`` takes ``seconds * rate`` bytes, released when the gap's phase starts.
    Bytes that fit nowhere go with the last gap (phase ``last``), to finish before the deadline
    if they can.

    Args:
        gaps: (phase index, predicted idle seconds) in iteration order.
        nbytes: bytes per GPU to place.
        rate: bytes/s one GPU's chunk drains at while the network is idle.
        last: the phase that receives the bytes left over.

    Returns:
        Chunks in release order; their bytes sum to ``nbytes``.
    """
    if nbytes <= 0:
        return ()
    chunks: dict[int, float] = {}
    remaining = float(nbytes)
    for phase, seconds in gaps:
        if remaining <= 0:
            break
        size = min(remaining, max(0.0, seconds) * rate)
        if size > 0:
            chunks[phase] = chunks.get(phase, 0.0) + size
            remaining -= size
    if remaining > 0:
        chunks[last] = chunks.get(last, 0.0) + remaining
    return tuple(Chunk(phase, size) for phase, size in sorted(chunks.items()))


def gap_plan(
    facts: ClusterFacts, durations: Mapping[int, float], peers: int, fill: float = 1.0
) -> tuple[Chunk, ...]:
    """The chunk plan for a profile: gaps are the compute phases before the deadline.

    Args:
        facts: the job (phases, state size, rates).
        durations: profiled seconds per phase index (missing phases count as no gap).
        peers: remote replicas per node (sets the per-GPU drain rate).
        fill: fraction of each gap the chunks may take (headroom for latency and pipelining).
    """
    gaps = [
        (phase.index, durations.get(phase.index, 0.0))
        for phase in facts.phases
        if phase.kind == "compute" and phase.index < facts.optimizer_phase
    ]
    last = max((index for index, seconds in gaps if seconds > 0), default=0)
    return fit_to_gaps(gaps, facts.state_bytes, fill * facts.memory_rate(peers), last)
