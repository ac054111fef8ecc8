"""The scenario schema: one pydantic model, its workload union built from the registry."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Union

from pydantic import Field, create_model

from simhpc.registry import lookup, names
from simhpc.scenario.network import NetworkConfig
from simhpc.scenario.types import Strict, Time

MAX_SEED = 2**63 - 1
"""The largest seed: a signed 64-bit integer (what sweep stores and most tools keep)."""


class OutputsConfig(Strict):
    """What a run writes besides ``summary.json`` and ``metrics.csv``."""

    trace: bool = True
    timeline: bool = True
    max_time: Time | None = None
    """Stop the simulation at this simulated time (default: when all work is done); the summary's
    ``stopped_at_max_time`` then says whether work was left."""


class ScenarioBase(Strict):
    """Fields every scenario has; ``workload`` is added per registered workload kind."""

    name: str = Field("scenario", min_length=1, max_length=200)
    """Shown in titles and file names: a line, not a document (the ``description`` holds that)."""
    description: str = ""
    seed: int = Field(0, ge=0, le=MAX_SEED, strict=True)
    hardware: dict[str, Any] | None = None
    """Extra catalog entries (sections gpus, cpus, storage, nodes), same shape as the catalog."""
    network: NetworkConfig | None = None
    outputs: OutputsConfig = OutputsConfig()
    sweep: dict[str, Any] | None = None
    """A sweep spec, expanded by ``simhpc sweep`` (``simhpc run`` only checks its shape)."""


@cache
def scenario_model() -> type[ScenarioBase]:
    """The Scenario model with ``workload`` a union over every registered workload config."""
    configs = tuple(lookup("workload", kind).Config for kind in names("workload"))
    if len(configs) == 1:
        workload_type: Any = configs[0]
    else:
        workload_type = Annotated[Union[configs], Field(discriminator="kind")]  # noqa: UP007
    return create_model("Scenario", __base__=ScenarioBase, workload=(workload_type, ...))
