"""``--set dotted.path=value`` overrides applied to a raw scenario mapping."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from simhpc.scenario.yamlio import DuplicateKeyError, ExpansionError, IntegerTooLongError, load_yaml

MAX_PATH_PARTS = 32
"""Most dotted parts an override path may have: far deeper than any scenario, and shallow enough
that the mapping it creates can still be copied and validated."""


class OverrideError(ValueError):
    """An override is malformed or names a path that does not exist."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)


def override_path(text: str) -> str:
    """The dotted path of ``--set PATH=VALUE`` (the text before the first ``=``), unchecked."""
    return text.split("=", 1)[0].strip()


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``a.b.c=value``; the value is read as YAML ('20' -> 20, '[1, 2]' -> list)."""
    if "=" not in text:
        raise OverrideError(text, f"expected --set PATH=VALUE, got {text!r}")
    path, raw = text.split("=", 1)
    path = path.strip()
    if not path or any(not part for part in path.split(".")):
        raise OverrideError(path or text, f"malformed path in --set {text!r}")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except (DuplicateKeyError, ExpansionError, IntegerTooLongError) as error:  # YAML, refused as a value: say why
        raise OverrideError(path, str(getattr(error, "problem", None) or error)) from None
    except yaml.YAMLError:
        value = raw  # not readable as YAML ('[1, 2', '!tag x'): the text itself
    return path, value


def apply_override(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Return a copy of ``data`` with ``path`` set to ``value`` (see :func:`set_override`)."""
    result = copy.deepcopy(data)
    set_override(result, path, value)
    return result


def set_override(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` in ``data`` (in place) to a copy of ``value``.

    Missing mapping keys on the way are created (a section the file leaves to its defaults, such
    as ``outputs``); the schema then decides whether the path exists, so a typo is reported as an
    unknown field at its path. List items must exist.
    """
    parts = path.split(".")
    if len(parts) > MAX_PATH_PARTS:
        raise OverrideError(path[:80] + "...", f"path has {len(parts)} parts, more than {MAX_PATH_PARTS}")
    value = copy.deepcopy(value)
    node: Any = data
    for depth, part in enumerate(parts):
        here = ".".join(parts[: depth + 1])
        last = depth == len(parts) - 1
        if isinstance(node, dict):
            if last:
                node[part] = value
            elif part not in node:
                node = node.setdefault(part, {})  # a section left to its defaults
            elif not isinstance(node[part], (dict, list)):
                raise OverrideError(here, "cannot set a field below a value that is not a mapping")
            else:
                node = node[part]
        elif isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise OverrideError(here, f"no list item {part!r} (the list has {len(node)} items)")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        else:  # pragma: no cover - guarded above
            raise OverrideError(here, "cannot index into a value")
