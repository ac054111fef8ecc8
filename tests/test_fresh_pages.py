"""Fresh pages from a trace's memory events: which allocations map new memory, and who pays."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from simhpc.cli.main import main
from simhpc.costs.calibration_file import host_specs
from simhpc.costs.model import CostModel
from simhpc.trace.compare import Comparison, compare_trace
from simhpc.trace.fresh_pages import HeapRule, PageSet, capture_page_faults, fresh_allocations, heap_rule
from simhpc.trace.readers import MemoryEvent, parse_trace, read_trace
from tests.test_fresh_memory import PER_PAGE_S, _calibration, _op

PAGE = 4096
HEAP = 0x5555_0000_0000
"""A heap address, page-aligned (blocks start some way into a page, as malloc's do)."""
MAPPED = 0x7F00_0000_0000 + 64
"""Where a block malloc maps on its own starts: a page boundary, plus 64 (PyTorch's alignment)."""


def test_page_set_agrees_with_a_set_of_pages() -> None:
    pages, model = PageSet(), set()
    rng = random.Random(7)
    for _ in range(400):
        first = rng.randrange(0, 200)
        end = first + rng.randrange(1, 40)
        probe = rng.randrange(0, 200)
        probe_end = probe + rng.randrange(1, 60)
        assert pages.covered(probe, probe_end) == len(model & set(range(probe, probe_end)))
        if rng.random() < 0.6:
            pages.add(first, end)
            model |= set(range(first, end))
        else:
            pages.remove(first, end)
            model -= set(range(first, end))
    assert pages.covered(0, 300) == len(model)


def _fresh(events: list[MemoryEvent], rule: HeapRule) -> list[tuple[float, int]]:
    return [(event.time, nbytes) for event, nbytes in fresh_allocations(events, rule)]


def test_heap_pages_are_fresh_only_when_no_earlier_block_covered_them_after_the_first_step() -> None:
    block = 64 * PAGE
    events = [
        MemoryEvent(0.1, HEAP + 128, block),  # first step: may have served the steps before
        MemoryEvent(0.2, HEAP + 128, -block),
        MemoryEvent(1.1, HEAP + 128, block),  # the same pages again: touched
        MemoryEvent(1.2, HEAP + 128 + block, block),  # the heap grew: 64 new pages (one shared)
        MemoryEvent(1.3, HEAP + 128, -block),
        MemoryEvent(2.1, HEAP + 128 + block, block // 2),  # inside the grown part: touched
    ]
    assert _fresh(events, HeapRule(warm_until=1.0)) == [(1.2, 64 * PAGE)]


def test_a_block_mapped_on_its_own_is_fresh_every_time_it_is_allocated() -> None:
    block = 1 << 20
    events = []
    for step in range(3):
        events += [MemoryEvent(step + 0.1, MAPPED, block), MemoryEvent(step + 0.2, MAPPED, -block)]
    expected = [(step + 0.1, block + PAGE) for step in range(3)]  # 64 bytes in: one more page
    assert _fresh(events, HeapRule(warm_until=math.inf)) == expected


def _with_unmap(per_page: float):
    """The test calibration (:func:`tests.test_fresh_memory._calibration_data`) with ``unmap``
    points of ``per_page`` seconds a page at 1 and 2 threads, as a torch cost model's efficiency."""
    from simhpc.costs.calibration import CalibratedEfficiency
    from simhpc.costs.calibration_file import validate
    from tests.test_fresh_memory import _calibration_data

    data = _calibration_data()
    data["kernels"]["unmap"] = [{"threads": t, "pages": 16384, "page_bytes": PAGE, "time_s": 16384 * per_page}
                                for t in (1, 2)]
    return CalibratedEfficiency(validate(data, "cal.json"), blas="torch")


def test_freeing_a_block_mapped_on_its_own_unmaps_it_and_the_step_pays_for_it() -> None:
    """glibc unmaps a block it mapped on its own when it is freed: each such free in a profiled
    step adds the calibration's ``unmap`` cost of the pages written into it to the predicted step
    (between ops or inside one: no op's prediction has it); a heap block's free, or one outside the
    steps, adds nothing, and a block freed moments after it was mapped holds few pages."""
    from simhpc.trace.fresh_pages import unmapped_blocks

    block, per_page = 64 << 20, 2.5e-7
    step = {"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100_000,
            "cat": "user_annotation"}
    memory = [
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t", "cat": "cpu_instant_event",
         "args": {"Addr": address, "Bytes": size}}
        for ts, address, size in ((10, MAPPED, block), (50_000, MAPPED, -block),  # mapped alone: unmapped
                                  (20, HEAP + 128, 1 << 20), (60_000, HEAP + 128, -(1 << 20)),  # a heap block
                                  (100_010, MAPPED, block), (100_020, MAPPED, -block))  # after the step
    ]
    trace = parse_trace({"traceEvents": [step, _op("aten::relu", 5, 90_000, [[16, 64, 112, 112]]), *memory],
                         "simhpc_capture": {"model": "test"}}, "unmap.json")
    pages = block // PAGE + 1  # 64 bytes into its first page
    unmapped = unmapped_blocks(trace)
    assert [event.size for event in unmapped] == [pages * PAGE, pages * PAGE]
    assert [event.time for event in unmapped] == pytest.approx([0.05, 0.10002])
    # at PER_PAGE_S a fault, the block freed 10 us after it was mapped had written 3 pages
    assert [event.size for event in unmapped_blocks(trace, PER_PAGE_S)] == [pages * PAGE, 3 * PAGE]
    efficiency = _with_unmap(per_page)
    cpu, _ = host_specs(efficiency.calibration)
    with_unmap = compare_trace(trace, CostModel(efficiency), cpu, 1)
    assert with_unmap.unmap_s == pytest.approx(pages * per_page)
    without = compare_trace(trace, CostModel(_calibration()), cpu, 1)
    assert without.unmap_s == 0.0
    assert with_unmap.predicted_step_s - without.predicted_step_s == pytest.approx(with_unmap.unmap_s)
    assert with_unmap.summary()["unmap_s"] == with_unmap.unmap_s
    # a plain script's trace (glibc's defaults) gives back every page its step wrote fresh, the
    # block's among them, once: here the block's alone (the heap block's pages may have served before)
    plain = parse_trace({"traceEvents": [step, _op("aten::relu", 5, 90_000, [[16, 64, 112, 112]]), *memory]},
                        "plain.json")
    given_back = compare_trace(plain, CostModel(efficiency), cpu, 1)
    assert given_back.fresh_pages_per_step == pages
    assert given_back.unmap_s == pytest.approx(pages * per_page)


def test_a_plain_trace_gives_back_by_heap_trims_every_page_its_steps_write_fresh() -> None:
    """With glibc's defaults (a trace without ``simhpc_capture``) a heap page written fresh in a
    step was given back to the kernel by a trim: the step pays the calibration's ``unmap`` cost for
    every fresh page an op is charged, those charged as the heap's growth reported apart; a capture
    whose malloc keeps freed memory pays only for blocks mapped on their own (none here)."""
    per_page = 2.5e-7
    efficiency = _with_unmap(per_page)
    cpu, _ = host_specs(efficiency.calibration)
    steps = [{"ph": "X", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": 100_000 * (n - 2), "dur": 100_000,
              "cat": "user_annotation"} for n in (2, 3)]
    gelus = [_op("aten::gelu", ts, 500, [SHAPE]) for ts in (100, 100_100)]
    # the same block in both steps, its step's largest: charged as the heap's growth in each (a trim
    # may have given its pages back, before the first profiled step too)
    memory = [_memory(ts, HEAP + 128, size) for ts, size in ((150, BYTES), (700, -BYTES), (100_150, BYTES),
                                                              (100_700, -BYTES))]
    events = [*steps, *gelus, *memory]
    plain = compare_trace(parse_trace({"traceEvents": events}, "plain.json"), CostModel(efficiency), cpu, 1)
    pages = BYTES // PAGE  # the block's own bytes
    assert plain.fresh_pages_per_step == pages
    assert plain.unmap_s == plain.heap_growth_unmap_s == pytest.approx(pages * per_page)
    assert plain.summary()["heap_growth_unmap_s"] == plain.heap_growth_unmap_s
    kept = compare_trace(parse_trace({"traceEvents": events, "simhpc_capture": {"heap_end": HEAP}}, "kept.json"),
                         CostModel(efficiency), cpu, 1)
    assert kept.fresh_pages_per_step > 0 and kept.unmap_s == 0.0


@pytest.mark.parametrize("address, size", [
    (HEAP + 64, 1 << 20),  # a heap block may start 64 bytes into a page, on pages it used before
    (HEAP + (4 << 20) + 64, 1 << 20),  # or on new ones, near the heap's other blocks
    (MAPPED, 64 << 10),  # below glibc's smallest mmap threshold: from the heap
])
def test_blocks_that_cannot_be_mapped_alone_are_heap_blocks(address: int, size: int) -> None:
    events = [MemoryEvent(0.1, HEAP + 128, 2 << 20), MemoryEvent(0.2, HEAP + 128, -(2 << 20))]
    for step in (1, 2):
        events += [MemoryEvent(step + 0.1, address, size), MemoryEvent(step + 0.2, address, -size)]
    fresh = _fresh(events, HeapRule(warm_until=0.5))
    assert [time for time, _ in fresh] in ([], [1.1])  # fresh when first covered at most; never again


def test_below_the_recorded_heap_end_no_page_is_fresh_and_the_first_step_counts() -> None:
    events = [MemoryEvent(0.1, HEAP + 64, 8 * PAGE), MemoryEvent(0.2, HEAP + 64, -8 * PAGE)]
    # the heap ended 4 pages in: pages 4 to 8 of the block are new, even in the first step
    assert _fresh(events, HeapRule(warm_until=-math.inf, heap_end=HEAP + 4 * PAGE)) == [(0.1, 5 * PAGE)]


def test_a_capture_scripts_trace_says_where_its_heap_ended_and_its_mmap_threshold() -> None:
    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "cat": "user_annotation"}
    plain = parse_trace({"traceEvents": [step]}, "plain.json")
    assert heap_rule(plain) == HeapRule(warm_until=pytest.approx(100e-6))
    captured = parse_trace({"traceEvents": [step], "simhpc_capture": {
        "heap_end": HEAP, "malloc": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20)}}}, "captured.json")
    assert heap_rule(captured) == HeapRule(-math.inf, HEAP, 32 << 20)
    older = parse_trace({"traceEvents": [step], "simhpc_capture": {"malloc": {}}}, "older.json")
    assert heap_rule(older) == HeapRule()  # its process ran other captures first: no heap page known fresh


def _memory(ts: float, address: int, size: int) -> dict:
    return {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Addr": address, "Bytes": size, "Device Type": 0}}


SHAPE = [256, 1024]
BYTES = 256 * 1024 * 4


def _compare(events: list[dict]) -> Comparison:
    """``compare`` of a plain trace of two profiler steps (100 ms each) around ``events``, at 1 thread."""
    steps = [{"ph": "X", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": 100_000 * (n - 2), "dur": 100_000,
              "cat": "user_annotation"} for n in (2, 3)]
    trace = parse_trace({"traceEvents": [*steps, *events]}, "mem.json")
    efficiency = _calibration()
    cpu, _ = host_specs(efficiency.calibration)
    return compare_trace(trace, CostModel(efficiency), cpu, 1)


def _script(name: str) -> ModuleType:
    """``validation/traces/NAME.py``, loaded as a module (it needs torch)."""
    path = Path(__file__).resolve().parents[1] / "validation" / "traces" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _charged(events: list[dict]) -> dict[str, list[float]]:
    """Each op's predicted page-fault seconds, in a trace of two profiler steps around ``events``."""
    comparison = _compare(events)
    assert comparison.first_touch_basis == "memory events"
    charged: dict[str, list[float]] = {}
    for prediction in comparison.predictions:
        charged.setdefault(prediction.op.name, []).append(prediction.first_touch_s)
    return charged


def test_the_op_running_when_its_output_was_allocated_pays_for_the_grown_heap() -> None:
    grown = HEAP + BYTES + 192  # above the first step's block: fresh pages
    comparison = _compare([
        _op("aten::gelu", 1_000, 500, [SHAPE]), _memory(1_100, HEAP + 128, BYTES),
        _op("aten::gelu", 101_000, 500, [SHAPE]), _memory(101_100, grown, BYTES),
    ])
    pages = (grown + BYTES - 1) // PAGE - grown // PAGE + 1 - 1  # its first page was the block's before
    first, second = (p for p in comparison.predictions if p.op.name == "aten::gelu")
    assert second.first_touch_s == pytest.approx(pages * PER_PAGE_S) and second.heap_growth_s == 0.0
    # the first step's block, on pages its events cannot call fresh, is its step's largest heap block
    assert first.first_touch_s == first.heap_growth_s == pytest.approx(BYTES // PAGE * PER_PAGE_S)


def test_a_zeros_tensor_is_paid_by_the_fill_that_writes_it() -> None:
    charged = _charged([
        _op("aten::zeros", 101_000, 300, [[]], ["ScalarList"], [str(SHAPE)]),
        _op("aten::empty", 101_010, 20, [[]], ["ScalarList"], [str(SHAPE)]), _memory(101_015, MAPPED, BYTES),
        _op("aten::fill_", 101_040, 250, [SHAPE, []], ["float", "Scalar"], ["", "0"]),
    ])
    assert charged["aten::fill_"] == [pytest.approx((BYTES // PAGE + 1) * PER_PAGE_S)]
    assert charged["aten::zeros"] == charged["aten::empty"] == [0.0]


def test_addmm_output_is_paid_by_the_copy_of_its_bias() -> None:
    charged = _charged([
        _op("aten::addmm", 101_000, 800, [[1024], [256, 512], [512, 1024], [], []]),
        _op("aten::empty", 101_010, 20, [[]], ["ScalarList"], [str(SHAPE)]), _memory(101_015, MAPPED, BYTES),
        _op("aten::copy_", 101_040, 100, [SHAPE, [1024], []], ["float", "float", "Scalar"]),
    ])
    assert charged["aten::copy_"] == [pytest.approx((BYTES // PAGE + 1) * PER_PAGE_S)]
    assert charged["aten::addmm"] == [0.0]


def test_a_pooling_backwards_gradient_is_paid_by_the_fill_under_its_zero() -> None:
    """A max-pool backward allocates its input's gradient, then zeroes it (``zero_`` -> ``fill_``)
    before scattering into it: the ``fill_``, two levels down, writes the block first."""
    pooled, dims = [16, 64, 56, 56], [16, 64, 112, 112]
    nbytes = 16 * 64 * 112 * 112 * 4
    charged = _charged([
        _op("aten::max_pool2d_with_indices_backward", 101_000, 30_000, [pooled, dims, [], [], [], [], [], pooled]),
        _op("aten::empty", 101_010, 20, [[]], ["ScalarList"], [str(dims)]), _memory(101_015, MAPPED, nbytes),
        _op("aten::zero_", 101_050, 25_000, [dims]),
        _op("aten::fill_", 101_055, 24_990, [dims, []], ["float", "Scalar"], ["", "0"]),
    ])
    assert charged["aten::fill_"] == [pytest.approx((nbytes // PAGE + 1) * PER_PAGE_S)]
    assert charged["aten::max_pool2d_with_indices_backward"] == [0.0]


def test_a_block_freed_soon_takes_no_more_faults_than_fit_in_its_life() -> None:
    """A batch norm's backward allocates a block of its input's size and frees it 20 us later,
    unwritten: at 3 us a fault, no more than 6 of its 12 545 pages can have been written."""
    dims = [16, 64, 112, 112]
    nbytes = 16 * 64 * 112 * 112 * 4
    charged = _charged([
        _op("aten::native_batch_norm_backward", 101_000, 30_000, [dims, dims, [64]]),
        _memory(101_050, MAPPED, nbytes), _memory(101_070, MAPPED, -nbytes),
        _memory(101_072, MAPPED + (64 << 20), nbytes),  # the block it returns, written
    ])
    assert charged["aten::native_batch_norm_backward"] == [pytest.approx((nbytes // PAGE + 1 + 6) * PER_PAGE_S)]


def test_heap_pages_a_short_lived_block_left_unwritten_stay_fresh() -> None:
    block = 64 * PAGE
    events = [
        MemoryEvent(1.0, HEAP + 128, block), MemoryEvent(1.0 + 10e-6, HEAP + 128, -block),  # 3 pages' faults at most
        MemoryEvent(1.1, HEAP + 128, block),  # the same pages, now written
    ]
    fresh = [(event.time, nbytes) for event, nbytes in fresh_allocations(events, HeapRule(warm_until=0.5), 3e-6)]
    assert fresh == [(1.0, 3 * PAGE), (1.1, 65 * PAGE)]
    assert _fresh(events, HeapRule(warm_until=0.5)) == [(1.0, 65 * PAGE)]  # without a fault's cost: no bound


def test_a_capture_records_where_its_heap_ended(tmp_path: Path) -> None:
    """``capture.py`` records the program break as recording begins: heap pages below it served the
    captures and steps before, and no page below it counts as fresh. It records the page faults of
    the recorded steps too, which the fresh pages found in the memory events account for. The
    script runs as a user runs it, in a process of its own with its glibc settings: in the test
    process, with glibc's defaults and whatever earlier tests left in the heap, the count was up to
    2.4x the events' fresh pages."""
    pytest.importorskip("torch")
    script = Path(__file__).resolve().parents[1] / "validation" / "traces" / "capture.py"
    subprocess.run([sys.executable, str(script), "--models", "mlp", "--threads", "1", "--steps", "2",
                    "--repeat", "1", "--out", str(tmp_path)], check=True, capture_output=True, timeout=300)
    trace = read_trace(tmp_path / "mlp_t1.json")
    heap_end = trace.metadata["simhpc_capture"]["heap_end"]
    assert heap_end > 0
    rule = heap_rule(trace)
    assert (rule.heap_end, rule.warm_until) == (heap_end, -math.inf)
    fresh = 0
    for event, nbytes in fresh_allocations(trace.memory, rule):
        above = event.address + event.size - max(event.address, heap_end)
        assert nbytes <= max(0, above) + 2 * PAGE
        fresh += nbytes // PAGE
    counted = capture_page_faults(trace)  # the process's own count: the events' fresh pages are most of it
    assert counted is not None and abs(fresh - counted) <= 0.1 * counted + 64


@pytest.mark.parametrize("faults", [-1, 2.5, "12", True])
def test_a_malformed_page_fault_count_is_an_error_naming_the_field(tmp_path: Path, faults: object) -> None:
    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000, "cat": "user_annotation"}
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps({"traceEvents": [step, _op("aten::gelu", 100, 500, [SHAPE])],
                                 "simhpc_capture": {"page_faults": faults}}))
    result = CliRunner().invoke(main, ["compare", str(trace), "--threads", "1"])
    assert result.exit_code == 2 and "simhpc_capture.page_faults" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("record, field", [
    ({"heap_end": "0x55d8"}, "simhpc_capture.heap_end"),
    ({"heap_end": -4096}, "simhpc_capture.heap_end"),
    ({"malloc": {"MALLOC_MMAP_THRESHOLD_": "32M"}}, "simhpc_capture.malloc.MALLOC_MMAP_THRESHOLD_"),
])
def test_a_malformed_heap_record_is_an_error_naming_the_field(tmp_path: Path, record: dict, field: str) -> None:
    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000, "cat": "user_annotation"}
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps({"traceEvents": [step, _op("aten::gelu", 100, 500, [SHAPE]), _memory(150, HEAP, BYTES)],
                                 "simhpc_capture": record}))
    result = CliRunner().invoke(main, ["compare", str(trace), "--threads", "1"])
    assert result.exit_code == 2 and field in result.output
    assert "Traceback" not in result.output


def test_a_plain_scripts_capture_is_charged_from_its_memory_events(tmp_path: Path, monkeypatch) -> None:
    """``plain_capture.py`` profiles as a user's script would (no ``simhpc_capture`` key, glibc's
    defaults): ``compare`` finds its fresh pages from its memory events, first step left out."""
    pytest.importorskip("torch")
    plain = _script("plain_capture")
    out = tmp_path / "mixer_t1.json"
    monkeypatch.setattr("sys.argv", ["plain_capture.py", "mixer", "--out", str(out)])
    plain.main()
    trace = read_trace(out)
    assert trace.memory and "simhpc_capture" not in trace.metadata and len(trace.steps) == 10
    assert heap_rule(trace).warm_until == pytest.approx(trace.steps[0].start + trace.steps[0].duration)
    result = CliRunner().invoke(main, ["compare", str(out), "--threads", "1", "--json", "-o", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["first_touch_basis"].startswith("memory events")
    assert summary["ops_modelled"] > 0.95 * summary["ops_total"]


def test_a_plain_capture_without_memory_events_is_charged_its_steps_largest_heap_blocks(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """Without allocation events the MLP-mixer's 4 MB blocks (its largest: the 1024 x 1024 layer's
    weight gradient and two Adam temporaries a step) are charged as fresh, and the script prints the
    page faults ``getrusage`` counted in each step (3072 a step in the last ones run on their own on
    the Zen 4 guest; a process that ran other tests first has another heap)."""
    pytest.importorskip("torch")
    plain = _script("plain_capture")
    out = tmp_path / "mixer_t1.json"
    monkeypatch.setattr("sys.argv", ["plain_capture.py", "mixer", "--no-memory", "--out", str(out)])
    plain.main()
    counted = json.loads(capsys.readouterr().out.split("last: ")[-1])
    result = CliRunner().invoke(main, ["compare", str(out), "--threads", "1", "--json", "-o", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["first_touch_basis"] == "shapes and heap growth"
    assert summary["fresh_pages_per_step"] == 3 * (4 << 20) // PAGE
    assert len(counted) == 12 and all(isinstance(faults, int) and faults >= 0 for faults in counted)


def test_every_plain_capture_model_trains_a_step_on_its_own_loss() -> None:
    """Each model of ``plain_capture.py`` (the held-out ones of session 35 take a tuple of inputs or
    another loss) runs a forward, its loss and a backward on its batch."""
    torch = pytest.importorskip("torch")
    plain = _script("plain_capture")
    torch.manual_seed(0)
    for name in plain.MODELS:
        model, inputs, labels = plain.model_and_batch(name)
        loss = plain.loss_of(name)(model(inputs), labels)
        loss.backward()
        assert loss.dim() == 0 and torch.isfinite(loss), name
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad), name


def test_the_heap_faults_a_plain_trace_may_hide_leave_out_those_charged() -> None:
    """Of a plain trace's 1-32 MiB blocks, each step's largest is charged (the first step's whole, the
    second step's on grown heap, as its events show); what glibc's trims could add is the rest: a
    smaller block of the second step on pages the first step's covered."""
    large, small = [16, 64, 56, 56], [16, 16, 56, 56]  # 12.8 and 3.2 MB
    nbytes, small_bytes = 16 * 64 * 56 * 56 * 4, 16 * 16 * 56 * 56 * 4
    pages = -(-nbytes // PAGE)
    relu = [_op("aten::clamp_min", ts, 9_000, [shape, []], ["float", "Scalar"], ["", "0"])
            for ts, shape in ((1_000, large), (101_000, large), (111_000, small))]
    memory = [_memory(1_100, HEAP + 128, nbytes), _memory(9_500, HEAP + 128, -nbytes),
              _memory(101_100, HEAP + 128 + nbytes + PAGE, nbytes), _memory(111_100, HEAP + 128, small_bytes)]
    comparison = _compare([*relu, *memory])
    charged = [p.first_touch_s for p in comparison.predictions if p.op.name == "aten::clamp_min"]
    # the first by its size, the second by its pages (it starts 128 bytes into a page)
    assert charged == [pytest.approx(pages * PER_PAGE_S), pytest.approx((pages + 1) * PER_PAGE_S), 0.0]
    assert comparison.heap_faults_if_fresh_s == pytest.approx(small_bytes // PAGE * PER_PAGE_S / 2)


def test_a_plain_trace_s_largest_heap_block_is_fresh_every_step_though_its_events_reuse_it() -> None:
    """A plain trace's 12.8 MB block at the same address in both steps: its events show the second
    step's on pages the first covered, but glibc may have given them back (a trim) in between, so a
    step's largest heap block is charged as fresh in every step (the first after the unprofiled
    ones, which trimmed too); a trace whose allocator is recorded (``capture.py``: freed memory
    kept) is charged by its events alone."""
    small = [16, 64, 56, 56]
    nbytes = 16 * 64 * 56 * 56 * 4
    relu = [_op("aten::clamp_min", ts, 9_000, [small, []], ["float", "Scalar"], ["", "0"]) for ts in (1_000, 101_000)]
    memory = [_memory(1_100, HEAP + 128, nbytes), _memory(9_500, HEAP + 128, -nbytes),
              _memory(101_100, HEAP + 128, nbytes)]
    comparison = _compare([*relu, *memory])
    charged = [p.first_touch_s for p in comparison.predictions if p.op.name == "aten::clamp_min"]
    assert charged == [pytest.approx(-(-nbytes // PAGE) * PER_PAGE_S)] * 2
    assert comparison.first_touch_basis == "memory events and heap growth"
    steps = [{"ph": "X", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": 100_000 * (n - 2), "dur": 100_000,
              "cat": "user_annotation"} for n in (2, 3)]
    kept = parse_trace({"traceEvents": [*steps, *relu, *memory], "simhpc_capture": {"heap_end": HEAP + (64 << 20)}},
                       "kept.json")
    efficiency = _calibration()
    recorded = compare_trace(kept, CostModel(efficiency), host_specs(efficiency.calibration)[0], 1)
    assert [p.first_touch_s for p in recorded.predictions if p.op.name == "aten::clamp_min"] == [0.0, 0.0]
    assert recorded.first_touch_basis == "memory events"


def test_the_report_says_when_a_profiled_trace_has_no_allocation_events(tmp_path: Path) -> None:
    step = {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000, "cat": "user_annotation"}
    events = [step, _op("aten::gelu", 100, 500, [SHAPE])]
    for name, memory in (("without", []), ("with", [_memory(150, HEAP + 128, BYTES)])):
        trace = tmp_path / f"{name}.json"
        trace.write_text(json.dumps({"traceEvents": events + memory}))
        text = CliRunner().invoke(main, ["compare", str(trace), "--threads", "1", "-o", str(tmp_path / name)]).output
        assert ("no allocation events" in " ".join(text.split())) == (not memory), name


def test_the_fault_pool_script_prints_a_cost_a_page_for_each_block(monkeypatch, capsys) -> None:
    """``fault_pool.py`` writes fresh blocks without freeing them and prints each one's cost a page."""
    pool = _script("fault_pool")
    monkeypatch.setattr("sys.argv", ["fault_pool.py", "--blocks", "3", "--block-mib", "1"])
    pool.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2", "3"]
    assert all(0 < float(line.split()[-4]) < 1000 for line in lines)
