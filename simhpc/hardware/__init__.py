"""Hardware: frozen specs, the YAML catalog, and runtime devices that account memory."""

from simhpc.hardware.catalog import Catalog, CatalogError, builtin_catalog
from simhpc.hardware.specs import CpuSpec, GpuSpec, LinkSpec, NodeSpec, SimdUnit, StorageSpec

__all__ = [
    "Catalog", "CatalogError", "builtin_catalog",
    "CpuSpec", "GpuSpec", "LinkSpec", "NodeSpec", "SimdUnit", "StorageSpec",
]
