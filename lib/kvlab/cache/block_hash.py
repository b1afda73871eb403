"""The book's block cache, :class:`BlockHashCache`: vLLM's automatic prefix caching, simplified.

KV lives in blocks of ``block_size`` tokens; every *full* block is named by its chained key
(:func:`kvlab.cache.common.block_keys`). Blocks a running request uses are pinned by a reference
count; unused blocks stay cached in an LRU free queue and are evicted from its front; a finished
request's blocks join the back of the queue deepest first, so a parent is never evicted before its
children. Capacity counts full blocks only: a partial last block is never cached nor counted (the
simplification :class:`kvlab.cache.VLLMBlockPool` drops). :mod:`kvlab.fleet` is proved exact
against this cache.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .._validate import check_int
from .common import (
    BLOCK_SIZE,
    ROOT_KEY,
    BlockInfo,
    CacheEvent,
    CacheFullError,
    Request,
    _as_tokens,
    _check_block_size,
    _check_mm,
    _OneCall,
    block_keys,
    short,
)

# ---------------------------------------------------------------------------------------------
# vLLM-style block cache


@dataclass
class _Block:
    key: str
    parent: str
    depth: int
    tokens: tuple[int, ...]
    ref_count: int = 0


class BlockHashCache(_OneCall):
    """A vLLM-style prefix cache of ``capacity_blocks`` full blocks of ``block_size`` tokens.

    Two ways to use it:

    * one call per request, for simulations: ``hit_tokens = cache.serve(prompt_ids, output_ids)``;
    * the engine's life cycle, to show pinning: ``cache.start(request)`` returns the hit and pins the
      request's prompt blocks (matched ones and newly allocated ones); ``cache.finish(request)``
      caches the full blocks of prompt + answer and unpins them, so they become evictable.

    When a new block is needed and the cache is full, the block at the front of the LRU free queue
    is evicted. If the blocks pinned by running requests leave no room, :class:`CacheFullError` is
    raised and the cache is left unchanged (a real engine would queue or preempt the request).
    """

    def __init__(
        self, capacity_blocks: int, block_size: int = BLOCK_SIZE, *, record_events: bool = True
    ):
        self.capacity_blocks = check_int("capacity_blocks", capacity_blocks, lo=1)
        self.block_size = _check_block_size(block_size)
        self.record_events = bool(record_events)
        self._blocks: dict[str, _Block] = {}
        self._free: OrderedDict[str, None] = OrderedDict()  # front = evicted first
        self._running: dict[int | str, list[str]] = {}
        self._ids = itertools.count()
        self.events: list[CacheEvent] = []
        self.query_tokens = 0  # prompt tokens looked up (as vLLM's prefix_cache_queries)
        self.hit_tokens = 0  # of which served from cache (as vLLM's prefix_cache_hits)

    # -- inspection ---------------------------------------------------------------------------

    def __len__(self) -> int:
        """Blocks cached now (pinned or evictable)."""
        return len(self._blocks)

    def __contains__(self, key: str) -> bool:
        return key in self._blocks

    @property
    def hit_rate(self) -> float:
        """Token hit rate over every lookup made by :meth:`start` / :meth:`serve` (0 if none)."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    def get_block(self, key: str) -> BlockInfo:
        """The cached block named ``key``."""
        if key not in self._blocks:
            raise KeyError(f"block {short(key)} is not cached")
        b = self._blocks[key]
        return BlockInfo(b.key, b.parent, b.depth, b.tokens, b.ref_count)

    def blocks(self) -> list[BlockInfo]:
        """Every cached block, in insertion order."""
        return [self.get_block(k) for k in self._blocks]

    def free_queue(self) -> list[str]:
        """Keys of the evictable blocks, the next one to be evicted first."""
        return list(self._free)

    def pinned_blocks(self) -> int:
        """Blocks pinned by running requests."""
        return len(self._blocks) - len(self._free)

    def running(self) -> list:
        """Ids of requests started and not finished."""
        return list(self._running)

    def table(self) -> list[dict]:
        """One row per cached block (short key, parent, depth, tokens, ref count, eviction rank)."""
        rank = {k: i for i, k in enumerate(self._free)}
        return [
            {
                "key": short(b.key),
                "parent": short(b.parent),
                "depth": b.depth,
                "tokens": b.tokens,
                "ref_count": b.ref_count,
                "evict_rank": rank.get(b.key),
            }
            for b in self._blocks.values()
        ]

    def check_invariants(self) -> None:
        """Raise AssertionError if the internal state is inconsistent (used by the tests)."""
        assert len(self._blocks) <= self.capacity_blocks, "capacity exceeded"
        refs: dict[str, int] = {}
        for keys in self._running.values():
            for k in keys:
                refs[k] = refs.get(k, 0) + 1
        for k, b in self._blocks.items():
            assert b.ref_count == refs.get(k, 0), f"ref count of {short(k)} is wrong"
            assert (b.ref_count == 0) == (k in self._free), f"free queue wrong for {short(k)}"
            assert b.parent == ROOT_KEY or b.parent in self._blocks, f"orphan block {short(k)}"
        # a parent always leaves the free queue after its children
        pos = {k: i for i, k in enumerate(self._free)}
        for k, i in pos.items():
            p = self._blocks[k].parent
            if p in pos:
                assert pos[p] > i, f"parent {short(p)} would be evicted before child {short(k)}"

    # -- the hit ------------------------------------------------------------------------------

    def _keys(self, tokens: np.ndarray, adapter, mm_inputs, cache_salt) -> list[str]:
        return block_keys(
            tokens, self.block_size, adapter=adapter, mm_inputs=mm_inputs, cache_salt=cache_salt
        )

    def match_blocks(self, prompt_ids, *, adapter=None, mm_inputs=(), cache_salt=None) -> int:
        """How many leading full blocks of the prompt are cached (no side effects, no limit)."""
        arr = _as_tokens("prompt_ids", prompt_ids)
        n = 0
        for key in self._keys(arr, adapter, mm_inputs, cache_salt):
            if key not in self._blocks:
                break
            n += 1
        return n

    def _hit_from_blocks(self, matched_blocks: int, n_tokens: int) -> int:
        # at least one prompt token is computed: cap at (n - 1) tokens, in whole blocks
        limit = max(n_tokens - 1, 0) // self.block_size
        return min(matched_blocks, limit) * self.block_size

    def lookup(self, prompt_ids, *, adapter=None, mm_inputs=(), cache_salt=None) -> int:
        """Prompt tokens a request would find cached now (no side effects)."""
        arr = _as_tokens("prompt_ids", prompt_ids)
        m = self.match_blocks(arr, adapter=adapter, mm_inputs=mm_inputs, cache_salt=cache_salt)
        return self._hit_from_blocks(m, len(arr))

    # -- life cycle ---------------------------------------------------------------------------

    def _evict_one(self) -> None:
        key, _ = self._free.popitem(last=False)
        b = self._blocks.pop(key)
        if self.record_events:
            self.events.append(CacheEvent("removed", key, b.depth, self.block_size))

    def _room(self, touched_free: int) -> int:
        """Blocks that can be made available (empty slots + evictable blocks not about to be pinned)."""
        return (self.capacity_blocks - len(self._blocks)) + (len(self._free) - touched_free)

    def _pin_chain(self, keys: list[str], tokens: np.ndarray, rid, start_depth: int) -> None:
        """Pin ``keys`` (blocks ``start_depth`` onwards of a chain): cached ones are touched, missing
        ones allocated (evicting the LRU free block when full). The caller has checked the room."""
        bs = self.block_size
        held = self._running[rid]
        for j, key in enumerate(keys):
            depth = start_depth + j
            b = self._blocks.get(key)
            if b is None:
                while len(self._blocks) >= self.capacity_blocks:
                    self._evict_one()
                parent = ROOT_KEY if depth == 0 else held[depth - 1]
                b = _Block(
                    key, parent, depth, tuple(int(t) for t in tokens[depth * bs : (depth + 1) * bs])
                )
                self._blocks[key] = b
                if self.record_events:
                    self.events.append(CacheEvent("stored", key, depth, bs))
            elif b.ref_count == 0:
                del self._free[key]
            b.ref_count += 1
            held.append(key)

    def _check_room(self, keys: list[str], rid, what: str) -> None:
        new = sum(1 for k in keys if k not in self._blocks)
        touched_free = sum(1 for k in set(keys) if k in self._free)
        room = self._room(touched_free)
        if new > room:
            raise CacheFullError(
                f"BlockHashCache is full: {what} of request {rid!r} needs {new} new blocks but only "
                f"{room} can be made free (capacity_blocks={self.capacity_blocks}, "
                f"{self.pinned_blocks()} pinned by {len(self._running)} running request(s)); "
                f"raise capacity_blocks or finish running requests first"
            )

    def start(self, request: Request) -> int:
        """Admit ``request``: return its hit in tokens and pin every full block of its prompt
        (cached blocks are reused, missing ones allocated). Raises :class:`CacheFullError`, leaving
        the cache unchanged, if the pinned blocks would not fit."""
        arr, rid, _, keys = self._admit(request)
        matched = 0
        for key in keys:
            if key not in self._blocks:
                break
            matched += 1
        self._check_room(keys, rid, "the prompt")
        hit = self._hit_from_blocks(matched, len(arr))
        self._running[rid] = []
        self._pin_chain(keys, arr, rid, 0)
        self.query_tokens += len(arr)
        self.hit_tokens += hit
        return hit

    def finish(self, request: Request, output_ids=None, *, cache_output: bool = True) -> None:
        """Finish ``request``: cache every full block of prompt + answer (``output_ids``, or the
        request's own ``output_ids`` when None; answer blocks are skipped if ``cache_output`` is
        False), then unpin the request's blocks. They join the back of the LRU free queue deepest
        first, so a chain is evicted from its tail."""
        rid = getattr(request, "request_id", None)
        if rid not in self._running:
            raise ValueError(f"request_id {rid!r} is not running; call start() first")
        held = self._running[rid]
        if cache_output:
            out = _as_tokens("output_ids", request.output_ids if output_ids is None else output_ids)
            prompt = _as_tokens("prompt_ids", request.prompt_ids)
            full = np.concatenate([prompt, out])
            keys = self._keys(
                full, request.adapter, _check_mm(request.mm_inputs, len(prompt)), request.cache_salt
            )
            extra = keys[len(held) :]
            if extra:
                self._check_room(extra, rid, "the answer")
                self._pin_chain(extra, full, rid, len(held))
        for key in reversed(held):
            b = self._blocks[key]
            b.ref_count -= 1
            if b.ref_count == 0:
                self._free[key] = None  # back of the queue; deepest block first
        del self._running[rid]
