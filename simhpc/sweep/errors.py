"""Errors of the sweep layer that are the user's to fix (reported in one line, exit 2)."""

from __future__ import annotations

from simhpc.errors import SimhpcError


class SweepError(SimhpcError):
    """A sweep cannot start or continue for a reason the user can fix (store, executor, ...)."""
