"""Closed-loop chat sessions in the timed simulator: no turn before its predecessor's answer, the
think time exactly, the offered rate, and the open-loop contrast that motivates it."""

import numpy as np
import pytest

from kvlab import queueing, routing, workload


@pytest.fixture(scope="module")
def sessions():
    return queueing.ChatSessions(requests=3_000, seed=3)


def test_sessions_shape(sessions):
    w = sessions
    assert len(w) == 3_000 and w.sessions == len(w.first_request)
    assert w.turn[w.first_request].tolist() == [0] * w.sessions
    assert np.all(w.predecessor[w.turn == 0] == -1)
    follow = np.flatnonzero(w.turn > 0)
    assert np.all(w.conversation[w.predecessor[follow]] == w.conversation[follow])
    assert np.all(w.turn[w.predecessor[follow]] == w.turn[follow] - 1)
    assert np.all(w.think_s[w.turn == 0] == 0)
    # geometric turns (capped at the chat's length) and exponential think times, as documented
    assert w.turns_per_session == pytest.approx(6.0, rel=0.1)
    assert w.think_s[follow].mean() == pytest.approx(10.0, rel=0.1)
    assert w.session_turns.max() <= w.turns_per_chat
    # each prompt holds the previous prompt and its answer (a valid prefix)
    for i in follow[:20]:
        p, o = w.tokens(int(w.predecessor[i]))
        nxt, _ = w.tokens(int(i))
        prev = np.concatenate([p, o])
        np.testing.assert_array_equal(nxt[: len(prev)], prev)


@pytest.mark.parametrize("policy", routing.ALL_POLICIES)
@pytest.mark.parametrize("chunk", [None, 512])
def test_no_turn_before_its_predecessor_finishes(sessions, policy, chunk):
    res = queueing.simulate(sessions, policy, 4, 12.0, chunk_tokens=chunk, seed=1)
    pred = res.predecessor
    has = pred >= 0
    assert has.sum() == (sessions.turn > 0).sum()
    # the next turn arrives exactly a think time after the previous answer's last token
    gap = res.arrival_s[has] - res.finish_s[pred[has]]
    assert np.all(gap >= 0)
    order = np.argsort(res.arrival_s, kind="stable")
    assert np.all(np.diff(res.arrival_s[order]) >= 0)
    assert np.all(np.isfinite(res.finish_s)) and np.all(res.first_token_s < res.finish_s)
    think = np.sort(gap)
    np.testing.assert_allclose(think, np.sort(sessions.think_s[sessions.turn > 0]), atol=1e-6)


def test_offered_rate_is_met_at_light_load():
    w = queueing.ChatSessions(requests=6_000, seed=0)
    res = queueing.simulate(w, "sticky", 8, 10.0, seed=0, warmup_s=150.0)
    c = res.counted
    t = res.arrival_s[c]
    assert (len(t) - 1) / (t[-1] - t[0]) == pytest.approx(10.0, rel=0.12)


def test_open_loop_chat_breaks_causality_closed_loop_does_not():
    """The open-loop ChatWorkload sends many turns before the previous answer exists (why the
    closed loop is the default); the check above would fail on it."""
    w = workload.ChatWorkload(requests=3_000, seed=0)
    res = queueing.simulate(w, "sticky", 8, 20.0, seed=0)
    prev = {}
    early = follow = 0
    for i in range(len(w)):
        c, t = int(w.conversation[i]), int(w.turn[i])
        if t > 0 and c in prev:
            follow += 1
            early += res.arrival_s[i] < res.finish_s[prev[c]]
        prev[c] = i
    assert early / follow > 0.3


def test_statistics_window_and_validation(sessions):
    res = queueing.simulate(sessions, "random", 4, 12.0, warmup_s=60.0)
    assert res.count_until is not None and res.warmup < res.count_until < len(sessions)
    assert res.arrival_s[res.warmup] >= 60.0 > res.arrival_s[res.warmup - 1]
    with pytest.raises(ValueError, match="rate_rps"):
        queueing.simulate(sessions, "random", 4)
    with pytest.raises(ValueError, match="arrival_s"):
        queueing.simulate(sessions, "random", 4, arrival_s=np.arange(3_000.0))
    with pytest.raises(ValueError, match="warmup"):
        queueing.simulate(sessions, "random", 4, 12.0, warmup=2_999)
    for kw, name in ((dict(mean_turns=0.5), "mean_turns"), (dict(think_s=-1.0), "think_s")):
        with pytest.raises(ValueError, match=name):
            queueing.ChatSessions(requests=10, **kw)


def test_compare_over_seeds_orders_the_routers():
    res = queueing.compare(
        {k: queueing.ROUTERS[k] for k in ("random", "sticky")},
        requests=2_000,
        warmup_s=50.0,
        seeds=(0, 1),
    )
    assert res["sticky"]["hit_rate"].mean > res["random"]["hit_rate"].mean + 0.1
    assert res["sticky"]["hit_rate"].n == 2
