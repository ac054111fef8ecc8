"""Where a node's in-memory replicas live: Gemini's group placement, else a ring."""

from __future__ import annotations


def replica_peers(nodes: int, replicas: int, strategy: str = "group") -> tuple[tuple[int, ...], ...]:
    """The nodes holding each node's remote replicas.

    ``group`` (Gemini, SOSP'23, when ``replicas`` divides ``nodes``): nodes form groups of
    ``replicas`` consecutive nodes and each keeps a replica of every member's checkpoint; a
    checkpoint is lost only if a whole group fails. Otherwise (or ``ring``): node ``i``'s
    replicas go to ``i+1, ..., i+replicas-1`` (mod ``nodes``).

    Args:
        nodes: machines.
        replicas: copies of each checkpoint, the local one included (capped at ``nodes``).
        strategy: ``"group"`` or ``"ring"``.

    Returns:
        ``peers[i]``: the remote holders of node ``i``'s checkpoint (``replicas - 1`` nodes).
    """
    if nodes < 1 or replicas < 1:
        raise ValueError(f"need nodes >= 1 and replicas >= 1, got {nodes} and {replicas}")
    if strategy not in ("group", "ring"):
        raise ValueError(f"placement must be 'group' or 'ring', got {strategy!r}")
    copies = min(replicas, nodes)
    if strategy == "group" and nodes % copies == 0:
        return tuple(
            tuple(m for m in range(i - i % copies, i - i % copies + copies) if m != i) for i in range(nodes)
        )
    return tuple(tuple((i + k) % nodes for k in range(1, copies)) for i in range(nodes))
