"""Lab 2, moving one request's KV: what the machine has, and how fast copies go.

- :mod:`.device`: device discovery (GPUs, memory, peer access, Colab), the lazy torch import.
- :mod:`.copies`: copies between memories (host, pinned, device, GPU to GPU), timed.
- :mod:`.distributed`: ``torch.distributed`` send/recv between two processes (NCCL or gloo);
  ``torchrun --nproc-per-node 2 -m kvlab.measure.transfer.distributed`` runs it by hand.

Rules: nothing here imports torch at module load; imports ``serving``, ``recording`` and the
library below the simulators only.
"""
