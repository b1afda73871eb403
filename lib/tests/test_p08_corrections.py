"""Problem 8 corrected (issue 21): each test fails on the old behaviour.

- SGLang's low-match branch picks the replica with the fewest live requests (sglang PR 14650,
  sgl-model-gateway 0.3.0 on), not the one with the smallest tree.
- A guard on *cumulative* load sends every request to a replica that joins a busy fleet.
- A replica that fails mid-run: its requests are sent again, the routers stop choosing it.
"""

import numpy as np
import pytest

from kvlab import queueing, routing


def test_sglang_low_match_goes_to_least_loaded_not_smallest_tree():
    r = routing.make_router("sglang", 4)
    m = [0, 1_000, 0, 0]  # best match 1,000 of 10,000 tokens: at most 30 %, the low-match branch
    loads = [3, 1, 4, 2]  # balanced by SGLang's test (max - min = 3 <= 64)
    tree = [9, 8, 7, 0]  # replica 3 has the smallest tree: the old rule's pick
    assert r.choose(0, m, loads, 10_000, tree) == 1
    assert r.branches["low_match"] == 1


def test_sglang_low_match_ties_go_to_the_first_listed():
    # idle traffic: every load is 0, Rust's min_by_key keeps the first minimum
    r = routing.make_router("sglang", 3)
    picks = {r.choose(k, [0, 0, 0], [0, 0, 0], 1_000, [5, 0, 9]) for k in range(20)}
    assert picks == {0}


def test_sglang_one_request_at_a_time_uses_the_first_worker():
    """One request at a time (every live load 0): a new prompt (no match) goes to replica 0, and
    its follow-ups match there; the old rule spread new prompts by tree size."""
    r = routing.make_router("sglang", 2)
    tree = np.zeros(2)
    picks = []
    for k in range(10):
        x = r.choose(k, [0, 0], [0, 0], 1_000, tree)
        tree[x] += 1_000
        picks.append(x)
    assert picks == [0] * 10


def test_cumulative_guard_starves_the_old_replicas_after_a_join():
    """Every old replica sits at 9/8 of the new mean, above (1 + 5 %) x mean: only the newcomer
    passes the guard, whatever the cache says, until it has caught up."""
    r = routing.make_router("cache_aware", 9, epsilon=0.05)
    loads = np.array([1_000_000.0] * 8 + [0.0])
    m = np.array([5_000.0] * 8 + [0.0])  # the old replicas hold the history
    picks = []
    for _ in range(20_000):
        x = r.choose(0, m, loads)
        picks.append(x)
        loads[x] += 1.0  # a 1-token prefill each: the newcomer stays far behind
    assert picks.count(8) == 20_000


def test_cumulative_guard_in_time_sends_the_newcomer_everything():
    """In a fleet that has been up an hour the newcomer must do 4/7 of an old replica's lifetime
    prefill before any old replica passes the guard again (about 7 % of the fleet's age)."""
    w = queueing.ChatSessions(requests=3_000, seed=0)
    add_s = 60.0
    kw = dict(
        replicas=8,
        rate_rps=20.0,
        seed=0,
        add_replica_at_s=add_s,
        cache_tokens=400_000,
        fleet_age_s=3_600.0,
    )
    cum = queueing.simulate(w, "cache_aware", load="cumulative", **kw)
    live = queueing.simulate(w, "cache_aware", load="outstanding", **kw)
    after = (cum.arrival_s >= add_s) & (cum.arrival_s < add_s + 30.0)
    assert after.sum() > 200
    assert np.mean(cum.replica[after] == 8) > 0.95  # the ninth replica gets (nearly) all
    after_l = (live.arrival_s >= add_s) & (live.arrival_s < add_s + 30.0)
    assert np.mean(live.replica[after_l] == 8) < 0.5
    # a young fleet (no age given: 60 s of history) catches up within seconds
    young = queueing.simulate(w, "cache_aware", load="cumulative", **{**kw, "fleet_age_s": None})
    assert np.mean(young.replica[after] == 8) < 0.5


@pytest.mark.parametrize("policy", routing.ALL_POLICIES)
def test_failure_mid_run_every_request_served_none_on_the_dead(policy):
    w = queueing.ChatSessions(requests=1_500, seed=1)
    fail_s = 40.0
    r = queueing.simulate(
        w, policy, replicas=4, rate_rps=10.0, seed=1, fail_replica_at_s=fail_s, fail_replica=2
    )
    assert np.all(np.isfinite(r.finish_s)) and np.all(r.first_token_s >= r.arrival_s)
    assert r.failed_at_s == fail_s and int(r.resent.sum()) == r.retried
    # after the failure nothing starts on replica 2
    assert not np.any((r.replica == 2) & (r.start_s > fail_s))
    # closed loop: a turn still arrives after its previous answer
    has = r.predecessor >= 0
    assert np.all(r.arrival_s[has] >= r.finish_s[r.predecessor[has]] - 1e-9)


def test_join_then_failure_ring_keeps_most_keys():
    w = queueing.ChatSessions(requests=2_000, seed=2)
    kw = dict(replicas=4, rate_rps=10.0, seed=2, add_replica_at_s=40.0, fail_replica_at_s=80.0)
    ring = queueing.simulate(w, "sticky", sticky="ring", fail_replica=1, **kw)
    assert ring.replicas == 5 and ring.retried > 0
    assert set(ring.replica[ring.start_s > 80.0].tolist()) <= {0, 2, 3, 4}


def test_fail_replica_validation():
    w = queueing.ChatSessions(requests=200, seed=0)
    with pytest.raises(ValueError, match="fail_replica"):
        queueing.simulate(
            w, "random", replicas=4, rate_rps=5.0, fail_replica_at_s=1.0, fail_replica=4
        )
    with pytest.raises(ValueError, match="fail_replica_at_s"):
        queueing.simulate(w, "random", replicas=1, rate_rps=5.0, fail_replica_at_s=1.0)


def test_operations_windows_and_the_cumulative_guard():
    variants = {k: queueing.ROUTERS[k] for k in ("sticky", "guard_cumulative", "guard_live")}
    res = queueing.operations(
        variants, requests=3_000, join_s=70.0, fail_s=110.0, window_s=20.0, seeds=[0, 1]
    )
    for name in variants:
        assert set(res[name]) == set(queueing.OPS_PHASES)
        assert res[name]["before"]["new_share"].mean == 0.0
    # the cumulative guard hands the newcomer (nearly) everything after the join
    assert res["guard_cumulative"]["join"]["new_share"].mean > 0.9
    assert res["guard_live"]["join"]["new_share"].mean < 0.5
    with pytest.raises(ValueError, match="fail_s"):
        queueing.operations(variants, join_s=100.0, fail_s=110.0, window_s=20.0, seeds=[0])


def test_each_router_through_a_join_in_an_old_fleet():
    """A replica joins a fleet that has been up an hour: only the cumulative guard hands the
    newcomer (nearly) everything."""
    w = queueing.ChatSessions(requests=2_500, seed=3)
    add_s = 60.0
    for name, kw in queueing.ROUTERS.items():
        r = queueing.simulate(
            w, replicas=8, rate_rps=20.0, seed=3, add_replica_at_s=add_s, fleet_age_s=3_600.0, **kw
        )
        sel = (r.arrival_s >= add_s) & (r.arrival_s < add_s + 30.0)
        share = float(np.mean(r.replica[sel] == 8))
        if name == "guard_cumulative":
            assert share > 0.9, name
        else:
            assert share < 0.5, (name, share)


def test_card_no_longer_recommends_the_cumulative_guard():
    from pathlib import Path

    card = (Path(__file__).resolve().parents[2] / "book" / "p08-card.md").read_text()
    assert "Working set unknown or changing" not in card
    assert "keeps almost all of sticky's hit rate with near-perfect balance." not in card


def test_router_replicas_with_their_own_records_lose_hits_and_events_restore_them():
    w = queueing.ChatSessions(requests=2_500, seed=4)
    kw = dict(replicas=8, rate_rps=20.0, seed=4, warmup_s=70.0)
    one = queueing.simulate(w, "sglang", **kw)
    four = queueing.simulate(w, "sglang", router_replicas=4, **kw)
    events = queueing.simulate(w, "sglang", router_replicas=4, view="exact", **kw)
    assert four.hit_rate < one.hit_rate - 0.05
    assert events.hit_rate > four.hit_rate + 0.05
    same = queueing.simulate(w, "sglang", router_replicas=1, **kw)
    assert np.array_equal(same.replica, one.replica)
    with pytest.raises(ValueError, match="router_replicas"):
        queueing.simulate(w, "sglang", router_replicas=0, **kw)


def test_pages_state_dynamo_ttl_and_sglang_lpm_fallback_as_their_code_does():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # the card's engine details live on its "going deeper" page
    card = "".join((root / "book" / f).read_text() for f in ("p08-card.md", "p08-deeper.md"))
    assert "the same stale view as SGLang's" not in card
    assert "dynamo_router_config" in card and "sglang_schedule_policy" in card
    nb = json.loads((root / "notebooks" / "p08-02-block-hashes-and-radix-tree.ipynb").read_text())
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "falls back to arrival order" not in text and "sglang_schedule_policy" in text
    bib = (root / "book" / "references.bib").read_text()
    assert "sglang_pr14650" in bib
    for page in [card, text]:
        assert "sglang_pr14532" not in page  # closed without merging: cite what was merged
