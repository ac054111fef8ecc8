"""Importing this module loads everything a run needs (the forkserver preloads it once)."""

from simhpc.sweep.worker import preload

preload()
