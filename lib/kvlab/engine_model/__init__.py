"""The engine model: one vLLM-style serving engine under every timed simulator.

* :mod:`.shapes`: dense models by their ``config.json`` fields (weights, KV bytes per token);
* :mod:`.step_costs`: what one step costs on a real GPU (aiconfigurator's measured per-operation
  database, vLLM backend), for any mix of prompt chunks and decoding requests;
* :mod:`.kv_pool`: the KV pool and its prefix cache, by block keys;
* :mod:`.engine`: vLLM v1's scheduler (token budget, chunked prefill of several prompts per step,
  admission on free blocks, preemption by recompute);
* :mod:`.closed_loop`: the closed-loop concurrency benchmark real measurements use;
* :mod:`.calibration`: the engine model as a calibration a fleet simulator takes (model, GPU,
  precision; costs and KV pool at any TP).
"""

from .calibration import EngineCalibration
from .closed_loop import LoopResult, closed_loop
from .engine import (
    DEVICE_MEMORY_BYTES,
    Engine,
    EngineConfig,
    Request,
    StepRecord,
    batch_defaults,
    kv_blocks,
)
from .kv_pool import KVPool
from .shapes import ModelSpec, model_spec
from .step_costs import StepCosts, covered, step_costs
from .tables import tables_doc

__all__ = [
    "DEVICE_MEMORY_BYTES",
    "Engine",
    "EngineCalibration",
    "EngineConfig",
    "KVPool",
    "LoopResult",
    "ModelSpec",
    "Request",
    "StepCosts",
    "StepRecord",
    "batch_defaults",
    "closed_loop",
    "covered",
    "kv_blocks",
    "model_spec",
    "step_costs",
    "tables_doc",
]
