"""simhpc's real-kernel microbenchmarks: the measurements behind ``simhpc calibrate``.

Python drivers time real kernels: GEMM through numpy's BLAS and torch's (:mod:`.gemm`), and C kernels
(``kernels.c``, built with gcc by :mod:`.native`) for streaming maps, reductions, STREAM
bandwidth, pointer-chase latency, the AMR stencil and hash-table probes. Every point gets
warm-up calls and repeated samples; the median and spread are recorded (:mod:`.timing`).
``simhpc calibrate`` loads this folder by path (``simhpc.costs.benchsuite``) and calls
:func:`.runner.plan` and :func:`.runner.run` (:func:`.runner.peers_available`: whether its round-trip
probe can run here).
"""

from .runner import SUITE_VERSION, Task, peers_available, plan, run

__all__ = ["SUITE_VERSION", "Task", "peers_available", "plan", "run"]
