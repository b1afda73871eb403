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

from ..._validate import check_choice, check_int
from ...cache import BlockHashCache, VLLMBlockPool

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


class ChatRouting:
    """kvlab's router objects driving a live fleet over a :class:`kvlab.workload.ChatWorkload`,
    with the fleet simulator's inputs: for "random", "round_robin" and "sticky" the same choices
    (``router.choose_many`` over the conversation ids); for "cache_aware" the simulator's stale
    view (what the router itself sent where, in blocks of the system prompt and of each chat) and,
    as load, the prefill tokens each replica computed so far (here measured: prompt minus cached
    tokens, as the engine reported them)."""

    def __init__(self, w, policy: str, replicas: int, block_size: int, seed: int = 0):
        from ... import routing

        self.w, self.policy, self.R = w, policy, int(replicas)
        self.paths = w.paths(block_size)
        self.bs = block_size
        self.router = routing.make_router(policy, self.R, seed=seed)
        self.choices = None if policy == "cache_aware" else self.router.choose_many(w.key)
        self.loads = [0] * self.R
        self._sys: dict[int, list[bool]] = {}
        self._chat: dict[int, list[int]] = {}

    def choose(self, i: int) -> int:
        if self.choices is not None:
            return int(self.choices[i])
        p = self.paths
        s, c = int(p.keys[2 * i]), int(p.keys[2 * i + 1])
        ns, nc, mh = int(p.blocks[2 * i]), int(p.blocks[2 * i + 1]), int(p.max_hit_blocks[i])
        ks = self._sys.setdefault(s, [False] * self.R)
        kc = self._chat.setdefault(c, [0] * self.R)
        m = [min(ns + kc[r], mh) * self.bs if ks[r] else 0 for r in range(self.R)]
        r = int(self.router.choose(int(self.w.key[i]), np.array(m), np.array(self.loads)))
        ks[r] = True
        kc[r] = nc
        return r

    def served(self, r: int, prompt_tokens: int, cached_tokens: int) -> None:
        self.loads[r] += int(prompt_tokens) - int(cached_tokens)


def emulate_fleet(
    w,
    policy: str,
    replicas: int,
    num_blocks: int,
    block_size: int,
    warmup: int = 0,
    vocab: int | None = None,
    seed: int = 0,
) -> dict:
    """The live fleet of the lab without engines: the same routing (:class:`ChatRouting`) over
    ``replicas`` :class:`kvlab.cache.VLLMBlockPool` s of ``num_blocks`` blocks, one request at a
    time, nothing of an answer cached. With ``vocab``, token ids are mapped into the model's
    vocabulary as the lab maps them. Returns the hit rate after ``warmup`` and per-request hits."""
    from .vllm_lab import to_vocab

    pools = [VLLMBlockPool(num_blocks, block_size, record_events=False) for _ in range(replicas)]
    routing = ChatRouting(w, policy, replicas, block_size, seed=seed)
    hits, prompt, reps = [], [], []
    for i in range(len(w)):
        ids = w.tokens(i)[0]
        if vocab is not None:
            ids = np.asarray(to_vocab(ids, vocab), dtype=np.int64)
        r = routing.choose(i)
        h = pools[r].serve(ids, cache_output=False)
        routing.served(r, len(ids), h)
        hits.append(h)
        prompt.append(len(ids))
        reps.append(r)
    counted = slice(warmup, None)
    return {
        "hit_rate": sum(hits[counted]) / sum(prompt[counted]),
        "hit_tokens": hits,
        "prompt_tokens": prompt,
        "replica": reps,
    }
