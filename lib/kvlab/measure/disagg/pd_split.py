"""Disaggregated prefill on a real vLLM engine (the CPU build), measured: Lab 3's splits under the
one name the notebook, the tools and the tests use.

Each engine runs in its own process (:mod:`kvlab.measure.disagg.pd_worker`, the engine
environment's Python), one core each, started and always stopped by
:class:`kvlab.measure.serving.procs.Children` under the machine-wide engine lock. Two splits:

- :func:`run_file_split`, vLLM's file-based connector: a producer engine writes each prompt's KV to
  files, a consumer engine loads them and decodes (:mod:`kvlab.measure.disagg.file_split`; the
  files themselves are read by :mod:`kvlab.measure.disagg.connector_files`);
- :func:`run_nixl_split`, vLLM's ``NixlConnector``: a decode engine pulls the prefill engine's KV
  blocks over NIXL while both run, on the CPU or on one GPU
  (:mod:`kvlab.measure.disagg.nixl_split`).

Both return the plain dataclasses of :mod:`kvlab.measure.disagg.split_results`; what the engines
are started with (model, prompts, arguments, environment) is
:mod:`kvlab.measure.disagg.engine_config`, the parent's handle on one engine process
:mod:`kvlab.measure.disagg.engine_process`.

Rules: this module holds no code, only the public names of those modules, so ``pd_split.X`` keeps
working. A function looks up the names it calls in the module that defines it: to replace one of
them in a test, patch that module (``monkeypatch.setattr(nixl_split, ...)``), not this one.
"""

from __future__ import annotations

from .connector_files import (
    StoredTensor,
    first_layer_kv,
    folder_name,
    layout_errors,
    read_stored,
    read_tensor,
    same_stored,
    split_kv,
    stored_tokens,
    zero_stored,
)
from .engine_config import (
    BATCH_INVARIANT_MIN_CAPABILITY,
    BLOCK_SIZE,
    DEVICES,
    DTYPE,
    GPU_FP32_ENV,
    GPU_INSTALL_COST,
    GPU_KERNEL_ENV,
    GPU_MEMORY_SHARE,
    GPU_MODEL,
    GPU_RUN_COST,
    batch_invariant_for,
    block_size_for,
    engine_configs,
    engine_env,
    engine_kwargs,
    gpu_compute_capability,
    gpu_here,
    gpu_missing,
    gpu_path_note,
    model_config,
    nixl_transfer_config,
    random_prompts,
    shape_from_config,
    shape_from_dict,
)
from .engine_process import WORKER, Engine
from .file_split import run_file_split
from .nixl_split import nixl_totals, pulled_tokens, run_nixl_split, split_summary, summary_ms
from .split_results import Checks, FileSplit, NixlRequest, NixlSplit, Run
from .token_match import LOGPROB_TOL, Verdict, compare_greedy, tolerance_for

__all__ = [
    "BLOCK_SIZE",
    "DEVICES",
    "GPU_MODEL",
    "GPU_MEMORY_SHARE",
    "DTYPE",
    "shape_from_config",
    "shape_from_dict",
    "model_config",
    "random_prompts",
    "engine_env",
    "block_size_for",
    "nixl_transfer_config",
    "engine_kwargs",
    "engine_configs",
    "gpu_here",
    "stored_tokens",
    "folder_name",
    "StoredTensor",
    "read_stored",
    "same_stored",
    "read_tensor",
    "split_kv",
    "first_layer_kv",
    "zero_stored",
    "layout_errors",
    "WORKER",
    "Engine",
    "Run",
    "Checks",
    "FileSplit",
    "NixlRequest",
    "NixlSplit",
    "run_file_split",
    "pulled_tokens",
    "nixl_totals",
    "run_nixl_split",
    "split_summary",
    "summary_ms",
    "LOGPROB_TOL",
    "Verdict",
    "compare_greedy",
    "tolerance_for",
    "GPU_FP32_ENV",
    "BATCH_INVARIANT_MIN_CAPABILITY",
    "batch_invariant_for",
    "gpu_compute_capability",
    "GPU_INSTALL_COST",
    "GPU_KERNEL_ENV",
    "GPU_RUN_COST",
    "gpu_missing",
    "gpu_path_note",
]
