"""Measuring code of the real-hardware labs, in five packages by what they measure.

- :mod:`.serving`: the real serving engine, whatever a lab runs on it: where it runs (in-process,
  or the engine environment ``.venv-engine``) and its clear errors, child processes stopped by
  their pids, ``vllm serve`` on loopback, vLLM's CLI launcher, Prometheus counters.
- :mod:`.prefix`: Lab 1, prefix caching: the prompts and the hit rate they predict, the tiny
  model (its tokenizer is trained on those prompts), the engine jobs, the engine-exact cache replay,
  and the hand-made PyTorch prefill engine with real prefix reuse (:mod:`.prefix.pytorch_engine`).
- :mod:`.disagg`: Lab 3, prefill/decode disaggregation: the file-connector and NIXL splits, the
  NIXL transfer sweep, and the child processes (workers) they start.
- :mod:`.transfer`: Lab 2, moving KV: device discovery, copies between memories, and
  ``torch.distributed`` send/recv between two processes.
- :mod:`.recording`: results recorded on other machines: GPU results (``results/*.json``) and
  the CPU recordings of the engine labs, used where the engines cannot run.

Rules (``lib/pyproject.toml``'s import contracts, checked by ``make lint``): ``serving`` imports no
other package of ``measure``; ``recording`` imports ``serving`` only; ``prefix``, ``disagg`` and
``transfer`` import those two, never each other. Nothing in the simulators imports ``measure``.

Optional dependencies (torch, vllm, prometheus_client) are imported only when a function needs
them; their absence is reported (``discover()``, ``torch_or_none()``), never a crash on import.
The names below are re-exported here for the notebooks' convenience.
"""

from .prefix.prompts import build_lab1_prompts, predicted_cached_tokens, predicted_hit_rate
from .recording.results import find_results, load_results, save_results
from .serving.prom import counter_delta, hit_rate_from_deltas, parse_metrics, prefix_cache_counters
from .transfer.copies import CopyResult, copy_kinds, kv_copy_sweep, time_copy
from .transfer.device import Discovery, discover, torch_or_none
from .transfer.distributed import SendRecvResult, send_recv

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
        from .prefix import pytorch_engine

        return getattr(pytorch_engine, name)
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
