"""What a page fault costs as a process keeps taking memory it never had: fresh private anonymous
blocks written one page at a time, none freed.

    .venv/bin/python validation/traces/fault_pool.py [--blocks 48] [--block-mib 64]

Prints the microseconds per page of each block in turn. On a virtual machine whose host backs guest
memory only once it is first touched, and takes back what the guest frees, the first blocks come
from guest pages the host still backs and the rest cost the host's fault too. On the EPYC Zen 4
guest: 2.0-2.2 us a page for the first 1.1 GB, then 10.5-11 us (``validation/README.md``, session
34). A profiled training loop's heap grows every step (:mod:`simhpc.trace.fresh_pages`), so a long
enough capture reaches the dear pages: its last steps run slower with the same fault count.
"""

from __future__ import annotations

import argparse
import mmap
import time

PAGE = 4096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=48, help="blocks to map and write")
    parser.add_argument("--block-mib", type=int, default=64, help="size of each block (MiB)")
    args = parser.parse_args()
    size = args.block_mib << 20
    kept = []  # mapped and never freed
    per_page = []
    for _ in range(args.blocks):
        block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = time.perf_counter()
        for offset in range(0, size, PAGE):
            block[offset] = 1
        per_page.append((time.perf_counter() - start) / (size // PAGE) * 1e6)
        kept.append(block)
    for index, micros in enumerate(per_page):
        print(f"{(index + 1) * args.block_mib:6d} MiB taken: {micros:6.2f} us a page")


if __name__ == "__main__":
    main()
