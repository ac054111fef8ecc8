"""Facts about the machine simhpc runs on, and the committed calibration as catalog entries.

:func:`detect_host` reads Linux's ``/proc/cpuinfo``, ``/proc/meminfo`` and
``/sys/devices/system/cpu`` (elsewhere it falls back to :mod:`platform` and ``os.cpu_count``).
:func:`host_catalog_entries` turns the ``host`` and ``derived`` sections of a calibration file
(written by ``simhpc calibrate``; by default the committed one of this machine) into a CPU
named ``host`` and a node named ``host-node`` for the built-in catalog; :func:`default_calibration`
picks the committed calibration of the machine simhpc runs on. This module reads only
those two sections; :mod:`simhpc.costs.calibration_file` owns the whole format.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from simhpc.units import MAX_COUNT

CALIBRATION_DIR = Path(__file__).resolve().parents[2] / "validation" / "calibration"
"""The committed calibrations, one per kind of machine measured (absent in a wheel)."""
COMMITTED_CALIBRATION = CALIBRATION_DIR / "host.json"
"""The calibration of the reference machine: the default where no committed one matches the host."""
CALIBRATION_ENV = "SIMHPC_CALIBRATION"
"""Environment variable naming the calibration file to use by default (overrides the matching)."""

ISA_FLAGS = (
    "sse2",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512cd",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimdhp",
    "bf16",
    "sve",
    "sve2",
)
"""The CPU flags recorded (and compared) in a calibration: those that change kernel speed."""
NATIVE_HALF_FLAGS = {"fp16": ("avx512_fp16", "asimdhp"), "bf16": ("avx512_bf16", "amx_bf16", "bf16")}
"""CPU flags of vector arithmetic on 16-bit floats (x86: AVX512-FP16, AVX512-BF16 or AMX; Arm:
FP16 SIMD, BF16): without them fp16/bf16 products are computed as fp32."""


def native_half_types(flags: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The 16-bit float types ``flags`` give native vector arithmetic, sorted."""
    present = set(flags)
    return tuple(sorted(t for t, names in NATIVE_HALF_FLAGS.items() if present.intersection(names)))

_SYS_CPU = Path("/sys/devices/system/cpu")


class HostFactsError(ValueError):
    """Host facts (from a calibration file) are malformed."""


@dataclass(frozen=True)
class CacheInfo:
    """One data or unified cache level as the OS reports it."""

    name: str
    """``L1D``, ``L2``, ``L3``."""
    size: int
    """Bytes per instance."""
    shared_by: int = 1
    """Logical CPUs sharing one instance."""


@dataclass(frozen=True)
class HostFacts:
    """What the host CPU is: model, cores, ISA flags, caches, memory.

    Attributes:
        cpu_model: the model name string (``/proc/cpuinfo``).
        vendor: ``GenuineIntel``, ``AuthenticAMD``, an ARM implementer, or ``unknown``.
        architecture: ``platform.machine()``.
        logical_cpus: CPUs this process may run on.
        cores: physical cores among them.
        sockets: physical packages.
        nominal_clock_hz: the clock the OS reports (0 if unknown); calibration measures the real one.
        isa_flags: the :data:`ISA_FLAGS` present, sorted.
        caches: data and unified cache levels, innermost first.
        memory_bytes: physical memory.
    """

    cpu_model: str
    vendor: str
    architecture: str
    logical_cpus: int
    cores: int
    sockets: int
    nominal_clock_hz: float
    isa_flags: tuple[str, ...]
    caches: tuple[CacheInfo, ...] = field(default_factory=tuple)
    memory_bytes: int = 0

    @property
    def simd_isa(self) -> str:
        """The widest vector ISA: ``avx512``, ``avx2``, ``avx``, ``sse``, ``sve``, ``neon`` or ``scalar``."""
        flags = set(self.isa_flags)
        for isa, flag in (
            ("avx512", "avx512f"),
            ("avx2", "avx2"),
            ("avx", "avx"),
            ("sve", "sve"),
            ("neon", "asimd"),
            ("sse", "sse2"),
        ):
            if flag in flags:
                return isa
        return "scalar"

    @property
    def simd_width_bits(self) -> int:
        """Vector register width of :attr:`simd_isa` (SVE: 128 unless a calibration measured more)."""
        return {"avx512": 512, "avx2": 256, "avx": 256}.get(self.simd_isa, 128)

    @property
    def last_level_cache(self) -> int:
        """Bytes of the outermost cache (32 MiB if the OS does not say)."""
        return self.caches[-1].size if self.caches else 32 << 20

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a calibration to describe this host."""
        return {"cpu_model": self.cpu_model, "cores": self.cores, "isa_flags": list(self.isa_flags)}

    def cache_sizes(self) -> list[tuple[str, int]]:
        """(level, bytes) of every cache level: guests of one model name can differ here (an EPYC
        Zen 2 and a Zen 3 guest both read ``AMD EPYC``, with 16 and 32 MiB of L3)."""
        return [(cache.name, cache.size) for cache in self.caches]

    def same_machine(self, other: HostFacts) -> bool:
        """Whether ``other`` is this kind of machine: same fingerprint and cache sizes."""
        return self.fingerprint() == other.fingerprint() and self.cache_sizes() == other.cache_sizes()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        data = asdict(self)
        data["isa_flags"] = list(self.isa_flags)
        data["caches"] = [asdict(cache) for cache in self.caches]
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "host") -> HostFacts:
        """Read facts written by :meth:`to_dict`; raises :class:`HostFactsError` naming the field."""
        if not isinstance(data, Mapping):
            raise HostFactsError(f"{where}: expected an object, got {type(data).__name__}")

        def get(key: str, kind: type | tuple[type, ...]) -> Any:
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise HostFactsError(f"{where}.{key}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
            return value

        def positive_int(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and value > 0

        flags = get("isa_flags", list)
        if not all(isinstance(flag, str) for flag in flags):
            raise HostFactsError(f"{where}.isa_flags: expected a list of strings, got {flags!r}")
        caches = []
        for i, cache in enumerate(get("caches", list)):
            if (
                not isinstance(cache, Mapping)
                or not isinstance(cache.get("name"), str)
                or not positive_int(cache.get("size"))
                or not positive_int(cache.get("shared_by", 1))
            ):
                raise HostFactsError(f"{where}.caches.{i}: expected {{name, size, shared_by}} (sizes and "
                                     f"sharing cores integers > 0), got {cache!r}")
            caches.append(CacheInfo(cache["name"], cache["size"], cache.get("shared_by", 1)))
        clock = get("nominal_clock_hz", (int, float))
        if not 0 < clock < math.inf:
            raise HostFactsError(f"{where}.nominal_clock_hz: expected a number > 0, got {clock!r}")

        def count(key: str) -> int:
            value = get(key, int)
            if not 1 <= value <= MAX_COUNT:
                raise HostFactsError(f"{where}.{key}: expected an integer from 1 to {MAX_COUNT}, got {value!r}")
            return value

        memory = get("memory_bytes", int)
        if memory < 0:
            raise HostFactsError(f"{where}.memory_bytes: expected a number of bytes >= 0, got {memory!r}")
        return cls(get("cpu_model", str), get("vendor", str), get("architecture", str), count("logical_cpus"),
                   count("cores"), count("sockets"), float(clock), tuple(flags), tuple(caches), memory)


def _cpuinfo() -> list[dict[str, str]]:
    """``/proc/cpuinfo`` as one mapping per logical CPU ([] where absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    blocks = []
    for block in text.strip().split("\n\n"):
        entry = {}
        for line in block.splitlines():
            if ":" in line:
                key, value = line.split(":", 1)
                entry[key.strip()] = value.strip()
        blocks.append(entry)
    return blocks


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _size(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)", text.strip())
    if not match:
        return 0
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def _cpu_list_length(text: str) -> int:
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += int(high) - int(low) + 1 if high else 1
    return count


def _caches(cpu: int) -> tuple[CacheInfo, ...]:
    found = []
    for index in sorted((_SYS_CPU / f"cpu{cpu}" / "cache").glob("index*")):
        kind, level, size = (_read(index / name) for name in ("type", "level", "size"))
        if kind not in ("Data", "Unified") or not level or not size:
            continue
        shared = _read(index / "shared_cpu_list")
        found.append(
            CacheInfo(
                f"L{level}D" if level == "1" else f"L{level}",
                _size(size),
                _cpu_list_length(shared) if shared else 1,
            )
        )
    return tuple(sorted(found, key=lambda cache: cache.name))


def _memory_bytes() -> int:
    text = _read(Path("/proc/meminfo")) or ""
    match = re.search(r"MemTotal:\s+(\d+) kB", text)
    return int(match.group(1)) * 1024 if match else 0


def detect_host() -> HostFacts:
    """Read the facts of the machine this process runs on."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        allowed = list(range(os.cpu_count() or 1))
    info = _cpuinfo()
    by_cpu = {int(entry["processor"]): entry for entry in info if entry.get("processor", "").isdigit()}
    first = by_cpu.get(allowed[0], info[0] if info else {})
    model = first.get("model name") or first.get("Model") or platform.processor() or "unknown"
    vendor = first.get("vendor_id") or first.get("CPU implementer") or "unknown"
    flag_text = first.get("flags") or first.get("Features") or ""
    flags = tuple(sorted(set(flag_text.split()) & set(ISA_FLAGS)))
    cores = {(by_cpu[c].get("physical id", "0"), by_cpu[c].get("core id", str(c))) for c in allowed if c in by_cpu}
    sockets = {by_cpu[c].get("physical id", "0") for c in allowed if c in by_cpu}
    clock = 0.0
    max_freq = _read(_SYS_CPU / f"cpu{allowed[0]}" / "cpufreq" / "cpuinfo_max_freq")
    if max_freq and max_freq.isdigit():
        clock = int(max_freq) * 1e3
    elif first.get("cpu MHz"):
        clock = float(first["cpu MHz"]) * 1e6
    return HostFacts(
        cpu_model=model,
        vendor=vendor,
        architecture=platform.machine(),
        logical_cpus=len(allowed),
        cores=max(1, len(cores)) if cores else len(allowed),
        sockets=max(1, len(sockets)),
        nominal_clock_hz=clock,
        isa_flags=flags,
        caches=_caches(allowed[0]),
        memory_bytes=_memory_bytes(),
    )


def _derived_number(table: Mapping[str, Any], key: str, where: str) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise HostFactsError(f"{where}.{key}: expected a number > 0, got {value!r}")
    return float(value)


def catalog_entries(data: Any, where: str) -> dict[str, dict[str, Any]]:
    """Catalog entries (CPU ``host``, node ``host-node``) from a parsed calibration object.

    Args:
        data: the calibration JSON object (only its ``host`` and ``derived`` sections are read).
        where: its origin, for error messages and the entries' ``source``.

    Returns:
        ``{"cpus": {"host": ...}, "nodes": {"host-node": ...}}`` in the catalog's YAML shape
        (plain SI numbers).

    Raises:
        HostFactsError: a section is missing or malformed.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("derived"), Mapping):
        raise HostFactsError(f"{where}: not a simhpc calibration (no 'derived' section)")
    facts = HostFacts.from_dict(data.get("host"), f"{where}: host")
    derived = data["derived"]
    latencies = derived.get("cache_latency", {})
    if not isinstance(latencies, Mapping):
        raise HostFactsError(f"{where}: derived.cache_latency: expected an object of seconds, got {latencies!r}")
    memory_latency = _derived_number(derived, "memory_latency", f"{where}: derived")
    caches = [
        {
            "name": cache.name,
            "size": cache.size,
            "latency": _derived_number(latencies, cache.name, f"{where}: derived.cache_latency")
            if cache.name in latencies else memory_latency,
            "shared": cache.shared_by > 1,
        }
        for cache in facts.caches
    ]
    isa = facts.simd_isa
    cpu = {
        "sockets": facts.sockets,
        "cores_per_socket": max(1, facts.cores // facts.sockets),
        "clock": _derived_number(derived, "clock_hz", f"{where}: derived"),
        "simd": {
            "isa": isa,
            "width_bits": int(_derived_number(derived, "vector_bits", f"{where}: derived")),
            "fma_units": int(_derived_number(derived, "fma_units", f"{where}: derived")),
            "gather": isa in ("avx512", "avx2", "sve"),
            "half": list(native_half_types(facts.isa_flags)),
        },
        "caches": caches,
        "memory_bandwidth": _derived_number(derived, "memory_bandwidth", f"{where}: derived") / facts.sockets,
        "memory_latency": memory_latency,
        "max_outstanding_misses": int(_derived_number(derived, "max_outstanding_misses", f"{where}: derived")),
        "source": f"measured by simhpc calibrate on '{facts.cpu_model}' ({Path(where).name})",
    }
    node = {
        "cpu": "host",
        "host_memory": facts.memory_bytes or 1 << 30,
        "source": f"the calibrated host ({Path(where).name}): one CPU, its memory, one default NIC",
    }
    return {"cpus": {"host": cpu}, "nodes": {"host-node": node}}


@functools.cache
def _committed_hosts() -> tuple[tuple[Path, HostFacts, tuple[int, str]], ...]:
    """Every committed calibration with the host it measured and how recent it is (its suite
    version, then when it was made), the reference machine's first; files that are not readable
    calibrations are left out."""
    paths = sorted(CALIBRATION_DIR.glob("*.json"), key=lambda path: (path != COMMITTED_CALIBRATION, path.name))
    found = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            facts = HostFacts.from_dict(data.get("host"))
            recency = (int(data.get("microbench", {}).get("suite_version") or 0), str(data.get("created") or ""))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError, ValueError,
                HostFactsError):
            continue
        found.append((path, facts, recency))
    return tuple(found)


def _likeness(measured: HostFacts, here: HostFacts) -> tuple[bool, bool, bool, bool, bool, float]:
    """How much a calibration's host is like this one, most telling first: the same kind of machine;
    the same vector ISA flags (what the kernels run on); vendor; model name; cores; then cache sizes
    within the fewest factors of two of each other."""
    theirs = dict(measured.cache_sizes())
    apart = sum(abs(math.log2(size / theirs[name])) if name in theirs else 8.0 for name, size in here.cache_sizes())
    return (measured.same_machine(here), measured.isa_flags == here.isa_flags, measured.vendor == here.vendor,
            measured.cpu_model == here.cpu_model, measured.cores == here.cores, -apart)


def committed_calibrations(facts: HostFacts | None = None) -> list[Path]:
    """The committed calibrations of this kind of machine (:meth:`HostFacts.same_machine`)."""
    here = facts or detect_host()
    return [path for path, measured, _ in _committed_hosts() if measured.same_machine(here)]


def default_calibration(facts: HostFacts | None = None) -> Path:
    """The calibration used where none is named: the file ``$SIMHPC_CALIBRATION`` names, else the
    committed calibration of this kind of machine (:meth:`HostFacts.same_machine`; of several, the
    one of the latest microbenchmark suite, then the newest: guests alike in every fact the OS shows
    can run at different clocks, and the older file may lack the later suites' kernels), else of the
    most like it (:func:`_likeness`: an AVX2 AMD guest gets an EPYC's, not the AVX-512 Xeon's), the
    reference machine's :data:`COMMITTED_CALIBRATION` on ties. ``simhpc compare`` warns when the
    host differs."""
    named = os.environ.get(CALIBRATION_ENV)
    if named:
        return Path(named)
    here = facts or detect_host()
    best, best_key = COMMITTED_CALIBRATION, None
    for path, measured, recency in _committed_hosts():  # the reference first: it wins ties
        likeness = _likeness(measured, here)
        key = (*likeness, recency if likeness[0] else (0, ""))
        if best_key is None or key > best_key:
            best, best_key = path, key
    return best


def host_catalog_entries(path: Path | None = None) -> dict[str, dict[str, Any]] | None:
    """Catalog entries (CPU ``host``, node ``host-node``) from a calibration file.

    Args:
        path: the calibration JSON; default :func:`default_calibration`.

    Returns:
        See :func:`catalog_entries`; None when the default file does not exist (an installed wheel).

    Raises:
        HostFactsError: the file exists but is not a readable calibration.
    """
    source = path or default_calibration()
    from_env = path is None and bool(os.environ.get(CALIBRATION_ENV))
    named = f" (named by ${CALIBRATION_ENV})" if from_env else ""
    if not source.exists():
        if path is None and not from_env:
            return None
        raise HostFactsError(f"{source}: no such calibration file{named}")
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HostFactsError(f"{source}: not a readable calibration JSON ({error}){named}") from None
    try:
        return catalog_entries(data, str(source))
    except HostFactsError as error:
        raise HostFactsError(f"{error}{named}") from None
