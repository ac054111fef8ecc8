"""Reading scenario files: YAML -> overrides -> validated model -> cross-references checked.

Every user mistake becomes a :class:`~simhpc.errors.ScenarioError` reading
``FILE: field.path: message``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simhpc.errors import ScenarioError
from simhpc.hardware.catalog import Catalog, CatalogError, builtin_catalog
from simhpc.registry import UnknownNameError, lookup
from simhpc.scenario.messages import describe_validation_error
from simhpc.scenario.network import GpuCluster
from simhpc.scenario.overrides import OverrideError, apply_override, override_path, parse_override
from simhpc.scenario.schema import ScenarioBase, scenario_model
from simhpc.scenario.yamlio import ExpansionError, load_yaml
from simhpc.workloads.base import InvalidReference

MAX_SCENARIO_BYTES = 16 * 2**20


def read_yaml(path: str | Path, kind: str = "scenario") -> dict[str, Any]:
    """Read a YAML mapping from ``path``, with one-line errors for every way it can fail
    (``kind``: what the file holds, as the errors name it)."""
    source = str(path)
    file = Path(path)
    try:
        file.stat()
    except FileNotFoundError:
        missing = f"broken symbolic link (to {os.readlink(file)})" if file.is_symlink() else "no such file"
        raise ScenarioError(source, "", missing) from None
    except OSError as error:  # a symlink loop, a path through a file, no permission
        raise ScenarioError(source, "", f"cannot read: {error.strerror}") from None
    if file.is_dir():
        raise ScenarioError(source, "", f"is a directory, expected a {kind} file (.yaml)")
    if not file.is_file():
        raise ScenarioError(source, "", "not a regular file (a pipe or a device?)")
    try:
        with file.open("rb") as stream:
            raw = stream.read(MAX_SCENARIO_BYTES + 1)
    except OSError as error:
        raise ScenarioError(source, "", f"cannot read: {error.strerror}") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(source, "", f"file is too large for a {kind} (over {MAX_SCENARIO_BYTES} bytes)")
    if b"\x00" in raw:
        raise ScenarioError(source, "", "not a text file (binary content)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(source, "", "not a UTF-8 text file") from None
    if not text.strip():
        raise ScenarioError(source, "", f"file is empty, expected a {kind} mapping")
    try:
        data = load_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        semantic = isinstance(error, (yaml.constructor.ConstructorError, ExpansionError))
        label = "YAML error" if semantic else "YAML syntax error"
        raise ScenarioError(source, "", f"{label}{where}: {problem}") from None
    if data is None:
        raise ScenarioError(source, "", f"file is empty, expected a {kind} mapping")
    if not isinstance(data, dict):
        raise ScenarioError(source, "", f"expected a mapping at the top level, got {type(data).__name__}")
    return data


def scenario_from_dict(data: Mapping[str, Any], source: str = "<scenario>") -> ScenarioBase:
    """Validate a raw mapping and check its references to the catalog and registries."""
    model = scenario_model()
    try:
        scenario = model.model_validate(data)
    except ValidationError as error:
        path, message = describe_validation_error(error, data)
        raise ScenarioError(source, path or "<top>", message) from None
    check_references(scenario, source)
    return scenario


def scenario_catalog(scenario: ScenarioBase, source: str = "<scenario>") -> Catalog:
    """The built-in catalog plus the scenario's ``hardware:`` entries."""
    try:
        return builtin_catalog().merged(scenario.hardware, "hardware")
    except CatalogError as error:
        raise ScenarioError(source, error.path, error.message) from None


def check_references(scenario: ScenarioBase, source: str) -> None:
    """Check names that refer to the catalog or registries (nodes, policies, ...)."""
    catalog = scenario_catalog(scenario, source)
    topology = scenario.network.topology if scenario.network else None
    if isinstance(topology, GpuCluster):
        _check_gpu_node(scenario, catalog, topology.node, source)
    workload = scenario.workload  # type: ignore[attr-defined]
    workload_class = lookup("workload", workload.kind)
    if workload_class.needs_network and scenario.network is None:
        raise ScenarioError(source, "network", f"workload {workload.kind!r} needs a network section")
    try:
        workload_class.check(workload, catalog, topology)
    except InvalidReference as error:
        raise ScenarioError(source, error.path, str(error)) from None
    except UnknownNameError as error:
        raise ScenarioError(source, "workload", str(error)) from None


def _check_gpu_node(scenario: ScenarioBase, catalog: Catalog, name: str, source: str) -> None:
    """A ``gpu_cluster``'s node must exist and have GPUs, a GPU-GPU link and PCIe.

    A missing part is reported at the node's own field when the scenario defines the node
    (``hardware.nodes.<name>``), else at ``network.topology.node``.
    """
    if name not in catalog.nodes:
        known = ", ".join(sorted(catalog.nodes))
        raise ScenarioError(source, "network.topology.node", f"unknown node {name!r} (known: {known})")
    spec = catalog.nodes[name]
    defined = name in ((scenario.hardware or {}).get("nodes") or {})
    for part, missing, what in (("gpu", spec.gpu is None or not spec.gpus, "no GPUs"),
                                ("gpu_link", spec.gpu_link is None, "no GPU-GPU link (gpu_link)"),
                                ("pcie", spec.pcie is None, "no PCIe link (pcie)")):
        if missing:
            field = f"hardware.nodes.{name}.{part}" if defined else "network.topology.node"
            raise ScenarioError(source, field, f"node {name!r} has {what}; a gpu_cluster topology needs it")


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> ScenarioBase:
    """Load, override and validate a scenario file, its ``sweep:`` section's shape included (a
    run does not expand it, but a malformed one is still the file's mistake)."""
    from simhpc.sweep.spec import parse_spec  # the sweep package builds on this module

    source = str(path)
    data = read_yaml(path)
    data = with_overrides(data, overrides, source)
    try:
        scenario = scenario_from_dict(data, source)
        if "sweep" in data:
            parse_spec(data["sweep"], source)
        return scenario
    except ScenarioError as error:
        raise naming_override(error, overrides) from None


def naming_override(error: ScenarioError, overrides: Iterable[str]) -> ScenarioError:
    """``error`` with the ``--set`` that gave its field (or a section around it) its value, if one did."""
    for text in reversed(list(overrides)):  # the last one of a path wins
        path = override_path(text)
        if path and (error.path == path or error.path.startswith(path + ".")):
            return ScenarioError(error.source, error.path, f"{error.message} (--set {_shown(text)})")
    return error


def with_overrides(data: dict[str, Any], overrides: Iterable[str], source: str) -> dict[str, Any]:
    """Apply ``--set`` overrides, turning their errors into ScenarioErrors."""
    for text in overrides:
        try:
            path, value = parse_override(text)
            data = apply_override(data, path, value)
        except OverrideError as error:
            raise ScenarioError(source, error.path, f"{error} (--set {_shown(text)})") from None
    return data


def _shown(override: str) -> str:
    """A ``--set`` as an error message quotes it: cut at 120 characters."""
    return override if len(override) <= 120 else override[:117] + "..."
