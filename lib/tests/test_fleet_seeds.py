"""Figures over seeds: fleet.over_seeds and fleet.sweep_over_seeds agree with single runs, and
the hottest replica's shares add up."""

import numpy as np
import pytest

from kvlab import fleet, routing, workload

SMALL = dict(conversations=40, requests=1_200)
KW = dict(replicas=4, cache_tokens=60_000, warmup=200)


def _direct(policy, seed, **extra):
    w = workload.ChatWorkload(**SMALL, seed=seed)
    return fleet.simulate(w, policy=policy, seed=seed, **{**KW, **extra})


@pytest.mark.parametrize("processes", [1, 2])
def test_over_seeds_matches_single_runs(processes):
    seeds = (0, 3, 5)
    out = fleet.over_seeds(
        seeds=seeds,
        workload_kwargs=SMALL,
        processes=processes,
        fields=("hit_rate", "imbalance"),
        **KW,
    )
    assert set(out) == set(routing.POLICIES)
    for p in routing.POLICIES:
        want = [_direct(p, s) for s in seeds]
        sp = out[p]["hit_rate"]
        assert sp.seeds == seeds and sp.n == 3
        assert sp.values == pytest.approx([r.hit_rate for r in want])
        assert out[p]["imbalance"].values == pytest.approx([r.imbalance for r in want])
        assert sp.lo <= sp.mean <= sp.hi


def test_fixed_workload_varies_only_random_routing():
    w = workload.ChatWorkload(**SMALL, seed=1)
    out = fleet.over_seeds(seeds=(0, 1, 2, 3), w=w, **KW)
    assert out["sticky"]["hit_rate"].std == 0 and out["round_robin"]["imbalance"].std == 0
    assert out["random"]["hit_rate"].std > 0


def test_sweep_over_seeds_equals_over_seeds_per_value():
    seeds = (0, 1)
    sw = fleet.sweep_over_seeds(
        "cache_tokens",
        [20_000, 200_000],
        ["sticky", "random"],
        seeds,
        workload_kwargs=SMALL,
        replicas=4,
        warmup=200,
    )
    for i, c in enumerate([20_000, 200_000]):
        one = fleet.over_seeds(
            ["sticky", "random"],
            seeds,
            workload_kwargs=SMALL,
            replicas=4,
            warmup=200,
            cache_tokens=c,
        )
        for p in ("sticky", "random"):
            assert sw[p]["hit_rate"][i].values == one[p]["hit_rate"].values
    sk = fleet.sweep_over_seeds("skew", [0.0, 1.5], ["sticky"], seeds, workload_kwargs=SMALL, **KW)
    assert sk["sticky"]["imbalance"][1].mean > sk["sticky"]["imbalance"][0].mean


def test_hottest_replica_shares():
    r = _direct("sticky", 0)
    n = r.requests_per_replica
    assert r.hot_request_share == pytest.approx(n[r.hottest_replica] / n.sum())
    assert r.hot_prefill_share * r.replicas == pytest.approx(r.imbalance)
    mask = r.replica[r.warmup :] == r.hottest_replica
    hits = r.hit_tokens[r.warmup :][mask].sum() / r.prompt_tokens[r.warmup :][mask].sum()
    assert r.hot_hit_rate == pytest.approx(hits)
    assert 0 < r.hot_hit_rate <= 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        fleet.over_seeds(["nope"], (0,), workload_kwargs=SMALL)
    with pytest.raises(ValueError, match="seeds"):
        fleet.over_seeds(seeds=(), workload_kwargs=SMALL)
    with pytest.raises(ValueError, match="seed"):
        fleet.over_seeds(seeds=(-1,), workload_kwargs=SMALL)
    with pytest.raises(ValueError, match="seed"):
        fleet.over_seeds(seeds=(0,), workload_kwargs={**SMALL, "seed": 3})
    w = workload.ChatWorkload(**SMALL)
    with pytest.raises(ValueError, match="either"):
        fleet.over_seeds(seeds=(0,), w=w, workload_kwargs=SMALL)
    with pytest.raises(ValueError, match="param"):
        fleet.sweep_over_seeds("colour", [1], seeds=(0,), workload_kwargs=SMALL)
    with pytest.raises(ValueError, match="param"):
        fleet.sweep_over_seeds("skew", [1.0], seeds=(0,), w=w)
    with pytest.raises(ValueError, match="values"):
        fleet.sweep_over_seeds("skew", [], seeds=(0,))
    with pytest.raises(ValueError, match="processes"):
        fleet.over_seeds(seeds=(0, 1), workload_kwargs=SMALL, processes=0, **KW)


def test_spread_is_nonzero_for_a_random_stream():
    out = fleet.over_seeds(["sticky"], (0, 1, 2), workload_kwargs=SMALL, **KW)
    assert out["sticky"]["imbalance"].std > 0
    assert np.isfinite(out["sticky"]["imbalance"].sem)
