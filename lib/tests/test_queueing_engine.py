"""The timed fleet simulator on the engine model (``kvlab.queueing.simulate(..., cost=
EngineCalibration())``): the same times as an engine driven directly, prefix hits from the pool's
shared blocks, the closed loop's think times, the routers' choices, the unsupported arguments and
every request served with its tokens. Runs are small (tens to hundreds of requests)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvlab import queueing, workload
from kvlab.engine_model import Engine, EngineCalibration, EngineConfig, KVPool, Request
from kvlab.engine_model.engine import DecodeRun
from kvlab.queueing import engine_backend

CAL = EngineCalibration()  # Llama-3.1-70B bf16 on H100 SXM, replicas of 8 GPUs (the default tp)
TP = 8


class Tiny:
    """Open-loop requests given by their cache paths: per request a list of (entry key, full
    blocks), its prompt and output tokens."""

    def __init__(self, entries, prompt, output, key=None):
        self.entries = entries
        self.prompt_tokens = np.asarray(prompt, dtype=np.int64)
        self.output_tokens = np.asarray(output, dtype=np.int64)
        self.key = np.arange(len(entries)) if key is None else np.asarray(key)

    def __len__(self) -> int:
        return len(self.entries)

    def paths(self, block_size: int = 16) -> workload.Paths:
        sizes = [len(e) for e in self.entries]
        return workload.Paths(
            block_size,
            np.r_[0, np.cumsum(sizes)].astype(np.int64),
            np.array([k for e in self.entries for k, _ in e], dtype=np.int64),
            np.array([b for e in self.entries for _, b in e], dtype=np.int64),
            (self.prompt_tokens - 1) // block_size,
        )


def drive(reqs: list[Request], arrivals: list[float], budget: int = 8192, seqs: int = 256):
    """One engine of CAL at TP, driven directly: each request added when the engine's clock
    reaches its arrival, runs of decode steps cut at the next arrival."""
    e = Engine(CAL.costs(TP), EngineConfig(CAL.num_blocks(TP), max_num_batched_tokens=budget,
                                           max_num_seqs=seqs))  # fmt: skip
    k = 0
    while k < len(reqs) or e.has_work():
        if not e.has_work():
            e.now = max(e.now, arrivals[k])
        while k < len(reqs) and arrivals[k] <= e.now:
            e.add(reqs[k])
            k += 1
        e.advance(arrivals[k] if k < len(reqs) else math.inf)
    return e


def same_requests(w, arrivals) -> list[Request]:
    p = w.paths(16)
    ks, ns = queueing.replica.split_paths(p, len(w))
    return [
        Request(
            i,
            int(w.prompt_tokens[i]),
            int(w.output_tokens[i]),
            arrival_s=arrivals[i],
            keys=engine_backend.block_keys(ks[i], ns[i]),
        )  # fmt: skip
        for i in range(len(w))
    ]


# -- (a) the same times as an engine driven directly ------------------------------------------------


@pytest.mark.parametrize("prompt", [3_000, 20_000])
def test_one_request_matches_the_engine(prompt):
    w = queueing.IndependentRequests(requests=1, prompt_tokens=prompt, sigma=0.0, output_tokens=50)
    res = queueing.simulate(w, "random", 1, arrival_s=[0.5], cost=CAL, cache_tokens=None)
    reqs = same_requests(w, [0.5])
    drive(reqs, [0.5])
    assert res.first_token_s[0] == reqs[0].first_token_s
    assert res.finish_s[0] == reqs[0].finish_s
    assert res.ttft_s[0] == pytest.approx(reqs[0].first_token_s - 0.5, rel=1e-12)
    assert res.start_s[0] == 0.5 and res.hit_tokens[0] == 0 and res.output_tokens[0] == 50
    assert res.first_token_s[0] > 0.5 + 0.05  # a 70B prefill takes tens of milliseconds at least


@pytest.mark.parametrize(
    "chunk, seqs, arr",
    [
        (None, 256, [0.0, 0.4, 0.9, 1.3, 1.35, 2.2, 2.6, 2.61]),  # arrivals cut decode runs
        (512, 4, [0.0, 0.05, 0.12, 0.3, 0.31, 0.9, 1.0, 1.05]),  # a queue for the 4 slots
    ],
)
def test_overlapping_requests_match_the_engine(chunk, seqs, arr, monkeypatch):
    """Arrivals that cut runs of decode steps and share steps: the same times, request by
    request, as one engine driven directly with the same budget."""
    cuts = []
    steps_before = DecodeRun.steps_before

    def counted(self, t):
        k = steps_before(self, t)
        cuts.append(k < len(self.ends_s))
        return k

    monkeypatch.setattr(DecodeRun, "steps_before", counted)
    w = queueing.IndependentRequests(requests=8, prompt_tokens=4_000, sigma=0.6,
                                     output_tokens=60, seed=4)  # fmt: skip
    res = queueing.simulate(w, "round_robin", 1, arrival_s=arr, cost=CAL, cache_tokens=None,
                            chunk_tokens=chunk, max_batch=seqs)  # fmt: skip
    assert any(cuts) == (chunk is None)
    reqs = same_requests(w, arr)
    drive(reqs, arr, budget=seqs + chunk if chunk else 8192, seqs=seqs)
    np.testing.assert_array_equal(res.first_token_s, [r.first_token_s for r in reqs])
    np.testing.assert_array_equal(res.finish_s, [r.finish_s for r in reqs])
    assert res.params["max_num_batched_tokens"] == (seqs + chunk if chunk else 8192)


# -- (b) prefix hits from shared blocks ---------------------------------------------------------------


def test_shared_system_prompt_hits_its_full_blocks():
    w = queueing.ChatSessions(requests=2, mean_turns=1, system_prompts=1, system_tokens=2008,
                              seed=0)  # fmt: skip
    assert w.sessions == 2 and w.system_prompt.tolist() == [0, 0]
    res = queueing.simulate(w, "random", 1, 0.02, cost=CAL, cache_tokens=None, seed=0)
    assert res.arrival_s[1] > res.finish_s[0]  # the first has finished: its blocks are free
    assert res.hit_tokens.tolist() == [0, 2008 // 16 * 16]


def test_follow_up_hits_its_whole_history():
    """A chat's next turn finds the previous prompt and answer (full blocks) in the pool."""
    # turn 0: 2,700 + 200 tokens = 181 full blocks; turn 1's prompt holds them (3,200 + 20)
    entries = [[(0, 125), (10, 56)], [(0, 125), (10, 76)]]
    w = Tiny(entries, [2_700, 3_200], [200, 20])
    res = queueing.simulate(w, "random", 1, arrival_s=[0.0, 30.0], cost=CAL, cache_tokens=None)
    assert res.hit_tokens.tolist() == [0, 181 * 16]  # within the 3,199 // 16 = 199 hittable


# -- (c) closed loop ------------------------------------------------------------------------------------


def test_closed_loop_turns_wait_their_think_time():
    w = queueing.ChatSessions(requests=150, think_s=2.0, seed=1)
    res = queueing.simulate(w, "cache_aware", 2, 4.0, cost=CAL, cache_tokens=None, seed=1,
                            view="exact")  # fmt: skip
    pred = res.predecessor
    has = pred >= 0
    assert has.sum() == (w.turn > 0).sum() > 50
    gap = res.arrival_s[has] - res.finish_s[pred[has]]
    assert np.all(gap >= 0)
    np.testing.assert_allclose(np.sort(gap), np.sort(w.think_s[w.turn > 0]), atol=1e-9)


# -- (d) sticky and round robin -------------------------------------------------------------------------


def test_sticky_keeps_a_session_round_robin_cycles():
    w = queueing.ChatSessions(requests=150, think_s=2.0, seed=2)
    res = queueing.simulate(w, "sticky", 3, 4.0, cost=CAL, cache_tokens=None, seed=2)
    pred = res.predecessor
    has = pred >= 0
    assert np.all(res.replica[has] == res.replica[pred[has]])
    assert len(set(res.replica.tolist())) == 3
    rr = queueing.simulate(w, "round_robin", 3, 4.0, cost=CAL, cache_tokens=None, seed=2)
    np.testing.assert_array_equal(rr.replica, np.arange(len(w)) % 3)


# -- (e) cache_aware's exact view reads the engines' pools ----------------------------------------------


def _two_sessions():
    """Sessions A and B on different system prompts; A's long first prompt is still prefilling
    when B's first turn arrives, so B goes to the other replica; both follow-ups arrive when the
    fleet is idle (equal loads)."""
    # A: 20,000 + 100 tokens (1,256 blocks), then 20,600 + 50 (1,290); B: 3,500 + 101 (225),
    # then 4,000 + 50 (253); 125 blocks of system prompt each
    entries = [[(0, 125), (10, 1_131)], [(1, 125), (11, 100)], [(1, 125), (11, 128)],
               [(0, 125), (10, 1_165)]]  # fmt: skip
    prompt = [20_000, 3_500, 4_000, 20_600]
    return Tiny(entries, prompt, [100, 101, 50, 50], key=[0, 1, 1, 0])


@pytest.mark.parametrize("view", ["exact", "stale"])
def test_cache_aware_follows_the_prefix(view):
    w = _two_sessions()
    arr = [0.0, 0.01, 30.0, 31.0]
    res = queueing.simulate(w, "cache_aware", 2, arrival_s=arr, cost=CAL, cache_tokens=None,
                            view=view)  # fmt: skip
    assert res.finish_s[:2].max() < 30.0  # idle when the follow-ups arrive: loads are equal
    a, b = res.replica[0], res.replica[1]
    assert a != b
    assert res.replica[2] == b and res.replica[3] == a
    assert res.hit_tokens[2] == 225 * 16 and res.hit_tokens[3] == 1_256 * 16


def test_exact_view_needs_no_record():
    """With no record (``record_tokens=0``) the stale view sees no match and the tie sends both
    follow-ups to replica 0; the exact view still reads the pools."""
    w = _two_sessions()
    arr = [0.0, 0.01, 30.0, 31.0]
    kw = dict(arrival_s=arr, cost=CAL, cache_tokens=None, record_tokens=0)
    exact = queueing.simulate(w, "cache_aware", 2, view="exact", **kw)
    stale = queueing.simulate(w, "cache_aware", 2, view="stale", **kw)
    assert exact.replica.tolist() == [0, 1, 1, 0]
    assert stale.replica.tolist() == [0, 1, 0, 0]


def test_pool_match_and_deepest():
    pool = KVPool(100)
    for k in [(5, 0), (5, 1), (5, 2), (7, 0), (7, 1)]:
        pool.store(k)
    pool.release([(7, 0), (7, 1)], 0)  # free but cached
    ks, ns = (5, 7, 9), (3, 4, 2)
    assert engine_backend.pool_match(pool, ks, ns, 100) == 5
    assert engine_backend.pool_match(pool, ks, ns, 4) == 4
    assert engine_backend.pool_deepest(pool, ks, ns) == 7
    assert engine_backend.pool_match(pool, (6,), (3,), 100) == 0
    assert engine_backend.pool_deepest(pool, (6,), (3,)) is None
    assert engine_backend.block_keys((5, 7), (2, 1)) == [(5, 0), (5, 1), (7, 0)]


# -- (f) what the engine backend does not take -----------------------------------------------------------


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(), "cache_tokens"),  # the default, 400,000 tokens
        (dict(cache_tokens=400_000), "cache_tokens"),
        (dict(cache_tokens=None, add_replica_at_s=10.0), "add_replica_at_s"),
        (dict(cache_tokens=None, fail_replica_at_s=10.0), "fail_replica_at_s"),
        (dict(cache_tokens=None, router_replicas=2), "router_replicas"),
        (dict(cache_tokens=None, prefill_only=True), "prefill_only"),
        (dict(cache_tokens=None, tp=0), "tp"),
    ],
)
def test_unsupported_arguments_raise(kw, name):
    w = queueing.ChatSessions(requests=20, seed=0)
    with pytest.raises(ValueError, match=name):
        queueing.simulate(w, "sticky", 2, 4.0, cost=CAL, **kw)


def test_cache_tokens_error_names_the_pool():
    w = queueing.ChatSessions(requests=20, seed=0)
    with pytest.raises(ValueError, match=f"{CAL.num_blocks(TP):,} blocks of 16 tokens"):
        queueing.simulate(w, "sticky", 2, 4.0, cost=CAL)


def test_tp_only_with_an_engine_calibration():
    w = queueing.ChatSessions(requests=20, seed=0)
    with pytest.raises(ValueError, match="tp"):
        queueing.simulate(w, "sticky", 2, 4.0, tp=8)


# -- (g) every request served, with its tokens -------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, kw",
    [
        ("sglang", {}),
        ("dynamo", {}),
        ("bounded_ring", {}),
        ("cache_aware", dict(load="cumulative")),
        ("random", dict(chunk_tokens=256, max_batch=8)),
    ],
)
def test_every_request_finishes_with_its_tokens(policy, kw):
    rng = np.random.default_rng(5)
    n = 120
    prompt = rng.integers(200, 6_000, n)
    out = rng.integers(1, 120, n)
    w = Tiny([[(i % 5, 8), (100 + i, int((p + o) // 16 - 8))] for i, (p, o) in
              enumerate(zip(prompt, out, strict=True))], prompt, out)  # fmt: skip
    arr = np.cumsum(rng.exponential(0.1, n))
    res = queueing.simulate(w, policy, 3, arrival_s=arr, cost=CAL, cache_tokens=None, **kw)
    assert np.all(np.isfinite(res.finish_s))
    assert np.all(res.arrival_s <= res.start_s) and np.all(res.start_s < res.first_token_s)
    assert np.all(res.first_token_s <= res.finish_s)
    np.testing.assert_array_equal(res.output_tokens, out)  # the engine's count, arrival order
    assert np.all(res.first_token_s[out == 1] == res.finish_s[out == 1])
    assert np.all((res.hit_tokens >= 0) & (res.hit_tokens <= (prompt - 1) // 16 * 16))
    assert res.hit_tokens.sum() > 0  # the five shared 8-block prefixes
    assert np.all(res.busy_s > 0) and np.all(res.prefill_busy_s <= res.busy_s)


def test_a_small_pool_preempts_and_still_serves_everyone():
    cal = EngineCalibration(gpu_memory_utilization=0.27)  # about 1,600 blocks per replica
    blocks = cal.num_blocks(TP)
    assert 500 < blocks < 5_000
    w = queueing.IndependentRequests(requests=60, prompt_tokens=2_500, sigma=0.3,
                                     output_tokens=300, seed=1)  # fmt: skip
    res = queueing.simulate(w, "round_robin", 2, 40.0, cost=cal, cache_tokens=None)
    assert sum(res.params["preemptions"]) > 0
    assert np.all(np.isfinite(res.finish_s))
    np.testing.assert_array_equal(res.output_tokens, 300)


def test_compare_runs_on_the_engine():
    out = queueing.compare({"sticky": queueing.ROUTERS["sticky"]}, rate_rps=5.0, requests=150,
                           warmup_s=0.0, seeds=(0,), cost=CAL, cache_tokens=None)  # fmt: skip
    assert 0.0 < out["sticky"]["hit_rate"].mean < 1.0
