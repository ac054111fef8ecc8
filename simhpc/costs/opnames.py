"""ATen op names and what kind of work each is: the tables :func:`classify` and the op -> kernel
mapping (:mod:`simhpc.costs.opmap`) read.

Kinds: ``gemm`` (mm, addmm, bmm, baddbmm, linear, matmul, mv, ...), ``conv`` (convolutions as
implicit GEMMs: m = N x H_out x W_out, n = C_out / groups, k = C_in / groups x kernel volume,
batch = groups; the backward is one such GEMM per gradient it computes), ``recurrent`` (oneDNN's
LSTM/GRU layers, :class:`~simhpc.costs.kernels.Recurrent`), ``elementwise``,
``reduction``, ``pool`` (2-D windowed pooling), ``random`` (in-place random fills), ``resample``
(upsampling, grid sampling, edge padding, flips), ``embedding`` (embedding bags) and ``sort``,
:class:`~simhpc.costs.kernels.FrameworkOp` by bytes moved, ``view`` (metadata and allocation ops:
no kernel, zero cost), ``group`` (annotations, autograd and optimizer wrappers: their children do
the work), ``step`` (``ProfilerStep#N``), ``span`` (events of other timelines, e.g. simhpc's own
traces), ``compiled`` (a ``torch.compile`` graph call, whose fused kernels the profiler does not
record: listed as not modelled), ``comm`` (``torch.distributed`` collectives: listed as not
modelled, their time is the network's and the other ranks') and ``unknown`` (ATen ops without a
cost model, and operators of other namespaces such as ``quantized::`` or a custom library's:
counted and listed by ``compare``).
"""

from __future__ import annotations

import functools


def names(text: str) -> frozenset[str]:
    """A set of op names written as whitespace-separated words."""
    return frozenset(text.split())


GEMM_OPS = names("""
    mm addmm bmm baddbmm linear matmul mv addmv dot vdot addbmm _addmm_activation einsum
""")
ADDED_TERM_FIRST = ("addmm", "_addmm_activation", "baddbmm", "addbmm")
"""Products whose first tensor argument is the added term, not an operand."""
CONV_OPS = names("""
    conv1d conv2d conv3d convolution _convolution mkldnn_convolution convolution_backward
    _slow_conv2d_forward _slow_conv2d_backward thnn_conv2d _convolution_mode conv_transpose1d
    conv_transpose2d conv_transpose3d _nnpack_spatial_convolution slow_conv3d slow_conv3d_forward
    slow_conv_dilated2d slow_conv_dilated3d slow_conv_transpose2d slow_conv_transpose3d
""")
ATTENTION_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": False,
    "_scaled_dot_product_flash_attention_for_cpu_backward": True,
}
"""Fused attention kernels (:class:`~simhpc.costs.kernels.Attention`) and whether each is the backward."""
RECURRENT_OPS = {"mkldnn_rnn_layer": False, "mkldnn_rnn_layer_backward": True}
"""oneDNN's recurrent layers (what ``nn.LSTM`` runs on a CPU), :class:`~simhpc.costs.kernels.Recurrent`,
and whether each is the backward."""
REDUCTION_OPS = names("""
    sum mean amax amin max min argmax argmin norm linalg_vector_norm var std var_mean std_mean prod
    logsumexp all any _foreach_norm adaptive_max_pool2d
""")
TRANSCENDENTAL = names("""
    tanh tanh_backward exp sigmoid sigmoid_backward silu silu_backward gelu gelu_backward erf log log1p
    pow softplus elu rsqrt sqrt _softmax _log_softmax _softmax_backward_data _log_softmax_backward_data
    _foreach_sqrt _foreach_pow _foreach_exp log_sigmoid_forward log_sigmoid_backward softplus_backward
    elu_backward mish mish_backward sin cos glu glu_backward xlogy
""")
ELEMENTWISE_OPS = (
    names("""
    add sub mul div rsub neg abs relu threshold threshold_backward clamp clamp_min clamp_max where
    masked_fill addcmul addcdiv lerp copy fill zero maximum minimum sign reciprocal square hardtanh
    hardtanh_backward leaky_relu leaky_relu_backward native_dropout_backward native_layer_norm
    native_layer_norm_backward native_batch_norm
    native_batch_norm_backward _native_batch_norm_legit _native_batch_norm_legit_no_training
    native_group_norm native_group_norm_backward mse_loss mse_loss_backward nll_loss_forward
    nll_loss_backward nll_loss2d_forward nll_loss2d_backward adaptive_avg_pool2d _adaptive_avg_pool2d
    _adaptive_avg_pool2d_backward cat stack index_select gather scatter scatter_add index_add
    embedding_dense_backward _to_copy cumsum eq ne lt gt le ge logical_not logical_and logical_or isnan
    isinf isneginf isposinf index_put _foreach_add _foreach_mul _foreach_div _foreach_sub
    _foreach_addcmul _foreach_addcdiv _foreach_lerp _foreach_copy _foreach_zero _foreach_neg
    _foreach_maximum _foreach_clamp_max _foreach_clamp_min _fused_sgd _fused_adam _fused_adamw softmax
    log_softmax hardswish hardswish_backward hardsigmoid hardsigmoid_backward smooth_l1_loss
    smooth_l1_loss_backward huber_loss huber_loss_backward tril triu arange _index_put_impl floor ceil round trunc
    sgn _prelu_kernel _prelu_kernel_backward adaptive_max_pool2d_backward pixel_shuffle pixel_unshuffle
""")
    | TRANSCENDENTAL
)
VIEW_OPS = names("""
    as_strided t transpose view reshape _reshape_alias expand expand_as permute unsqueeze squeeze
    select slice narrow split split_with_sizes chunk unbind detach alias resolve_conj resolve_neg
    _unsafe_view view_as flatten unflatten broadcast_tensors lift_fresh numpy_T empty empty_like
    empty_strided resize new_empty new_empty_strided set size stride item _local_scalar_dense
    scalar_tensor result_type is_nonzero requires_grad retain_grad _has_compatible_shallow_copy_type
    unsafe_split _nested_tensor_from_mask_left_aligned to type_as contiguous clone zeros zeros_like
    ones ones_like full full_like new_zeros new_ones new_full _to_dense lift align_to movedim swapaxes
    mT mH record_stream _make_per_tensor_quantized_tensor dropout feature_dropout alpha_dropout
    cudnn_is_acceptable is_same_size _has_same_storage_numel _version _is_zerotensor is_contiguous
    _nnpack_available _use_cudnn_ctc_loss is_pinned unfold resize_as
""")
"""Ops that move no data themselves (``clone``, ``to``, ``zeros`` copy or fill through child ops)."""
COMPOSITE = names("""
    linear matmul conv1d conv2d conv3d convolution _convolution _convolution_mode conv_transpose1d
    conv_transpose2d conv_transpose3d einsum softmax log_softmax layer_norm group_norm batch_norm
    _batch_norm_impl_index instance_norm dropout feature_dropout cross_entropy_loss nll_loss
    nll_loss_nd scaled_dot_product_attention max_pool2d adaptive_avg_pool2d _to_copy _fused_sgd
    relu zero mean
""")
"""Ops whose work usually happens in child ops (``relu`` in ``clamp_min``, ``zero_`` in ``fill_``,
``mean`` in ``sum`` and ``div_``); with children they carry no kernel of their own. So does any
op with a child of its own name (a redispatch: ``div_`` in ``div_``)."""
HELPERS = names("zero fill copy empty resize")
"""Child ops a kernel-bearing op runs beside its own work (zeroing an output, a bias copy): a child
of the parent's kind that is not one of these does the parent's work."""
POOL_OPS = names("""
    max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward
""")
"""2-D windowed pooling, timed from the calibration's torch measurements of the same op."""
RANDOM_OPS = names("bernoulli uniform normal")
"""In-place random fills, timed from the calibration's torch measurements of the same op."""
RESAMPLE_OPS = names("""
    upsample_nearest2d upsample_nearest2d_backward upsample_bilinear2d upsample_bilinear2d_backward
    reflection_pad2d reflection_pad2d_backward replication_pad2d replication_pad2d_backward flip
    grid_sampler_2d grid_sampler_2d_backward
""")
"""Image resampling (by a scale or a sampling grid), padding by edge values and flips: each
output element read from a computed place in the input, timed from the calibration's torch
measurements of the same op."""
EMBEDDING_BAG_OPS = names("_embedding_bag _embedding_bag_forward_only _embedding_bag_dense_backward")
"""An embedding bag's lookup (rows gathered and reduced per bag) and its gradient (each looked-up
row's bag gradient added into the weight's), timed at the measured rates of ``index_select`` and
``index_add``, the same accesses."""
SORT_OPS = names("sort")
"""Sorts (``argsort`` and ``msort`` run one as their child), timed from the calibration's torch
measurements of the same op by the length of a row."""
UNCOVERED = {
    **dict.fromkeys(
        ("native_dropout", "random", "randn", "rand", "exponential", "multinomial"),
        "random number generation: no calibrated kernel (only bernoulli_, uniform_ and normal_ are measured)",
    ),
    **dict.fromkeys(
        ("max_pool3d_with_indices", "max_pool3d_with_indices_backward", "avg_pool3d", "avg_pool3d_backward"),
        "3-D windowed pooling: no calibrated kernel",
    ),
    **dict.fromkeys(
        ("index", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive"),
        "its output's size depends on the values (not recorded): no cost model",
    ),
}
"""ATen ops known not to be covered by any microbenchmark, with the reason ``compare`` lists."""
DTYPES = {
    "float": "fp32",
    "double": "fp64",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "long int": "fp64",
    "int": "fp32",
    "short int": "fp16",
    "signed char": "int8",
    "unsigned char": "int8",
    "bool": "int8",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}
"""torch's ``Input type`` names -> the dtype whose width they have (integers: a float of their width)."""
INTEGER_TYPES = frozenset(("long int", "int", "short int", "signed char", "unsigned char", "bool"))
"""The integer ``Input type`` names (no BLAS multiplies them)."""


@functools.lru_cache(maxsize=4096)
def in_place(name: str) -> bool:
    """Whether ``name`` is an in-place op's (``aten::add_``; not a dunder such as ``__and__``)."""
    short = name.rsplit("::", 1)[-1]
    return short.endswith("_") and not short.endswith("__")


@functools.lru_cache(maxsize=4096)
def base_name(name: str) -> str:
    """``aten::add_`` -> ``add``: namespace and in-place underscore removed (``__and__`` kept)."""
    short = name.rsplit("::", 1)[-1]
    return short[:-1] if in_place(name) else short


COMPILED_GRAPH = "## Call CompiledFxGraph"
"""The annotation of a ``torch.compile`` (inductor) graph call: its self time is the work of fused
kernels that the profiler does not record op by op."""


BOOKKEEPING_NAMESPACES = ("autograd::", "torch::autograd::", "profiler::")
"""Namespaced ``cpu_op`` spans that are bookkeeping (autograd's engine nodes and
``AccumulateGrad``, the profiler's record_function ops), not operators."""
COMM_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "gloo:", "nccl:", "mpi:", "ucc:")
"""Collective-communication ops of ``torch.distributed`` (the launch and the backends' own spans)."""


def classify(name: str, category: str = "") -> str:
    """The kind of a trace event (see the module docstring)."""
    if name.startswith("ProfilerStep#"):
        return "step"
    if name.startswith(COMPILED_GRAPH):
        return "compiled"
    if name.startswith(COMM_PREFIXES) or name == "record_param_comms":
        return "comm"
    if not name.startswith("aten::"):
        if category == "cpu_op" and "::" in name and not name.startswith(BOOKKEEPING_NAMESPACES):
            return "unknown"  # an operator of another library: quantized::, torchvision::, a custom op
        return "group" if category in ("cpu_op", "user_annotation", "python_function") else "span"
    op = base_name(name)
    if op in GEMM_OPS or op in ATTENTION_OPS:
        return "gemm"
    if op in CONV_OPS:
        return "conv"
    if op in RECURRENT_OPS:
        return "recurrent"
    if op in REDUCTION_OPS:
        return "reduction"
    if op in POOL_OPS:
        return "pool"
    if op in RANDOM_OPS:
        return "random"
    if op in SORT_OPS:
        return "sort"
    if op in EMBEDDING_BAG_OPS:
        return "embedding"
    if op in RESAMPLE_OPS:
        return "resample"
    if op in ELEMENTWISE_OPS:
        return "elementwise"
    if op in VIEW_OPS:
        return "view"
    return "unknown"
