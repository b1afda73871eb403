"""The engine model as a calibration a fleet simulator can take (:class:`EngineCalibration`): one
model on one kind of GPU, whose replicas at any TP get their step costs and KV pool from
:mod:`kvlab.engine_model`."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import check_choice, check_number
from .engine import DEVICE_MEMORY_BYTES, kv_blocks
from .step_costs import PRECISIONS, StepCosts, step_costs


@dataclass(frozen=True)
class EngineCalibration:
    """Replicas of ``model`` on ``gpu`` in ``precision``, run by the engine model: step costs from
    aiconfigurator's measured per-operation database, vLLM's scheduling rules, a KV pool sized
    from memory (``gpu_memory_utilization`` of each GPU, less the weights and
    ``non_kv_bytes_per_gpu``), the host's time per step (``step_overhead_s``) and per request in a
    step (``host_s_per_seq``). The knobs default to those of ``kvlab.validate.silicon`` without a
    host term."""

    model: str = "meta-llama/Llama-3.1-70B"
    gpu: str = "H100-SXM"
    precision: str = "bf16"
    gpu_memory_utilization: float = 0.9
    non_kv_bytes_per_gpu: float = 3 * 2**30
    step_overhead_s: float = 0.0
    host_s_per_seq: float = 0.0

    def __post_init__(self):
        check_choice("gpu", self.gpu, DEVICE_MEMORY_BYTES)
        check_choice("precision", self.precision, PRECISIONS)
        check_number(
            "gpu_memory_utilization", self.gpu_memory_utilization, lo=0, hi=1, lo_open=True
        )
        check_number("non_kv_bytes_per_gpu", self.non_kv_bytes_per_gpu, lo=0)
        check_number("step_overhead_s", self.step_overhead_s, lo=0)
        check_number("host_s_per_seq", self.host_s_per_seq, lo=0)

    calibration = "engine"

    @property
    def label(self) -> str:
        host = ""
        if self.step_overhead_s or self.host_s_per_seq:
            host = (f", host {self.step_overhead_s * 1e3:.2f} ms + "
                    f"{self.host_s_per_seq * 1e6:.0f} us/request")  # fmt: skip
        return f"engine model ({self.model.split('/')[-1]} {self.precision}, {self.gpu}{host})"

    def costs(self, tp: int) -> StepCosts:
        """Step costs of one replica of ``tp`` GPUs."""
        return step_costs(self.model, self.gpu, tp, self.precision,
                          step_overhead_s=self.step_overhead_s,
                          host_s_per_seq=self.host_s_per_seq)  # fmt: skip

    def num_blocks(self, tp: int, block_size: int = 16) -> int:
        """KV blocks of one replica of ``tp`` GPUs."""
        return kv_blocks(
            self.costs(tp).model, self.gpu, tp, self.precision,
            gpu_memory_utilization=self.gpu_memory_utilization,
            non_kv_bytes_per_gpu=self.non_kv_bytes_per_gpu, block_size=block_size,
        )  # fmt: skip
