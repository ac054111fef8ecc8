"""Roofline cost model: a kernel's duration on a device.

``duration = max(flops / (peak x compute_eff), bytes / (bandwidth x memory_eff)) + overhead``

The efficiencies come from an :class:`EfficiencyModel`: a constant one here; the calibration
module supplies one interpolated from real-kernel measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from simhpc.costs.kernels import Kernel
from simhpc.hardware.specs import CpuSpec, GpuSpec

Device = GpuSpec | CpuSpec


class EfficiencyModel(Protocol):
    """Fractions of peak compute and peak bandwidth a kernel reaches on a device."""

    def efficiency(self, kernel: Kernel, device: Device, cores: int | None) -> tuple[float, float]:
        """Return (compute efficiency, memory efficiency), each in (0, 1]."""
        ...


@dataclass(frozen=True)
class ConstantEfficiency:
    """The same efficiency for every kernel of a kind; the fallback before calibration.

    Defaults: GEMMs reach 70 % of peak, other kernels 80 % of memory bandwidth, typical of
    well-tuned libraries on large shapes.
    """

    compute: dict[str, float] = field(default_factory=lambda: {"gemm": 0.7})
    memory: dict[str, float] = field(default_factory=dict)
    default_compute: float = 0.5
    default_memory: float = 0.8

    def efficiency(self, kernel: Kernel, device: Device, cores: int | None) -> tuple[float, float]:
        return (self.compute.get(kernel.kind, self.default_compute),
                self.memory.get(kernel.kind, self.default_memory))


class CostModel:
    """Turns kernel descriptors into durations on GPU or CPU specs."""

    def __init__(self, efficiency: EfficiencyModel | None = None) -> None:
        self.efficiency = efficiency or ConstantEfficiency()

    def duration(self, kernel: Kernel, device: Device, cores: int | None = None) -> float:
        """Seconds ``kernel`` takes on ``device`` (a CPU uses ``cores`` cores, default all)."""
        compute_eff, memory_eff = self.efficiency.efficiency(kernel, device, cores)
        if isinstance(device, GpuSpec):
            peak = device.flops(kernel.dtype) if kernel.flops() else 1.0
            bandwidth = device.memory_bandwidth
            overhead = device.launch_overhead
        else:
            used = device.cores if cores is None else cores
            peak = device.peak_flops(kernel.dtype if kernel.flops() else "fp64", used)
            # Few cores cannot draw the whole socket's bandwidth (outstanding-miss limit).
            bandwidth = min(device.total_memory_bandwidth(), used * device.core_bandwidth_limit())
            overhead = 0.0
        compute_time = kernel.flops() / (peak * compute_eff) if kernel.flops() else 0.0
        memory_time = kernel.bytes() / (bandwidth * memory_eff) if kernel.bytes() else 0.0
        return max(compute_time, memory_time) + overhead
