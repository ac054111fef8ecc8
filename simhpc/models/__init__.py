"""Model profiles for pipeline training: per-layer kernels, parameters and activation bytes.

``build_model(name, micro_batch, seq_len=..., image_size=..., dtype=...)`` returns a
:class:`ModelProfile` for ``bert-base``, ``bert-large``, ``resnet-50``, ``resnet-101`` or
``resnet-152`` (registry family ``model``); :func:`uniform_model`, identical layers with given times.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from simhpc.models.bert import bert
from simhpc.models.profile import Layer, LayerCosts, ModelProfile
from simhpc.models.resnet import resnet
from simhpc.models.uniform import uniform_model
from simhpc.registry import lookup, register

TRANSFORMERS = ("bert-base", "bert-large")
CONVNETS = ("resnet-50", "resnet-101", "resnet-152")

register("model", "bert-base")(partial(bert, "base"))
register("model", "bert-large")(partial(bert, "large"))
for _depth in (50, 101, 152):
    register("model", f"resnet-{_depth}")(partial(resnet, _depth))
register("model", "uniform")(uniform_model)  # listed by `simhpc list`; a scenario gives its figures


def build_model(name: str, micro_batch: int, *, seq_len: int = 512, image_size: int = 224,
                dtype: str = "fp16", **extra: Any) -> ModelProfile:
    """The profile of registered model ``name`` at the given shapes.

    Transformers take ``seq_len``, convolutional networks ``image_size``; the other is ignored.
    """
    if name == "uniform":
        raise ValueError("the uniform model has no shapes to build from: give its layers' figures "
                         "(workload.model: {kind: uniform, ...}, or uniform_model(...))")
    builder = lookup("model", name)
    if name in CONVNETS:
        return builder(micro_batch, image_size=image_size, dtype=dtype, **extra)
    return builder(micro_batch, seq_len=seq_len, dtype=dtype, **extra)


__all__ = ["CONVNETS", "TRANSFORMERS", "Layer", "LayerCosts", "ModelProfile", "bert", "build_model", "resnet",
           "uniform_model"]
