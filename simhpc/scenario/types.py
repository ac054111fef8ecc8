"""Pydantic field types for quantities written with units in scenario files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from simhpc.units import parse_bandwidth, parse_frequency, parse_rate, parse_size, parse_time


def _strict(parser: Callable[[object], float]) -> Callable[[Any], float]:
    def validate(value: Any) -> float:
        return parser(value)  # UnitError is a ValueError: pydantic reports it at the field path

    return validate


Time = Annotated[float, BeforeValidator(_strict(parse_time)), Field(ge=0)]
"""A duration ('2 us'); seconds inside."""
Size = Annotated[float, BeforeValidator(_strict(parse_size)), Field(ge=0)]
"""A size ('16 GiB'); bytes inside. Zero allowed."""
PositiveSize = Annotated[float, BeforeValidator(_strict(parse_size)), Field(gt=0)]
"""A size that must be > 0."""
Bandwidth = Annotated[float, BeforeValidator(_strict(parse_bandwidth)), Field(gt=0)]
"""A bandwidth ('400 Gb/s'); bytes/s inside."""
Rate = Annotated[float, BeforeValidator(_strict(parse_rate)), Field(gt=0)]
"""An operation rate ('7.8 TFLOP/s'); FLOP/s inside."""
Frequency = Annotated[float, BeforeValidator(_strict(parse_frequency)), Field(gt=0)]
"""A clock ('2 GHz'); Hz inside."""
PositiveInt = Annotated[int, Field(gt=0, strict=True)]
"""An integer > 0 (no floats or strings)."""


class Strict(BaseModel):
    """Base of every scenario model: unknown keys are errors; models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
