"""Build ``kernels.c`` with gcc and bind it with ctypes.

The shared library is cached in ``_build/`` beside this file, keyed by a hash of the source,
the flags, the compiler's version and the CPU model (``-march=native`` code is host-specific).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels.c"
BUILD = HERE / "_build"
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-shared", "-fopenmp")
"""Compiled with -ffast-math (vectorised tanh, exp, erf from libmvec) but linked without it: linking
with -ffast-math adds crtfastmath.o, whose constructor turns on flush-to-zero and denormals-are-zero
in the whole process that loads the library (it sent scipy's k-d tree into endless recursion)."""

_F = ctypes.c_void_p
_L = ctypes.c_long
_I = ctypes.c_int
_D = ctypes.c_double
_U = ctypes.c_uint64

# name -> (argument types); every function returns a double.
SIGNATURES: dict[str, tuple[object, ...]] = {
    **{
        f"ew_{op}_{t}": (_F, _F, _F, _L, _I, _I) for op in ("add", "mul", "tanh", "exp", "gelu") for t in ("f32", "f64")
    },
    **{f"red_{op}_{t}": (_F, _L, _I, _I, ctypes.POINTER(_D)) for op in ("sum", "max") for t in ("f32", "f64")},
    "bw_copy": (_F, _F, _L, _I, _I),
    "bw_triad": (_F, _F, _F, _L, _I, _I),
    "store_lines": (_F, _L),
    "chase_latency": (_L, _L, _U),
    "chase_latency_on": (_I, _L, _L, _U),
    "clock_probe": (_L, _I),
    "peer_round_trip": (_L,),
    "fma_probe": (_L, _I, ctypes.POINTER(_I)),
    "stencil7": (_F, _F, _L, _I, _I),
    "hash_probe_linear": (_L, _D, _D, _L, _U, ctypes.POINTER(_D)),
}


class BuildError(RuntimeError):
    """The C kernels could not be compiled or loaded."""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _compiler() -> str:
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        raise BuildError(f"C compiler {compiler!r} not found; the microbenchmarks need gcc (set CC to another)")
    return compiler


def source_hash() -> str:
    """Short hash of the kernel source (recorded in calibration files)."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]


def build() -> Path:
    """Compile the kernels if needed; returns the shared library's path."""
    compiler = _compiler()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(
        b"\0".join(
            [SOURCE.read_bytes(), " ".join(FLAGS + LINK_FLAGS).encode(), version.encode(), _cpu_model().encode()]
        )
    ).hexdigest()[:16]
    target = BUILD / f"libsimhpc_microbench-{key}.so"
    if target.exists():
        return target
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
        partial = Path(tmp) / target.name
        obj = Path(tmp) / "kernels.o"
        for command in (
            [compiler, "-c", *FLAGS, str(SOURCE), "-o", str(obj)],
            [compiler, *LINK_FLAGS, str(obj), "-o", str(partial), "-lmvec", "-lm"],
        ):
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                detail = (result.stderr or result.stdout).strip().splitlines()
                raise BuildError(f"building {SOURCE.name} failed: {detail[0] if detail else 'no output'}")
        os.replace(partial, target)  # atomic: concurrent builds never see half a library
    return target


@cache
def library() -> ctypes.CDLL:
    """The loaded kernel library with typed functions."""
    path = build()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as error:
        raise BuildError(f"loading {path.name} failed: {error}") from None
    for name, argtypes in SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes = list(argtypes)
        function.restype = _D
    return lib
