"""SGLang's RadixAttention cache: :class:`RadixTree` and the longest-prefix-match order.

Edges hold runs of tokens; a lookup finds the longest matching prefix, an insert splits edges,
lock counts protect paths in use, and eviction removes least-recently-used leaves. Capacity is in
tokens. With ``page_size=16`` it works in whole blocks and gives the same hit lengths as
:class:`kvlab.cache.BlockHashCache` on the same requests (the tests check it).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .._validate import check_int
from .common import (
    BLOCK_SIZE,
    CacheEvent,
    CacheFullError,
    Request,
    _as_tokens,
    _check_block_size,
    _check_extra,
    _check_mm,
    _check_not_empty,
    _check_request,
    _OneCall,
)

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
