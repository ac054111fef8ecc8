"""One-line messages for pydantic validation errors: ``field.path: what is wrong, got VALUE``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from simhpc.units import counted, huge_integer


def _dotted(location: Iterable[Any]) -> str:
    return ".".join(str(part) for part in location)


def _strip_tags(location: tuple[Any, ...], data: Any, missing: bool = False) -> tuple[Any, ...]:
    """Remove the union tags pydantic inserts into error locations, keeping the data's own path.

    A discriminated union adds the value of ``kind`` right after the union's own field
    (``workload.collective.size`` for ``workload.size``); at most one tag per level is dropped, so a
    field that happens to share the kind's name still appears. A plain union adds the member that
    failed (``workload.ranks.constrained-int``, ``mapping.literal['a','b']``): a part that is not in
    the data at that point is such a tag, unless it is the last part of a missing field's location.
    """
    kept: list[Any] = []
    node: Any = data
    tag_dropped = False
    for depth, part in enumerate(location):
        if not tag_dropped and isinstance(node, Mapping) and node.get("kind") == part:
            tag_dropped = True
            continue
        if isinstance(node, Mapping):
            if part not in node and not (missing and depth == len(location) - 1):
                continue
        elif isinstance(node, list):
            if not isinstance(part, int) or part >= len(node):
                continue
        else:
            continue  # below a scalar: only tags
        kept.append(part)
        tag_dropped = False
        node = node.get(part) if isinstance(node, Mapping) else node[part]
    return tuple(kept)


_SHOULD = "Input should be "
_LONGEST_SHOWN = 60
"""Most characters of an offending value a message shows (a 400-digit integer, a long string)."""


def _shown(value: Any) -> str:
    """``repr(value)``, cut to :data:`_LONGEST_SHOWN` characters with the length said."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return huge_integer(value)
    text = repr(value)
    return text if len(text) <= _LONGEST_SHOWN else f"{text[:_LONGEST_SHOWN]}... ({len(text)} characters)"


def _message(error: Mapping[str, Any], got: bool = True) -> str:
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    if error["type"] == "missing":
        return "field required"
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):  # not the schema's class name
        message = "expected a mapping of its fields"
    if error["type"] == "union_tag_invalid":
        context = error.get("ctx") or {}
        return f"unknown kind {context.get('tag')!r} (expected one of: {context.get('expected_tags')})"
    if got and "input" in error and error["type"] not in ("value_error",) \
            and not isinstance(error["input"], (dict, list)):
        message += f", got {_shown(error['input'])}"
    return message


def describe_validation_error(error: ValidationError, data: Any) -> tuple[str, str]:
    """The dotted path and one-line message of the error to report, for ``data`` validated by a
    pydantic model: the first error, union tags removed from its path, with the alternatives of a
    plain union.

    Of the errors of one union field (one per member), the one that got deepest into the data
    is reported, with the other members' expectations at the same place (``Input should be a
    valid integer or a valid list, got 'abc'``).
    """
    errors = error.errors()
    located = [(_strip_tags(tuple(e["loc"]), data, e["type"] == "missing"), e) for e in errors]
    first_loc = located[0][0]
    chosen_loc, chosen = located[0]
    alternatives: list[Mapping[str, Any]] = []
    if len(first_loc) < len(errors[0]["loc"]):  # inside a union
        family = [(loc, e) for loc, e in located if loc[: len(first_loc)] == first_loc]
        chosen_loc, chosen = max(family, key=lambda item: len(item[0]))
        alternatives = [e for loc, e in family if loc == chosen_loc and e is not chosen]
    if chosen["type"] == "union_tag_not_found":  # a mapping without its kind
        tag = str((chosen.get("ctx") or {}).get("discriminator", "kind")).strip("'\"")
        chosen_loc, chosen = (*chosen_loc, tag), {"type": "missing", "msg": "", "loc": ()}
    if chosen["type"] == "union_tag_invalid":  # the mapping's kind names no member
        chosen_loc = (*chosen_loc, str((chosen.get("ctx") or {}).get("discriminator", "kind")).strip("'\""))
    message = _message(chosen, got=not alternatives)
    for other in alternatives:
        text = _message(other, got=False)
        text = text[len(_SHOULD):] if text.startswith(_SHOULD) and message.startswith(_SHOULD) else text
        if text not in message:
            message += f" or {text}"
    if alternatives and "input" in chosen and not isinstance(chosen["input"], (dict, list)):
        message += f", got {_shown(chosen['input'])}"
    more = len(errors) - 1 - len(alternatives)
    if more:
        message += f" (and {counted(more, 'more error')})"
    return _dotted(chosen_loc), message
