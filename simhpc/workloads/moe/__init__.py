"""MoE training (``kind: moe_training``): expert-parallel training, checkpointing, failures.

What is simulated, per iteration (:mod:`.trainer`): every layer's attention (+ gate), the
dispatch all-to-all, the experts (the phase lasts as long as the GPU whose most-loaded expert
has the most tokens), the combine all-to-all; the backward pass in reverse with the same
pattern (GEMMs twice); the dense gradient all-reduce; the Adam step. Kernel times come from the
cost model on the catalog GPU; all-to-all volumes follow the routing shares of
:mod:`.loads`. Traffic between nodes is flows on the network (:mod:`.comm`: NCCL-style rails;
the NVLink part in closed form), so in flow mode checkpoint copies and training traffic share
NICs and PCIe links.

Checkpointing (:mod:`.checkpointer`) executes the registered policy's plan
(:mod:`simhpc.policies.checkpoint`, interface in :mod:`.plan`): chunks released at phase
starts, copied out of a reserved GPU buffer to host memory and, for in-memory policies, to the
peers' host memory (GPUDirect RDMA); storage policies stage in host memory and write to a
storage server (:mod:`.storage`). The consistency deadline: the checkpoint of the state
entering iteration ``i`` must have left GPU memory before iteration ``i``'s optimizer step;
training stalls until it has (a ``stall`` span on every GPU). Failures and rollback:
:mod:`.recovery`.

Not modelled: activation memory (only weights, gradients, optimizer state and the buffer count
against GPU memory), gradient accumulation (one micro-batch per iteration), overlap of the
gradient all-reduce with the backward pass, host CPU time. By default the gpu_cluster topology
reaches a node's host memory from other nodes through NIC 0 only, so every node's incoming
replica traffic crosses one NIC and one PCIe link (``host_rails: true`` brings it in through the
NIC of the sending GPU's rail).
"""

from simhpc.workloads.moe.workload import MoETrainingWorkload

__all__ = ["MoETrainingWorkload"]
