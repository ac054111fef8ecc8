"""Workloads: what runs on the simulated machine."""

from simhpc.workloads.base import InvalidReference, RunContext, Workload

__all__ = ["InvalidReference", "RunContext", "Workload"]
