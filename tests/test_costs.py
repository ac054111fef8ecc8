import pytest

from simhpc.costs import ConstantEfficiency, CostModel, Elementwise, Gemm
from simhpc.hardware import builtin_catalog


def test_gemm_is_compute_bound_on_gpu():
    a100 = builtin_catalog().gpus["a100"]
    model = CostModel(ConstantEfficiency(compute={"gemm": 1.0}, default_memory=1.0))
    gemm = Gemm(dtype="bf16", m=8192, n=8192, k=8192)
    expected = 2 * 8192**3 / 312e12 + a100.launch_overhead
    assert model.duration(gemm, a100) == pytest.approx(expected)


def test_elementwise_is_memory_bound():
    a100 = builtin_catalog().gpus["a100"]
    model = CostModel(ConstantEfficiency(default_memory=0.5))
    add = Elementwise(dtype="fp32", n=10**8)
    expected = 3 * 4 * 10**8 / (2039e9 * 0.5) + a100.launch_overhead
    assert model.duration(add, a100) == pytest.approx(expected)


def test_cpu_bandwidth_limited_by_outstanding_misses_on_few_cores():
    cpu = builtin_catalog().cpus["spr-8480"]
    model = CostModel(ConstantEfficiency(default_memory=1.0))
    add = Elementwise(dtype="fp64", n=10**8)
    one_core = model.duration(add, cpu, cores=1)
    all_cores = model.duration(add, cpu)
    assert one_core == pytest.approx(add.bytes() / cpu.core_bandwidth_limit())
    assert all_cores == pytest.approx(add.bytes() / cpu.total_memory_bandwidth())
