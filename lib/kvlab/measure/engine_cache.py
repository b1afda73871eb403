"""Predicting a real engine's cache hits request by request, with kvlab's prefix caches.

:func:`predict_replay` runs a request stream (token ids, one request at a time, nothing of the
answer cached: the engine is asked for one token only) through a model of the engine's KV cache
and returns each request's predicted ``num_cached_tokens``. Two models:

- ``"book"``: :class:`kvlab.cache.BlockHashCache`, the book's block cache (LRU over full blocks,
  a finished request's blocks join the back of the queue deepest first), with the engine's usable
  block count as its capacity. It leaves out two things a real pool does.
- ``"vllm"``: :class:`kvlab.cache.VLLMBlockPool`, the same cache with the rules read in vLLM's
  v1 block pool (``vllm/v1/core/block_pool.py``, ``kv_cache_utils.py``,
  ``single_type_kv_cache_manager.py``, checked on 0.32.0). Two of them matter here:

  1. Capacity is in physical blocks and a request occupies ``ceil(n / block_size)`` of them while
     it runs, its partial last block included (the book's model counts full blocks only). One
     block of the pool is the reserved *null block* and never holds KV.
  2. A finished request's blocks are freed last block first; blocks with a hash go to the *back*
     of the free queue (evicted last: LRU), blocks without one, the partial last block, to the
     *front* (reused first). New blocks are popped from the front, and popping a block that still
     carries a hash evicts that hash. Blocks a request hits leave the queue while it runs.

  A prompt whose blocks are all cached still recomputes its last block (the last prompt token is
  always computed), and the recomputed block is hashed a second time.
"""

from __future__ import annotations

import numpy as np

from .._validate import check_choice, check_int
from ..cache import BlockHashCache, VLLMBlockPool

MODELS = ("book", "vllm")


def predict_replay(prompts, num_blocks: int, block_size: int, model: str = "vllm") -> list[int]:
    """Predicted ``num_cached_tokens`` of each prompt (token-id sequences, served in order, one at
    a time, with one output token that is not cached) on an engine of ``num_blocks`` blocks."""
    check_choice("model", model, set(MODELS))
    num_blocks = check_int("num_blocks", num_blocks, lo=2)
    block_size = check_int("block_size", block_size, lo=1)
    if model == "vllm":
        pool = VLLMBlockPool(num_blocks, block_size, record_events=False)
        return [pool.serve(np.asarray(p, dtype=np.int64), cache_output=False) for p in prompts]
    cache = BlockHashCache(num_blocks - 1, block_size, record_events=False)
    return [cache.serve(np.asarray(p, dtype=np.int64), cache_output=False) for p in prompts]


def agreement(predicted, measured) -> dict:
    """How a prediction compares with the engine, request by request: the share that agree
    exactly, both hit rates (over ``prompt_tokens`` when given as ``measured['prompt_tokens']``)."""
    pred = [int(x) for x in predicted]
    meas = [int(x) for x in measured["cached_tokens"]]
    if len(pred) != len(meas):
        raise ValueError(f"predicted holds {len(pred)} requests, measured {len(meas)}")
    total = sum(int(x) for x in measured["prompt_tokens"])
    exact = sum(p == m for p, m in zip(pred, meas, strict=True))
    return {
        "requests": len(pred),
        "exact": exact,
        "exact_share": exact / len(pred) if pred else 1.0,
        "predicted_hit_rate": sum(pred) / total,
        "measured_hit_rate": sum(meas) / total,
        "first_mismatch": next(
            (i for i, (p, m) in enumerate(zip(pred, meas, strict=True)) if p != m), None
        ),
    }
