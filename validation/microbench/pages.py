"""First touch of fresh memory: what a page fault costs, and an allocator that never causes one.

A tensor's first write into memory the kernel has just mapped takes a page fault per 4 KiB page
(the kernel zeroes the page and maps it; under a hypervisor the guest's fault may take the host's
too). glibc's malloc serves every block of 32 MiB or more (its largest mmap threshold on 64-bit,
mallopt(3)) with a fresh ``mmap`` and unmaps it when freed, so a PyTorch op whose output is that
large pays those faults on every call. ``measure_first_touch`` times them: STREAM copy into a
freshly mapped buffer (512 KiB to 64 MiB since suite 36), less the same copy into it once touched,
per page. The buffer is private anonymous memory, as malloc maps: Python's ``mmap`` maps shared
memory unless told, whose faults go through the shared-memory file system (on the Zen 4 guest
2.2 us a page against 1.4 us for a private mapping, which is what a 64 MiB ``torch.empty`` takes;
suites before 31 measured that). ``measure_unmap`` times the other end of such a block's life:
glibc unmaps it when it is freed, at a cost per page (suite 37).

``keep_freed_memory`` turns mmap off in glibc's malloc and keeps freed memory in the heap
(``M_MMAP_MAX`` 0, ``M_TRIM_THRESHOLD`` 2 GiB): the microbenchmarks then time kernels, not
page faults. Without it a point's time depended on what the process had freed before (a
convolution writing a 33 MiB output measured 57 ms, 41 ms of them page faults; a 16 MiB batch
norm backward took 100 ms with 33 000 page faults in one process, 14 ms with 12 000 in another).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import time

import numpy as np

from .native import library
from .timing import Budget, summarize

PAGE_BYTES = mmap.PAGESIZE
FIRST_TOUCH_BYTES = 64 << 20
"""The largest buffer written fresh: 16384 pages, above glibc's largest mmap threshold as
PyTorch's are."""
FIRST_TOUCH_SIZES = (512 << 10, 2 << 20, 8 << 20, FIRST_TOUCH_BYTES)
"""Buffers written fresh, from a small activation's to the largest. On several threads a page
costs more in a smaller one: on the 2-core EPYC Zen 5 guest 0.75 us at 512 KiB and 2 MiB, 0.69 at
8 MiB, 0.59 at 64 MiB (1.2 us at every size on one thread); torch's ops writing fresh outputs of
those sizes paid alike."""
MAX_FIRST_TOUCH_REPEATS = 32
"""The most samples a small buffer takes: as many as fit in 64 MiB, up to this (a 64 MiB buffer
takes the budget's, at least five); its faults take less time and vary more."""
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # malloc.h
KEPT_BYTES = 2**31 - 1
"""Free memory the heap keeps (mallopt takes an int)."""


def keep_freed_memory() -> bool:
    """Make glibc's malloc serve every block from the heap and keep what is freed (no page
    faults after the first use of the memory); False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, KEPT_BYTES))


def measure_first_touch(threads: int, budget: Budget, nbytes: int = FIRST_TOUCH_BYTES) -> dict:
    """Seconds the first write into a freshly mapped buffer of ``nbytes`` takes beyond a write into
    touched memory (more samples of a smaller buffer, whose faults take less time)."""
    n = nbytes // 8
    source = np.ones(n)
    lib = library()
    extra: list[float] = []
    for _ in range(max(budget.repeats, 5, min(MAX_FIRST_TOUCH_REPEATS, FIRST_TOUCH_BYTES // nbytes))):
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)  # anonymous: unmapped pages
        target = np.frombuffer(region, dtype=np.float64)
        fresh = lib.bw_copy(source.ctypes.data, target.ctypes.data, n, 1, threads)
        warm = lib.bw_copy(source.ctypes.data, target.ctypes.data, n, 1, threads)
        extra.append(max(1e-9, fresh - warm))
        del target
        region.close()
    return _buffer_row(threads, nbytes, extra)


def measure_unmap(threads: int, budget: Budget, nbytes: int = FIRST_TOUCH_BYTES) -> dict:
    """Seconds unmapping a buffer of ``nbytes`` that ``threads`` cores wrote takes: what glibc's
    ``free`` of a block it mapped on its own costs (the kernel tears down its pages, and the other
    cores' TLB entries of them)."""
    n = nbytes // 8
    source = np.ones(n)
    lib = library()
    took: list[float] = []
    for _ in range(max(budget.repeats, 5)):
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
        target = np.frombuffer(region, dtype=np.float64)
        lib.bw_copy(source.ctypes.data, target.ctypes.data, n, 1, threads)
        del target
        start = time.perf_counter()
        region.close()
        took.append(time.perf_counter() - start)
    return _buffer_row(threads, nbytes, took)


def _buffer_row(threads: int, nbytes: int, seconds: list[float]) -> dict:
    """The calibration row of a buffer of ``nbytes`` timed ``seconds`` on ``threads`` cores."""
    return {"threads": threads, "bytes": nbytes, "pages": nbytes // PAGE_BYTES, "page_bytes": PAGE_BYTES,
            **summarize(seconds, 1).row()}
