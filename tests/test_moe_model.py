"""MoE arithmetic and expert-load dynamics (pure functions, no SimPy)."""

import numpy as np
import pytest

from simhpc.costs import CostModel
from simhpc.hardware.catalog import builtin_catalog
from simhpc.workloads.moe.config import MoEModelConfig
from simhpc.workloads.moe.loads import ExpertLoads
from simhpc.workloads.moe.model import Layout, MoEModel
from simhpc.workloads.moe.plan import iteration_phases


def model(**overrides) -> MoEModel:
    fields = dict(layers=2, hidden=1024, ffn_hidden=4096, heads=16, experts=16, top_k=2, sequence_length=1024)
    fields.update(overrides)
    return MoEModel(MoEModelConfig(**fields), Layout(2, 8, 16), 64, builtin_catalog().gpus["a100"], CostModel())


def test_parameter_counts():
    m = model()
    h, f = 1024, 4096
    assert m.ffn_params == 2 * h * f
    assert m.dense_params == 2 * (4 * h * h + 4 * h + 16 * h) + (50257 + 1024) * h
    assert m.expert_params_total == 2 * 16 * 2 * h * f
    assert m.total_params == m.dense_params + m.expert_params_total
    assert model(gated_ffn=True).ffn_params == 3 * h * f
    # One expert per GPU per layer; each GPU saves its experts and 1/16 of the dense state.
    assert m.checkpoint_params_per_gpu() == pytest.approx(2 * 2 * h * f + m.dense_params / 16)


def test_dense_layers_between_moe_layers():
    """moe_every=2: layers 1 and 3 of 4 have experts; 0 and 2 a dense FFN of ffn_hidden."""
    alternating, every = model(layers=4, moe_every=2), model(layers=4)
    h, f = 1024, 4096
    assert alternating.config.moe_layers == (1, 3)
    assert alternating.expert_params_total == 2 * 16 * 2 * h * f
    # Each dense layer trades the gate (h x experts) for one dense FFN (2 h f).
    assert alternating.dense_params == every.dense_params + 2 * (2 * h * f - 16 * h)
    assert alternating.checkpoint_params_per_gpu() == pytest.approx(2 * 2 * h * f + alternating.dense_params / 16)
    attention, ffn = alternating.dense_attention_time, alternating.dense_ffn_time
    assert attention[0] < alternating.attention_time[0]  # no gate
    # The dense FFN runs every token of the GPU; an expert its share (even: top_k / experts).
    assert ffn[0] > alternating.expert_time(alternating.tokens_per_gpu * 2 / 16)[0]
    phases = iteration_phases(4, alternating.config.moe_layers)
    assert [p.part for p in phases if p.layer == 0] == ["attention", "ffn", "ffn", "attention"]
    assert sum(p.kind == "comm" for p in phases) == 2 * 2 * 2 + 1  # 2 all-to-alls x 2 passes x 2 MoE layers
    with pytest.raises(ValueError, match="moe_every"):
        MoEModelConfig(layers=2, hidden=1024, ffn_hidden=4096, experts=16, moe_every=3)


def test_tokens_capacity_and_dispatch_bytes():
    m = model()
    assert m.tokens_per_gpu == 64 * 1024 / 16
    even = np.full(16, 1 / 16)
    tokens = m.expert_tokens(even)
    assert tokens.sum() == pytest.approx(m.tokens_per_gpu * 16 * 2)
    skewed = np.array([0.5] + [0.5 / 15] * 15)
    capped = model(capacity_factor=1.25).expert_tokens(skewed)
    assert capped.max() == pytest.approx(1.25 * m.tokens_per_gpu * 16 * 2 / 16)
    sends = m.dispatch_bytes(tokens)
    # Each GPU sends each expert's GPU 1/16 of that expert's tokens, hidden x 2 bytes each.
    assert sends.sum() * 16 == pytest.approx(tokens.sum() * 1024 * 2)


def test_expert_time_follows_the_most_loaded_expert():
    m = model(experts=32)  # two experts per GPU
    tokens = np.full(32, 1000.0)
    tokens[5] = 3000.0
    peaks = m.gpu_expert_load(tokens)
    assert peaks[2] == 3000.0 and peaks[0] == 1000.0
    forward, backward = m.expert_time(3000.0)
    assert forward > m.expert_time(1000.0)[0]
    assert backward == pytest.approx(2 * forward, rel=0.01)


def test_loads_are_static_without_dynamicity_and_repeatable():
    a = ExpertLoads(np.random.default_rng(1), 4, 8, dynamicity=0.0, skew=0.7)
    assert np.array_equal(a.shares(0), a.shares(9))
    assert np.allclose(a.shares(3).sum(axis=1), 1.0)
    b = ExpertLoads(np.random.default_rng(1), 4, 8, dynamicity=0.3, skew=0.7)
    c = ExpertLoads(np.random.default_rng(1), 4, 8, dynamicity=0.3, skew=0.7)
    assert np.array_equal(b.shares(0), a.shares(0))  # same start, whatever the dynamicity
    assert np.array_equal(b.shares(7), c.shares(7))
    assert not np.array_equal(b.shares(0), b.shares(1))
    assert not np.array_equal(a.shares(0)[0], a.shares(0)[1])  # layers differ


def test_loads_keep_temporal_locality_and_a_stationary_spread():
    slow = ExpertLoads(np.random.default_rng(2), 8, 64, dynamicity=0.05, skew=0.8)
    fast = ExpertLoads(np.random.default_rng(2), 8, 64, dynamicity=1.0, skew=0.8)
    step = lambda loads: np.mean([np.abs(loads.logits(i + 1) - loads.logits(i)).mean() for i in range(40)])  # noqa: E731
    assert step(slow) < 0.4 * step(fast)
    for loads in (slow, fast):
        spread = np.std(np.stack([loads.logits(i) for i in range(200)]))
        assert spread == pytest.approx(0.8, rel=0.2)


def test_uniform_start_begins_even():
    loads = ExpertLoads(np.random.default_rng(3), 2, 4, dynamicity=0.1, skew=1.0, start="uniform")
    assert np.allclose(loads.shares(0), 0.25)
    assert not np.allclose(loads.shares(5), 0.25)
    with pytest.raises(ValueError):
        ExpertLoads(np.random.default_rng(3), 2, 4, dynamicity=1.5, skew=1.0)
