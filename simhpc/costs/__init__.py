"""Costs: kernel descriptors and the roofline cost model."""

from simhpc.costs.kernels import Copy, Elementwise, Gemm, HashProbe, Kernel, Reduction, Stencil, dtype_bytes
from simhpc.costs.model import ConstantEfficiency, CostModel, EfficiencyModel

__all__ = [
    "ConstantEfficiency",
    "Copy",
    "CostModel",
    "EfficiencyModel",
    "Elementwise",
    "Gemm",
    "HashProbe",
    "Kernel",
    "Reduction",
    "Stencil",
    "dtype_bytes",
]
