"""Problem 8's worked scenario as kvlab computes it (issue 35): random routing with nested prefix
hits, the free KV pool from HBM, the working set against it, and the card's claims about them."""

from __future__ import annotations

import dataclasses

import pytest

from kvlab import calc, claims, workingset
from kvlab.assumptions import P8


@pytest.mark.parametrize("replicas", [1, 2, 8, 16])
@pytest.mark.parametrize("turns", [1, 2, 3, 6])
def test_nested_random_routing_is_the_sum_it_stands_for(replicas, turns):
    s, h = 2_000, 3_000
    p = 1 / replicas
    # the chosen replica served earlier turn j (of K, 1 = oldest) last with p (1 - p)^(K - j)
    direct = s + sum(j * h / turns * p * (1 - p) ** (turns - j) for j in range(1, turns + 1))
    assert calc.cached_tokens_random_nested(s, h, replicas, turns) == pytest.approx(direct)


def test_one_earlier_turn_is_the_one_in_n_bound_and_more_turns_nest():
    assert calc.cached_tokens_random_nested(2_000, 3_000, 8, 1) == pytest.approx(
        calc.cached_tokens_random(2_000, 3_000, 8)
    )
    hits = [calc.cached_tokens_random_nested(2_000, 3_000, 8, k) for k in (1, 2, 3, 10, 1_000)]
    assert hits == sorted(hits) and hits[-1] < 5_000  # rises towards S + H, never reaches it
    with pytest.raises(ValueError, match="earlier_turns"):
        calc.cached_tokens_random_nested(2_000, 3_000, 8, 0.5)


def test_the_pool_is_hbm_less_weights_and_engine_memory():
    pool, fp8 = workingset.p08_pool(), workingset.p08_pool(kv_bytes_per_value=1)
    assert abs(fp8.tokens - 2 * pool.tokens) <= 32  # fp8 KV: twice the tokens, whole blocks
    assert pool.kv_bytes == pytest.approx(fp8.kv_bytes, rel=1e-4)
    left = pool.hbm_bytes * pool.gpu_memory_utilization - pool.weight_bytes - pool.non_kv_bytes
    assert left - 16 * 327_680 < pool.kv_bytes <= left  # less than one block lost to rounding
    assert pool.tokens > 3 * P8.cache_tokens_per_replica  # the round number was far too small
    assert workingset.p08_pool(gpu_memory_utilization=0.95).tokens > pool.tokens


def test_the_working_set_is_littles_law_against_the_pools():
    pool = workingset.p08_pool()
    ws = workingset.p08_working_set(pool.tokens)
    assert ws.live == pytest.approx(P8.rate_rps * P8.return_s)
    assert ws.share == pytest.approx(ws.fit / ws.live)
    assert ws.all_fit_within_s * P8.rate_rps == pytest.approx(ws.fit)
    rows = workingset.p08_sensitivity()
    assert [len(w) for _, w in rows] == [len(workingset.P8_RETURNS_S)] * len(
        workingset.P8_POOL_SETTINGS
    )
    for _, ws_row in rows:  # a longer return time keeps more chats live: a smaller share
        shares = [w.share for w in ws_row]
        assert shares == sorted(shares, reverse=True)


def test_the_card_claims_hold_and_the_verdict_moves_with_the_return_time():
    now = {c.key: c for c in claims.p08_card_claims()}
    assert all(c.holds for c in now.values()), [k for k, c in now.items() if not c.holds]
    quick = {c.key: c for c in claims.p08_card_claims(dataclasses.replace(P8, return_s=60))}
    assert not quick["p08_claim_working_set"].holds  # users back within a minute: it all fits
    fp8 = {c.key: c for c in claims.p08_card_claims(dataclasses.replace(P8, kv_bytes_per_value=1))}
    assert not fp8["p08_claim_working_set"].holds  # fp8 KV: most of it fits
