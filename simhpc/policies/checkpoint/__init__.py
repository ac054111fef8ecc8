"""Checkpoint policies (registry family ``checkpoint``): when and how a training job saves state.

Each policy gets the job's :class:`~simhpc.workloads.moe.plan.ClusterFacts`, sees an
:class:`~simhpc.workloads.moe.plan.Observation` after each iteration and returns a
:class:`~simhpc.workloads.moe.plan.CheckpointPlan` before each: a chunk plan the MoE workload
executes as real transfers. Built in: ``none``, ``torchsnapshot``, ``checkfreq``, ``gemini``,
``capricorn``.
"""

from simhpc.policies.checkpoint.base import CheckpointPolicy, NoOptions
from simhpc.policies.checkpoint.capricorn import Capricorn
from simhpc.policies.checkpoint.checkfreq import CheckFreq
from simhpc.policies.checkpoint.gemini import Gemini
from simhpc.policies.checkpoint.none import NoCheckpoint
from simhpc.policies.checkpoint.partition import fit_to_gaps
from simhpc.policies.checkpoint.placement import replica_peers
from simhpc.policies.checkpoint.torchsnapshot import TorchSnapshot

__all__ = [
    "Capricorn", "CheckFreq", "CheckpointPolicy", "Gemini", "NoCheckpoint", "NoOptions",
    "TorchSnapshot", "fit_to_gaps", "replica_peers",
]
