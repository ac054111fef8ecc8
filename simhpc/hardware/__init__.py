"""Hardware: frozen specs, the YAML catalog, and runtime devices that account memory."""

from simhpc.hardware.catalog import Catalog, CatalogError, builtin_catalog
from simhpc.hardware.specs import CpuSpec, GpuSpec, LinkSpec, NodeSpec, SimdUnit, StorageSpec

__all__ = [
    "Catalog",
    "CatalogError",
    "CpuSpec",
    "GpuSpec",
    "LinkSpec",
    "NodeSpec",
    "SimdUnit",
    "StorageSpec",
    "builtin_catalog",
]
