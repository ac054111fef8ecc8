"""Scenario schema of ``kind: moe_training``: model, parallelism, loads, checkpointing, failures.

Every quantity carries its unit in the scenario file; defaults name their source.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from simhpc.scenario.types import Count, Number, PositiveInt, PositiveSize, Size, Strict, Time


class MoEModelConfig(Strict):
    """A decoder-only transformer whose feed-forward blocks are mixtures of experts (every
    ``moe_every``-th one; the others dense)."""

    name: str = "moe"
    layers: PositiveInt
    hidden: PositiveInt
    ffn_hidden: PositiveInt
    """Hidden width of one expert's feed-forward network."""
    heads: PositiveInt = 16
    experts: PositiveInt
    """Experts per MoE layer."""
    top_k: PositiveInt = 1
    moe_every: PositiveInt = 1
    """Every N-th layer's feed-forward block is a MoE layer (layers N-1, 2N-1, ... counted from
    0), the others a dense feed-forward network of ``ffn_hidden``. 1: every layer (Mixtral);
    2: every other one (GShard, Switch Transformer, DeepSpeed-MoE)."""
    capacity_factor: Number | None = Field(None, gt=0)
    """Tokens an expert accepts, as a multiple of the even share ``tokens * top_k / experts``;
    tokens beyond it are dropped (GShard/Switch). ``null``: dropless (MegaBlocks-style)."""
    gated_ffn: bool = False
    """SwiGLU experts (three matrices, Mixtral/LLaMA) instead of two (GPT)."""
    sequence_length: PositiveInt = 2048
    vocab: PositiveInt = 50257
    """Embedding rows (tied input/output embedding, dense, data-parallel)."""
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    """Type of weights, activations and gradients on the GPU."""

    @model_validator(mode="after")
    def _shapes_fit(self) -> MoEModelConfig:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds the number of experts ({self.experts})")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.moe_every > self.layers:
            raise ValueError(f"moe_every ({self.moe_every}) exceeds the layers ({self.layers}): no MoE layer")
        return self

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Indices of the layers whose feed-forward block is a mixture of experts."""
        return tuple(range(self.moe_every - 1, self.layers, self.moe_every))


class ParallelismConfig(Strict):
    """How the ranks are split: every GPU is a data-parallel rank; experts are spread over
    expert-parallel groups of ``expert_parallel`` consecutive GPUs (default: all GPUs)."""

    expert_parallel: PositiveInt | None = None
    zero_shard_dense: bool = True
    """Dense optimizer state sharded over the data-parallel ranks (ZeRO stage 1, as in
    DeepSpeed-MoE): each rank checkpoints its shard only."""


class CheckpointConfig(Strict):
    """Which checkpoint policy runs and the resources it may use."""

    policy: str = "none"
    """A name in the ``checkpoint`` registry (``simhpc list``)."""
    every: PositiveInt = 1
    """Checkpoint every N iterations (policies with an adaptive interval may choose another)."""
    replicas: PositiveInt = 2
    """In-memory copies of each node's checkpoint, the local one included (Gemini's m). Set,
    it must not exceed the nodes; left at its default it is capped at them (one node: 1)."""
    buffer: PositiveSize = 256 * 2**20
    """GPU memory reserved per GPU for checkpoint chunks in flight."""
    storage: str | None = None
    """Catalog storage persistent checkpoints are written to (default: the node's own)."""
    bytes_per_param: Annotated[Size, Field(le=1024)] = 14.0
    """Checkpointed bytes per parameter: bf16 weight (2) + fp32 master weight, Adam m and v
    (3 x 4), the mixed-precision Adam accounting of ZeRO (Rajbhandari et al., SC'20) less the
    gradients. 0 makes every checkpoint empty; at most 1 KiB."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Policy-specific options, validated by the policy's ``Options`` model."""


class FailureSpec(Strict):
    """One injected node failure."""

    time: Time
    node: Count = 0


class FailuresConfig(Strict):
    """Node failures: at given times and/or drawn from an exponential MTBF (per cluster)."""

    at: list[FailureSpec] = Field(default_factory=list)
    mtbf: Time | None = None
    """Mean time between failures of the whole cluster; failure times are exponential."""
    max_failures: Annotated[int, Field(ge=0, le=10000, strict=True)] = 10
    """Failures injected at most (explicit and drawn together)."""
    give_up_after: PositiveInt = 10
    """Consecutive failures that each restore no newer state than the failure before (the first:
    than the start), after which training is abandoned (``failures.gave_up``): the MTBF is too
    short for the run."""
    restart_time: Time = 0.0
    """Detection plus replacing the node and restarting the processes, before state reload."""


class LoadConfig(Strict):
    """Expert popularity: per layer, logits ``x`` with shares ``softmax(x)``, evolving as

    ``x[i+1] = rho * x[i] + skew * sqrt(1 - rho**2) * N(0, 1)``, ``rho = 1 - dynamicity``

    (a stationary AR(1) / discretised Ornstein-Uhlenbeck process: the spread of loads is the
    same at every dynamicity; dynamicity sets how fast they move; 0 = static).
    """

    skew: Number = Field(0.6, ge=0)
    """Standard deviation of the logits: the stationary spread of expert popularity."""
    start: Literal["stationary", "uniform"] = "stationary"
    """``stationary``: x[0] drawn from the stationary law; ``uniform``: x[0] = 0, the even
    routing of a freshly initialised gate, from which the skew builds up."""


class MoETrainingConfig(Strict):
    """``kind: moe_training`` — data- and expert-parallel MoE training with checkpointing."""

    kind: Literal["moe_training"]
    model: MoEModelConfig
    global_batch: PositiveInt
    """Sequences per iteration, over all data-parallel ranks."""
    parallelism: ParallelismConfig = ParallelismConfig()
    iterations: Annotated[int, Field(gt=0, le=1000, strict=True)] = 10
    """Iterations to complete (re-executed iterations after a rollback do not count; at most 1000:
    each simulates every layer's all-to-all and expert phases)."""
    warmup: Count = 2
    """Leading iterations left out of the steady-state mean iteration time."""
    dynamicity: Number = Field(0.0, ge=0, le=1)
    """Iteration-level change of expert loads (0 = static, 1 = independent draws)."""
    loads: LoadConfig = LoadConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    failures: FailuresConfig = FailuresConfig()
    profile_overhead: Time = 20e-6
    """Cost of timing one phase online (CUDA event record plus host synchronisation, tens of
    microseconds per NVIDIA's CUDA best-practices guide), charged on every GPU."""
