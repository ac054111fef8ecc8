"""The YAML reader of scenario files, ``--set`` values and sweep specs.

PyYAML's safe loader, with four differences: a key given twice in one mapping is an error
(plain YAML silently keeps the last one, hiding a typo'd duplicate); a document nested so
deeply that the parser would exhaust the Python stack, or whose aliases expand it past a million
values, is a :class:`yaml.YAMLError`; and only
plain decimal integers are integers (YAML 1.1 also reads ``1:30`` as 90, ``010`` as 8, ``0x3``
and ``1_000``: here they stay strings, which an integer field then rejects by name).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _LimitError(yaml.YAMLError):
    """A document beyond a limit of the reader (no position: the whole document is)."""

    problem = ""
    problem_mark = None

    def __str__(self) -> str:
        return self.problem


class NestingError(_LimitError):
    """The document is nested too deeply to be read."""

    problem = "nested too deeply"


class DuplicateKeyError(ConstructorError):
    """A mapping gives the same key twice."""


class UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys in a mapping (``<<`` merge keys may still be
    overridden, as YAML intends)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable: the base constructor reports it
            if first is not None:
                raise DuplicateKeyError(None, None, f"key {key!r} is given twice (first at line {first + 1})",
                                        key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_INT_TAG = "tag:yaml.org,2002:int"
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _INT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.add_implicit_resolver(_INT_TAG, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))


class IntegerTooLongError(ConstructorError):
    """An integer with more digits than the interpreter converts."""


def _construct_int(loader: UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    """An integer, refused past the interpreter's str->int digit limit (4300 by default), where
    ``int()`` would raise a plain ValueError out of the parser."""
    text = str(loader.construct_scalar(node))
    digits = len(text.lstrip("+-").replace("_", ""))
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if limit and digits > limit:
        raise IntegerTooLongError(None, None, f"an integer of {digits} digits (more than {limit}) is no count "
                               "or quantity", node.start_mark)
    return yaml.SafeLoader.construct_yaml_int(loader, node)


UniqueKeyLoader.add_constructor(_INT_TAG, _construct_int)


MAX_VALUES = 1_000_000
"""Most values (mapping keys and values, list items) a document may expand to with its aliases
resolved: a few aliases of aliases make a kilobyte file expand exponentially."""


class ExpansionError(_LimitError):
    """The document's aliases expand it beyond :data:`MAX_VALUES` values."""

    problem = f"expands to more than {MAX_VALUES:,} values (aliases of aliases?)"


def _check_expansion(data: Any) -> None:
    """Raise :class:`ExpansionError` if ``data``, each alias counted where it is used, holds too many values."""
    stack, count = [data], 0
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ExpansionError()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def load_yaml(text: str) -> Any:
    """Parse one YAML document with :class:`UniqueKeyLoader`.

    Raises:
        yaml.YAMLError: a syntax error, a duplicate key, nesting too deep to read, or aliases
            expanding it beyond :data:`MAX_VALUES` values.
    """
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except RecursionError:
        raise NestingError() from None
    _check_expansion(data)
    return data
