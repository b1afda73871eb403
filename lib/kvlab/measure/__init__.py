"""Measuring code of the real-hardware labs.

Optional dependencies (torch, vllm, prometheus_client) are imported only when a function needs
them; their absence is reported (``discover()``, ``torch_or_none()``), never a crash on import.

Submodules:

- :mod:`.device`: device discovery (GPUs, memory, peer access, Colab) and the lazy import helper.
- :mod:`.copies`: timing copies of one request's KV (host<->device pinned/pageable, device to
  device, GPU to GPU; host memory copies on a CPU-only machine).
- :mod:`.transfer`: moving a tensor between two processes with ``torch.distributed`` send/recv
  (NCCL on GPUs, gloo on CPU), the primitive KV connectors build on.
- :mod:`.model`: a small PyTorch transformer (scaled_dot_product_attention, random weights), a
  block-hash KV prefix store and a prefill engine with real prefix reuse.
- :mod:`.prom`: Prometheus text parsing, counter deltas and hit rates.
- :mod:`.prompts`: the Lab 1 prompts and the hit rate they predict.
- :mod:`.engine`: where the real engine runs (in-process, or the engine environment
  ``.venv-engine`` through a subprocess that returns JSON) and its clear errors.
- :mod:`.engine_jobs`: the engine jobs (one engine start each) the lab notebooks call.
- :mod:`.vllm_lab`: Lab 1 on vLLM (engine settings, one request, counters), CPU and GPU alike.
- :mod:`.server`: ``vllm serve`` on loopback, always stopped by its pid; ``/metrics``; openai client.
- :mod:`.engine_cache`: predicting the engine's per-request cache hits (the book's cache and the
  exact vLLM block pool).
- :mod:`.tinymodel`: the tiny random-weight Llama and its locally trained tokenizer.
- :mod:`.results`: writing and reading recorded GPU results (``results/*.json``).
- :mod:`.recorded`: a lab's engine run measured here, or its CPU recording when the engines cannot
  run here (``results/<lab>-cpu-recorded.json``), the page saying which.
"""

from .copies import CopyResult, copy_kinds, kv_copy_sweep, time_copy
from .device import Discovery, discover, torch_or_none
from .prom import counter_delta, hit_rate_from_deltas, parse_metrics, prefix_cache_counters
from .prompts import build_lab1_prompts, predicted_cached_tokens, predicted_hit_rate
from .results import find_results, load_results, save_results
from .transfer import SendRecvResult, send_recv

# The model needs torch at class-definition time: load it on first use only.
_MODEL_NAMES = {
    "PrefixKVStore",
    "PrefixReuseEngine",
    "PrefillResult",
    "TinyTransformer",
    "predicted_saving_s",
    "prefix_reuse_check",
    "make_model",
    "block_hashes",
}


def __getattr__(name):
    if name in _MODEL_NAMES:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'kvlab.measure' has no attribute {name!r}")


__all__ = [
    "CopyResult",
    "Discovery",
    "PrefillResult",
    "PrefixKVStore",
    "PrefixReuseEngine",
    "SendRecvResult",
    "TinyTransformer",
    "build_lab1_prompts",
    "copy_kinds",
    "counter_delta",
    "discover",
    "find_results",
    "hit_rate_from_deltas",
    "kv_copy_sweep",
    "load_results",
    "parse_metrics",
    "predicted_cached_tokens",
    "predicted_hit_rate",
    "predicted_saving_s",
    "prefix_cache_counters",
    "prefix_reuse_check",
    "save_results",
    "send_recv",
    "time_copy",
    "torch_or_none",
]
