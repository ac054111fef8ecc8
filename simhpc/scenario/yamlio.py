"""The YAML reader of scenario files, ``--set`` values and sweep specs.

PyYAML's safe loader, with two differences: a key given twice in one mapping is an error
(plain YAML silently keeps the last one, hiding a typo'd duplicate), and a document nested so
deeply that the parser would exhaust the Python stack is a :class:`yaml.YAMLError`.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

_MERGE_TAG = "tag:yaml.org,2002:merge"


class NestingError(yaml.YAMLError):
    """The document is nested too deeply to be read."""

    problem = "nested too deeply"
    problem_mark = None

    def __str__(self) -> str:
        return self.problem


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
                raise ConstructorError(None, None, f"key {key!r} is given twice (first at line {first + 1})",
                                       key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """Parse one YAML document with :class:`UniqueKeyLoader`.

    Raises:
        yaml.YAMLError: a syntax error, a duplicate key, or nesting too deep to read.
    """
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except RecursionError:
        raise NestingError() from None
