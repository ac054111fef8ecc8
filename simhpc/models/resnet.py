"""ResNet-50/101/152 (He et al. 2016, bottleneck blocks, v1.5 strides) as layer profiles.

Units are the modules a pipeline partitioner can cut between (as torchgpipe cuts an
``nn.Sequential`` of modules): convolutions, batch-norms (+ ReLU where the network applies one,
fused into one elementwise pass), the stem's max-pool, each block's residual add + ReLU, and the
head (global average pool, fully connected, loss). A convolution is an implicit GEMM with
``M = batch x H_out x W_out``, ``N = C_out``, ``K = C_in x k_h x k_w``.

Activation stash: a convolution keeps its input (for the weight gradient), a batch-norm its
input and output (normalisation statistics, ReLU mask), the residual add its output. A cut inside
a block ships, besides the unit's output, the tensor the rest of the block still needs: the
block's input (for the shortcut) or, once the shortcut is being computed, the main branch's
output. Those bytes are in ``boundary_bytes``.
"""

from __future__ import annotations

from simhpc.costs import Elementwise, dtype_bytes
from simhpc.models.profile import Layer, ModelProfile, elementwise_pair, gemm_layer_kernels

BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
"""Bottleneck blocks per stage (He et al. 2016, Table 1)."""
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4


def _halve(side: int) -> int:
    """Output side of a stride-2 convolution or pooling with padding: ``ceil(side / 2)``."""
    return -(-side // 2)


class _Builder:
    """Appends module units, tracking the element size and micro-batch."""

    def __init__(self, dtype: str, batch: int) -> None:
        self.dtype = dtype
        self.batch = batch
        self.element = dtype_bytes(dtype)
        self.layers: list[Layer] = []

    def conv(self, name: str, c_in: int, c_out: int, kernel: int, side_in: int, side_out: int,
             carried: float) -> None:
        """A convolution; ``carried`` = bytes besides its output a cut after it must ship."""
        b, e = self.batch, self.element
        forward, grad_input, grad_weight = gemm_layer_kernels(
            self.dtype, b * side_out * side_out, c_out, c_in * kernel * kernel)
        self.layers.append(Layer(
            name=name, forward=forward, backward_input=grad_input, backward_weight=grad_weight,
            params=c_in * c_out * kernel * kernel,
            stash_bytes=e * b * c_in * side_in * side_in,
            boundary_bytes=e * b * c_out * side_out * side_out + carried,
        ))

    def norm(self, name: str, channels: int, side: int, relu: bool, carried: float) -> None:
        """Batch-norm (+ ReLU) over ``channels x side x side`` maps."""
        n = self.batch * channels * side * side
        forward, backward = elementwise_pair(self.dtype, n, "bn_relu" if relu else "bn", 6 if relu else 5)
        self.layers.append(Layer(
            name=name, forward=(forward,), backward_input=(backward,), backward_weight=(),
            params=2 * channels, stash_bytes=2.0 * self.element * n,
            boundary_bytes=self.element * n + carried,
        ))

    def elementwise(self, name: str, n_out: int, op: str, flops: float, inputs: int, stash: float) -> None:
        forward, backward = elementwise_pair(self.dtype, n_out, op, flops, inputs)
        self.layers.append(Layer(
            name=name, forward=(forward,), backward_input=(backward,), backward_weight=(), params=0,
            stash_bytes=stash, boundary_bytes=self.element * n_out,
        ))


def resnet(depth: int, micro_batch: int, image_size: int = 224, dtype: str = "fp16",
           classes: int = 1000) -> ModelProfile:
    """ResNet-``depth`` at ``micro_batch`` images of ``image_size`` x ``image_size`` pixels.

    Args:
        depth: 50, 101 or 152.
        micro_batch: images per micro-batch.
        image_size: input height and width (mini-ImageNet: 84; ImageNet crops: 224).
        dtype: compute and activation dtype.
        classes: outputs of the classifier.
    """
    if depth not in BLOCKS:
        raise ValueError(f"unknown ResNet depth {depth} (known: {', '.join(map(str, BLOCKS))})")
    if image_size < 32:
        raise ValueError(f"image_size must be at least 32 pixels, got {image_size}")
    b = micro_batch
    net = _Builder(dtype, b)
    e = net.element
    side = _halve(image_size)
    net.conv("stem.conv", 3, 64, 7, image_size, side, carried=0.0)
    net.norm("stem.bn", 64, side, relu=True, carried=0.0)
    pooled = _halve(side)
    net.elementwise("stem.maxpool", b * 64 * pooled * pooled, "maxpool", 9, inputs=4,
                    stash=float(b * 64 * pooled * pooled))  # 1-byte argmax indices
    c_in, side = 64, pooled
    for stage, (blocks, width) in enumerate(zip(BLOCKS[depth], WIDTHS)):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            out_side = _halve(side) if stride == 2 else side
            c_out = width * EXPANSION
            name = f"layer{stage + 1}.{block}"
            shortcut = e * b * c_in * side * side  # the block input, still needed by the shortcut
            net.conv(f"{name}.conv1", c_in, width, 1, side, side, carried=shortcut)
            net.norm(f"{name}.bn1", width, side, relu=True, carried=shortcut)
            net.conv(f"{name}.conv2", width, width, 3, side, out_side, carried=shortcut)
            net.norm(f"{name}.bn2", width, out_side, relu=True, carried=shortcut)
            net.conv(f"{name}.conv3", width, c_out, 1, out_side, out_side, carried=shortcut)
            main = e * b * c_out * out_side * out_side
            if block == 0:  # projection shortcut: strided 1x1 conv + BN on the block input
                net.norm(f"{name}.bn3", c_out, out_side, relu=False, carried=shortcut)
                net.conv(f"{name}.downsample.conv", c_in, c_out, 1, side, out_side, carried=main)
                net.norm(f"{name}.downsample.bn", c_out, out_side, relu=False, carried=main)
            else:
                net.norm(f"{name}.bn3", c_out, out_side, relu=False, carried=shortcut)
            out = b * c_out * out_side * out_side
            net.elementwise(f"{name}.add_relu", out, "add_relu", 2, inputs=2, stash=float(e * out))
            c_in, side = c_out, out_side
    features = c_in
    pool = Elementwise(dtype, n=b * features, op="avgpool", flops_per_element=side * side,
                       inputs=side * side, outputs=1)
    pool_grad = Elementwise(dtype, n=b * features * side * side, op="avgpool_grad", inputs=1, outputs=1)
    fc = gemm_layer_kernels(dtype, b, classes, features)
    loss_fwd, loss_bwd = elementwise_pair(dtype, b * classes, "softmax_loss", 6)
    net.layers.append(Layer(
        name="head",
        forward=(pool, *fc[0], loss_fwd), backward_input=(loss_bwd, *fc[1], pool_grad),
        backward_weight=fc[2],
        params=features * classes + classes,
        stash_bytes=e * b * (features + classes),
        boundary_bytes=0.0,
    ))
    return ModelProfile(
        name=f"resnet-{depth}",
        micro_batch=micro_batch,
        dtype=dtype,
        layers=tuple(net.layers),
        description=f"ResNet-{depth}: {sum(BLOCKS[depth])} bottleneck blocks, {image_size}px, "
                    f"micro-batch {b}",
    )
