"""Imports every built-in component so its ``@register`` decorator runs."""

from simhpc import models  # noqa: F401  (model profiles: family "model")
from simhpc.network import builders  # noqa: F401
from simhpc.policies import checkpoint  # noqa: F401
from simhpc.policies import pipeline as pipeline_schedules  # noqa: F401
from simhpc.workloads import collective, moe  # noqa: F401
from simhpc.workloads import pipeline as pipeline_training  # noqa: F401
