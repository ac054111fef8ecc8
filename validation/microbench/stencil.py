"""The AMR kernel: a 7-point 3-D stencil sweep over 16^3-cell blocks (C, OpenMP over blocks).

Each block is stored with one ghost layer (18^3 float64); a sweep reads the input block and
writes the output block. Bytes are counted as one read and one write of 8 bytes per cell.
"""

from __future__ import annotations

import numpy as np

from .native import library
from .timing import Budget, measure_native

BLOCK_CELLS = 16**3
STORED_CELLS = 18**3
BLOCKS = (1, 4, 16, 64, 256, 1024)
QUICK_BLOCKS = (1, 8)


def measure_stencil(blocks: int, threads: int, budget: Budget) -> dict:
    """Sweep ``blocks`` blocks once per call."""
    rng = np.random.default_rng(2)
    data = rng.standard_normal(blocks * STORED_CELLS)
    out = np.zeros_like(data)
    lib = library()
    result = measure_native(lambda reps: lib.stencil7(data.ctypes.data, out.ctypes.data, blocks, reps, threads), budget)
    cells = blocks * BLOCK_CELLS
    return {
        "blocks": blocks,
        "cells": cells,
        "threads": threads,
        "dtype": "fp64",
        "bytes": 2 * 8 * cells,
        "working_set": 2 * 8 * blocks * STORED_CELLS,
        **result.row(),
        "cells_per_s": cells / result.median_s,
        "bytes_per_s": 2 * 8 * cells / result.median_s,
    }
