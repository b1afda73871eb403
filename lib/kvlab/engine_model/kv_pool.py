"""The engine's KV pool with its prefix cache, at the level of block keys (:class:`KVPool`).

The rules are vLLM v1's (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``), kept as far as
they decide how many blocks are free and which cached block goes first:

* the pool holds ``num_blocks`` blocks of ``block_size`` tokens; a request holds one block per
  ``block_size`` tokens it has in the cache, its partial last block included;
* a full block whose key is known (the hash of its tokens and everything before them) is cached
  under that key when it fills; a second request that fills a block with the same key keeps its
  own copy, uncached (vLLM's duplicate blocks);
* a cached block nobody uses stays in the free queue, least recently freed first; a request's
  blocks are freed last block first, so its deepest blocks are evicted first;
* free blocks that hold no key are handed out before any cached block is evicted (in vLLM they sit
  at the front of the free queue);
* a prefix hit takes the leading run of the request's keys found in the cache; the blocks it
  takes leave the free queue while the request runs.

:class:`kvlab.cache.VLLMBlockPool` follows vLLM block for block on token ids; this pool counts
blocks and keys only, which is what a timed simulation of thousands of long requests can afford.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from .._validate import check_int


class KVPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens with a prefix cache.

    ``on_stored(keys)`` and ``on_removed(keys)``, if given, are called when blocks enter or leave
    the cache (vLLM's KV events, as an external router would see them).
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        on_stored: Callable[[list], None] | None = None,
        on_removed: Callable[[list], None] | None = None,
    ):
        self.num_blocks = check_int("num_blocks", num_blocks, lo=1)
        self.block_size = check_int("block_size", block_size, lo=1)
        self.free_plain = self.num_blocks  # free blocks holding no key
        self.lru: OrderedDict[Hashable, None] = OrderedDict()  # cached, unused: evicted first-in
        self.ref: dict[Hashable, int] = {}  # cached keys in use -> number of users
        self.on_stored = on_stored
        self.on_removed = on_removed
        self.hits = 0  # prompt tokens served from the cache
        self.queries = 0  # prompt tokens looked up

    # --- what is there -----------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks a new allocation may take (free plain blocks and unused cached ones)."""
        return self.free_plain + len(self.lru)

    @property
    def usage(self) -> float:
        """Share of blocks in use, as vLLM reports ``kv_cache_usage`` (cached unused blocks count
        as free)."""
        return 1.0 - self.num_free / self.num_blocks

    def cached_keys(self) -> set:
        return set(self.ref) | set(self.lru)

    def match(self, keys: Sequence[Hashable]) -> int:
        """Number of leading ``keys`` found in the cache."""
        n = 0
        for k in keys:
            if k in self.ref or k in self.lru:
                n += 1
            else:
                break
        return n

    def hits_in_free_queue(self, keys: Sequence[Hashable]) -> int:
        """How many of ``keys`` (all cached) sit unused in the free queue."""
        return sum(1 for k in keys if k in self.lru)

    # --- changes -------------------------------------------------------------------------------------

    def take_hits(self, keys: Sequence[Hashable]) -> None:
        """A request starts using the cached blocks ``keys``."""
        for k in keys:
            if k in self.lru:
                del self.lru[k]
                self.ref[k] = 1
            else:
                self.ref[k] += 1

    def allocate(self, n: int) -> bool:
        """Take ``n`` blocks, evicting cached ones least recently freed first; False (nothing
        taken) when fewer than ``n`` are free."""
        if n <= 0:
            return True
        if n > self.num_free:
            return False
        plain = min(n, self.free_plain)
        self.free_plain -= plain
        rest = n - plain
        if rest:
            gone = [self.lru.popitem(last=False)[0] for _ in range(rest)]
            if self.on_removed is not None:
                self.on_removed(gone)
        return True

    def store(self, key: Hashable) -> bool:
        """A request's block just filled with ``key``: cache it (True), or keep it as the
        request's own uncached copy when the key is already cached (False)."""
        if key in self.ref or key in self.lru:
            return False
        self.ref[key] = 1
        if self.on_stored is not None:
            self.on_stored([key])
        return True

    def release(self, keys: Sequence[Hashable], plain_blocks: int) -> None:
        """A request frees its cached blocks ``keys`` (in its order) and ``plain_blocks`` blocks
        without a key. Keys are freed last first, so the deepest is evicted first."""
        for k in reversed(keys):
            left = self.ref[k] - 1
            if left:
                self.ref[k] = left
            else:
                del self.ref[k]
                self.lru[k] = None
        self.free_plain += plain_blocks

    def check(self) -> None:
        """Raise AssertionError when the counts do not add up (tests)."""
        used_keys = len(self.ref)
        assert 0 <= self.free_plain <= self.num_blocks
        assert used_keys + len(self.lru) + self.free_plain <= self.num_blocks
        assert not (set(self.ref) & set(self.lru))
