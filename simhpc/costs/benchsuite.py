"""Find and load the microbenchmark suite that ``simhpc calibrate`` runs.

The kernels live with their C sources in ``validation/microbench/`` of the source checkout
(the package is installed editable), not in the package: the package stays importable without
a C compiler, and the measurements stay beside the data they produce. This module locates that
folder (``SIMHPC_MICROBENCH_DIR`` overrides) and imports it as the package ``simhpc_microbench``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from simhpc.errors import SimhpcError

PACKAGE = "simhpc_microbench"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "validation" / "microbench"


class MicrobenchError(SimhpcError):
    """The microbenchmark suite is missing or cannot run here."""


def suite_dir() -> Path:
    """The folder holding the suite: ``$SIMHPC_MICROBENCH_DIR`` or ``validation/microbench``."""
    configured = os.environ.get("SIMHPC_MICROBENCH_DIR")
    folder = Path(configured) if configured else DEFAULT_DIR
    if not (folder / "__init__.py").is_file() or not (folder / "kernels.c").is_file():
        raise MicrobenchError(
            f"microbenchmarks not found in {folder}: simhpc calibrate needs a source checkout of simhpc "
            "(validation/microbench/ beside the package) or SIMHPC_MICROBENCH_DIR pointing at that folder"
        )
    return folder


def load_suite() -> ModuleType:
    """Import the suite (once) and return its package module."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    folder = suite_dir()
    spec = importlib.util.spec_from_file_location(
        PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise MicrobenchError(f"cannot import the microbenchmarks from {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        del sys.modules[PACKAGE]
        raise MicrobenchError(f"cannot import the microbenchmarks from {folder}: {error}") from None
    return module


def load_submodule(name: str) -> ModuleType:
    """A module of the suite, e.g. ``native`` or ``gemm``."""
    load_suite()
    return importlib.import_module(f"{PACKAGE}.{name}")
