"""The queueing simulator against queueing theory (M/G/1, Little's law), zero load, conservation,
the fleet simulator's hits, determinism and input checks."""

import math

import numpy as np
import pytest

from kvlab import fleet, queueing, routing, workload
from kvlab.assumptions import COST, CostModel

TAU = COST.prefill_s_per_token


def _batch_means_se(x, batches=40):
    """Standard error of the mean of an autocorrelated series, from batch means."""
    n = len(x) // batches * batches
    means = np.asarray(x[:n]).reshape(batches, -1).mean(1)
    return means.std(ddof=1) / math.sqrt(batches)


@pytest.fixture(scope="module")
def mg1():
    w = queueing.IndependentRequests(requests=150_000, prompt_tokens=2_000, sigma=0.8, seed=3)
    rate = 3.5  # E[S] ~ 0.2 s: rho ~ 0.7
    res = queueing.simulate(w, "round_robin", 1, rate, cache_tokens=0, prefill_only=True, seed=11)
    return w, rate, res


def test_mg1_mean_wait_matches_pollaczek_khinchine(mg1):
    w, rate, res = mg1
    s = w.prompt_tokens * TAU
    es, es2 = s.mean(), (s**2).mean()
    assert 0.6 < rate * es < 0.8
    expected = queueing.mg1_wait_s(rate, es, es2)
    wait = res.wait_s[2_000:]  # drop the empty-system start
    se = _batch_means_se(wait)
    # sampling error (not the tolerance) is small enough for the test to have teeth
    assert se / expected < 0.04
    assert abs(wait.mean() - expected) < 4 * se, (wait.mean(), expected, se)
    # TTFT = wait + service exactly (no cache, one replica)
    np.testing.assert_allclose(res.ttft_s - res.wait_s, s, rtol=1e-9, atol=1e-12)


def test_littles_law(mg1):
    w, rate, res = mg1
    span = res.end_s - res.arrival_s[0]
    lam = len(w) / span
    # the simulator's own time-average of the count equals lambda x mean time in system
    assert res.mean_in_system == pytest.approx(lam * res.latency_s.mean(), rel=1e-9)
    # and an independent estimate: the count sampled at random times from the per-request arrays
    t = np.sort(np.random.default_rng(0).uniform(res.arrival_s[0], res.end_s, 50_000))
    n_t = np.searchsorted(res.arrival_s, t, "right") - np.searchsorted(
        np.sort(res.finish_s), t, "right"
    )
    assert n_t.mean() == pytest.approx(res.mean_in_system, rel=0.05)


def test_littles_law_with_decode_and_chunking():
    w = workload.ChatWorkload(requests=3_000, seed=1)
    res = queueing.simulate(w, "cache_aware", 4, 6.0, chunk_tokens=512, seed=2)
    lam = len(w) / (res.end_s - res.arrival_s[0])
    assert res.mean_in_system == pytest.approx(lam * res.latency_s.mean(), rel=1e-9)


def test_zero_load_one_request():
    w = queueing.IndependentRequests(requests=1, prompt_tokens=5_000, sigma=0.0, output_tokens=200)
    res = queueing.simulate(w, "random", 8, 1.0)
    assert res.ttft_s[0] == pytest.approx(5_000 * TAU, rel=1e-12)
    step = COST.decode_base_s + COST.decode_per_request_s  # a batch of one
    assert res.tpot_s[0] == pytest.approx(step, rel=1e-9)
    assert res.finish_s[0] - res.first_token_s[0] == pytest.approx(199 * step, rel=1e-9)


@pytest.mark.parametrize("policy", ["random", "round_robin", "sticky"])
def test_widely_spaced_matches_fleet_and_prefill_time(policy):
    w = workload.ChatWorkload(conversations=30, requests=400, seed=4)
    arr = np.arange(len(w)) * 100.0  # every request has finished before the next one arrives
    res = queueing.simulate(w, policy, 4, arrival_s=arr, cache_tokens=40_000, seed=5)
    ref = fleet.simulate(w, policy, 4, cache_tokens=40_000, warmup=0, seed=5)
    np.testing.assert_array_equal(res.replica, ref.replica)
    np.testing.assert_array_equal(res.hit_tokens, ref.hit_tokens)
    np.testing.assert_allclose(res.ttft_s, (w.prompt_tokens - res.hit_tokens) * TAU, rtol=1e-9)
    assert np.all(res.wait_s == 0)


def test_conservation():
    w = workload.ChatWorkload(requests=2_000, seed=2)
    for chunk in (None, 256):
        res = queueing.simulate(
            w, "cache_aware", 4, 8.0, chunk_tokens=chunk, max_batch=16, view="exact"
        )
        assert np.all(np.isfinite(res.finish_s))
        assert np.all(res.arrival_s <= res.start_s)
        assert np.all(res.start_s <= res.first_token_s)
        assert np.all(res.first_token_s < res.finish_s)
        assert np.all((res.hit_tokens >= 0) & (res.hit_tokens < res.prompt_tokens))
        computed = (res.prompt_tokens - res.hit_tokens) * TAU
        assert res.prefill_busy_s.sum() == pytest.approx(computed.sum(), rel=1e-9)
        per_rep = np.bincount(res.replica, weights=computed, minlength=res.replicas)
        np.testing.assert_allclose(res.prefill_busy_s, per_rep, rtol=1e-9)
        assert np.all(res.busy_s >= res.prefill_busy_s - 1e-9)
        assert np.all(res.utilisation <= 1 + 1e-9)
        # every decode step of a batch of b takes a + k b, and b <= max_batch
        assert np.all(
            res.tpot_s
            <= COST.decode_base_s + 16 * COST.decode_per_request_s + res.prefill_busy_s.max()
        )


def test_costs_are_configurable():
    w = queueing.IndependentRequests(requests=1, prompt_tokens=1_000, sigma=0.0)
    res = queueing.simulate(w, "random", 1, 1.0, cost=CostModel(prefill_s_per_token=2e-4))
    assert res.ttft_s[0] == pytest.approx(0.2)


def test_determinism():
    w = workload.ChatWorkload(requests=1_500, seed=3)
    a = queueing.simulate(w, "random", 4, 10.0, seed=7)
    b = queueing.simulate(w, "random", 4, 10.0, seed=7)
    c = queueing.simulate(w, "random", 4, 10.0, seed=8)
    np.testing.assert_array_equal(a.finish_s, b.finish_s)
    np.testing.assert_array_equal(a.replica, b.replica)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_more_load_more_wait_and_cache_helps():
    w = workload.ChatWorkload(requests=3_000, seed=0)
    r = queueing.sweep_rate(w, [2.0, 8.0], policies=("sticky",), warmup=1_000)["sticky"]
    assert r[0].percentile("ttft", 95) < r[1].percentile("ttft", 95)
    no_cache = queueing.simulate(w, "sticky", 8, 8.0, cache_tokens=0, warmup=1_000)
    assert r[1].hit_rate > 0.5 > no_cache.hit_rate
    assert r[1].percentile("ttft", 50) < no_cache.percentile("ttft", 50)


def test_add_replica_ring_moves_fewer_keys():
    w = workload.ChatWorkload(conversations=2_000, skew=0.0, requests=6_000, seed=0)
    mid = 6_000 / 20.0 / 2
    mod = queueing.simulate(w, "sticky", 8, 20.0, add_replica_at_s=mid, sticky="modulo")
    ring = queueing.simulate(w, "sticky", 8, 20.0, add_replica_at_s=mid, sticky="ring")
    assert mod.replicas == ring.replicas == 9
    assert mod.keys_moved == pytest.approx(8 / 9, abs=0.03)
    assert 0.03 < ring.keys_moved < 0.25
    late = mod.arrival_s >= mid
    assert np.all(mod.replica[late] == w.key[late] % 9)
    ring9 = routing.HashRing(9)
    assert all(ring.replica[i] == ring9.lookup(int(w.key[i])) for i in np.flatnonzero(late)[:500])
    assert np.any(mod.replica[late] == 8) and np.any(ring.replica[late] == 8)


def test_trace_replay():
    from kvlab import traces

    tr = traces.load_mooncake(limit=600)
    res = queueing.simulate(tr, "cache_aware", 4, speedup=2.0, view="exact")
    np.testing.assert_allclose(res.arrival_s, tr.arrival_s / 2.0)
    assert 0.0 < res.hit_rate < 1.0
    assert np.all(np.isfinite(res.ttft_s))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(replicas=0), "replicas"),
        (dict(rate_rps=-1.0), "rate_rps"),
        (dict(cache_tokens=-5), "cache_tokens"),
        (dict(max_batch=0), "max_batch"),
        (dict(chunk_tokens=0), "chunk_tokens"),
        (dict(policy="fastest"), "policy"),
        (dict(view="psychic"), "view"),
        (dict(load="vibes"), "load"),
        (dict(add_replica_at_s=-1.0), "add_replica_at_s"),
        (dict(warmup=10_000), "warmup"),
        (dict(speedup=0.0, rate_rps=None, arrival_s=np.arange(10.0)), "speedup"),
        (dict(rate_rps=None, arrival_s=np.arange(10.0)[::-1]), "arrival_s"),
        (dict(rate_rps=None), "rate_rps"),
        (dict(guard_slack_tokens=-1.0), "guard_slack_tokens"),
    ],
)
def test_validation(kwargs, name):
    w = queueing.IndependentRequests(requests=10)
    args = dict(policy="random", replicas=2, rate_rps=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        queueing.simulate(w, **args)


def test_mg1_formula_checks():
    assert queueing.mg1_wait_s(1.0, 0.5, 0.25) == pytest.approx(0.25)  # M/D/1: rho/(2 mu (1-rho))
    assert queueing.mg1_wait_s(3.0, 0.5, 0.5) == math.inf
    with pytest.raises(ValueError, match="rate_rps"):
        queueing.mg1_wait_s(0.0, 0.5, 0.5)
