"""Named registries of pluggable components: hardware, topologies, workloads, policies.

``@register("checkpoint", "capricorn")`` on a class adds it to the ``checkpoint`` family;
``lookup("checkpoint", "capricorn")`` returns it; ``simhpc list`` prints every family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_REGISTRY: dict[str, dict[str, Any]] = {}


class UnknownNameError(KeyError):
    """A name is not registered in a family."""

    def __init__(self, family: str, name: str) -> None:
        self.family = family
        self.name = name
        known = ", ".join(sorted(_REGISTRY.get(family, {}))) or "none"
        super().__init__(f"unknown {family} {name!r} (known: {known})")

    def __str__(self) -> str:
        return str(self.args[0])


def register(family: str, name: str) -> Callable[[T], T]:
    """Class decorator adding ``obj`` to ``family`` under ``name``."""

    def decorate(obj: T) -> T:
        members = _REGISTRY.setdefault(family, {})
        if name in members and members[name] is not obj:
            raise ValueError(f"{family} {name!r} is registered twice")
        members[name] = obj
        return obj

    return decorate


def lookup(family: str, name: str) -> Any:
    """Return the component registered as ``name`` in ``family``."""
    _load_builtins()
    try:
        return _REGISTRY[family][name]
    except KeyError:
        raise UnknownNameError(family, name) from None


def names(family: str) -> list[str]:
    """Sorted names registered in ``family``."""
    _load_builtins()
    return sorted(_REGISTRY.get(family, {}))


def families() -> dict[str, list[str]]:
    """Every family with its sorted names."""
    _load_builtins()
    return {family: sorted(members) for family, members in sorted(_REGISTRY.items())}


_loaded = False


def _load_builtins() -> None:
    """Import the modules whose decorators fill the registries (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import simhpc.plugins  # noqa: F401  (imports every built-in component)
