"""The fleet simulator: exact against a brute-force block cache, and the demo's figures."""

from collections import OrderedDict

import numpy as np
import pytest

from kvlab import fleet, routing, traces, workload

POLICIES = routing.POLICIES


class BruteBlockCache:
    """An obviously-correct block-level LRU prefix cache (tests only).

    A block is identified by its tokens and everything before it (an interned chain id). A hit is
    the longest run of leading full prompt blocks present, capped so the last prompt token is
    computed. Serving touches every full block of prompt + answer, deepest least recent; then the
    least recent blocks are evicted until at most ``capacity_blocks`` remain.
    """

    _ids: dict = {}

    def __init__(self, capacity_blocks, block_size=16):
        self.cap = capacity_blocks
        self.bs = block_size
        self.lru = OrderedDict()

    def chain(self, ids):
        out, parent = [], -1
        for j in range(len(ids) // self.bs):
            k = (parent, ids[j * self.bs : (j + 1) * self.bs].tobytes())
            parent = self._ids.setdefault(k, len(self._ids))
            out.append(parent)
        return out

    def serve(self, prompt, output):
        blocks = self.chain(np.concatenate([prompt, output]))
        n_prompt = len(prompt) // self.bs
        hit = 0
        while hit < n_prompt and blocks[hit] in self.lru:
            hit += 1
        hit = min(hit, (len(prompt) - 1) // self.bs)
        for b in reversed(blocks):
            self.lru[b] = True
            self.lru.move_to_end(b)
        while self.cap is not None and len(self.lru) > self.cap:
            self.lru.popitem(last=False)
        return hit * self.bs


def brute_hits(w, replicas, route, cache_tokens, block_size=16):
    cap = None if cache_tokens is None else cache_tokens // block_size
    caches = [BruteBlockCache(cap, block_size) for _ in range(replicas)]
    return np.array([caches[r].serve(*w.tokens(i)) for i, r in enumerate(route)])


SMALL_CHAT = dict(
    conversations=12,
    skew=1.0,
    requests=300,
    seed=3,
    system_prompts=2,
    system_tokens=40,
    history_start=20,
    history_step=50,
    history_max=300,
    new_tokens=30,
    output_tokens=13,
)


@pytest.fixture(scope="module")
def small_chat():
    return workload.ChatWorkload(**SMALL_CHAT)


@pytest.fixture(scope="module")
def small_trace():
    return traces.load_mooncake(limit=120)


CASES = [
    (p, v) for p in POLICIES for v in (("stale", "exact") if p == "cache_aware" else ("stale",))
]


@pytest.mark.parametrize("cache_tokens", [0, 48, 200, 700, 3000, None])
@pytest.mark.parametrize("policy,view", CASES)
def test_exact_against_brute_force_chat(small_chat, policy, view, cache_tokens):
    r = fleet.simulate(
        small_chat,
        policy=policy,
        replicas=3,
        cache_tokens=cache_tokens,
        warmup=0,
        view=view,
        seed=1,
    )
    ref = brute_hits(small_chat, 3, r.replica, cache_tokens)
    np.testing.assert_array_equal(r.hit_tokens, ref)


def test_exact_default_sizes_block_aligned():
    w = workload.ChatWorkload(conversations=6, requests=120, seed=5)
    for cache in (10_000, 60_000):
        r = fleet.simulate(w, policy="cache_aware", replicas=2, cache_tokens=cache, warmup=0)
        np.testing.assert_array_equal(r.hit_tokens, brute_hits(w, 2, r.replica, cache))


@pytest.mark.parametrize("cache_tokens", [4_000, 60_000, 400_000, None])
@pytest.mark.parametrize("policy,view", CASES)
def test_exact_against_brute_force_trace(small_trace, policy, view, cache_tokens):
    r = fleet.simulate(
        small_trace, policy=policy, replicas=3, cache_tokens=cache_tokens, warmup=0, view=view
    )
    ref = brute_hits(small_trace, 3, r.replica, cache_tokens)
    np.testing.assert_array_equal(r.hit_tokens, ref)


def test_exact_trace_512_token_blocks(small_trace):
    r = fleet.simulate(
        small_trace, policy="round_robin", replicas=2, cache_tokens=50_000, warmup=0, block_size=512
    )
    np.testing.assert_array_equal(r.hit_tokens, brute_hits(small_trace, 2, r.replica, 50_000, 512))


@pytest.mark.parametrize("view", ["stale", "exact"])
@pytest.mark.parametrize("cache_model", ["prefix", "per_conversation"])
def test_inline_cache_aware_equals_router_object(small_chat, view, cache_model):
    kw = dict(
        policy="cache_aware",
        replicas=4,
        cache_tokens=700,
        warmup=0,
        view=view,
        cache_model=cache_model,
        lam=0.01,
    )
    fast = fleet.simulate(small_chat, **kw)
    slow = fleet.simulate(small_chat, _use_router_object=True, **kw)
    np.testing.assert_array_equal(fast.replica, slow.replica)
    np.testing.assert_array_equal(fast.hit_tokens, slow.hit_tokens)


def test_result_fields_and_accounting(small_chat):
    r = fleet.simulate(small_chat, policy="random", replicas=3, cache_tokens=500, warmup=50)
    n = len(small_chat)
    assert r.replica.shape == r.hit_tokens.shape == r.prompt_tokens.shape == (n,)
    assert np.all((r.hit_tokens >= 0) & (r.hit_tokens < r.prompt_tokens))
    assert np.all(r.hit_tokens % 16 == 0)
    assert r.prefill_tokens.sum() == (r.prompt_tokens - r.hit_tokens)[50:].sum()
    assert r.imbalance == pytest.approx(r.prefill_tokens.max() / r.prefill_tokens.mean())
    assert r.requests_per_replica.sum() == n - 50


def test_bad_arguments(small_chat):
    for kw in (
        dict(policy="nearest"),
        dict(replicas=0),
        dict(cache_tokens=-1),
        dict(warmup=300),
        dict(cache_model="lru"),
        dict(view="psychic"),
        dict(epsilon=-0.1),
    ):
        with pytest.raises(ValueError):
            fleet.simulate(small_chat, **kw)
    with pytest.raises(ValueError, match="per_conversation"):
        fleet.simulate(traces.load_mooncake(limit=10), cache_model="per_conversation", warmup=0)


def test_more_cache_never_hurts_a_single_replica(small_chat):
    rates = [
        fleet.simulate(
            small_chat, policy="round_robin", replicas=1, cache_tokens=c, warmup=0
        ).hit_rate
        for c in (0, 100, 400, 1600, None)
    ]
    assert rates == sorted(rates)
    assert rates[0] == 0.0


# --- the demo's figures (acceptance criteria; nothing is tuned to them) ------------------------
# published (simplified cache): hit rates within 2 points, imbalance within 0.1x
PUBLISHED = {
    "default": dict(
        hit={"random": 0.55, "round_robin": 0.55, "sticky": 0.97, "cache_aware": 0.94},
        imb={"sticky": 1.7, "cache_aware": 1.05},
    ),
    "cache50k": dict(hit={"cache_aware": 0.56}, imb={}),
    "skew0": dict(hit={"sticky": 0.59, "cache_aware": 0.59}, imb={"sticky": 1.1}),
}
# demo.md's expectations with real prefix semantics ("roughly"; same tolerances)
REAL = {
    "default": dict(
        hit={"random": 0.52, "round_robin": 0.52, "sticky": 0.95, "cache_aware": 0.94},
        imb={"sticky": 1.85, "cache_aware": 1.04},
    ),
    "cache50k": dict(hit={"cache_aware": 0.58}, imb={}),
    "skew0": dict(hit={"sticky": 0.59, "cache_aware": 0.59}, imb={"sticky": 1.1}),
}
SCENARIOS = {
    "default": ({}, {}),
    "cache50k": ({}, {"cache_tokens": 50_000}),
    "skew0": ({"skew": 0.0}, {}),
}
# Measured and known to miss (reported to the lead, not tuned away): sticky's imbalance. The
# request share alone gives 1.84x at skew 1 (c mod 8 with Zipf over 500 conversations), so 1.7x
# is out of reach for modulo placement; with real semantics, lingering old chats on the hottest
# replica push it to ~2.0x.
KNOWN_MISSES = {
    ("per_conversation", "default", "imb", "sticky"),
    ("prefix", "default", "imb", "sticky"),
}


def _cases():
    for model, table in (("per_conversation", PUBLISHED), ("prefix", REAL)):
        for scen, figs in table.items():
            for kind in ("hit", "imb"):
                for pol, val in figs[kind].items():
                    marks = (
                        [pytest.mark.xfail(strict=True, reason="see KNOWN_MISSES")]
                        if (model, scen, kind, pol) in KNOWN_MISSES
                        else []
                    )
                    yield pytest.param(
                        model, scen, kind, pol, val, marks=marks, id=f"{model}-{scen}-{kind}-{pol}"
                    )


_memo: dict = {}


def _run(model, scen, pol):
    key = (model, scen, pol)
    if key not in _memo:
        wkw, skw = SCENARIOS[scen]
        w = _memo.setdefault(("w", scen), workload.ChatWorkload(**wkw))
        _memo[key] = fleet.simulate(w, policy=pol, cache_model=model, **skw)
    return _memo[key]


@pytest.mark.parametrize("model,scen,kind,policy,target", list(_cases()))
def test_demo_figures(model, scen, kind, policy, target):
    r = _run(model, scen, policy)
    if kind == "hit":
        # compared as printed to one decimal of a point ("53.0 %"), within 2 points
        assert abs(round(r.hit_rate * 100, 1) - target * 100) <= 2.0 + 1e-9, f"{r.hit_rate:.4f}"
    else:
        assert abs(r.imbalance - target) <= 0.1, f"{r.imbalance:.3f} vs {target}"


def test_hottest_sticky_replica_owns_conversation_zero():
    r = _run("prefix", "default", "sticky")
    w = _memo[("w", "default")]
    assert r.hottest_replica == 0 % 8
    assert abs((w.conversation == 0).mean() - 0.15) < 0.01


def test_stale_view_costs_something_with_small_caches():
    w = workload.ChatWorkload(requests=6_000)
    stale = fleet.simulate(w, cache_tokens=50_000, warmup=1_000, view="stale")
    exact = fleet.simulate(w, cache_tokens=50_000, warmup=1_000, view="exact")
    assert exact.hit_rate >= stale.hit_rate - 0.005


def synthetic_trace(seed=0, n=200):
    """Repeated and overlapping prompts, partial last blocks, some prompts a multiple of 16."""
    rng = np.random.default_rng(seed)
    id_len = {0: 512, 1: 512, 2: 100, 3: 512, 4: 512, 5: 512, 6: 32}  # tokens in each block
    roots = [[0, 1, 2], [0, 3], [0, 1, 4, 5], [6]]
    ids, lengths = [], []
    for _ in range(n):
        base = list(roots[rng.integers(len(roots))])
        if id_len[base[-1]] == 512 and rng.random() < 0.5:  # extend a path that ends full
            new = len(id_len)
            id_len[new] = int(rng.choice([16, 32, 100, 512, 511]))
            base.append(new)
            roots.append(base)
        ids.append(base)
        lengths.append(512 * (len(base) - 1) + id_len[base[-1]])
    return traces.Trace(np.arange(n) * 0.1, lengths, rng.integers(0, 40, n), ids)


@pytest.mark.parametrize("cache_tokens", [0, 600, 2_000, 8_000, None])
@pytest.mark.parametrize("policy,view", CASES)
def test_exact_against_brute_force_synthetic_trace(policy, view, cache_tokens):
    t = synthetic_trace()
    r = fleet.simulate(t, policy=policy, replicas=2, cache_tokens=cache_tokens, warmup=0, view=view)
    np.testing.assert_array_equal(r.hit_tokens, brute_hits(t, 2, r.replica, cache_tokens))
    if cache_tokens != 0:  # the last-token rule is exercised
        assert np.any(r.hit_tokens == t.prompt_tokens - 16)


# --- routers -------------------------------------------------------------------------------------
def test_router_objects_basic():
    rr = routing.make_router("round_robin", 3)
    assert [rr.choose(k) for k in range(5)] == [0, 1, 2, 0, 1]
    st = routing.make_router("sticky", 8)
    assert st.choose(13) == 5 and st.choose("chat-7") == st.choose("chat-7")
    ring = routing.make_router("sticky", 8, sticky="ring", vnodes=50)
    assert ring.choose(13) == ring.choose(13)
    a, b = routing.make_router("random", 4, seed=2), routing.make_router("random", 4, seed=2)
    seq = [a.choose(0) for _ in range(5000)]
    assert np.array_equal(seq, b.choose_many(np.zeros(5000)))
    assert set(seq) == {0, 1, 2, 3}


def test_cache_aware_choice_rules():
    ca = routing.make_router("cache_aware", 4, epsilon=0.05)
    loads = np.array([100, 100, 100, 100])
    assert ca.choose(0, np.array([0, 32, 16, 32]), loads) == 1  # longest match, lower index
    # the best match is over the load guard: (1.05 x mean) excludes replica 3
    assert ca.choose(0, np.array([0, 0, 16, 999]), np.array([90, 90, 90, 130])) == 2
    assert ca.choose(0, np.zeros(4), np.array([5, 3, 9, 3])) == 1  # ties: less loaded
    lam = routing.make_router("cache_aware", 2, lam=1.0)
    assert lam.choose(0, np.array([100, 90]), np.array([50, 30])) == 1
    with pytest.raises(ValueError):
        ca.choose(0, np.zeros(3), np.zeros(4))
    for kw in (
        dict(policy="x", replicas=2),
        dict(policy="random", replicas=0),
        dict(policy="sticky", replicas=2, sticky="md5"),
        dict(policy="cache_aware", replicas=2, epsilon=-1),
    ):
        with pytest.raises(ValueError):
            routing.make_router(**kw)


def test_hash_ring_moves_few_keys():
    keys = range(5000)
    ring = routing.HashRing(8, vnodes=100, seed=0)
    before = ring.lookup_many(keys)
    assert ring.add_replica() == 8
    after = ring.lookup_many(keys)
    moved = np.mean(before != after)
    assert 0.05 < moved < 0.2 and set(after[before != after]) == {8}
    modulo_moved = np.mean(np.arange(5000) % 8 != np.arange(5000) % 9)
    assert modulo_moved > 0.85


def test_ring_sticky_in_the_simulator():
    w = workload.ChatWorkload(requests=3_000)
    r = fleet.simulate(w, policy="sticky", sticky="ring", warmup=500)
    ring = routing.HashRing(8, 100, 0)
    assert np.array_equal(r.replica, [ring.lookup(int(c)) for c in w.conversation])


def test_cache_aware_slack_widens_the_guard():
    import numpy as np

    from kvlab import routing

    matched = np.array([0.0, 900.0, 0.0])
    loads = np.array([0.0, 300.0, 0.0])  # mean 100: replica 1 is over (1 + 0.05) x mean
    assert routing.make_router("cache_aware", 3).choose(0, matched, loads) == 0
    wide = routing.make_router("cache_aware", 3, slack=250.0)
    assert wide.choose(0, matched, loads) == 1  # 300 <= 1.05 x 100 + 250
    with pytest.raises(ValueError, match="slack"):
        routing.make_router("cache_aware", 3, slack=-1.0)
