"""Model profiles: a network as a sequence of layers with kernels, parameters and activation bytes.

A :class:`Layer` describes one cut-able unit of a model for one micro-batch: the kernels of its
forward pass, of its backward pass split into the input-gradient part and the weight-gradient
part, its parameter count, the activation bytes it stashes for the backward pass, and the bytes
that must cross to the next device if the pipeline is cut right after it. Durations are not
stored: :meth:`ModelProfile.costs` asks a cost model, so the same profile runs on any GPU of the
catalog (and on calibrated efficiencies when present).

Backward-pass convention: a GEMM ``C[m,n] = A[m,k] B[k,n]`` has two backward GEMMs of the same
FLOPs, ``dA = dC B^T`` (input gradient) and ``dB = A^T dC`` (weight gradient), so a layer's
backward is about twice its forward FLOPs; elementwise layers read the saved input and the
incoming gradient and write one gradient.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from simhpc.costs import CostModel, Elementwise, Gemm, Kernel
from simhpc.hardware.specs import GpuSpec


@dataclass(frozen=True)
class Layer:
    """One unit of a model, for one micro-batch.

    Attributes:
        name: e.g. ``encoder3.attention`` or ``layer2.1.conv2``.
        forward: kernels of the forward pass.
        backward_input: kernels computing the gradient w.r.t. the layer's input.
        backward_weight: kernels computing the gradients w.r.t. the layer's parameters.
        params: parameter count.
        stash_bytes: activation bytes kept from the forward until the backward.
        boundary_bytes: bytes sent to the next device (and gradient bytes sent back) when a
            stage ends after this layer: its output plus any tensor a later layer still reads
            (a residual branch's input).
    """

    name: str
    forward: tuple[Kernel, ...]
    backward_input: tuple[Kernel, ...]
    backward_weight: tuple[Kernel, ...]
    params: int
    stash_bytes: float
    boundary_bytes: float


@dataclass(frozen=True)
class LayerCosts:
    """Per-layer arrays of a profile on one GPU (seconds, bytes); index = layer."""

    names: tuple[str, ...]
    forward_s: np.ndarray
    backward_input_s: np.ndarray
    backward_weight_s: np.ndarray
    params: np.ndarray
    stash_bytes: np.ndarray
    boundary_bytes: np.ndarray

    @property
    def backward_s(self) -> np.ndarray:
        """Full backward (input and weight gradients)."""
        return self.backward_input_s + self.backward_weight_s

    @property
    def step_s(self) -> np.ndarray:
        """Forward plus backward of each layer."""
        return self.forward_s + self.backward_s

    def recomputed(self) -> LayerCosts:
        """These costs with activation recomputation: each backward first reruns its forward (before
        the input gradient, which needs the rebuilt activations)."""
        return dataclasses.replace(self, backward_input_s=self.backward_input_s + self.forward_s)

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class ModelProfile:
    """A model at a given micro-batch size and input shape.

    Attributes:
        name: e.g. ``bert-large``.
        micro_batch: samples per micro-batch.
        dtype: compute dtype of the kernels and activations.
        layers: the layers from input to loss.
        description: shape summary for reports.
    """

    name: str
    micro_batch: int
    dtype: str
    layers: tuple[Layer, ...]
    description: str = ""
    fixed_costs: LayerCosts | None = field(default=None, compare=False, repr=False)
    """Per-layer figures given rather than derived from kernels (:mod:`simhpc.models.uniform`)."""
    _cache: dict[tuple[CostModel, str], LayerCosts] = field(default_factory=dict, compare=False, repr=False)

    @property
    def params(self) -> int:
        """Total parameter count."""
        return sum(layer.params for layer in self.layers)

    def costs(self, cost_model: CostModel, gpu: GpuSpec) -> LayerCosts:
        """Per-layer durations on ``gpu`` (kernel durations summed) and byte counts."""
        if self.fixed_costs is not None:
            return self.fixed_costs
        key = (cost_model, gpu.name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached

        def seconds(kernels: Iterable[Kernel]) -> float:
            return float(sum(cost_model.duration(kernel, gpu) for kernel in kernels))

        result = LayerCosts(
            names=tuple(layer.name for layer in self.layers),
            forward_s=np.array([seconds(layer.forward) for layer in self.layers]),
            backward_input_s=np.array([seconds(layer.backward_input) for layer in self.layers]),
            backward_weight_s=np.array([seconds(layer.backward_weight) for layer in self.layers]),
            params=np.array([layer.params for layer in self.layers], dtype=np.int64),
            stash_bytes=np.array([layer.stash_bytes for layer in self.layers]),
            boundary_bytes=np.array([layer.boundary_bytes for layer in self.layers]),
        )
        self._cache[key] = result
        return result


def gemm_layer_kernels(dtype: str, m: int, n: int, k: int, batch: int = 1) -> tuple[
        tuple[Kernel, ...], tuple[Kernel, ...], tuple[Kernel, ...]]:
    """(forward, input-gradient, weight-gradient) GEMMs of ``Y[m,n] = X[m,k] W[k,n]``."""
    return ((Gemm(dtype, m=m, n=n, k=k, batch=batch),),
            (Gemm(dtype, m=m, n=k, k=n, batch=batch),),
            (Gemm(dtype, m=k, n=n, k=m, batch=batch),))


def elementwise_pair(
    dtype: str, n: int, op: str, flops: float = 1.0, inputs: int = 1
) -> tuple[Kernel, Kernel]:
    """(forward, backward) of an elementwise op over ``n`` elements.

    The backward reads the incoming gradient and the saved input(s) and writes one gradient.
    """
    forward = Elementwise(dtype, n=n, op=op, flops_per_element=flops, inputs=inputs, outputs=1)
    backward = Elementwise(dtype, n=n, op=f"{op}_grad", flops_per_element=2 * flops, inputs=inputs + 1,
                           outputs=1)
    return forward, backward


def merge(parts: Sequence[tuple[Sequence[Kernel], Sequence[Kernel], Sequence[Kernel]]]) -> tuple[
        tuple[Kernel, ...], tuple[Kernel, ...], tuple[Kernel, ...]]:
    """Concatenate (forward, input-grad, weight-grad) kernel lists; the backward runs in reverse."""
    forward = tuple(k for part in parts for k in part[0])
    backward_input = tuple(k for part in reversed(parts) for k in part[1])
    backward_weight = tuple(k for part in reversed(parts) for k in part[2])
    return forward, backward_input, backward_weight
