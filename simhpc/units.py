"""One parser and formatter for physical quantities.

Scenario files carry units in their values ("400 Gb/s", "2 us", "16 GiB", "7.8 TFLOP/s");
inside the simulator every quantity is a plain SI float: seconds, bytes, bytes/s, FLOP/s.
Bits are converted to bytes (``400 Gb/s`` -> ``5e10`` bytes/s).
"""

from __future__ import annotations

import math
import re

__all__ = [
    "MAX_COUNT",
    "UnitError",
    "counted",
    "format_bandwidth",
    "format_rate",
    "format_size",
    "format_time",
    "parse_bandwidth",
    "parse_frequency",
    "parse_number",
    "parse_quantity",
    "parse_rate",
    "parse_size",
    "parse_time",
]


class UnitError(ValueError):
    """A value could not be read as the expected kind of quantity."""


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

_TIME_UNITS = {
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9, "ps": 1e-12,
    "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
}

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(_NUMBER + r"\s*(?P<unit>[^\d\s].*)?$")

# What each kind expects, for error messages.
_EXAMPLES = {
    "time": "a time like '2 us'",
    "size": "a size like '16 GiB'",
    "bandwidth": "a bandwidth like '100 Gb/s'",
    "rate": "a rate like '7.8 TFLOP/s'",
    "frequency": "a frequency like '2.0 GHz'",
    "number": "a number like '0.5'",
}


def counted(count: int, noun: str) -> str:
    """``"1 run"``, ``"3 runs"``: a count and its noun, plural unless the count is one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def huge_integer(value: int) -> str:
    """``"an integer of about N digits"``: how a message names an integer too long to print
    (``str()`` refuses more than 4300 digits)."""
    return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"


def _split(value: object, kind: str) -> tuple[float, str]:
    """Split ``value`` into a number and a unit string; bare numbers have unit ''."""
    if isinstance(value, bool):
        raise UnitError(f"expected {_EXAMPLES[kind]}, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            return float(value), ""
        except OverflowError:  # an int beyond any float (YAML reads 10**400 written out as one)
            raise UnitError(f"expected {_EXAMPLES[kind]}, got {huge_integer(value)}") from None
    if not isinstance(value, str):
        raise UnitError(f"expected {_EXAMPLES[kind]}, got {value!r}")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise UnitError(f"expected {_EXAMPLES[kind]}, got {value!r}")
    return float(match.group("num")), (match.group("unit") or "").strip()


MAX_COUNT = 2**20
"""The largest count an input may give (hosts, GPUs, layers, experts, micro-batches,
iterations, ...): 1,048,576. Counts size the simulated machine and its event list; a larger one
would only exhaust the memory or the patience of the host running the simulation."""

# Quantities are 0 or within these magnitudes (in SI units): wide enough for any machine, narrow
# enough that products and ratios of a few of them (bytes / bandwidth, time x rate, microsecond
# timestamps) stay finite floats instead of overflowing to inf or underflowing to 0.
SMALLEST = 1e-30
LARGEST = 1e30
_SI = {"time": "s", "size": "B", "bandwidth": "B/s", "rate": "FLOP/s", "frequency": "Hz"}


def _finite_nonnegative(number: float, value: object, kind: str) -> float:
    if not math.isfinite(number) or number < 0:
        raise UnitError(f"expected {_EXAMPLES[kind]} (finite, >= 0), got {value!r}")
    if number > LARGEST or 0 < number < SMALLEST:
        unit = _SI[kind]
        raise UnitError(f"expected {_EXAMPLES[kind]} of 0 or {SMALLEST:g} to {LARGEST:g} {unit}, got {value!r}")
    return number


def _prefix_factor(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    return _DECIMAL.get(prefix)


def parse_time(value: object) -> float:
    """Parse a duration into seconds. Bare numbers are seconds."""
    number, unit = _split(value, "time")
    if unit == "":
        return _finite_nonnegative(number, value, "time")
    factor = _TIME_UNITS.get(unit)
    if factor is None:
        raise UnitError(f"expected {_EXAMPLES['time']}, got {value!r} (unknown unit {unit!r})")
    return _finite_nonnegative(number * factor, value, "time")


def _parse_bytes_unit(unit: str) -> float | None:
    """Factor for a size unit: B, KB, KiB, Gb (bits), ...; None if not a size unit."""
    if unit in ("", "B", "byte", "bytes"):
        return 1.0
    if unit in ("b", "bit", "bits"):
        return 1 / 8
    for suffix, scale in (("B", 1.0), ("b", 1 / 8)):
        if unit.endswith(suffix):
            factor = _prefix_factor(unit[: -len(suffix)])
            if factor is not None:
                return factor * scale
    return None


def parse_size(value: object) -> float:
    """Parse a size into bytes ('16 GiB', '512 MB', '8 Gb'). Bare numbers are bytes."""
    number, unit = _split(value, "size")
    factor = _parse_bytes_unit(unit)
    if factor is None:
        raise UnitError(f"expected {_EXAMPLES['size']}, got {value!r} (unknown unit {unit!r})")
    return _finite_nonnegative(number * factor, value, "size")


def parse_bandwidth(value: object) -> float:
    """Parse a bandwidth into bytes/s ('400 Gb/s', '25 GB/s', '10 GiB/s', '100 Gbps')."""
    number, unit = _split(value, "bandwidth")
    if unit == "":
        return _finite_nonnegative(number, value, "bandwidth")
    if unit.endswith(("bps", "Bps")):  # '100 Gbps' -> '100 Gb/s'
        unit = unit[:-2] + "/s"
    if not unit.endswith("/s"):
        raise UnitError(f"expected {_EXAMPLES['bandwidth']}, got {value!r} (missing '/s')")
    factor = _parse_bytes_unit(unit[:-2])
    if factor is None:
        raise UnitError(
            f"expected {_EXAMPLES['bandwidth']}, got {value!r} (unknown unit {unit!r})"
        )
    return _finite_nonnegative(number * factor, value, "bandwidth")


def parse_rate(value: object) -> float:
    """Parse an operation rate into ops/s ('7.8 TFLOP/s', '19.5 TFLOPS', '2 Gop/s')."""
    number, unit = _split(value, "rate")
    if unit == "":
        return _finite_nonnegative(number, value, "rate")
    match = re.fullmatch(r"([kKMGTPE]?)(FLOP|FLOPs|flop|flops|op|ops|OP|OPS|FLOPS)(/s)?", unit)
    if not match or (match.group(3) is None and not match.group(2).upper().endswith("S")):
        raise UnitError(f"expected {_EXAMPLES['rate']}, got {value!r} (unknown unit {unit!r})")
    return _finite_nonnegative(number * _DECIMAL[match.group(1)], value, "rate")


def parse_frequency(value: object) -> float:
    """Parse a frequency into Hz ('2.0 GHz', '800 MHz')."""
    number, unit = _split(value, "frequency")
    if unit == "":
        return _finite_nonnegative(number, value, "frequency")
    match = re.fullmatch(r"([kKMGT]?)Hz", unit)
    if not match:
        raise UnitError(
            f"expected {_EXAMPLES['frequency']}, got {value!r} (unknown unit {unit!r})"
        )
    return _finite_nonnegative(number * _DECIMAL[match.group(1)], value, "frequency")


def parse_number(value: object) -> float:
    """Parse a plain number (a ratio, a factor): 0.5, 2, '1e-3' (YAML 1.1 reads 1e-3 as a string).

    Unlike the quantities it may be negative; like them it is finite and 0 or of a magnitude
    from :data:`SMALLEST` to :data:`LARGEST`.
    """
    number, unit = _split(value, "number")
    if unit:
        raise UnitError(f"expected {_EXAMPLES['number']}, got {value!r}")
    if not math.isfinite(number):
        raise UnitError(f"expected {_EXAMPLES['number']} (finite), got {value!r}")
    if abs(number) > LARGEST or 0 < abs(number) < SMALLEST:
        raise UnitError(f"expected {_EXAMPLES['number']} of 0 or {SMALLEST:g} to {LARGEST:g} in magnitude, "
                        f"got {value!r}")
    return number


_PARSERS = {
    "time": parse_time,
    "size": parse_size,
    "bandwidth": parse_bandwidth,
    "rate": parse_rate,
    "frequency": parse_frequency,
}


QUANTITY_KINDS = tuple(_PARSERS)
"""The kinds :func:`parse_quantity` reads."""


def parse_quantity(value: object, kind: str) -> float:
    """Parse ``value`` as a quantity of ``kind`` (time, size, bandwidth, rate, frequency)."""
    try:
        parser = _PARSERS[kind]
    except KeyError:
        raise ValueError(f"unknown quantity kind {kind!r}") from None
    return parser(value)


def _format(value: float, unit: str, steps: list[tuple[float, str]]) -> str:
    for factor, prefix in steps:
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}" if value else f"0 {unit}"


def format_time(seconds: float) -> str:
    """Human-readable duration: 1.5e-6 -> '1.5 us'."""
    if seconds == 0:
        return "0 s"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(seconds) >= factor:
            return f"{seconds / factor:.4g} {unit}"
    return f"{seconds / 1e-12:.4g} ps"


def format_size(nbytes: float) -> str:
    """Human-readable size with binary prefixes: 2**30 -> '1 GiB'."""
    steps = [(2.0**50, "Pi"), (2.0**40, "Ti"), (2.0**30, "Gi"), (2.0**20, "Mi"), (2.0**10, "Ki")]
    return _format(nbytes, "B", steps)


def format_bandwidth(bytes_per_s: float) -> str:
    """Human-readable bandwidth in decimal bytes/s: 5e10 -> '50 GB/s'."""
    steps = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
    return _format(bytes_per_s, "B/s", steps)


def format_rate(ops_per_s: float) -> str:
    """Human-readable FLOP rate: 7.8e12 -> '7.8 TFLOP/s'."""
    steps = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
    return _format(ops_per_s, "FLOP/s", steps)
