"""``validation/traces/heap_trims.py``: the program break it reads and its per-step rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[1] / "validation" / "traces"


@pytest.fixture
def heap_trims(monkeypatch: pytest.MonkeyPatch):
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(TRACES))
    sys.modules.pop("heap_trims", None)
    import heap_trims

    threads = torch.get_num_threads()
    yield heap_trims
    torch.set_num_threads(threads)  # run() sets the loop's own


def _heap_end(maps: str) -> int | None:
    """The end of the ``[heap]`` mappings in the text of ``/proc/self/maps`` (None where there are none:
    the kernel may split the heap into several)."""
    ends = [int(line.split()[0].split("-")[1], 16) for line in maps.splitlines() if line.endswith("[heap]")]
    return max(ends, default=None)


def test_the_program_break_is_the_heaps_end(heap_trims) -> None:
    """``sbrk(0)`` read through ctypes is the full 64-bit address where the ``[heap]`` mapping ends
    (the maps are read first, the break right after, before anything else allocates)."""
    program_break = heap_trims.program_break()
    maps = Path("/proc/self/maps").read_text()
    brk = program_break()
    end = _heap_end(maps)
    if end is None:
        pytest.skip("no [heap] mapping in /proc/self/maps")
    assert end - 4096 < brk <= end


def test_each_step_gives_the_breaks_change_and_its_page_faults(heap_trims) -> None:
    rows = heap_trims.run("mlp_b1", 1, profiled=False)
    assert len(rows) == heap_trims.STEPS
    assert all(isinstance(grown, int) and isinstance(faults, int) and faults >= 0 for grown, faults in rows)
