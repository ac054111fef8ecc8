"""The ``simhpc`` command group and its user-error handling.

Every subcommand lives in its own module in this package and is added to the group below.
User mistakes (:class:`~simhpc.errors.SimhpcError`) print one line on stderr and exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from simhpc import __version__
from simhpc.errors import SimhpcError

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR = 2


def fail(message: str) -> None:
    """Print a one-line user error and exit with status 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(USER_ERROR)


def user_errors(command: F) -> F:
    """Turn :class:`SimhpcError` raised by ``command`` into a one-line message and exit 2."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SimhpcError as error:
            fail(str(error))

    return wrapper  # type: ignore[return-value]


class _Group(click.Group):
    """A click group whose usage errors also exit with status 2 (click's default)."""


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="simhpc")
def main() -> None:
    """simhpc: a discrete-event simulator of HPC and ML-training clusters."""


def _add_commands() -> None:
    from simhpc.cli import calibrate_cmd, compare_cmd, list_cmd, plot_cmd, run_cmd, sweep_cmd

    for module in (run_cmd, sweep_cmd, compare_cmd, calibrate_cmd, plot_cmd, list_cmd):
        main.add_command(module.command)


_add_commands()
