"""What a page fault costs inside a plain training loop: its step with glibc's defaults against the
same step with the heap's trims and malloc's own mappings turned off (no profiler either way).

With glibc's defaults the heap is trimmed when a large free block is left at its top, and a block
over the mmap threshold is unmapped when freed: the pages come back fresh in the next step, and
each costs a page fault and, before it, its unmapping. Turning both off
(``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_`` far above any block) keeps the pages, so
the step loses its faults; the time it loses, over the faults it loses, is what one costs in situ.
Each setting runs in a process of its own (glibc reads them at start-up) and prints the median step
and the median page faults ``getrusage`` counted a step. On the Zen 5 guest (session 49) a fault
cost 1.38-1.68 us in situ at 1 thread, against 1.1 for the calibration's fault and 0.21 for its
unmapping (``simhpc compare`` charges both in a plain script's trace).

    .venv/bin/python validation/traces/trim_cost.py regression --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

KEEP_FREED = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TOP_PAD_": "0"}
"""glibc's tunables that keep every freed page: no trim, no block mapped on its own."""
WARM_UP = 5
"""Steps run before the timed ones (the optimizer's state, the heap's first growth)."""


def run_steps(model_name: str, threads: int, steps: int) -> dict[str, float]:
    """Train the ``plain_capture.py`` model with AdamW in this process: the median step (s) and the
    median page faults a step over ``steps`` steps after :data:`WARM_UP`."""
    import torch
    from plain_capture import loss_of, model_and_batch

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model, inputs, labels = model_and_batch(model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = loss_of(model_name)

    def step() -> None:
        optimizer.zero_grad()
        loss(model(inputs), labels).backward()
        optimizer.step()

    for _ in range(WARM_UP):
        step()
    seconds, faults = [], []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return {"step_s": statistics.median(seconds), "faults": statistics.median(faults)}


def measure(model_name: str, threads: int, steps: int, keep_freed: bool) -> dict[str, float]:
    """:func:`run_steps` in a child process, with glibc's defaults or :data:`KEEP_FREED`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    if keep_freed:
        env.update(KEEP_FREED)
    command = [sys.executable, __file__, model_name, "--threads", str(threads), "--steps", str(steps), "--child"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    from plain_capture import MODELS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_steps(args.model, args.threads, args.steps)))
        return
    defaults = measure(args.model, args.threads, args.steps, keep_freed=False)
    kept = measure(args.model, args.threads, args.steps, keep_freed=True)
    lost = defaults["faults"] - kept["faults"]
    per_fault = (defaults["step_s"] - kept["step_s"]) / lost if lost > 0 else float("nan")
    print(f"{args.model}, {args.threads} thread(s): step {defaults['step_s'] * 1e3:.3f} ms with "
          f"{defaults['faults']:.0f} page faults (glibc's defaults), {kept['step_s'] * 1e3:.3f} ms with "
          f"{kept['faults']:.0f} (freed memory kept): {per_fault * 1e6:.2f} us a fault")


if __name__ == "__main__":
    main()
