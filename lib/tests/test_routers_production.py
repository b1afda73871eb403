"""The production routers' rules (SGLang's cache-aware rule, Dynamo's KV-router cost, consistent
hashing with bounded loads), one branch at a time, and in the timed simulator."""

import math

import numpy as np
import pytest

from kvlab import queueing, routing


def test_sglang_branches():
    r = routing.make_router("sglang", 4)
    m = [0, 3_000, 1_000, 0]
    # balanced loads, match 3,000 / 4,000 > 0.3: the longest match
    assert r.choose(0, m, [5, 5, 5, 5], 4_000, [0, 0, 0, 0]) == 1
    # imbalanced needs both tests: max - min > 64 and max > 1.5 x min
    assert r.choose(0, m, [100, 100, 100, 30], 4_000, [0, 0, 0, 0]) == 3
    assert r.choose(0, m, [100, 100, 100, 40], 4_000, [0, 0, 0, 0]) == 1  # 100 - 40 = 60
    assert r.choose(0, m, [200, 200, 200, 140], 4_000, [0, 0, 0, 0]) == 1  # 200 < 1.5 x 140
    # a match of at most 30 % of the prompt: the fewest live requests (smg >= 0.3.0), not the
    # smallest tree (replica 3 here)
    assert r.choose(0, m, [5, 5, 2, 5], 10_000, [9, 8, 7, 3]) == 2
    assert r.branches == {"imbalanced": 1, "match": 3, "low_match": 1}


def test_sglang_ties_go_to_one_fixed_replica_per_node():
    r = routing.make_router("sglang", 8, seed=0)
    m = [2_000] * 8  # every replica holds the system prompt
    picks = {r.choose(k, m, [0] * 8, 2_800, [0] * 8, node="sys-0") for k in range(50)}
    assert len(picks) == 1  # the first tenant of that node, whatever the load
    others = {r.choose(0, m, [0] * 8, 2_800, [0] * 8, node=f"sys-{j}") for j in range(40)}
    assert len(others) > 1  # another node has its own order


def test_dynamo_cost():
    r = routing.make_router("dynamo", 3, block_size=16)
    c = r.cost([0, 1_600, 3_200], [160, 0, 0], 3_200, [1_600, 3_200, 8_000])
    # weight 1 x (outstanding + uncached) / 16 + active / 16
    np.testing.assert_allclose(c, [(160 + 3_200) / 16 + 100, 1_600 / 16 + 200, 0 + 500])
    assert r.choose(0, [0, 1_600, 3_200], [160, 0, 0], 3_200, [1_600, 3_200, 8_000]) == 1
    heavy = routing.make_router("dynamo", 3, overlap_weight=4.0)
    assert heavy.choose(0, [0, 1_600, 3_200], [160, 0, 0], 3_200, [1_600, 3_200, 8_000]) == 2


def test_bounded_ring_caps_live_load():
    r = routing.make_router("bounded_ring", 4, load_factor=1.25)
    ring = routing.HashRing(4)
    assert all(r.choose(k, None, [0, 0, 0, 0]) == ring.lookup(k) for k in range(100))
    loads = [0, 0, 0, 0]
    for k in range(400):  # every request stays: loads only grow
        x = r.choose(k, None, loads)
        assert loads[x] < math.ceil(1.25 * (sum(loads) + 1) / 4)
        loads[x] += 1
    assert max(loads) <= math.ceil(1.25 * 400 / 4)
    walk = list(ring.walk(7))
    assert sorted(walk) == [0, 1, 2, 3] and walk[0] == ring.lookup(7)


@pytest.mark.parametrize(
    "policy, kwargs, name",
    [
        ("sglang", dict(cache_threshold=1.5), "cache_threshold"),
        ("sglang", dict(balance_rel=0.5), "balance_rel"),
        ("dynamo", dict(overlap_weight=-1.0), "overlap_weight"),
        ("bounded_ring", dict(load_factor=0.9), "load_factor"),
    ],
)
def test_validation(policy, kwargs, name):
    with pytest.raises(ValueError, match=name):
        routing.make_router(policy, 4, **kwargs)


def test_in_time_sglang_piles_new_chats_dynamo_balances():
    """At the demo's shape new chats share a 2,000-token system prompt (over 30 % of their
    prompt), so SGLang's rule sends them to that node's first tenant: a lopsided fleet. Dynamo's
    cost counts active blocks and stays even."""
    w = queueing.ChatSessions(requests=3_000, seed=0)
    kw = dict(replicas=8, rate_rps=20.0, seed=0, warmup_s=80.0)
    sg = queueing.simulate(w, "sglang", **kw)
    dy = queueing.simulate(w, "dynamo", **kw)
    br = sg.params["router"].branches
    assert br["imbalanced"] == 0 and br["match"] > 0.99 * len(w)
    new_chats = sg.replica[sg.predecessor == -1]
    assert len(set(new_chats.tolist())) <= w.system_prompts  # one replica per system prompt
    assert len(set(dy.replica[dy.predecessor == -1].tolist())) == 8
    assert sg.imbalance > 1.5 > 1.2 > dy.imbalance
