"""What evicts a small product's cold-call cost: a product timed right after other work (needs torch).

``simhpc compare`` charges a traced product a share of the calibration's cold-call constant (a
single call after a 128 MiB fill, over its loop time) by the bytes the ops since the previous
product brought into its cores' private caches (``simhpc.trace.product_reuse``). This script times
small products in a loop of single calls, each right after one of: nothing, a fill of 8-128 MiB, a
line touched in each of 1024-16 384 pages (the TLB, not the caches), a product streaming a 4 MiB
matrix (matrix-vector, as a batch-1 layer's, or of 64 rows), twenty different small ops,
a tiny backward pass, a small convolution, a 1 ms sleep. It prints each product's median time (us)
after each. On a Zen 5 guest (session 43, ``validation/README.md``) a 1 x 10 x 1024 product paid
+1.5 us over its loop time after 8-16 MiB, +8 after 32 MiB, +22 after 128 MiB, under 1 us after
everything else.

    .venv/bin/python validation/traces/cold_eviction.py [--threads 1] [--calls 100]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
from idle_decay import median_us  # this folder's idle_decay.py (the script's folder is on sys.path)
from torch import nn

FILLS_MIB = (8, 16, 24, 32, 48, 64, 128)
PAGES = (1024, 4096, 16384)
PAGE_FLOATS = 1024  # 4 KiB of fp32


def small_ops(x: torch.Tensor) -> None:
    """Twenty different small ops (their code, little data)."""
    for op in (torch.tanh, torch.exp, torch.sigmoid, torch.relu, nn.functional.gelu, torch.log1p,
               torch.sqrt, torch.erf, torch.sin, torch.atan, torch.floor):
        op(x)
    torch.cumsum(x, 0)
    nn.functional.softmax(x, 1)
    nn.functional.layer_norm(x, (x.shape[1],))
    torch.sort(x, 1)
    torch.max(x, 1)
    nn.functional.dropout(x, 0.1)
    torch.where(x > 0, x, 0.0)
    torch.clamp(x, -1, 1)
    x.sum(0)


def befores() -> dict[str, Callable[[], object]]:
    """The work each product is timed after, by name."""
    fills = {mib: torch.empty(mib << 18) for mib in FILLS_MIB}
    span = torch.zeros(max(PAGES) * PAGE_FLOATS)
    small = torch.randn(64, 64)
    weight, inputs = torch.randn(32, 32, requires_grad=True), torch.randn(8, 32)
    conv, image = nn.Conv2d(8, 8, 3), torch.randn(1, 8, 16, 16)
    work: dict[str, Callable[[], object]] = {"loop": lambda: None}
    work |= {f"fill {mib} MiB": (lambda t=tensor: t.fill_(1.0)) for mib, tensor in fills.items()}
    lines = {pages: torch.arange(0, pages * PAGE_FLOATS, PAGE_FLOATS) for pages in PAGES}  # one a page
    work |= {f"{pages} pages": (lambda i=index: span.index_fill_(0, i, 1.0)) for pages, index in lines.items()}
    matrix, row, rows = torch.randn(1024, 1024), torch.randn(1, 1024), torch.randn(64, 1024)
    work["4 MiB gemv"] = lambda: nn.functional.linear(row, matrix)  # a batch-1 layer's product
    work["4 MiB gemm"] = lambda: nn.functional.linear(rows, matrix)
    work["20 small ops"] = lambda: small_ops(small)
    work["tiny backward"] = lambda: torch.tanh(inputs @ weight).sum().backward()
    work["small conv"] = lambda: conv(image)
    work["sleep 1 ms"] = lambda: time.sleep(1e-3)
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    products = {f"{m} x {n} x {k}": (torch.randn(m, k), torch.randn(n, k))
                for m, n, k in ((1, 10, 1024), (16, 10, 1024), (64, 10, 256))}
    work = befores()
    print("product | " + " | ".join(work))
    for name, (x, w) in products.items():
        product = partial(nn.functional.linear, x, w)
        timings = [median_us(product, before, args.calls) for before in work.values()]
        print(f"{name} | " + " | ".join(f"{t:.1f}" for t in timings), flush=True)


if __name__ == "__main__":
    main()
