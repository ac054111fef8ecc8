"""Capture a model the way a user's own script would: a plain torch.profiler loop, AdamW, glibc's defaults.

``capture.py`` runs with freed memory kept, records its thread count, and keeps the fastest of
several captures taken in one process. This script does none of that: one process, one capture,
``record_shapes=True`` (and ``profile_memory=True`` unless ``--no-memory``), ten profiled steps after
one waiting and one warm-up step. Two models the cost model was not developed on (needs torch):

- ``vit``: three pre-norm encoder layers of width 192 (GELU) over 16 patches of a 32 x 32 image
  (an 8 x 8 stride-8 convolution), batch 32, 100 classes;
- ``mixer``: a 512-1024-1024-10 MLP with GELU, LayerNorm, SiLU and dropout, batch 128.

    .venv/bin/python validation/traces/plain_capture.py vit --threads 2 --out runs/plain/vit_t2.json
    .venv/bin/simhpc compare runs/plain/vit_t2.json --threads 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

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


def model_and_batch(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model named ``name`` and one batch of inputs and labels for it."""
    if name == "vit":
        return ViT(), torch.randn(32, 3, 32, 32), torch.randint(0, 100, (32,))
    mixer = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.LayerNorm(1024), nn.Linear(1024, 1024), nn.SiLU(),
                          nn.Dropout(0.1), nn.Linear(1024, 10))
    return mixer, torch.randn(128, 512), torch.randint(0, 10, (128,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["vit", "mixer"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-memory", action="store_true", help="without profile_memory (no allocation events)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, images, labels = model_and_batch(args.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=not args.no_memory,
                 schedule=schedule(wait=1, warmup=1, active=10)) as prof:
        for _ in range(12):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
            prof.step()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
