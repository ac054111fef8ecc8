"""Imports every built-in component so its ``@register`` decorator runs."""

from simhpc.network import builders  # noqa: F401
from simhpc.workloads import collective  # noqa: F401
