"""Model profiles: parameter counts, FLOPs, activation bytes and costs from layer shapes."""

from __future__ import annotations

import pytest

from simhpc.costs import CostModel, Gemm
from simhpc.hardware import builtin_catalog
from simhpc.models import build_model
from simhpc.registry import names

V100 = builtin_catalog().gpus["v100"]


def flops(kernels) -> float:
    return sum(kernel.flops() for kernel in kernels)


@pytest.mark.parametrize(("name", "params"), [
    ("bert-base", 110e6), ("bert-large", 335e6),  # Devlin et al. 2019 (with a 2-way classifier)
    ("resnet-50", 25.56e6), ("resnet-101", 44.55e6), ("resnet-152", 60.19e6),  # torchvision
])
def test_parameter_counts_match_the_published_models(name, params):
    assert build_model(name, 2).params == pytest.approx(params, rel=0.01)


def test_every_model_is_registered():
    assert {"bert-base", "bert-large", "resnet-50", "resnet-101", "resnet-152"} <= set(names("model"))


@pytest.mark.parametrize("name", ["bert-large", "resnet-50"])
def test_backward_is_about_twice_the_forward_flops(name):
    model = build_model(name, 4, seq_len=128, image_size=64)
    forward = sum(flops(layer.forward) for layer in model.layers)
    backward = sum(flops(layer.backward_input) + flops(layer.backward_weight) for layer in model.layers)
    assert backward / forward == pytest.approx(2.0, rel=0.05)
    for layer in model.layers:
        gemms = [k for k in layer.forward if isinstance(k, Gemm)]
        if layer.params > 1000 and gemms:  # a weight layer computes weight gradients
            assert layer.backward_weight


def test_bert_layer_flops_and_activation_bytes_follow_the_shapes():
    b, s, h, heads = 2, 128, 1024, 16
    model = build_model("bert-large", b, seq_len=s)
    names_ = [layer.name for layer in model.layers]
    assert names_[0] == "embedding" and names_[-1] == "head" and len(names_) == 2 + 2 * 24
    attention, mlp = model.layers[1], model.layers[2]
    gemm_flops = 2 * b * s * (3 * h * h + h * h) + 2 * 2 * b * heads * s * s * (h // heads)
    assert flops(k for k in attention.forward if isinstance(k, Gemm)) == gemm_flops
    assert flops(k for k in mlp.forward if isinstance(k, Gemm)) == 2 * b * s * 8 * h * h
    # Korthikanti et al. (2022): 34 sbh + 5 a s^2 b bytes per layer with 16-bit activations.
    per_layer = attention.stash_bytes + mlp.stash_bytes
    assert per_layer == pytest.approx(s * b * h * 34 + 5 * heads * s * s * b)
    assert attention.boundary_bytes == 2 * b * s * h


def test_resnet_cuts_inside_a_block_ship_the_shortcut():
    model = build_model("resnet-50", 8, image_size=224)
    layers = {layer.name: layer for layer in model.layers}
    block_input = 2 * 8 * 256 * 56 * 56
    conv1_out = 2 * 8 * 128 * 56 * 56
    assert layers["layer2.0.conv1"].boundary_bytes == conv1_out + block_input
    assert layers["layer2.0.add_relu"].boundary_bytes == 2 * 8 * 512 * 28 * 28
    stem = layers["stem.conv"].forward[0]
    assert (stem.m, stem.n, stem.k) == (8 * 112 * 112, 64, 3 * 49)


def test_costs_come_from_the_cost_model_and_scale_with_the_micro_batch():
    model = CostModel()
    small = build_model("bert-base", 2, seq_len=256).costs(model, V100)
    large = build_model("bert-base", 8, seq_len=256).costs(model, V100)
    assert len(small) == len(large) == 26
    assert (small.forward_s > 0).all() and (small.backward_s >= small.forward_s).all()
    assert 2.0 < large.step_s.sum() / small.step_s.sum() < 4.0  # launch overheads do not scale
    assert large.stash_bytes.sum() == pytest.approx(4 * small.stash_bytes.sum())


def test_profiles_are_non_uniform_where_real_models_are():
    model = build_model("resnet-152", 32)
    costs = model.costs(CostModel(), V100)
    assert costs.step_s.max() > 5 * costs.step_s.min()
    early, late = model.layers[1], model.layers[-2]
    assert early.stash_bytes > 10 * late.stash_bytes  # 112x112 maps vs 7x7 maps


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="seq_len"):
        build_model("bert-base", 1, seq_len=1024)
    with pytest.raises(ValueError, match="image_size"):
        build_model("resnet-50", 1, image_size=16)
