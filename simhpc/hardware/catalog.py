"""The hardware catalog: named GPU, CPU, storage and node specs read from YAML.

The built-in catalog is ``catalog.yaml`` beside this module; a scenario may add or override
entries with a ``hardware:`` section of the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from simhpc.hardware.host import HostFactsError, host_catalog_entries
from simhpc.hardware.specs import (
    DTYPE_BITS,
    HALF_TYPES,
    CacheLevel,
    CpuSpec,
    GpuSpec,
    LinkSpec,
    NodeSpec,
    SimdUnit,
    StorageSpec,
)
from simhpc.units import MAX_COUNT, UnitError, parse_quantity

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")
SECTIONS = ("gpus", "cpus", "storage", "nodes")


class CatalogError(ValueError):
    """An entry of a hardware catalog is malformed; ``path`` is the dotted field path."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


def _shown(value: Any) -> str:
    """A value for an error message: a collection by its type only (it may be huge, or a YAML
    alias expanding exponentially)."""
    if isinstance(value, (Mapping, list, tuple, set)):
        return f"a {type(value).__name__}"
    return repr(value)[:80]


class _Fields:
    """Reads typed fields of one mapping, naming the dotted path in every error."""

    def __init__(self, data: Any, path: str, allowed: tuple[str, ...]) -> None:
        if not isinstance(data, Mapping):
            raise CatalogError(path, f"expected a mapping, got {type(data).__name__}")
        for key in data:
            if key not in allowed:
                raise CatalogError(f"{path}.{key}", f"unknown field (allowed: {', '.join(allowed)})")
        self.data = data
        self.path = path

    def raw(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise CatalogError(f"{self.path}.{key}", "field required")
            return default
        return self.data[key]

    def quantity(self, key: str, kind: str, default: Any = ..., positive: bool = True) -> float:
        value = self.raw(key, default)
        try:
            number = parse_quantity(value, kind)
        except UnitError as error:
            raise CatalogError(f"{self.path}.{key}", str(error)) from None
        if positive and number <= 0:
            raise CatalogError(f"{self.path}.{key}", f"must be > 0, got {value!r}")
        return number

    def integer(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
            raise CatalogError(f"{self.path}.{key}", f"expected an integer from {minimum} to {MAX_COUNT}, "
                                                     f"got {value!r}")
        return value

    def text(self, key: str, default: Any = ...) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or not value:
            raise CatalogError(f"{self.path}.{key}", f"expected a non-empty string, got {_shown(value)}")
        return value

    def note(self, key: str) -> str:
        """An optional free-text field (``source``: where the figures come from)."""
        value = self.raw(key, "")
        if not isinstance(value, str):
            raise CatalogError(f"{self.path}.{key}", f"expected a string, got {_shown(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise CatalogError(f"{self.path}.{key}", f"expected true or false, got {value!r}")
        return value


SIMD_MAX_BITS = {"avx512": 512, "avx2": 256, "avx": 256, "sse": 128, "neon": 128, "sve": 2048, "scalar": 128}
"""Vector instruction sets a CPU's ``simd.isa`` may name, with their widest registers in bits. The
width used may be narrower (AVX-512 code built for 256-bit vectors), a multiple of 64 bits (SVE:
of 128, the implementation's choice)."""


def _simd_width_problem(isa: str, width: int) -> str | None:
    step = 128 if isa == "sve" else 64
    if width % step or width > SIMD_MAX_BITS[isa]:
        return f"{isa} vectors are a multiple of {step} bits up to {SIMD_MAX_BITS[isa]}, got {width}"
    return None


def _link(data: Any, path: str) -> LinkSpec:
    f = _Fields(data, path, ("bandwidth", "latency", "source"))
    return LinkSpec(f.quantity("bandwidth", "bandwidth"), f.quantity("latency", "time", positive=False))


def _gpu(name: str, data: Any, path: str) -> GpuSpec:
    f = _Fields(data, path, ("peak_flops", "memory_bandwidth", "memory_capacity", "launch_overhead", "source"))
    peaks = f.raw("peak_flops")
    if not isinstance(peaks, Mapping) or not peaks:
        raise CatalogError(f"{path}.peak_flops", "expected a mapping dtype -> rate")
    unknown = [dtype for dtype in peaks if dtype not in DTYPE_BITS]
    if unknown:
        raise CatalogError(f"{path}.peak_flops.{unknown[0]}", f"unknown dtype (known: {', '.join(DTYPE_BITS)})")
    peak_fields = _Fields(peaks, f"{path}.peak_flops", tuple(peaks))
    return GpuSpec(
        name=name,
        peak_flops={str(dtype): peak_fields.quantity(dtype, "rate") for dtype in peaks},
        memory_bandwidth=f.quantity("memory_bandwidth", "bandwidth"),
        memory_capacity=f.quantity("memory_capacity", "size"),
        launch_overhead=f.quantity("launch_overhead", "time", 5e-6, positive=False),
        source=f.note("source"),
    )


def _cpu(name: str, data: Any, path: str) -> CpuSpec:
    allowed = ("sockets", "cores_per_socket", "clock", "simd", "caches", "memory_bandwidth",
               "memory_latency", "max_outstanding_misses", "memory_capacity", "source")
    f = _Fields(data, path, allowed)
    s = _Fields(f.raw("simd"), f"{path}.simd", ("isa", "width_bits", "fma_units", "gather", "half"))
    half = s.raw("half", [])
    if not isinstance(half, list) or any(h not in HALF_TYPES for h in half):
        raise CatalogError(f"{path}.simd.half", f"expected a list of {' / '.join(HALF_TYPES)}, got {half!r}")
    isa, width = s.text("isa"), s.integer("width_bits", minimum=64)
    if isa not in SIMD_MAX_BITS:
        raise CatalogError(f"{path}.simd.isa",
                           f"unknown instruction set {_shown(isa)} (known: {', '.join(SIMD_MAX_BITS)})")
    problem = _simd_width_problem(isa, width)
    if problem:
        raise CatalogError(f"{path}.simd.width_bits", problem)
    simd = SimdUnit(isa, width, s.integer("fma_units"), s.flag("gather", True), tuple(sorted(set(half))))
    caches = f.raw("caches", [])
    if not isinstance(caches, list):
        raise CatalogError(f"{path}.caches", "expected a list of cache levels")
    levels = []
    for i, level in enumerate(caches):
        c = _Fields(level, f"{path}.caches.{i}", ("name", "size", "latency", "shared"))
        levels.append(CacheLevel(c.text("name"), c.quantity("size", "size"),
                                 c.quantity("latency", "time"), c.flag("shared", False)))
    return CpuSpec(
        name=name,
        sockets=f.integer("sockets", 1),
        cores_per_socket=f.integer("cores_per_socket"),
        clock=f.quantity("clock", "frequency"),
        simd=simd,
        caches=tuple(levels),
        memory_bandwidth=f.quantity("memory_bandwidth", "bandwidth"),
        memory_latency=f.quantity("memory_latency", "time"),
        max_outstanding_misses=f.integer("max_outstanding_misses", 10),
        memory_capacity=f.quantity("memory_capacity", "size", 0, positive=False),
        source=f.note("source"),
    )


def _storage(name: str, data: Any, path: str) -> StorageSpec:
    f = _Fields(data, path, ("bandwidth", "latency", "capacity", "shared", "local", "source"))
    shared, local = f.flag("shared", False), f.flag("local", False)
    if shared and local:
        raise CatalogError(f"{path}.local", "a node-local device cannot also be shared by every node (shared: true)")
    return StorageSpec(name, f.quantity("bandwidth", "bandwidth"), f.quantity("latency", "time", positive=False),
                       f.quantity("capacity", "size"), shared, local, f.note("source"))


def _section(data: Any, path: str) -> dict[str, Any]:
    """A section's entries (name -> mapping); a section left empty (``null``) has none."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise CatalogError(path, f"expected a mapping of name -> entry, got {type(data).__name__}")
    return dict(data)


class Catalog:
    """Named specs by section; resolves a node's references to CPUs, GPUs and storage."""

    def __init__(self, data: Mapping[str, Any], origin: str = "catalog") -> None:
        if not isinstance(data, Mapping):
            raise CatalogError(origin, "expected a mapping with sections " + ", ".join(SECTIONS))
        for key in data:
            if key not in SECTIONS:
                raise CatalogError(f"{origin}.{key}", f"unknown section (allowed: {', '.join(SECTIONS)})")
        self.raw = {section: _section(data.get(section), f"{origin}.{section}") for section in SECTIONS}
        self.origin = origin
        self.gpus = {n: _gpu(n, d, f"{origin}.gpus.{n}") for n, d in self.raw["gpus"].items()}
        self.cpus = {n: _cpu(n, d, f"{origin}.cpus.{n}") for n, d in self.raw["cpus"].items()}
        self.storage = {n: _storage(n, d, f"{origin}.storage.{n}") for n, d in self.raw["storage"].items()}
        self.nodes = {n: self._node(n, d, f"{origin}.nodes.{n}") for n, d in self.raw["nodes"].items()}

    def _ref(self, table: dict[str, Any], kind: str, name: Any, path: str) -> Any:
        if not isinstance(name, str) or not name:
            raise CatalogError(path, f"expected the name of a catalog {kind}, got {name!r}")
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise CatalogError(path, f"unknown {kind} {name!r} (known: {known})")
        return table[name]

    def _node(self, name: str, data: Any, path: str) -> NodeSpec:
        allowed = ("cpu", "host_memory", "gpu", "gpus", "gpu_link", "pcie", "nics", "nic", "storage", "source")
        f = _Fields(data, path, allowed)
        gpu_name = f.raw("gpu", None)
        gpu = self._ref(self.gpus, "gpu", gpu_name, f"{path}.gpu") if gpu_name is not None else None
        storage_name = f.raw("storage", None)
        storage = (self._ref(self.storage, "storage", storage_name, f"{path}.storage")
                   if storage_name is not None else None)
        nic_default: Any = {"bandwidth": "100 Gb/s", "latency": "1.5 us"}
        return NodeSpec(
            name=name,
            cpu=self._ref(self.cpus, "cpu", f.text("cpu"), f"{path}.cpu"),
            host_memory=f.quantity("host_memory", "size"),
            gpu=gpu,
            gpus=f.integer("gpus", 1 if gpu else 0, minimum=1 if gpu else 0),
            gpu_link=_link(f.raw("gpu_link"), f"{path}.gpu_link") if f.raw("gpu_link", None) is not None else None,
            pcie=_link(f.raw("pcie"), f"{path}.pcie") if f.raw("pcie", None) is not None else None,
            nics=f.integer("nics", 1),
            nic=_link(f.raw("nic", nic_default), f"{path}.nic"),
            storage=storage,
            source=f.note("source"),
        )

    def merged(self, extra: Mapping[str, Any] | None, origin: str) -> Catalog:
        """A new catalog with ``extra``'s entries added (same name: ``extra`` wins)."""
        if not extra:
            return self
        if not isinstance(extra, Mapping):
            raise CatalogError(origin, "expected a mapping with sections " + ", ".join(SECTIONS))
        for key in extra:
            if key not in SECTIONS:
                raise CatalogError(f"{origin}.{key}", f"unknown section (allowed: {', '.join(SECTIONS)})")
        combined = {s: {**self.raw[s], **_section(extra.get(s), f"{origin}.{s}")} for s in SECTIONS}
        try:
            return Catalog(combined, self.origin)
        except CatalogError as error:
            # Errors in user entries name the user's section, built-ins keep theirs.
            raise CatalogError(error.path.replace(self.origin, origin, 1), error.message) from None

    def names(self) -> dict[str, list[str]]:
        return {"gpu": sorted(self.gpus), "cpu": sorted(self.cpus),
                "storage": sorted(self.storage), "node": sorted(self.nodes)}


@cache
def builtin_catalog() -> Catalog:
    """The catalog shipped with simhpc, plus the default calibration's host as CPU ``host`` and
    node ``host-node`` (when it is present: see :func:`.host.default_calibration`)."""
    with CATALOG_PATH.open(encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    try:
        host = host_catalog_entries()
    except HostFactsError as error:
        raise CatalogError("catalog.host", str(error)) from None
    for section, entries in (host or {}).items():
        data.setdefault(section, {}).update(entries)
    return Catalog(data, "catalog")
