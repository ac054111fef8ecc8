"""Capture a model the way a user's own script would: a plain torch.profiler loop, AdamW, glibc's defaults.

``capture.py`` runs with freed memory kept, records its thread count, and keeps the fastest of
several captures taken in one process. This script does none of that: one process, one capture,
AdamW (``--optimizer sgd``: SGD), ``record_shapes=True`` (and ``profile_memory=True`` unless
``--no-memory``), ten profiled steps after one waiting and one warm-up step (training steps, or
with ``--inference SCALE`` forward passes in eval mode under ``no_grad`` on SCALE times the batch;
``--no-schedule``: two steps, then ten profiled without a schedule, so the trace has no
``ProfilerStep`` spans, as in the profiler recipe's loops).
It prints the page faults ``getrusage`` counted in each step
(what ``compare`` charges fresh pages against; the trace does not record them). Models the cost
model was not developed on (needs torch):

- ``vit``: three pre-norm encoder layers of width 192 (GELU) over 16 patches of a 32 x 32 image
  (an 8 x 8 stride-8 convolution), batch 32, 100 classes;
- ``mixer``: a 512-1024-1024-10 MLP with GELU, LayerNorm, SiLU and dropout, batch 128;
- ``encoder``: two post-norm encoder layers of width 256 (4 heads, 1024 wide, dropout 0.1) over 64
  tokens, batch 16, mean-pooled into a 10-class head;
- ``convnet``: three 3 x 3 convolutions (32, 64, 64 channels; batch norm, ReLU, one 2 x 2 max-pool)
  over 32 x 32 images, batch 32, average-pooled into a 10-class head;
- ``lstm``: a two-layer LSTM (128 in, 256 hidden) over 20 steps, batch 32, its last output into a
  10-class head;
- ``wide_mlp``: a 784-2048-2048-10 ReLU MLP, batch 256;
- ``residual``: a 48-channel 3 x 3 stem and two residual blocks (two convolutions with batch norm
  each) over 32 x 32 images, batch 16, average-pooled into a 10-class head;
- ``gru``: one GRU layer (64 in, 512 hidden) over 30 steps, batch 64, its last output into a head;
- ``wide_encoder``: two pre-norm encoder layers of width 384 (6 heads, 1536 wide) over 128 tokens,
  batch 8, the first token into a 10-class head;
- ``ln_mlp``: a 256-1536-1536-100 MLP with LayerNorm, GELU, dropout and Tanh, batch 64.

The last four were added after the rule that charges a plain trace's heap growth
(``simhpc.trace.fresh_memory.largest_heap_writes``) was fitted on the others, to check it.
Five more, unlike any the cost model was developed on (session 35; ``validation/README.md``):

- ``unet``: two 3 x 3 convolutions, a max-pool, a 2 x 2 transposed convolution, a concatenation
  and a 1 x 1 convolution to one channel over 64 x 64 images, batch 8, a binary mask's loss;
- ``recommender``: a 50 000-row embedding bag (8 ids a sample) beside a 13-64 MLP, then a
  128-256-1 MLP, batch 256, a click's binary loss;
- ``regression``: a 512-1024-512-1 GELU MLP, batch 128, squared error;
- ``mnist_cnn``: PyTorch's MNIST example (3 x 3 convolutions to 32 and 64 channels, a max-pool,
  dropout, 9216-128-10), batch 64;
- ``mlp_b1``: a 784-1024-1024-10 ReLU MLP at batch 1 (``--inference 1``: a latency measurement's
  matrix-vector products).

    .venv/bin/python validation/traces/plain_capture.py vit --threads 2 --out runs/plain/vit_t2.json
    .venv/bin/simhpc compare runs/plain/vit_t2.json --threads 2
"""

from __future__ import annotations

import argparse
import resource
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


class ViT(nn.Module):
    """A small vision transformer: patch embedding, pre-norm encoder layers, mean pool, head."""

    def __init__(self, width: int = 192, depth: int = 3, heads: int = 3, classes: int = 100) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, width, 8, stride=8)
        self.position = nn.Parameter(torch.zeros(1, 16, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(images).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.blocks(tokens)).mean(1))


class PooledEncoder(nn.Module):
    """Post-norm encoder layers, mean-pooled over the tokens into a classifier head."""

    def __init__(self, width: int = 256, depth: int = 2, classes: int = 10) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(tokens).mean(1))


class LastStepLSTM(nn.Module):
    """A stacked LSTM whose last step's output feeds a classifier head."""

    def __init__(self, width: int = 128, hidden: int = 256, classes: int = 10) -> None:
        super().__init__()
        self.rnn = nn.LSTM(width, hidden, 2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(sequence)[0][:, -1])


class Residual(nn.Module):
    """A convolution stem and two residual blocks, average-pooled into a classifier head."""

    def __init__(self, channels: int = 48, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                          nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels))
            for _ in range(2))
        self.head = nn.Linear(channels, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.stem(images))
        for block in self.blocks:
            features = torch.relu(features + block(features))
        return self.head(features.mean((2, 3)))


class FirstToken(nn.Module):
    """Pre-norm encoder layers whose first token's output feeds a classifier head."""

    def __init__(self, width: int = 384, classes: int = 10) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, 6, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(tokens)[:, 0])


class LastStepGRU(nn.Module):
    """A GRU whose last step's output feeds a classifier head."""

    def __init__(self, width: int = 64, hidden: int = 512, classes: int = 10) -> None:
        super().__init__()
        self.rnn = nn.GRU(width, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(sequence)[0][:, -1])


class SmallUNet(nn.Module):
    """One level of a U-Net: convolution, pool, convolution, transposed convolution up, concatenation
    with the skip, a 1 x 1 convolution to one channel."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU())
        self.middle = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.out = nn.Conv2d(64, 1, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        skip = self.down(images)
        return self.out(torch.cat([skip, self.up(self.middle(skip))], 1))


class Recommender(nn.Module):
    """A DLRM-like click model: dense features through an MLP beside a summed embedding bag, then an
    MLP to one logit."""

    def __init__(self, rows: int = 50_000, width: int = 64) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(rows, width, mode="sum")
        self.bottom = nn.Sequential(nn.Linear(13, width), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(2 * width, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, inputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        dense, ids = inputs
        return self.top(torch.cat([self.bottom(dense), self.embedding(ids)], 1)).squeeze(1)


MODELS = ("vit", "mixer", "encoder", "convnet", "lstm", "wide_mlp", "residual", "gru", "wide_encoder", "ln_mlp", "unet",
          "recommender", "regression", "mnist_cnn", "mlp_b1")
LOSSES = {"unet": nn.functional.binary_cross_entropy_with_logits,
          "recommender": nn.functional.binary_cross_entropy_with_logits, "regression": nn.functional.mse_loss}
"""Models trained on other losses than cross-entropy over class labels."""


def loss_of(name: str) -> Any:
    """The loss the model named ``name`` trains on: :data:`LOSSES`' or cross-entropy over labels."""
    return LOSSES.get(name, nn.functional.cross_entropy)


def model_and_batch(name: str) -> tuple[nn.Module, Any, torch.Tensor]:
    """The model named ``name`` (one of :data:`MODELS`) and one batch of inputs and labels for it."""
    if name == "vit":
        return ViT(), torch.randn(32, 3, 32, 32), torch.randint(0, 100, (32,))
    if name == "encoder":
        return PooledEncoder(), torch.randn(16, 64, 256), torch.randint(0, 10, (16,))
    if name == "convnet":
        convnet = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                                nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                nn.Linear(64, 10))
        return convnet, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    if name == "lstm":
        return LastStepLSTM(), torch.randn(32, 20, 128), torch.randint(0, 10, (32,))
    if name == "residual":
        return Residual(), torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    if name == "gru":
        return LastStepGRU(), torch.randn(64, 30, 64), torch.randint(0, 10, (64,))
    if name == "wide_encoder":
        return FirstToken(), torch.randn(8, 128, 384), torch.randint(0, 10, (8,))
    if name == "ln_mlp":
        mlp = nn.Sequential(nn.Linear(256, 1536), nn.LayerNorm(1536), nn.GELU(), nn.Dropout(0.1),
                            nn.Linear(1536, 1536), nn.Tanh(), nn.Linear(1536, 100))
        return mlp, torch.randn(64, 256), torch.randint(0, 100, (64,))
    if name == "unet":
        return SmallUNet(), torch.randn(8, 3, 64, 64), torch.rand(8, 1, 64, 64)
    if name == "recommender":
        return Recommender(), (torch.randn(256, 13), torch.randint(0, 50_000, (256, 8))), torch.rand(256)
    if name == "regression":
        regression = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512), nn.GELU(), nn.Linear(512, 1))
        return regression, torch.randn(128, 512), torch.randn(128, 1)
    if name == "mnist_cnn":
        mnist = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                              nn.Linear(128, 10))
        return mnist, torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    if name == "mlp_b1":
        mlp = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        return mlp, torch.randn(1, 784), torch.randint(0, 10, (1,))
    if name == "wide_mlp":
        wide = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
        return wide, torch.randn(256, 784), torch.randint(0, 10, (256,))
    mixer = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.LayerNorm(1024), nn.Linear(1024, 1024), nn.SiLU(),
                          nn.Dropout(0.1), nn.Linear(1024, 10))
    return mixer, torch.randn(128, 512), torch.randint(0, 10, (128,))


def _repeated(batch: torch.Tensor, times: int) -> torch.Tensor:
    """``times`` copies of ``batch`` along its first dimension."""
    return batch.repeat(times, *[1] * (batch.dim() - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-memory", action="store_true", help="without profile_memory (no allocation events)")
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw", help="SGD: with momentum 0.9")
    parser.add_argument("--no-schedule", action="store_true",
                        help="profile ten steps after two without a schedule (no ProfilerStep spans)")
    parser.add_argument("--inference", type=int, metavar="SCALE", default=0,
                        help="forward passes only (eval mode, no_grad), on SCALE times the batch")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, images, labels = model_and_batch(args.model)
    optimizer = (torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9) if args.optimizer == "sgd"
                 else torch.optim.AdamW(model.parameters(), lr=1e-3))
    if args.inference:
        model.eval()
        images = tuple(_repeated(part, args.inference) for part in images) if isinstance(images, tuple) \
            else _repeated(images, args.inference)

    def step() -> None:
        if args.inference:
            with torch.no_grad():
                model(images)
            return
        optimizer.zero_grad()
        loss_of(args.model)(model(images), labels).backward()
        optimizer.step()

    faults = []

    def counted_step() -> None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

    if args.no_schedule:
        counted_step()
        counted_step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=not args.no_memory,
                 schedule=None if args.no_schedule else schedule(wait=1, warmup=1, active=10)) as prof:
        for _ in range(10 if args.no_schedule else 12):
            counted_step()
            prof.step()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(args.out))
    print(f"wrote {args.out}; page faults a step, the profiled ones last: {faults}")


if __name__ == "__main__":
    main()
