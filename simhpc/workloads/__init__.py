"""Workloads: what runs on the simulated machine."""

from simhpc.workloads.base import InvalidReference, RunContext, Workload, gpu_cluster_node

__all__ = ["InvalidReference", "RunContext", "Workload", "gpu_cluster_node"]
