"""Per-link accounting: bytes carried, merged busy spans and utilisation counters.

Each directed link that carries traffic gets one trace track, ``("network", link.name)``, whose
spans are the merged intervals the link was busy (spans never overlap), and in flow mode a
counter series of the same name sampled with ``{"utilisation": fraction}`` whenever its load
changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simhpc.engine import Simulation, Track
from simhpc.engine.recorder import CounterSeries
from simhpc.network.topology import Topology


class LinkAccounting:
    """Byte counters for every link, and (when ``record``) its trace track and counter.

    Args:
        sim: the simulation whose trace receives the records.
        topology: the links accounted.
        record: record busy spans and utilisation counters in the trace.
        counters: with ``record``, the utilisation counters too.
        spans: with ``record``, keep every busy span (False: their count and time only, as
            metrics.csv needs: a :class:`~simhpc.engine.recorder.SpanTally` per link).
    """

    def __init__(self, sim: Simulation, topology: Topology, record: bool = True, counters: bool = True,
                 spans: bool = True) -> None:
        self.sim = sim
        self.topology = topology
        self.record = record
        self.counters = counters
        self.spans = spans
        count = len(topology.links)
        self._bytes = np.zeros(count)
        self._carried: dict[tuple[int, ...], float] = {}
        self._capacity = topology.capacities
        self._tracks: list[Track | None] = [None] * count
        self._utilisation: list[CounterSeries | None] = [None] * count
        self._busy = [False] * count

    def carried(self, path: tuple[int, ...], nbytes: float) -> None:
        """Count ``nbytes`` on every link of ``path`` (summed per path until read)."""
        self._carried[path] = self._carried.get(path, 0.0) + nbytes

    @property
    def bytes(self) -> np.ndarray:
        """Bytes carried by each link, indexed by link index."""
        if self._carried:
            for path, nbytes in self._carried.items():
                self._bytes[list(path)] += nbytes
            self._carried.clear()
        return self._bytes

    def _track(self, link: int) -> Track:
        track = self._tracks[link]
        if track is None:
            track = self.sim.trace.track("network", self.topology.links[link].name, tally=not self.spans)
            self._tracks[link] = track
        return track

    def busy(self, path: tuple[int, ...], start: float, end: float) -> None:
        """Mark every link of ``path`` busy over [start, end], merged with touching spans.

        Starts must come in non-decreasing order (the simulated time a transfer is issued).
        """
        for link in path:
            track = self._track(link)
            spans = track.spans
            if spans and start <= spans[-1].end:
                if end > spans[-1].end:
                    spans[-1].end = end
            else:
                track.span("busy", start, end, "network")

    def loads_changed(self, links: np.ndarray, loads: np.ndarray, now: float) -> None:
        """Record new link loads (bytes/s) at ``now``: utilisation samples and busy spans."""
        fractions = loads / self._capacity[links]
        series_of, busy_now, counters = self._utilisation, self._busy, self.counters
        for link, fraction in zip(links.tolist(), fractions.tolist()):
            if counters:
                series = series_of[link]
                if series is None:
                    series = series_of[link] = self.sim.trace.counter("network", self.topology.links[link].name)
                series.sample(now, {"utilisation": fraction})
            busy = fraction > 0.0
            if busy == busy_now[link]:
                continue
            busy_now[link] = busy
            track = self._track(link)
            if not busy:
                track.spans[-1].end = now
            elif not track.spans or track.spans[-1].end < now:  # else: idle for no time, reopen
                track.span("busy", now, now, "network")

    def close(self, now: float) -> None:
        """The run ends at ``now``: links still busy (flow mode) have their open spans end here."""
        for link in [link for link, busy in enumerate(self._busy) if busy]:
            self._busy[link] = False
            spans = self._track(link).spans
            spans[-1].end = max(spans[-1].end, now)

    def utilisation(self, makespan: float) -> np.ndarray:
        """Average utilisation of each link over ``[0, makespan]`` (bytes / capacity / time)."""
        if makespan <= 0:
            return np.zeros_like(self._bytes)
        return self.bytes / (self._capacity * makespan)

    def busiest(self, makespan: float, top: int) -> list[dict[str, Any]]:
        """The ``top`` links by bandwidth utilisation over the run (then bytes, then link index).

        ``bandwidth_utilisation`` is bytes / (capacity x makespan): a link that carried fewer bytes
        at a lower capacity (an oversubscribed spine) can be the busier one. ``metrics.csv``'s
        ``utilisation`` is another figure: the fraction of time a track was busy at all.
        """
        carried = self.bytes
        use = self.utilisation(makespan)
        order = np.lexsort((np.arange(carried.size), -carried, -use))[:top]
        links = self.topology.links
        return [
            {"link": links[i].name, "bytes": float(carried[i]), "bandwidth_utilisation": float(use[i])}
            for i in order.tolist()
            if carried[i] > 0
        ]
