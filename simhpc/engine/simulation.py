"""`Simulation`: a SimPy environment with seeded RNG streams, a trace and counters."""

from __future__ import annotations

import gc
import zlib
from collections import Counter
from collections.abc import Generator
from heapq import heappush
from typing import Any

import numpy as np
import simpy

from simhpc.engine.recorder import TraceRecorder

_NO_FULL_COLLECTION = 1 << 30
"""The oldest generation's collection threshold while :meth:`Simulation.run` runs: never reached."""


class Simulation:
    """One simulated run: the clock, randomness, trace and counters every component shares.

    Args:
        seed: the scenario seed. Each component draws from its own stream
            (:meth:`rng`), so adding a component never changes another's numbers.
    """

    def __init__(self, seed: int = 0) -> None:
        self.env = simpy.Environment()
        self.seed = int(seed)
        self.trace = TraceRecorder()
        self.counters: Counter[str] = Counter()
        self.events_processed = 0
        self._rngs: dict[str, np.random.Generator] = {}
        self._background = 0  # background timeouts scheduled and not yet processed

    @property
    def now(self) -> float:
        """Simulated time in seconds."""
        return self.env.now

    def rng(self, component: str) -> np.random.Generator:
        """The random stream of ``component``, derived from the seed and the name alone."""
        generator = self._rngs.get(component)
        if generator is None:
            key = zlib.crc32(component.encode("utf-8"))
            sequence = np.random.SeedSequence(entropy=self.seed, spawn_key=(key,))
            generator = np.random.Generator(np.random.PCG64(sequence))
            self._rngs[component] = generator
        return generator

    def process(self, generator: Generator[Any, Any, Any]) -> simpy.Process:
        """Start a SimPy process."""
        return self.env.process(generator)

    def timeout(self, delay: float, value: Any = None) -> simpy.Timeout:
        """An event that fires ``delay`` seconds from now."""
        return self.env.timeout(delay, value)

    def at(self, time: float) -> simpy.Event:
        """An event that fires at simulated time ``time`` (>= now) exactly.

        A timeout of ``time - now`` can land an ulp away (``now + (time - now)`` is not ``time``
        where ``time``'s ulp is larger than ``now``); a schedule timed in advance
        (:mod:`simhpc.network.analytic_ring`) must fire where a chain of timeouts would have.
        """
        env = self.env
        if not time >= env.now:
            raise ValueError(f"cannot schedule an event at {time!r}, before now ({env.now!r})")
        event = simpy.Event(env)
        event._ok = True  # triggered, as a Timeout is when made
        event._value = None
        heappush(env._queue, (time, simpy.events.NORMAL, next(env._eid), event))
        return event

    def event(self) -> simpy.Event:
        """A fresh event to be triggered by hand."""
        return self.env.event()

    def background_timeout(self, delay: float) -> simpy.Timeout:
        """A timeout that does not keep the run going: once only such timeouts are left,
        :meth:`run` ends, and a process waiting on one alone is not resumed (a failure due after
        the training is over must not stretch the run)."""
        timeout = self.env.timeout(delay)
        self._background += 1
        timeout.callbacks.append(self._background_processed)
        return timeout

    def _background_processed(self, event: simpy.Event) -> None:
        self._background -= 1

    @property
    def work_left(self) -> bool:
        """Whether events other than background timeouts are scheduled."""
        return len(self.env._queue) > self._background  # simpy's event heap

    def run(self, until: float | None = None) -> None:
        """Process events until only :meth:`background_timeout` ones remain (or simulated time
        reaches ``until``).

        Counts every processed event in :attr:`events_processed`. An exception raised inside
        a process (a simulated OOM, say) propagates from here.

        Python's collector makes no full collection while it runs (the young generations are
        collected as usual; the thresholds are restored after). A run keeps what it builds as it
        goes (routes, flows, trace records), and each full collection walks all of it: a 512-host
        all-to-all (261 632 routes) spent a third of its time in 18 of them (12.7-13.9 s, 7.9-9.7 s
        without), BERT-large on 128 / 256 nodes a tenth to a fifth (ring 6.4 -> 5.7 s, tree 6.7 -> 5.4 s), with
        the same peak memory; 1000 iterations of ``moe_demo`` left 30 objects of cyclic garbage for
        the next full collection.
        """
        env = self.env
        step = env.step
        queue = env._queue
        processed = 0
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], _NO_FULL_COLLECTION)
        try:  # each loop steps only while foreground events are queued: never on an empty queue
            if until is None:
                while len(queue) > self._background:
                    step()
                    processed += 1
            else:
                peek = env.peek
                while peek() < until and len(queue) > self._background:
                    step()
                    processed += 1
                env._now = max(env.now, float(until))
        finally:
            gc.set_threshold(*thresholds)
            self.events_processed += processed
