"""Run keys: a sha256 of the fully resolved scenario, so equal scenarios share one result."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from simhpc.scenario.schema import ScenarioBase


def canonical_json(data: Any) -> str:
    """Compact JSON with sorted keys: equal data, equal text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def resolved_scenario(scenario: ScenarioBase) -> dict[str, Any]:
    """The validated scenario as JSON data (units resolved to SI numbers), without ``sweep``."""
    return scenario.model_dump(mode="json", exclude={"sweep"})


def run_key(scenario: ScenarioBase) -> str:
    """The key of one run: sha256 of the canonical JSON of the resolved scenario (hex)."""
    return hashlib.sha256(canonical_json(resolved_scenario(scenario)).encode("utf-8")).hexdigest()
