"""Max-min fair bandwidth sharing (progressive filling), incremental and vectorised.

:class:`FlowSolver` holds the active flows, each a set of link indices, and the max-min fair
rate of each: no flow can get more without taking from a flow that has no more than it.
Nothing here knows about SimPy.

:func:`max_min_rates` water-fills a padded ``flows x links`` index array with numpy. A link's
fair share is its remaining capacity over its unfrozen flows; shares never fall as flows
freeze. Rounds first freeze, all at once, the flows of every link whose share is no larger
(within a relative tolerance) than the share of any link it shares an unfrozen flow with: such
a link saturates at that level in sequential filling too. Once a round saturates too few links
to pay for touching every unfrozen flow (the bottlenecks form a long chain), the rest is filled
one level at a time: every link whose share equals the minimum within the tolerance freezes its
flows at that level, touching only those flows and the (compacted) links. A change recomputes
only the connected component of the links it touched: the flows linked to them through shared
links, transitively.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)

_LEVEL_COST = 600
"""Cost of one level-by-level step, in array elements a parallel round touches (measured)."""


def max_min_rates(flow_links: np.ndarray, capacity: np.ndarray, tolerance: float = 1e-12) -> np.ndarray:
    """Max-min fair rates by vectorised water-filling.

    Args:
        flow_links: ``(flows, width)`` link indices, rows padded with a sentinel link whose
            capacity is ``inf``. Every flow uses at least one real link, each link once.
        capacity: link capacities (bytes/s), including the sentinel. Work per level is
            proportional to its length: pass only the links in use (compacted).
        tolerance: shares within this relative distance count as equal (freeze together).

    Returns:
        The rate of each flow (bytes/s).
    """
    return _fill(np.ascontiguousarray(flow_links.T), capacity, tolerance)


def _fill(links: np.ndarray, capacity: np.ndarray, tolerance: float) -> np.ndarray:
    """:func:`max_min_rates` on a link-major ``(width, flows)`` array.

    Link-major because numpy reduces along the long axis far faster than across short rows.
    """
    rates = np.empty(links.shape[1])
    remaining = capacity.astype(float)
    unfrozen = np.arange(links.shape[1])
    while unfrozen.size:
        links, unfrozen, saturated = _parallel_round(links, unfrozen, remaining, rates, tolerance)
        if unfrozen.size and saturated * _LEVEL_COST < links.size:
            _level_by_level(links, unfrozen, remaining, rates, tolerance)
            break
    return rates


def _shares(remaining: np.ndarray, users: np.ndarray) -> np.ndarray:
    """Fair share of each link; ``inf`` where no unfrozen flow uses it."""
    return np.divide(remaining, users, out=np.full(remaining.size, math.inf), where=users > 0)


def _parallel_round(
    links: np.ndarray, unfrozen: np.ndarray, remaining: np.ndarray, rates: np.ndarray, tolerance: float
) -> tuple[np.ndarray, np.ndarray]:
    """Freeze the flows of every locally minimal link.

    Returns:
        The link-major columns and ids of the flows left, and the number of links saturated.
    """
    size, width = remaining.size, links.shape[0]
    flat = links.ravel()
    share = _shares(remaining, np.bincount(flat, minlength=size))
    flow_share = share[links].min(axis=0)
    neighbour = np.full(size, math.inf)
    np.minimum.at(neighbour, flat, np.tile(flow_share, width))
    bottleneck = share <= neighbour * (1.0 + tolerance)
    saturated = int(np.count_nonzero(bottleneck))
    freeze = bottleneck[links].any(axis=0)
    level = flow_share[freeze]
    rates[unfrozen[freeze]] = level
    remaining -= np.bincount(links[:, freeze].ravel(), weights=np.tile(level, width), minlength=size)
    np.maximum(remaining, 0.0, out=remaining)
    keep = ~freeze
    return links[:, keep], unfrozen[keep], saturated


def _level_by_level(
    links: np.ndarray, unfrozen: np.ndarray, remaining: np.ndarray, rates: np.ndarray, tolerance: float
) -> None:
    """Sequential progressive filling of the ``unfrozen`` flows (link-major columns ``links``)."""
    size, count = remaining.size, links.shape[1]
    flat = links.ravel()
    users = np.bincount(flat, minlength=size)
    by_link = np.argsort(flat, kind="stable") % count
    starts = np.concatenate(([0], np.cumsum(users)))
    users = users.astype(float)
    share = _shares(remaining, users)
    frozen = np.zeros(count, dtype=bool)
    left = count
    while left:
        level = share.min()
        saturated = np.flatnonzero(share <= level * (1.0 + tolerance)).tolist()
        rows = np.concatenate([by_link[starts[i] : starts[i + 1]] for i in saturated])
        rows = rows[~frozen[rows]]
        if len(saturated) > 1:
            rows = np.unique(rows)
        rates[unfrozen[rows]] = level
        frozen[rows] = True
        left -= rows.size
        hit = np.bincount(links[:, rows].ravel(), minlength=size)
        remaining -= level * hit
        np.maximum(remaining, 0.0, out=remaining)
        users -= hit
        share = _shares(remaining, users)


class FlowSolver:
    """Active flows over capacitated links and their max-min fair rates.

    Changes are batched: :meth:`add` and :meth:`remove` only record the change, and
    :meth:`update` (called by :attr:`rates` and :meth:`rate`) recomputes the components of the
    links they touched. Each flow occupies a slot (a small integer, reused after removal)
    that indexes :attr:`rate_array`.

    Args:
        capacities: capacity of each link (bytes/s, finite, > 0), indexed by link index.
        tolerance: relative tolerance for equal fair shares (ties freeze together).
    """

    def __init__(self, capacities: Sequence[float] | np.ndarray, tolerance: float = 1e-12) -> None:
        caps = np.asarray(capacities, dtype=float)
        if caps.ndim != 1 or not np.all(np.isfinite(caps)) or np.any(caps <= 0):
            raise ValueError("link capacities must be a 1-D sequence of finite numbers > 0")
        self.tolerance = tolerance
        self.link_count = caps.size
        self._capacity = np.append(caps, math.inf)
        self._sentinel = caps.size
        self._links = np.full((4, 16), self._sentinel, dtype=np.int64)  # link-major: (width, slots)
        self._rate = np.zeros(16)
        self._load = np.zeros(caps.size + 1)
        self._used = 0
        self._free: list[int] = []
        self._slot: dict[Hashable, int] = {}
        self._paths: list[np.ndarray | None] = []
        self._added: list[int] = []
        self._removed: list[int] = []
        self._dirty: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, flow_id: Hashable) -> bool:
        return flow_id in self._slot

    @property
    def capacity(self) -> int:
        """Number of slots allocated (arrays indexed by slot have this length)."""
        return self._rate.size

    @property
    def rate_array(self) -> np.ndarray:
        """Rate by slot as of the last :meth:`update` (0 for free slots)."""
        return self._rate

    @property
    def link_load(self) -> np.ndarray:
        """Sum of flow rates on each link as of the last :meth:`update`."""
        return self._load[: self.link_count]

    @property
    def rates(self) -> dict[Hashable, float]:
        """Rate of every active flow (bytes/s), after applying pending changes."""
        self.update()
        return {flow_id: float(self._rate[slot]) for flow_id, slot in self._slot.items()}

    def rate(self, flow_id: Hashable) -> float:
        """Rate of one flow (bytes/s), after applying pending changes."""
        self.update()
        return float(self._rate[self._slot[flow_id]])

    def slot(self, flow_id: Hashable) -> int:
        """The slot of an active flow."""
        return self._slot[flow_id]

    def links_of(self, flow_id: Hashable) -> tuple[int, ...]:
        """The links of an active flow."""
        return tuple(self._paths[self._slot[flow_id]].tolist())  # type: ignore[union-attr]

    def add(self, flow_id: Hashable, links: Sequence[int] | np.ndarray, *, check: bool = True) -> int:
        """Start a flow; returns its slot.

        Args:
            flow_id: any hashable not already active.
            links: distinct link indices, at least one.
            check: validate ``links`` (callers passing known-good routes may skip it).
        """
        if flow_id in self._slot:
            raise ValueError(f"flow {flow_id!r} is already active")
        path = np.asarray(links, dtype=np.int64)
        if check:
            values = path.tolist() if path.ndim == 1 else []
            if not values:
                raise ValueError(f"flow {flow_id!r} uses no link")
            if min(values) < 0 or max(values) >= self._sentinel:
                raise ValueError(f"flow {flow_id!r}: link index out of range 0..{self._sentinel - 1}")
            if len(set(values)) != len(values):
                raise ValueError(f"flow {flow_id!r} uses a link twice: {values}")
        if self._free:
            slot = self._free.pop()
            self._paths[slot] = path
        else:
            slot = self._used
            self._used += 1
            self._paths.append(path)
            if slot >= self._rate.size:
                self._links = np.hstack([self._links, np.full_like(self._links, self._sentinel)])
                self._rate = np.concatenate([self._rate, np.zeros(self._rate.size)])
        self._slot[flow_id] = slot
        self._added.append(slot)
        self._dirty.append(path)
        return slot

    def remove(self, flow_id: Hashable) -> int:
        """End a flow; returns the slot it freed."""
        slot = self._slot.pop(flow_id)
        path = self._paths[slot]
        assert path is not None
        self._dirty.append(path)
        self._paths[slot] = None
        self._removed.append(slot)
        self._free.append(slot)
        return slot

    def _flush(self) -> None:
        """Write pending additions and removals into the slot arrays."""
        if self._removed:
            gone = np.array(self._removed)
            self._links[:, gone] = self._sentinel
            self._rate[gone] = 0.0
            self._removed.clear()
        if self._added:
            slots = sorted({slot for slot in self._added if self._paths[slot] is not None})
            self._added.clear()
            if not slots:
                return
            paths = [self._paths[slot] for slot in slots]
            lengths = np.array([path.size for path in paths])  # type: ignore[union-attr]
            if lengths.max() > self._links.shape[0]:
                extra = np.full((lengths.max() - self._links.shape[0], self._links.shape[1]), self._sentinel)
                self._links = np.vstack([self._links, extra])
            columns = np.repeat(slots, lengths)
            offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
            self._links[:, slots] = self._sentinel
            self._links[np.arange(columns.size) - offsets, columns] = np.concatenate(paths)  # type: ignore[arg-type]

    def update(self) -> tuple[np.ndarray, np.ndarray]:
        """Recompute the rates of the components touched since the last update.

        Returns:
            The slots whose rate changed (sorted; removed flows excluded) and the links whose
            load changed (sorted).
        """
        self._flush()
        if not self._dirty:
            return _EMPTY, _EMPTY
        dirty = np.concatenate(self._dirty)
        self._dirty.clear()
        links = self._links[:, : self._used]
        slots, touched = self._component(links, dirty)
        old_load = self._load[touched]
        self._load[touched] = 0.0
        if slots.size == 0:
            return _EMPTY, touched[old_load != 0.0]
        columns = links[:, slots]
        compact = np.full(self._sentinel + 1, touched.size)
        compact[touched] = np.arange(touched.size)
        capacity = np.append(self._capacity[touched], math.inf)
        new = _fill(compact[columns], capacity, self.tolerance)
        changed = slots[new != self._rate[slots]]
        self._rate[slots] = new
        load = np.bincount(
            columns.ravel(), weights=np.tile(new, columns.shape[0]), minlength=self._sentinel + 1
        )
        self._load[touched] = load[touched]
        return changed, touched[self._load[touched] != old_load]

    def _component(self, links: np.ndarray, dirty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flows connected to the ``dirty`` links through shared links, and all their links."""
        marked = np.zeros(self._sentinel + 1, dtype=bool)
        marked[dirty] = True
        member = np.zeros(links.shape[1], dtype=bool)
        found, active = 0, len(self._slot)
        while found < active:
            reached = marked[links].any(axis=0)
            reached &= ~member
            new = int(np.count_nonzero(reached))
            if not new:
                break
            found += new
            member |= reached
            marked[links[:, reached]] = True
            marked[self._sentinel] = False
        return np.flatnonzero(member), np.flatnonzero(marked[: self._sentinel])
