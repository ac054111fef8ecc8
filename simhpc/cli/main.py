"""The ``simhpc`` command group and its user-error handling.

Every subcommand lives in its own module in this package and is added to the group below.
User mistakes (:class:`~simhpc.errors.SimhpcError`) print one line on stderr and exit 2, and
so do a file system refusal (:class:`OSError`: an output folder that is a file, no permission)
and running out of memory (an input too large for this machine).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from simhpc import __version__
from simhpc.errors import SimhpcError

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR = 2
_INPUTS = ("scenario", "measured", "sweep_dir", "merge")
"""Parameters naming a command's input file (or files), for messages."""


def _shown_input(value: Any) -> str:
    """An input parameter's value for a message: a path, or paths joined by commas."""
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


class _FilePath(click.Path):
    """A file or folder argument: a :class:`~pathlib.Path`; an empty one is refused (it would
    read or write the current folder, shown as '.')."""

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path", param, ctx)
        return super().convert(value, param, ctx)


PATH = _FilePath()
"""The click type of every path option and argument."""


def fail(message: str) -> None:
    """Print a one-line user error and exit with status 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(USER_ERROR)


def write_refusal(error: OSError) -> str:
    """Why the file system refused a write, in words (a file where a folder goes, no permission...)."""
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        return "a file is in the way of a folder to write"
    return error.strerror or str(error)


def user_errors(command: F) -> F:
    """Turn :class:`SimhpcError` raised by ``command`` into a one-line message and exit 2."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SimhpcError as error:
            fail(str(error))
        except OSError as error:
            # The file system refused (a folder that is a file, no permission, disk full): one line.
            where = error.filename if error.filename is not None else ""
            fail(f"{where}{': ' if where else ''}{write_refusal(error)}")
        except MemoryError:
            # A scenario (or trace) the host cannot hold: the input's size, not a simhpc bug.
            name = next((name for name in _INPUTS if kwargs.get(name)), None)
            subject = "" if name is None else _shown_input(kwargs[name])
            what = ("too large to simulate on this machine (reduce the counts or sizes)" if name == "scenario"
                    else "too large for this machine")
            fail(f"{subject}{': ' if subject else ''}out of memory: {what}")

    return wrapper  # type: ignore[return-value]


_NO_ARGS_IS_HELP: type[Exception] = getattr(click.exceptions, "NoArgsIsHelpError", ())  # type: ignore[assignment]
"""click >= 8.2 raises it for a group called without a command (older versions exit with the help)."""

# Subcommand name -> module defining ``command``; imported only when the command is used, so
# `simhpc run` does not pay for the imports of `compare` or `sweep`.
COMMANDS = {
    "run": "simhpc.cli.run_cmd",
    "sweep": "simhpc.cli.sweep_cmd",
    "compare": "simhpc.cli.compare_cmd",
    "calibrate": "simhpc.cli.calibrate_cmd",
    "plot": "simhpc.cli.plot_cmd",
    "list": "simhpc.cli.list_cmd",
}


def _command_path(args: Any) -> str:
    """``simhpc COMMAND`` for the command line ``args`` (a list, or a tuple holding one; None: the
    process's own), for an error click raised with no context (an option missing its value)."""
    if isinstance(args, tuple):
        args = args[0] if args else None
    words = [word for word in (sys.argv[1:] if args is None else args) if not str(word).startswith("-")]
    return f"simhpc {words[0]}" if words and words[0] in COMMANDS else "simhpc"


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what it could not write
    does not print a second error on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test runner's): nothing will be flushed to it
        pass


class _LazyGroup(click.Group):
    """A click group that imports each subcommand's module on first use, and reports a bad option
    or argument in one line (``error: simhpc compare: Invalid value for '--worst': ...``), exit 2,
    like every other user error, instead of click's usage block."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _NO_ARGS_IS_HELP as error:  # bare `simhpc`: the help, as click prints it
            error.show()
            sys.exit(error.exit_code)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else _command_path(kwargs.get("args", args[:1]))
            fail(f"{where}: {error.format_message()} (see '{where} --help')")
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as error:  # the help, the version or a listing refused by stdout (a full disk, /dev/full)
            _drop_stdout()
            if isinstance(error, BrokenPipeError):  # the reader went away (`simhpc list | head -1`)
                sys.exit(1)
            fail(f"{error.filename or 'standard output'}: {write_refusal(error)}")
        sys.exit(code if isinstance(code, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        return importlib.import_module(module).command if module else None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="simhpc")
def main() -> None:
    """simhpc: a discrete-event simulator of HPC and ML-training clusters."""
