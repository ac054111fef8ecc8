"""MoE transformer arithmetic: parameter counts, checkpoint bytes, kernel durations, traffic.

Pure functions of the model config, the cluster shape and the expert loads; no SimPy. Kernel
durations come from the cost model on the catalog's GPU spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simhpc.costs import CostModel, Elementwise, Gemm, dtype_bytes
from simhpc.hardware.specs import GpuSpec
from simhpc.workloads.moe.config import MoEModelConfig

ADAM_FLOPS_PER_PARAM = 12.0
"""Adam update arithmetic per parameter (moments, bias correction, sqrt, divide, update)."""
ADAM_ARRAYS_IN, ADAM_ARRAYS_OUT = 4, 3
"""Adam reads weight, gradient, m, v and writes weight, m, v (fp32 master copy)."""


@dataclass(frozen=True)
class Layout:
    """Where ranks and experts live.

    Attributes:
        nodes: machines.
        gpus_per_node: GPUs per machine.
        expert_parallel: GPUs in one expert-parallel group (consecutive ranks).
    """

    nodes: int
    gpus_per_node: int
    expert_parallel: int

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def expert_replicas(self) -> int:
        """Copies of each expert (data parallelism among expert-parallel groups)."""
        return self.world // self.expert_parallel

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node


class MoEModel:
    """Sizes, costs and traffic of one MoE model on one layout.

    Args:
        config: the model section of the scenario.
        layout: ranks and expert groups.
        global_batch: sequences per iteration.
        gpu: the GPU spec the kernels run on.
        cost_model: kernel -> duration.
        zero_shard_dense: dense optimizer state sharded over data-parallel ranks.
    """

    def __init__(
        self,
        config: MoEModelConfig,
        layout: Layout,
        global_batch: int,
        gpu: GpuSpec,
        cost_model: CostModel,
        zero_shard_dense: bool = True,
    ) -> None:
        self.config = config
        self.layout = layout
        self.gpu = gpu
        self.cost_model = cost_model
        self.zero_shard_dense = zero_shard_dense
        self.tokens_per_gpu = global_batch * config.sequence_length / layout.world
        self.experts_per_gpu = config.experts // layout.expert_parallel
        self.act_bytes = dtype_bytes(config.dtype)
        self._expert_cache: dict[float, tuple[float, float]] = {}

    # -- parameters ---------------------------------------------------------------------------

    @property
    def moe_layer_count(self) -> int:
        """Layers whose feed-forward block is a mixture of experts."""
        return len(self.config.moe_layers)

    @property
    def attention_params(self) -> float:
        """One layer's attention (QKV and output projections) and two layer norms."""
        h = self.config.hidden
        return 4.0 * h * h + 4.0 * h

    @property
    def gate_params(self) -> float:
        """One MoE layer's router."""
        return float(self.config.hidden * self.config.experts)

    @property
    def ffn_params(self) -> float:
        """One feed-forward network, an expert or a dense layer's (two or three h x f matrices)."""
        matrices = 3 if self.config.gated_ffn else 2
        return float(matrices * self.config.hidden * self.config.ffn_hidden)

    @property
    def dense_params(self) -> float:
        """Every dense parameter: all layers' attention, the MoE layers' gates, the dense
        layers' feed-forward networks, and the (tied) embedding."""
        c = self.config
        moe = self.moe_layer_count
        return (c.layers * self.attention_params + moe * self.gate_params + (c.layers - moe) * self.ffn_params
                + (c.vocab + c.sequence_length) * c.hidden)

    @property
    def expert_params_total(self) -> float:
        return self.moe_layer_count * self.config.experts * self.ffn_params

    @property
    def total_params(self) -> float:
        return self.dense_params + self.expert_params_total

    @property
    def local_expert_params(self) -> float:
        """Expert parameters held by one GPU."""
        return self.moe_layer_count * self.experts_per_gpu * self.ffn_params

    def checkpoint_params_per_gpu(self) -> float:
        """Parameters whose state one GPU checkpoints (no parameter is saved twice).

        A GPU's experts are replicated on ``expert_replicas`` GPUs; each replica saves a share.
        Dense parameters are saved as ``1 / world`` shards (ZeRO-1), or by rank 0's node
        otherwise (here: spread evenly too, so that every GPU saves the same amount).
        """
        layout = self.layout
        return self.local_expert_params / layout.expert_replicas + self.dense_params / layout.world

    def training_state_bytes(self) -> float:
        """GPU memory of weights, gradients and optimizer state (activations not counted)."""
        local = self.local_expert_params + self.dense_params
        weights_and_grads = 2 * self.act_bytes * local
        master = 12.0  # fp32 master weight, Adam m and v
        dense_state = self.dense_params / (self.layout.world if self.zero_shard_dense else 1)
        expert_state = self.local_expert_params / (
            self.layout.expert_replicas if self.zero_shard_dense else 1
        )
        return weights_and_grads + master * (dense_state + expert_state)

    # -- kernels ------------------------------------------------------------------------------

    def _time(self, kernel: Gemm | Elementwise) -> float:
        return self.cost_model.duration(kernel, self.gpu)

    @cached_property
    def attention_time(self) -> tuple[float, float]:
        """(forward, backward) seconds of one MoE layer's attention, layer norms and gate."""
        return self._attention(gate=True)

    @cached_property
    def dense_attention_time(self) -> tuple[float, float]:
        """(forward, backward) seconds of one dense layer's attention and layer norms (no gate)."""
        return self._attention(gate=False)

    @cached_property
    def dense_ffn_time(self) -> tuple[float, float]:
        """(forward, backward) seconds of one dense layer's feed-forward network over the GPU's tokens."""
        return self._ffn_time(round(self.tokens_per_gpu), 1)

    def _attention(self, gate: bool) -> tuple[float, float]:
        c, t = self.config, round(self.tokens_per_gpu)
        h, s, dt = c.hidden, c.sequence_length, c.dtype
        sequences = max(1, t // s)
        head_dim = h // c.heads
        gemms = [
            Gemm(dt, m=t, n=3 * h, k=h),  # QKV projection
            Gemm(dt, m=s, n=s, k=head_dim, batch=sequences * c.heads),  # scores
            Gemm(dt, m=s, n=head_dim, k=s, batch=sequences * c.heads),  # context
            Gemm(dt, m=t, n=h, k=h),  # output projection
        ]
        if gate:
            gemms.append(Gemm(dt, m=t, n=c.experts, k=h))
        elementwise = [
            Elementwise(dt, n=sequences * c.heads * s * s, op="softmax", flops_per_element=5, inputs=1),
            Elementwise(dt, n=t * h, op="layernorm", flops_per_element=8, inputs=1),
            Elementwise(dt, n=t * h, op="layernorm", flops_per_element=8, inputs=1),
            Elementwise(dt, n=t * h, op="residual", inputs=2),
        ]
        forward = sum(self._time(k) for k in gemms) + sum(self._time(k) for k in elementwise)
        # Backward: two GEMMs (input and weight gradient) per forward GEMM, elementwise twice.
        backward = 2 * sum(self._time(k) for k in gemms) + 2 * sum(self._time(k) for k in elementwise)
        return forward, backward

    def expert_time(self, tokens: float) -> tuple[float, float]:
        """(forward, backward) seconds of one GPU's experts when each processes ``tokens``
        (padded to the most-loaded local expert: one batched GEMM per matrix)."""
        key = float(np.ceil(tokens))
        cached = self._expert_cache.get(key)
        if cached is None:
            cached = self._expert_cache[key] = self._ffn_time(int(key), self.experts_per_gpu)
        return cached

    def _ffn_time(self, tokens: int, batch: int) -> tuple[float, float]:
        """(forward, backward) seconds of ``batch`` feed-forward networks over ``tokens`` each."""
        if tokens == 0:
            return 0.0, 0.0
        c = self.config
        h, f, dt = c.hidden, c.ffn_hidden, c.dtype
        up = Gemm(dt, m=tokens, n=f, k=h, batch=batch)
        down = Gemm(dt, m=tokens, n=h, k=f, batch=batch)
        act = Elementwise(dt, n=tokens * f * batch, op="gelu", flops_per_element=8, inputs=2 if c.gated_ffn else 1)
        gemm = self._time(up) * (2 if c.gated_ffn else 1) + self._time(down)
        return gemm + self._time(act), 2 * gemm + 2 * self._time(act)

    def optimizer_time(self) -> float:
        """Adam step over the GPU's parameters (fp32 master state, memory-bound)."""
        dense = self.dense_params / (self.layout.world if self.zero_shard_dense else 1)
        experts = self.local_expert_params / (self.layout.expert_replicas if self.zero_shard_dense else 1)
        kernel = Elementwise(
            "fp32",
            n=int(dense + experts),
            op="adam",
            flops_per_element=ADAM_FLOPS_PER_PARAM,
            inputs=ADAM_ARRAYS_IN,
            outputs=ADAM_ARRAYS_OUT,
        )
        return self._time(kernel)

    # -- routing ------------------------------------------------------------------------------

    def expert_tokens(self, shares: np.ndarray) -> np.ndarray:
        """Tokens each expert processes in each expert-parallel group.

        Args:
            shares: ``(experts,)`` routing probabilities of one layer (sum 1).

        Returns:
            ``(experts,)`` tokens per expert (same in every group: all groups see the same
            routing distribution), after capacity clipping (dropped tokens are not processed
            and not sent).
        """
        c = self.config
        group_tokens = self.tokens_per_gpu * self.layout.expert_parallel
        wanted = np.minimum(group_tokens * c.top_k * shares, group_tokens)
        if c.capacity_factor is not None:
            capacity = c.capacity_factor * group_tokens * c.top_k / c.experts
            wanted = np.minimum(wanted, capacity)
        return wanted

    def gpu_expert_load(self, tokens: np.ndarray) -> np.ndarray:
        """``(expert_parallel,)`` tokens of the most-loaded expert on each GPU of a group."""
        return tokens.reshape(self.layout.expert_parallel, self.experts_per_gpu).max(axis=1)

    def dispatch_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """``(expert_parallel,)`` bytes every GPU of a group sends to each GPU of it.

        Each GPU contributes ``1 / expert_parallel`` of the tokens every expert receives.
        """
        per_gpu = tokens.reshape(self.layout.expert_parallel, self.experts_per_gpu).sum(axis=1)
        return per_gpu / self.layout.expert_parallel * self.config.hidden * self.act_bytes
