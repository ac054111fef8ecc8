"""Pydantic field types for quantities written with units in scenario files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from simhpc.units import MAX_COUNT, parse_bandwidth, parse_frequency, parse_number, parse_rate, parse_size, parse_time


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
Number = Annotated[float, BeforeValidator(_strict(parse_number))]
"""A plain number (a ratio or factor): finite, never a boolean; '1e-3' (a string to YAML 1.1) too."""
PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT, strict=True)]
"""An integer from 1 to :data:`MAX_COUNT` (no floats or strings)."""
Count = Annotated[int, Field(ge=0, le=MAX_COUNT, strict=True)]
"""An integer from 0 to :data:`MAX_COUNT` (no floats or strings)."""


class Strict(BaseModel):
    """Base of every scenario model: unknown keys are errors; models are immutable.

    Values are not coerced across types (``true`` is not 1, ``"0.5"`` is not a number, ``2.0``
    is not an integer) and plain numbers must be finite (no ``.nan`` or ``.inf``): a quantity
    with units goes through its own parser, which rejects them too.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
