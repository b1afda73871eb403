"""Predicting a real engine's cache hits request by request, with kvlab's prefix caches.

:func:`predict_replay` runs a request stream (token ids, one request at a time, nothing of the
answer cached: the engine is asked for one token only) through a model of the engine's KV cache
and returns each request's predicted ``num_cached_tokens``. Two models:

- ``"book"``: :class:`kvlab.cache.BlockHashCache`, the book's block cache (LRU over full blocks,
  a finished request's blocks join the back of the queue deepest first), with the engine's usable
  block count as its capacity. It leaves out two things a real pool does.
- ``"vllm"``: :class:`VllmBlockPool`, the same cache plus the two rules read in vLLM's v1 block
  pool (``vllm/v1/core/block_pool.py``, ``kv_cache_utils.py``, ``single_type_kv_cache_manager.py``,
  checked on 0.32.0):

  1. Capacity is in physical blocks and a request occupies ``ceil(n / block_size)`` of them while
     it runs, its partial last block included (the book's model counts full blocks only). One
     block of the pool is the reserved *null block* and never holds KV.
  2. A finished request's blocks are freed last block first (``free`` walks them in reverse);
     blocks with a hash go to the *back* of the free queue (evicted last: LRU), blocks without one,
     the partial last block, to the *front* (reused first, ``prepend_n``). New blocks are popped
     from the front, and popping a block that still carries a hash evicts that hash. Blocks a
     request hits leave the queue while it runs (``touch``) and rejoin it at the back.

  Hashes may be duplicated: a prompt whose blocks are all cached still recomputes its last block
  (the last prompt token is always computed), and the recomputed block is hashed again; a lookup
  takes any block with the hash, eviction removes one.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .._validate import check_choice, check_int
from ..cache import BlockHashCache, block_keys


class VllmBlockPool:
    """vLLM v1's block pool with prefix caching, for requests served one at a time.

    ``num_blocks`` is the engine's block count (``num_gpu_blocks``, as set by
    ``num_gpu_blocks_override``), null block included; ``block_size`` in tokens.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = check_int("num_blocks", num_blocks, lo=2)
        self.block_size = check_int("block_size", block_size, lo=1)
        # block 0 is the null block; the free queue starts as 1, 2, ..., num_blocks - 1
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self._hash_of: dict[int, str] = {}
        self._blocks_of: dict[str, dict[int, None]] = {}
        self.query_tokens = 0
        self.hit_tokens = 0

    @property
    def usable_blocks(self) -> int:
        """Blocks that can hold KV (all but the null block)."""
        return self.num_blocks - 1

    def cached_blocks(self) -> int:
        """Blocks that carry a hash now."""
        return len(self._hash_of)

    def free_queue(self) -> list[int]:
        """Block ids in the free queue, the next one handed out first."""
        return list(self._free)

    def _evict(self, block: int) -> None:
        key = self._hash_of.pop(block, None)
        if key is not None:
            owners = self._blocks_of[key]
            del owners[block]
            if not owners:
                del self._blocks_of[key]

    def serve(self, prompt_ids) -> int:
        """Serve one prompt (prefill, one output token, finish); return its cached tokens."""
        arr = np.asarray(prompt_ids, dtype=np.int64)
        n = len(arr)
        if n == 0:
            raise ValueError("prompt_ids must hold at least 1 token, got an empty prompt")
        bs = self.block_size
        keys = block_keys(arr, bs)
        need_total = -(-n // bs)
        if need_total > self.usable_blocks:
            raise ValueError(
                f"prompt of {n} tokens needs {need_total} blocks, more than the pool's "
                f"{self.usable_blocks} usable blocks"
            )
        # the hit: leading blocks found, never covering the last prompt token
        hit_blocks: list[int] = []
        for key in keys[: (n - 1) // bs]:
            owners = self._blocks_of.get(key)
            if not owners:
                break
            hit_blocks.append(next(iter(owners)))
        for b in hit_blocks:  # touch: hit blocks leave the free queue while in use
            self._free.pop(b, None)
        new = []
        for _ in range(need_total - len(hit_blocks)):
            b, _ = self._free.popitem(last=False)
            self._evict(b)
            new.append(b)
        held = hit_blocks + new
        # cache the prompt's full blocks that were computed
        for depth in range(len(hit_blocks), n // bs):
            b, key = held[depth], keys[depth]
            self._hash_of[b] = key
            self._blocks_of.setdefault(key, {})[b] = None
        # free, last block first: hashed ones to the back, the others to the front
        to_front = []
        for b in reversed(held):
            if b in self._hash_of:
                self._free[b] = None
            else:
                to_front.append(b)
        for b in reversed(to_front):
            self._free[b] = None
            self._free.move_to_end(b, last=False)
        hit = len(hit_blocks) * bs
        self.query_tokens += n
        self.hit_tokens += hit
        return hit


MODELS = ("book", "vllm")


def predict_replay(prompts, num_blocks: int, block_size: int, model: str = "vllm") -> list[int]:
    """Predicted ``num_cached_tokens`` of each prompt (token-id sequences, served in order, one at
    a time, with one output token that is not cached) on an engine of ``num_blocks`` blocks."""
    check_choice("model", model, set(MODELS))
    num_blocks = check_int("num_blocks", num_blocks, lo=2)
    block_size = check_int("block_size", block_size, lo=1)
    if model == "vllm":
        pool = VllmBlockPool(num_blocks, block_size)
        return [pool.serve(p) for p in prompts]
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
