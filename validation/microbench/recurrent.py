"""oneDNN's LSTM layer timed through torch: ``aten::mkldnn_rnn_layer`` and its backward.

``nn.LSTM`` on a CPU runs each layer as one oneDNN RNN primitive (``aten::mkldnn_rnn_layer``,
and ``aten::mkldnn_rnn_layer_backward`` under autograd), which keeps the weights and the gates of
every step inside one kernel: the model of it as separate BLAS products (the input projection
over all steps, one product per step with the hidden state) and the gates at the C ``tanh`` rate
put a 32 x 64-step, 128 -> 256 layer 15 % (one thread) and 28 % (two) over its traced time on
the EPYC Zen 2 guest. Each point is one single-layer LSTM, fp32, sequence-major input
``[steps, batch, width]``: its forward (the module call: ``aten::lstm`` around the layer), and
its backward (autograd from a fixed output gradient, the graph kept between calls), for
steps 8 and 32, batch 8 and 32, (width, hidden) (64, 128) and (128, 256): up to 12 ms a call, 2 s in
all (``row["length"]``: the steps).
``simhpc compare`` times a traced layer from these points (its FLOPs at the interpolated fraction
of peak). Skipped without torch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from .gemm import torch_available, torch_threads
from .timing import Budget, measure_python

STEPS = (8, 32)
BATCHES = (8, 32)
SIZES = ((64, 128), (128, 256))
"""(input features, hidden size)."""
QUICK_SHAPES = ((8, 8, 64, 64),)
GATES = 4


def available() -> bool:
    """Whether torch (and so oneDNN's RNN primitive) is importable."""
    return torch_available()


def shapes(quick: bool = False) -> list[tuple[int, int, int, int]]:
    """(steps, batch, width, hidden) of every point."""
    if quick:
        return list(QUICK_SHAPES)
    return [(steps, batch, width, hidden) for steps, batch, (width, hidden) in itertools.product(STEPS, BATCHES, SIZES)]


def _call(steps: int, batch: int, width: int, hidden: int, backward: bool) -> Callable[[], object]:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.LSTM(width, hidden)
    x = torch.randn(steps, batch, width)
    if not backward:
        return lambda: layer(x)
    out, _ = layer(x)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.backward(out, grad, retain_graph=True)


def measure_recurrent(steps: int, batch: int, width: int, hidden: int, backward: bool, threads: int,
                      budget: Budget) -> dict:
    """Time one LSTM layer's forward (or backward) over ``steps`` x ``batch`` inputs; a record."""
    with torch_threads(threads):
        call = _call(steps, batch, width, hidden, backward)
        result = measure_python(call, budget)
    return {"library": "torch", "dtype": "fp32", "threads": threads, "backward": backward, "length": steps,
            "batch": batch, "width": width, "hidden": hidden, "gates": GATES, **result.row()}
