import gc

import pytest

from simhpc.engine import Simulation
from simhpc.errors import SimulatedOOM
from simhpc.hardware.devices import Device


def test_rng_streams_depend_on_seed_and_name_only():
    a, b = Simulation(seed=7), Simulation(seed=7)
    b.rng("other").random(100)  # drawing from another stream changes nothing
    assert a.rng("gate").random(5).tolist() == b.rng("gate").random(5).tolist()
    assert Simulation(seed=8).rng("gate").random(5).tolist() != a.rng("gate").random(5).tolist()
    assert a.rng("x").random() != a.rng("y").random()


def test_run_counts_events_and_stops_at_until():
    sim = Simulation()

    def ticker():
        for _ in range(10):
            yield sim.timeout(1.0)

    sim.process(ticker())
    sim.run(until=4.5)
    assert sim.now == 4.5
    first = sim.events_processed
    sim.run()
    assert sim.now == 10.0
    # 10 timeouts + process init + process end
    assert sim.events_processed == 12 > first


def test_an_event_at_a_time_fires_there_exactly_where_a_timeout_may_not():
    sim = Simulation()
    fired = []

    def late():
        yield sim.timeout(1.0)
        target = 2.0**53 + 2  # where a timeout of target - now does not land: its ulp is 2
        assert sim.now + (target - sim.now) != target
        yield sim.at(target)
        fired.append(sim.now)
        yield sim.at(sim.now)  # now itself is allowed
        with pytest.raises(ValueError, match="before now"):
            sim.at(sim.now / 2)

    sim.process(late())
    sim.run()
    assert fired == [2.0**53 + 2]


def test_a_run_makes_no_full_collection_and_restores_the_collectors_thresholds():
    """While events run the oldest generation is never collected (each full collection walks every
    route and record a run has kept); the young ones are, and the thresholds come back after, an
    error included."""
    sim = Simulation()
    seen = []

    def watcher(fail: bool):
        seen.append(gc.get_threshold())
        yield sim.timeout(1.0)
        if fail:
            raise RuntimeError("raised inside the run")

    before = gc.get_threshold()
    sim.process(watcher(False))
    sim.run()
    sim.process(watcher(True))
    with pytest.raises(RuntimeError):
        sim.run()
    assert gc.get_threshold() == before
    assert len(seen) == 2 and all(during[:2] == before[:2] and during[2] > 10**8 for during in seen)


def test_background_timeouts_do_not_keep_the_run_going():
    sim = Simulation()
    fired = []

    def watcher():
        yield sim.background_timeout(100.0)
        fired.append(sim.now)

    def work():
        yield sim.timeout(1.0)
        yield sim.env.any_of([sim.background_timeout(0.5), sim.timeout(1.0)])  # the first fires
        fired.append(sim.now)
        yield sim.timeout(1.0)

    sim.process(watcher())
    sim.process(work())
    sim.run()
    assert sim.now == pytest.approx(2.5) and fired == [1.5] and not sim.work_left


def test_stream_serialises_work_and_records_spans():
    sim = Simulation()
    gpu = Device(sim, "gpu0", memory_capacity=100.0)
    stream = gpu.stream("compute")

    def job(name, duration):
        yield from stream.run(name, duration)

    for i in range(3):
        sim.process(job(f"k{i}", 1.0))
    sim.run()
    spans = stream.track.spans
    assert [(s.start, s.end) for s in spans] == [(0, 1), (1, 2), (2, 3)]
    assert stream.track.busy_time() == 3.0


def test_overlapping_span_is_rejected():
    sim = Simulation()
    track = sim.trace.track("p", "t")
    track.span("a", 0.0, 2.0)
    with pytest.raises(ValueError, match="overlaps"):
        track.span("b", 1.0, 3.0)


def test_memory_account_peak_and_oom():
    sim = Simulation()
    device = Device(sim, "gpu0", memory_capacity=100.0)
    device.memory.allocate(60, "weights")
    device.memory.free(20)
    device.memory.allocate(50, "activations")
    assert device.memory.peak == 90
    with pytest.raises(SimulatedOOM, match="gpu0: optimizer needs"):
        device.memory.allocate(20, "optimizer")
    assert device.memory.used == 90
    with pytest.raises(ValueError):
        device.memory.free(1000)
