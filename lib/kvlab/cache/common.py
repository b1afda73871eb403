"""What the three caches share: requests, block keys, events, errors, checks.

Keys are ``hashlib.blake2b`` digests of bytes, never Python's salted ``hash()``: a block's key
chains its parent's key, its token ids and its extra keys (adapter, multimodal inputs, cache salt
on the first block), as vLLM's block hashes do. :class:`_OneCall` is the base of every cache here:
one request served in one call, and the recorded events drained.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .._validate import check_int

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
