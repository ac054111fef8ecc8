"""Frozen hardware specifications. All quantities are SI floats (bytes, seconds, bytes/s, Hz).

Specs describe what a part *is*; runtime devices (:mod:`simhpc.hardware.devices`) account for
what a simulated run does with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPE_BITS = {"fp64": 64, "fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8}
"""Storage width of each numeric type, in bits."""
HALF_TYPES = ("fp16", "bf16")
"""16-bit floats: a CPU computes them at twice the fp32 rate only with native vector arithmetic."""


@dataclass(frozen=True)
class SimdUnit:
    """A CPU core's vector unit.

    Attributes:
        isa: instruction set ("avx512", "avx2", "sve", "neon").
        width_bits: vector register width (SVE: the implementation's width).
        fma_units: fused multiply-add pipes per core.
        gather: whether the ISA has a hardware gather (AVX-512, SVE do; NEON does not).
        half: the 16-bit float types it multiplies natively, twice the fp32 lanes per FMA (A64FX:
            fp16; Sapphire Rapids' AVX-512 FP16 and BF16: both). Others are converted and
            computed as fp32 (AVX2 has conversions, F16C, but no 16-bit arithmetic).
    """

    isa: str
    width_bits: int
    fma_units: int
    gather: bool = True
    half: tuple[str, ...] = ()

    def lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` per vector register."""
        return max(1, self.width_bits // DTYPE_BITS[dtype])

    def flops_per_cycle(self, dtype: str) -> int:
        """Peak FLOP per cycle per core: lanes x FMA units x 2 (multiply + add); a 16-bit float
        without native arithmetic at the fp32 lanes."""
        computed = "fp32" if dtype in HALF_TYPES and dtype not in self.half else dtype
        return self.lanes(computed) * self.fma_units * 2


@dataclass(frozen=True)
class CacheLevel:
    """One cache level; ``size`` is per core unless ``shared`` (then per socket)."""

    name: str
    size: float
    latency: float
    shared: bool = False


@dataclass(frozen=True)
class CpuSpec:
    """A CPU model (one or more sockets)."""

    name: str
    sockets: int
    cores_per_socket: int
    clock: float
    simd: SimdUnit
    caches: tuple[CacheLevel, ...]
    memory_bandwidth: float
    """Sustainable DRAM/HBM bandwidth per socket, bytes/s."""
    memory_latency: float
    max_outstanding_misses: int
    """Line-fill buffers per core: bounds the bandwidth one core can draw (Little's law)."""
    memory_capacity: float = 0.0
    """Memory attached to the package (A64FX's HBM2); 0 when memory belongs to the node."""
    source: str = ""

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    def peak_flops(self, dtype: str = "fp64", cores: int | None = None) -> float:
        """Peak FLOP/s over ``cores`` (default: all) at the nominal clock."""
        used = self.cores if cores is None else cores
        return used * self.clock * self.simd.flops_per_cycle(dtype)

    def total_memory_bandwidth(self) -> float:
        return self.memory_bandwidth * self.sockets

    def core_bandwidth_limit(self, line_bytes: int = 64) -> float:
        """Bandwidth one core can draw: outstanding misses x line size / latency."""
        return self.max_outstanding_misses * line_bytes / self.memory_latency


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model."""

    name: str
    peak_flops: dict[str, float]
    """Dense peak per dtype (tensor cores where the dtype uses them), FLOP/s."""
    memory_bandwidth: float
    memory_capacity: float
    launch_overhead: float = 5e-6
    source: str = ""

    def flops(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; raises KeyError naming the GPU if unsupported."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise KeyError(f"{self.name} has no peak for dtype {dtype!r}") from None


@dataclass(frozen=True)
class LinkSpec:
    """A point-to-point or bus link; ``bandwidth`` is per direction."""

    bandwidth: float
    latency: float
    source: str = ""


@dataclass(frozen=True)
class StorageSpec:
    """Persistent storage reachable from a node (local NVMe, a parallel file system)."""

    name: str
    bandwidth: float
    """Aggregate write bandwidth available to one node, bytes/s."""
    latency: float
    capacity: float
    shared: bool = False
    """A shared file system's bandwidth is shared by every node writing at once."""
    local: bool = False
    """A device inside the node (its NVMe): what it holds is lost when the node fails and is replaced."""
    source: str = ""


@dataclass(frozen=True)
class NodeSpec:
    """A server: GPUs, CPUs, host memory, the links between them and its NICs."""

    name: str
    cpu: CpuSpec
    host_memory: float
    gpu: GpuSpec | None = None
    gpus: int = 0
    gpu_link: LinkSpec | None = None
    """GPU-GPU link per GPU (NVLink/NVSwitch, or PCIe figures on a PCIe-only server); None: none
    (a ``gpu_cluster`` topology needs one)."""
    pcie: LinkSpec | None = None
    """Host-device link per GPU."""
    nics: int = 1
    nic: LinkSpec = field(default_factory=lambda: LinkSpec(bandwidth=12.5e9, latency=1e-6))
    storage: StorageSpec | None = None
    source: str = ""
