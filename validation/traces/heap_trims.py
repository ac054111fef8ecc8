"""Whether glibc gives a training loop's heap back to the system within its steps: per step, the
change of the program break (``sbrk(0)``) and the page faults ``getrusage`` counted, with the loop
profiled as ``plain_capture.py`` profiles it and without the profiler.

A heap page that glibc's trim returned is mapped afresh, and faulted, when the heap grows over it
again, at the same address: a trace's memory events show where each block lands but not whether
the pages under it were given back in between. The break at the step's ends shows the net growth;
page faults beyond it are pages trimmed and grown again within the step, or blocks malloc mapped
on its own (those over its mmap threshold). On the Zen 5 guest
(session 47) the ``unet`` model at 2 threads, profiled, grew its break 8 MiB a step and faulted
32 MiB (oneDNN's 8 MiB blocks at the heap's top, trimmed each backward), at 1 thread it grew 16
MiB and faulted 16 MiB (no trim); unprofiled, both trimmed every step.

    .venv/bin/python validation/traces/heap_trims.py unet --threads 2
"""

from __future__ import annotations

import argparse
import ctypes
import resource
from collections.abc import Callable

import torch
from plain_capture import MODELS, loss_of, model_and_batch
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 12
"""Steps per run: with the profiler, one waiting, one warming up and ten recorded (as ``plain_capture.py``)."""


def program_break() -> Callable[[], int]:
    """A function returning the process's current program break (the heap's end), in bytes."""
    libc = ctypes.CDLL(None)
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_ssize_t]
    return lambda: libc.sbrk(0)


def run(name: str, threads: int, profiled: bool) -> list[tuple[int, int]]:
    """Per step of ``name``'s AdamW training loop: (change of the program break in KiB, page faults)."""
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model, inputs, labels = model_and_batch(name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    brk = program_break()
    rows: list[tuple[int, int]] = []

    def step() -> None:
        before, faults = brk(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        optimizer.zero_grad()
        loss_of(name)(model(inputs), labels).backward()
        optimizer.step()
        rows.append(((brk() - before) >> 10, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults))

    if not profiled:
        for _ in range(STEPS):
            step()
        return rows
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=1, warmup=1, active=STEPS - 2)) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--unprofiled", action="store_true", help="run the loop without the profiler")
    args = parser.parse_args()
    rows = run(args.model, args.threads, not args.unprofiled)
    mode = "unprofiled" if args.unprofiled else "profiled"
    print(f"{args.model}, {args.threads} thread(s), {mode}: per step, the program break's change (KiB) and page faults")
    for number, (grown, faults) in enumerate(rows):
        beyond = max(0, faults * 4 - max(grown, 0))  # KiB faulted beyond the net growth (4 KiB pages)
        print(f"step {number:2d}: break {grown:+8d} KiB, {faults:6d} page faults ({beyond} KiB beyond the growth)")


if __name__ == "__main__":
    main()
