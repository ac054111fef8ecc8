import math

import pytest

from simhpc.units import (
    UnitError,
    format_bandwidth,
    format_size,
    format_time,
    parse_bandwidth,
    parse_frequency,
    parse_number,
    parse_rate,
    parse_size,
    parse_time,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("2 us", 2e-6), ("1.5ms", 1.5e-3), ("3 s", 3.0), ("250 ns", 250e-9), ("2 min", 120.0), (0.5, 0.5),
    ("1e-3 s", 1e-3), ("7 µs", 7e-6),
])
def test_parse_time(text, seconds):
    assert math.isclose(parse_time(text), seconds, rel_tol=1e-12)


@pytest.mark.parametrize(("text", "nbytes"), [
    ("16 GiB", 16 * 2**30), ("512 MB", 512e6), ("8 Gb", 1e9), ("64 KiB", 65536), ("1 B", 1), (4096, 4096),
    ("1.5 TB", 1.5e12),
])
def test_parse_size(text, nbytes):
    assert math.isclose(parse_size(text), nbytes, rel_tol=1e-12)


@pytest.mark.parametrize(("text", "rate"), [
    ("400 Gb/s", 50e9), ("25 GB/s", 25e9), ("100 Gbps", 12.5e9), ("10 GiB/s", 10 * 2**30), ("1 MB/s", 1e6),
])
def test_parse_bandwidth(text, rate):
    assert math.isclose(parse_bandwidth(text), rate, rel_tol=1e-12)


def test_parse_rate_and_frequency():
    assert parse_rate("7.8 TFLOP/s") == pytest.approx(7.8e12)
    assert parse_rate("19.5 TFLOPS") == pytest.approx(19.5e12)
    assert parse_frequency("2.2 GHz") == pytest.approx(2.2e9)


@pytest.mark.parametrize(("parser", "value"), [
    (parse_time, "fast"), (parse_time, "2 parsecs"), (parse_time, "-1 s"), (parse_size, "12 GiB/s"),
    (parse_bandwidth, "100 Gb"), (parse_bandwidth, "fast"), (parse_rate, "3 GHz"), (parse_size, True),
    (parse_size, None), (parse_time, "nan s"), (parse_size, [1]),
    # magnitudes whose products and ratios would overflow: 1e308 s, 1e400 (inf), 1e-300 B/s
    (parse_time, "1e308 s"), (parse_time, 1e31), (parse_bandwidth, "1e400 GB/s"), (parse_bandwidth, "1e-300 B/s"),
    (parse_number, True), (parse_number, "fast"), (parse_number, "2 GB"), (parse_number, float("inf")),
    (parse_number, 1e308), (parse_number, "-1e-40"),
    # an integer too large for a float (YAML reads 10**400 written out as an int)
    (parse_bandwidth, 10**400), (parse_size, 10**400), (parse_time, -(10**400)), (parse_number, 10**400),
])
def test_bad_values_raise_clear_errors(parser, value):
    with pytest.raises(UnitError, match="expected"):
        parser(value)


def test_format_round_trips():
    assert format_time(1.5e-6) == "1.5 us"
    assert format_size(2**30) == "1 GiB"
    assert format_bandwidth(5e10) == "50 GB/s"
    assert parse_time(format_time(0.0123)) == pytest.approx(0.0123)
    assert parse_size(format_size(3 * 2**20)) == pytest.approx(3 * 2**20)


def test_numbers_and_the_magnitude_range():
    assert parse_number("1e-3") == 1e-3  # YAML 1.1 reads 1e-3 as a string
    assert parse_number(-2) == -2.0 and parse_number(0) == 0.0
    assert parse_time("1e30 s") == 1e30 and parse_size("1e-30 B") == 1e-30 and parse_size(0) == 0.0
