"""Pipeline-parallel training (``kind: pipeline_training``): GPipe, 1F1B, interleaved, Chimera, PRT, ZB-H1.

Modules: :mod:`~.config` (the scenario section), :mod:`~.stages` (a profile cut into stages),
:mod:`~.engine` (running a plan on simulated GPUs), :mod:`~.workload` (the registered workload).
"""

from simhpc.workloads.pipeline.config import PipelineTrainingConfig
from simhpc.workloads.pipeline.engine import PipelineExecutor
from simhpc.workloads.pipeline.stages import StageCosts
from simhpc.workloads.pipeline.workload import PipelineTrainingWorkload

__all__ = ["PipelineExecutor", "PipelineTrainingConfig", "PipelineTrainingWorkload", "StageCosts"]
