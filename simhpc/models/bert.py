"""BERT encoders (Devlin et al. 2019) for sequence classification, as layer profiles.

Units: the embedding layer, then per encoder layer an attention unit (QKV projection, scores,
softmax, context, output projection, residual + layernorm) and an MLP unit (h -> 4h, GELU,
4h -> h, residual + layernorm), then the classification head (pooler + classifier + loss).

Activation bytes follow Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (2022), Sec. 4.1: per layer ``sbh(34) + 5as^2b`` bytes with 16-bit
activations and 1-byte dropout masks, here written per element size ``e`` so other dtypes
scale: attention ``sbh(5e+1) + as^2b(2e+1)``, MLP ``sbh(9e+1)``, each layernorm ``sbh*e``.
"""

from __future__ import annotations

from typing import Literal

from simhpc.costs import Elementwise, dtype_bytes
from simhpc.models.profile import Layer, ModelProfile, elementwise_pair, gemm_layer_kernels, merge

SIZES = {"base": (12, 768, 12), "large": (24, 1024, 16)}
"""layers, hidden size, attention heads (Devlin et al. 2019, Table/Sec. 3)."""
VOCAB = 30522
MAX_POSITIONS = 512


def _activation_gemm(dtype: str, m: int, n: int, k: int, batch: int) -> tuple[tuple, tuple, tuple]:
    """A GEMM of two activations (attention scores, context): both gradients are input gradients."""
    forward, grad_a, grad_b = gemm_layer_kernels(dtype, m, n, k, batch)
    return forward, grad_a + grad_b, ()


def _elementwise(dtype: str, n: int, op: str, flops: float, inputs: int = 1) -> tuple[tuple, tuple, tuple]:
    forward, backward = elementwise_pair(dtype, n, op, flops, inputs)
    return (forward,), (backward,), ()


def bert(size: Literal["base", "large"], micro_batch: int, seq_len: int = 512, dtype: str = "fp16",
         classes: int = 2) -> ModelProfile:
    """BERT-``size`` for classification at ``micro_batch`` sequences of ``seq_len`` tokens.

    Args:
        size: ``"base"`` (12 layers, h=768) or ``"large"`` (24 layers, h=1024).
        micro_batch: sequences per micro-batch.
        seq_len: tokens per sequence (at most 512).
        dtype: compute and activation dtype.
        classes: labels of the classifier (IMDB sentiment: 2).
    """
    if size not in SIZES:
        raise ValueError(f"unknown BERT size {size!r} (known: {', '.join(SIZES)})")
    if not 1 <= seq_len <= MAX_POSITIONS:
        raise ValueError(f"seq_len must be in 1..{MAX_POSITIONS}, got {seq_len}")
    depth, h, heads = SIZES[size]
    b, s, e = micro_batch, seq_len, dtype_bytes(dtype)
    tokens = b * s
    sbh = float(tokens * h)
    scores = b * heads * s * s
    layers = []

    embed_forward = (Elementwise(dtype, n=tokens * h, op="embedding_gather", flops_per_element=2, inputs=3),)
    norm = _elementwise(dtype, tokens * h, "layernorm", 8)
    scatter = Elementwise(dtype, n=tokens * h, op="embedding_grad", flops_per_element=1, inputs=2)
    layers.append(Layer(
        name="embedding",
        forward=embed_forward + norm[0],
        backward_input=norm[1],
        backward_weight=(scatter,),
        params=(VOCAB + MAX_POSITIONS + 2) * h + 2 * h,
        stash_bytes=sbh * (e + 1),
        boundary_bytes=sbh * e,
    ))
    for i in range(depth):
        attention = merge([
            gemm_layer_kernels(dtype, tokens, 3 * h, h),
            _activation_gemm(dtype, s, s, h // heads, b * heads),
            _elementwise(dtype, scores, "softmax_dropout", 6),
            _activation_gemm(dtype, s, h // heads, s, b * heads),
            gemm_layer_kernels(dtype, tokens, h, h),
            _elementwise(dtype, tokens * h, "residual_layernorm", 10, inputs=2),
        ])
        layers.append(Layer(
            name=f"encoder{i}.attention",
            forward=attention[0], backward_input=attention[1], backward_weight=attention[2],
            params=4 * h * h + 4 * h + 2 * h,
            stash_bytes=sbh * (5 * e + 1) + scores * (2 * e + 1) + sbh * e,
            boundary_bytes=sbh * e,
        ))
        mlp = merge([
            gemm_layer_kernels(dtype, tokens, 4 * h, h),
            _elementwise(dtype, tokens * 4 * h, "gelu", 8),
            gemm_layer_kernels(dtype, tokens, h, 4 * h),
            _elementwise(dtype, tokens * h, "residual_layernorm", 10, inputs=2),
        ])
        layers.append(Layer(
            name=f"encoder{i}.mlp",
            forward=mlp[0], backward_input=mlp[1], backward_weight=mlp[2],
            params=8 * h * h + 5 * h + 2 * h,
            stash_bytes=sbh * (9 * e + 1) + sbh * e,
            boundary_bytes=sbh * e,
        ))
    head = merge([
        gemm_layer_kernels(dtype, b, h, h),
        _elementwise(dtype, b * h, "tanh", 4),
        gemm_layer_kernels(dtype, b, classes, h),
        _elementwise(dtype, b * classes, "softmax_loss", 6),
    ])
    layers.append(Layer(
        name="head",
        forward=head[0], backward_input=head[1], backward_weight=head[2],
        params=h * h + h + classes * h + classes,
        stash_bytes=float(2 * b * h * e),
        boundary_bytes=0.0,
    ))
    return ModelProfile(
        name=f"bert-{size}",
        micro_batch=micro_batch,
        dtype=dtype,
        layers=tuple(layers),
        description=f"BERT-{size}: {depth} layers, h={h}, {heads} heads, seq {s}, micro-batch {b}",
    )
