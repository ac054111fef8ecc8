"""The ``simhpc`` command line: run, sweep, compare, calibrate, plot, list."""

from simhpc.cli.main import main

__all__ = ["main"]
