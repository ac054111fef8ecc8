"""The ``pipeline_training`` scenario section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator

from simhpc.models import CONVNETS, TRANSFORMERS
from simhpc.models.bert import MAX_POSITIONS
from simhpc.policies.pipeline import ScheduleConfig
from simhpc.policies.pipeline.blocking import P2P
from simhpc.scenario.types import PositiveInt, PositiveSize, Size, Strict, Time
from simhpc.units import format_time

ModelName = Literal["bert-base", "bert-large", "resnet-50", "resnet-101", "resnet-152"]
assert set(ModelName.__args__) == set(TRANSFORMERS + CONVNETS)  # type: ignore[attr-defined]


class UniformModel(Strict):
    """A synthetic model of identical layers whose per-micro-batch times and bytes are given
    (:mod:`simhpc.models.uniform`): cut into a number of stages that divides ``layers``, identical
    stages, as the analytic bubble formulas assume."""

    kind: Literal["uniform"]
    layers: Annotated[int, Field(gt=0, le=512, strict=True)]
    """Layers to cut into stages (a schedule needs at least as many as it has stages; at most 512, more
    than ResNet-152's 362: stages x micro-batches ops, each planned and simulated)."""
    forward: Time
    """Forward time of one layer for one micro-batch (more than 0)."""
    backward: Time
    """Backward time of one layer (input and weight gradients together)."""
    weight_grad: Time | None = None
    """The weight-gradient part of ``backward`` (split-backward schedules; default: half of it)."""
    params: Annotated[int, Field(ge=0, le=10**12, strict=True)] = 0
    """Parameters of one layer (memory: weights, gradients and optimizer state; at most 10^12)."""
    stash: Size = 0.0
    """Activation bytes one layer keeps from forward to backward, per micro-batch."""
    boundary: Size = 0.0
    """Bytes sent to the next GPU when a stage ends after a layer (and gradient bytes sent back)."""

    @field_validator("forward")
    @classmethod
    def _forward_takes_time(cls, seconds: float) -> float:
        if seconds <= 0:
            raise ValueError("a layer's forward must take some time (more than 0 s)")
        return seconds

    @field_validator("weight_grad")
    @classmethod
    def _weight_grad_within_backward(cls, seconds: float | None, info: ValidationInfo) -> float | None:
        backward = info.data.get("backward")
        if seconds is not None and backward is not None and seconds > backward:
            raise ValueError("the weight-gradient part of backward cannot be longer than backward "
                             f"({format_time(backward)})")
        return seconds

    def __str__(self) -> str:
        return "the uniform model"


def _model_form(value: Any) -> str:
    """Which member of ``model`` a value is for: a mapping the uniform model, else a name (so an
    error names one member's expectation, not both)."""
    return "uniform" if isinstance(value, (Mapping, UniformModel)) else "name"


Model = Annotated[Annotated[ModelName, Tag("name")] | Annotated[UniformModel, Tag("uniform")],
                  Discriminator(_model_form)]


_WRONG_INPUT = {"seq_len": (CONVNETS, "images, not sequences", "image_size"),
                "image_size": (TRANSFORMERS, "sequences, not images", "seq_len")}
"""Input-size field -> (the models that do not take it, what they take, the field that sets it)."""


StageLayerCounts = Annotated[list[Annotated[int, Field(gt=0, strict=True)]], Field(min_length=1, max_length=4096)]
"""A cut given as the number of layers of each stage, in order."""


class PipelineTrainingConfig(Strict):
    """Pipeline-parallel training of one model on the GPUs of one node or several.

    ``micro_batches`` counts the micro-batches of one iteration over all pipelines (a
    bidirectional schedule sends half of them each way); an iteration ends with a flush.
    """

    kind: Literal["pipeline_training"]
    model: Model
    """A named model (layer times from its kernels and the cost model) or ``{kind: uniform, ...}``."""
    micro_batch_size: PositiveInt = 8
    """Samples per micro-batch."""
    micro_batches: Annotated[int, Field(gt=0, le=4096, strict=True)] = 8
    """Micro-batches per iteration, ``m`` (at most 4096: each is a column of ops on every stage)."""
    seq_len: Annotated[int, Field(gt=0, le=MAX_POSITIONS, strict=True)] = MAX_POSITIONS
    """Tokens per sequence (BERT; at most its 512 positions)."""
    image_size: Annotated[int, Field(ge=32, le=1 << 16, strict=True)] = 224
    """Image side in pixels (ResNet; at least 32: five stride-2 stages)."""
    dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    schedule: ScheduleConfig
    devices: PositiveInt | None = None
    """GPUs of one pipeline: the first N, node by node (``n0``'s, then ``n1``'s, ...; default: all of
    them, shared among the ``data_parallel`` replicas). Consecutive devices on different nodes pass
    activations over PCIe, the NICs and the fabric."""
    data_parallel: Annotated[int, Field(gt=0, le=4096, strict=True)] = 1
    """Replicas of the pipeline, each on its own micro-batches; each stage's gradients are
    all-reduced among its copies once the last copy has run its last backward of the iteration."""
    gradient_all_reduce: Literal["ring", "tree", "hierarchical"] = "ring"
    """Algorithm of the replicas' gradient all-reduces: ``ring``, ``tree`` (binomial reduce, then
    broadcast) or ``hierarchical`` (inside each node, across nodes, inside again: every node must
    hold as many copies of each stage)."""
    replica_layout: Literal["consecutive", "strided"] = "consecutive"
    """Which GPUs (numbered node by node) each replica takes: ``consecutive``, replica ``r`` the
    ``r``-th ``devices`` of them (a pipeline inside a node, the all-reduces between nodes);
    ``strided``, GPUs ``r``, ``r + N``, ``r + 2N``, ... for ``N`` replicas (Megatron's order: a
    pipeline across nodes, the all-reduces inside them)."""
    stage_overhead: Time = 0.0
    """Fixed cost of every op (one stage, one micro-batch, one pass): kernel-launch gaps,
    framework scheduling and synchronisation, beyond the cost model's per-kernel launch."""
    op_time_variation: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] = 0.0
    """Coefficient of variation of every op's time (at most 2): each op, every time it runs, takes its
    time (then the median) times an independent lognormal factor drawn from the scenario's seed, as
    ops vary on a shared or noisy machine; 0 runs every op in exactly its time."""
    p2p: P2P = "overlapped"
    """How activation and gradient transfers meet the compute (:mod:`simhpc.policies.pipeline.blocking`):
    ``overlapped``, a copy engine moves the bytes while both devices compute on (non-blocking NCCL
    send/receive); ``blocking``, the sender computes again only once its send has arrived (batched
    send/receive pairs waited for, every receive posted ahead, as Megatron-LM does); ``rendezvous``,
    also, a transfer starts only once its receiver has ended the op before the one that consumes
    it (send/receive pairs issued op by op; a plan that then deadlocks is an error)."""
    partition: Literal["time", "time_and_transfer", "even", "parameters"] | StageLayerCounts = "time"
    """Layers -> stages: minimise the slowest stage's forward + backward time (torchgpipe's balance by
    time; of two such cuts, the min-max search's and the most even one, the one the schedule's
    dry run finds faster); ``time_and_transfer``: the same candidates and the cuts that also price
    the transfer that ends each stage, over the two devices that boundary joins, either added to
    the stage or overlapping it (PipeDream's objective), the fastest by the dry run; equal layer
    counts; or minimise the largest stage's parameter count (DeepSpeed's default
    ``partition_method``). A list gives the cut itself: the number of layers of each stage, in
    order (a published partition, or the ``stage_layer_counts`` of an earlier run)."""
    recompute: Literal["none", "full", "auto"] = "none"
    """Activation recomputation (GPipe's re-materialisation, Megatron's full checkpointing): with
    ``full`` a stage keeps only its input from forward to backward, and its backward first reruns
    its forward to rebuild the rest (a forward's time more, that stage's activations for the
    backward's length); ``auto``, only the stages that must, one at a time until every device fits
    its memory (:mod:`~simhpc.workloads.pipeline.recompute`)."""
    optimizer: Literal["adam", "sgd", "none"] = "adam"
    """Optimizer state kept per parameter (memory only)."""
    memory_capacity: PositiveSize | None = None
    """Usable memory per GPU (default: the GPU's capacity)."""
    sync_replicas: bool = True
    """Bidirectional schedules: exchange the gradients of the two copies of each stage."""
    iterations: Annotated[int, Field(gt=0, le=1000, strict=True)] = 1
    """Iterations to simulate (at most 1000: each replays the whole op list)."""

    @field_validator("model", mode="before")
    @classmethod
    def _uniform_needs_its_figures(cls, value: Any) -> Any:
        if value == "uniform":
            raise ValueError("the uniform model takes its layers' figures: "
                             "{kind: uniform, layers: N, forward: 1 ms, backward: 2 ms}")
        return value

    @field_validator("seq_len", "image_size")
    @classmethod
    def _input_size_fits_the_model(cls, size: int, info: ValidationInfo) -> int:
        """An input size the model does not take is a mistake, not a no-op (set fields only)."""
        model = info.data.get("model")
        if isinstance(model, UniformModel):
            raise ValueError(f"the uniform model takes no input: remove {info.field_name} (its layers' times "
                             "and bytes are given)")
        others, takes, instead = _WRONG_INPUT[info.field_name]
        if model in others:
            raise ValueError(f"{model} takes {takes}: remove {info.field_name} ({instead} sets the input)")
        return size


def bytes_per_param(dtype: str, optimizer: str) -> float:
    """Weights, gradients and optimizer state per parameter.

    Mixed precision (fp16/bf16) keeps 16-bit weights and gradients plus fp32 master weights;
    Adam adds two fp32 moments, SGD one momentum (Rajbhandari et al., ZeRO, 2020: 16 bytes per
    parameter for mixed-precision Adam).
    """
    element = 4 if dtype == "fp32" else 2
    master = 0 if dtype == "fp32" else 4
    moments = {"adam": 8, "sgd": 4, "none": 0}[optimizer]
    states = master + moments if optimizer != "none" else 0
    return 2 * element + states
