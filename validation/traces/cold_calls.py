"""What a classifier's ATen calls pay over their loop time once a step's traffic has passed (needs torch).

A training step runs its classifier head once, after the convolutions have streamed megabytes
through the caches. Its forward is an ``aten::addmm`` with the bias, whose children (``expand``, a
``copy_`` of the bias into the output, ``resolve_conj``) run before its GEMM; its loss ops are tiny.
This script times, on 1 thread by default, each of these calls in a loop and as single calls right
after a 16 MiB fill, a 128 MiB fill, and a 128 MiB fill followed by a read of the product's
operands (the state after the convolutions: the input just written, the weight not), and prints
the medians and each state's extra over the loop.

On the Zen 5 guest (session 45, ``validation/README.md``; three runs): the bias ``copy_`` 1.8 us
in a loop, +2-6 us after the 16 MiB fill, +18-26 us after the 128 MiB one, +11-16 us after that and
the operands' read; ``log_softmax`` over 64 x 10 +1.4 / +16-26 / +11 us; the ``addmm`` +40-50 us
after the fill and the read against +35-44 us for a ``mm`` into an output. The calibration's cold
points time C kernels, and its dispatch probe view ops after 16 MiB; an ATen op's code is larger
and leaves the caches to traffic on the scale of the L3. The states' order moves these figures:
each state's calls here run in a row, and a run half an hour later read half these extras.

    .venv/bin/python validation/traces/cold_calls.py [--threads 1 2] [--calls 21]
"""

from __future__ import annotations

import argparse

import torch
from idle_decay import median_us  # this folder's idle_decay.py (the script's folder is on sys.path)

BATCH, FEATURES, CLASSES = 64, 4096, 10
"""The fresh checks' CNN classifier: 64 images, 64 x 8 x 8 features, 10 classes."""
MIB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--calls", type=int, default=21)
    args = parser.parse_args()
    x, weight, bias = torch.randn(BATCH, FEATURES), torch.randn(CLASSES, FEATURES), torch.randn(CLASSES)
    out = torch.empty(BATCH, CLASSES)
    small, large = torch.empty(16 * MIB // 4), torch.empty(128 * MIB // 4)
    calls = {
        "copy_ of the bias": lambda: out.copy_(bias.expand(BATCH, CLASSES)),
        "addmm (with the bias)": lambda: torch.addmm(bias, x, weight.t()),
        "mm into an output": lambda: torch.mm(x, weight.t(), out=out),
        "log_softmax": lambda: torch.log_softmax(out, 1),
    }
    states = {
        "16 MiB fill": lambda: small.fill_(1.0),
        "128 MiB fill": lambda: large.fill_(1.0),
        "128 MiB fill, operands read": lambda: (large.fill_(1.0), x.sum(), weight.sum()),
    }
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"{threads} thread(s): median us, and each state's extra over the loop")
        print(f"{'call':24s}{'loop':>9s}" + "".join(f"{name:>30s}" for name in states))
        for name, call in calls.items():
            for _ in range(50):
                call()
            loop = median_us(call, lambda: None, 300)
            after = [median_us(call, before, args.calls) for before in states.values()]
            print(f"{name:24s}{loop:9.1f}" + "".join(f"{value:21.1f} ({value - loop:+6.1f})" for value in after))


if __name__ == "__main__":
    main()
