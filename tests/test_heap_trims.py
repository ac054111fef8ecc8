"""``validation/traces/heap_trims.py``: the program break it reads and its per-step rows."""

from __future__ import annotations

import subprocess
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


def test_trim_cost_runs_a_plain_step_with_and_without_glibcs_trims() -> None:
    """``trim_cost.py`` trains a ``plain_capture.py`` model in two processes, with glibc's defaults
    and with freed memory kept: the second faults no more pages a step, and the report gives the
    cost of a fault from the difference."""
    pytest.importorskip("torch")
    script = TRACES / "trim_cost.py"
    report = subprocess.run([sys.executable, str(script), "regression", "--steps", "3"], check=True,
                            capture_output=True, text=True).stdout
    assert report.startswith("regression, 1 thread(s): step ") and report.rstrip().endswith("a fault")
    faults = [float(part.split()[0]) for part in report.split(" ms with ")[1:]]
    assert len(faults) == 2 and faults[1] <= faults[0]
