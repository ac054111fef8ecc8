"""Hash-table lookups (C, one thread) at table sizes from L1 to DRAM.

``VARIANTS`` maps a table layout to its C function; all share one signature
``(slots, load, hit_fraction, probes, seed, &lines_per_probe) -> seconds``. The baseline is
open addressing with linear probing over 64-bit keys. The kvstore issue adds the AVX-512
two-region three-hash bucketed table here (a C function in kernels.c plus an entry below).
"""

from __future__ import annotations

import ctypes
import statistics

from .native import library

VARIANTS = {"linear": "hash_probe_linear"}
TABLE_BYTES = tuple(32768 * 4**i for i in range(7))  # 32 KiB .. 128 MiB
QUICK_TABLE_BYTES = (32768, 1 << 21)
LOAD = 0.5
HIT_FRACTION = 0.1  # the kvstore paper's 90 % miss workload


def measure_hash(variant: str, table_bytes: int, repeats: int, probes: int = 1 << 19) -> dict:
    """Median seconds per lookup over ``repeats`` freshly built tables."""
    function = getattr(library(), VARIANTS[variant])
    slots = table_bytes // 8
    lines = ctypes.c_double()
    samples = []
    for i in range(repeats):
        elapsed = function(slots, LOAD, HIT_FRACTION, probes, 99 + i, ctypes.byref(lines))
        if elapsed < 0:
            raise RuntimeError(f"hash table of {table_bytes} bytes could not be built")
        samples.append(elapsed / probes)
    median = statistics.median(samples)
    return {
        "variant": variant,
        "threads": 1,
        "table_bytes": table_bytes,
        "load": LOAD,
        "hit_fraction": HIT_FRACTION,
        "probes": probes,
        "lines_per_probe": lines.value,
        "time_s": median,
        "spread_s": (max(samples) - min(samples)) / 2,
        "probes_per_s": 1.0 / median,
    }
