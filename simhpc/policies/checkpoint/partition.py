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


def hedge_gaps(
    gaps: list[tuple[int, float]], spread: Mapping[int, float], nbytes: float, rate: float
) -> list[tuple[int, float]]:
    """Shrink uncertain gaps as far as the slack allows, each to the same quantile.

    A chunk that outgrows its gap collides with the next all-to-all (and delays every later
    chunk); a gap larger than predicted only idles the link. So where the predicted gaps hold
    more than ``nbytes``, the slack is taken from the gaps whose length is uncertain: a gap of
    predicted length ``s`` and relative spread ``u`` (standard deviation of its length over
    ``s``) is planned at ``s * (1 - z * u)`` with one ``z >= 0`` for all gaps, the largest that
    still holds ``nbytes``; this fills every gap to the same quantile of its length, which
    minimises the expected bytes pushed into the training traffic for the bytes placed. Gaps
    without spread keep their length; without slack nothing shrinks.

    Args:
        gaps: (phase index, predicted idle seconds) in iteration order.
        spread: phase index -> relative spread of its length (missing: certain).
        nbytes: bytes per GPU to place.
        rate: bytes/s one GPU's chunk drains at while the network is idle.

    Returns:
        The gaps with their planned lengths, same order.
    """
    def planned(z: float) -> list[tuple[int, float]]:
        return [(phase, max(0.0, seconds) * max(0.0, 1.0 - z * spread.get(phase, 0.0))) for phase, seconds in gaps]

    def capacity(z: float) -> float:
        return rate * sum(seconds for _, seconds in planned(z))

    spreads = [spread.get(phase, 0.0) for phase, seconds in gaps if seconds > 0]
    widest = max((u for u in spreads if u > 0), default=0.0)
    if nbytes <= 0 or widest <= 0 or capacity(0.0) <= nbytes:
        return planned(0.0)
    low, high = 0.0, 1.0 / min(u for u in spreads if u > 0)  # at ``high`` every uncertain gap is empty
    if capacity(high) >= nbytes:
        return planned(high)
    for _ in range(60):  # capacity(z) falls as z grows: keep capacity(low) >= nbytes
        middle = 0.5 * (low + high)
        if capacity(middle) >= nbytes:
            low = middle
        else:
            high = middle
    return planned(low)


def gap_plan(
    facts: ClusterFacts,
    durations: Mapping[int, float],
    peers: int,
    fill: float = 1.0,
    spread: Mapping[int, float] | None = None,
) -> tuple[Chunk, ...]:
    """The chunk plan for a profile: gaps are the compute phases before the deadline.

    Args:
        facts: the job (phases, state size, rates).
        durations: profiled seconds per phase index (missing phases count as no gap).
        peers: remote replicas per node (sets the per-GPU drain rate).
        fill: fraction of each gap the chunks may take (headroom for latency and pipelining).
        spread: relative uncertainty of each gap's length; where given, the slack is taken
            from the uncertain gaps (:func:`hedge_gaps`) instead of left after the last chunk.
    """
    gaps = [
        (phase.index, durations.get(phase.index, 0.0))
        for phase in facts.phases
        if phase.kind == "compute" and phase.index < facts.optimizer_phase
    ]
    last = max((index for index, seconds in gaps if seconds > 0), default=0)
    rate = fill * facts.memory_rate(peers)
    if spread:
        gaps = hedge_gaps(gaps, spread, facts.state_bytes, rate)
    return fit_to_gaps(gaps, facts.state_bytes, rate, last)
