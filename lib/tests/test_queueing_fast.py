"""The compiled loop of the timed simulator (kvlab.queueing.kernel) against the kept reference
loop (kvlab.queueing.reference): random workloads, policies, cache sizes, chunking and calibrations
must give the same requests: the same replica and hit for each, times equal to 1e-9 s, the same
busy time per replica, the same mean number in the system, the routers left in the same state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import queueing, routing, workload
from kvlab.queueing import fast, reference
from kvlab.workload import Paths

SETTINGS = settings(
    max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
TOL = 1e-9


def assert_same(a: queueing.QueueResult, b: queueing.QueueResult) -> None:
    for name in ("prompt_tokens", "output_tokens", "hit_tokens", "replica"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("arrival_s", "start_s", "first_token_s", "finish_s"):
        x, y = getattr(a, name), getattr(b, name)
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=name)
        np.testing.assert_allclose(x, y, rtol=0, atol=TOL, err_msg=name)
    for name in ("busy_s", "prefill_busy_s", "online_s"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=TOL)
    assert abs(a.mean_in_system - b.mean_in_system) <= TOL
    assert abs(a.end_s - b.end_s) <= TOL
    assert (a.replicas, a.warmup, a.count_until, a.retried) == (
        b.replicas,
        b.warmup,
        b.count_until,
        b.retried,
    )
    if a.predecessor is not None:
        np.testing.assert_array_equal(a.predecessor, b.predecessor)
    ra, rb = a.params["router"], b.params["router"]
    if isinstance(ra, routing.SGLangRouter):
        assert ra.branches == rb.branches
    if isinstance(ra, (routing.DynamoRouter, routing.RandomRouter)):  # the same draws were used
        assert ra.rng.integers(1 << 40) == rb.rng.integers(1 << 40)


class FakeStream:
    """Open-loop requests given directly as cache paths (any keys, block counts, repeats, empty
    and shrinking entries), so the loop meets inputs no real workload makes."""

    def __init__(self, paths: Paths, prompt, output, key):
        self._paths = paths
        self.prompt_tokens = np.asarray(prompt, dtype=np.int64)
        self.output_tokens = np.asarray(output, dtype=np.int64)
        self.key = np.asarray(key, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def paths(self, block_size: int = 16) -> Paths:
        return self._paths


@st.composite
def fake_streams(draw):
    n = draw(st.integers(1, 60))
    bs = 4
    offsets, keys, blocks, mh, prompt = [0], [], [], [], []
    for _ in range(n):
        depth = draw(st.integers(0, 4))
        ks = draw(st.lists(st.integers(0, 12), min_size=depth, max_size=depth))
        nbs = draw(st.lists(st.integers(0, 30), min_size=depth, max_size=depth))
        p = draw(st.integers(1, 200))
        keys += ks
        blocks += nbs
        offsets.append(len(keys))
        mh.append(draw(st.integers(0, (p - 1) // bs)))
        prompt.append(p)
    paths = Paths(
        bs,
        np.array(offsets, dtype=np.int64),
        np.array(keys, dtype=np.int64),
        np.array(blocks, dtype=np.int64),
        np.array(mh, dtype=np.int64),
    )
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    key = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    return FakeStream(paths, prompt, output, key), {"rate_rps": draw(st.sampled_from([2.0, 50.0]))}


sessions = st.builds(
    lambda n, seed, think, turns, rate: (
        queueing.ChatSessions(requests=n, seed=seed, think_s=think, mean_turns=turns),
        {"rate_rps": rate},
    ),
    st.integers(1, 400),
    st.integers(0, 20),
    st.sampled_from([0.0, 2.0, 10.0]),
    st.sampled_from([1.0, 6.0]),
    st.sampled_from([5.0, 20.0, 60.0]),
)
open_chats = st.builds(
    lambda n, seed, rate: (workload.ChatWorkload(requests=n, seed=seed), {"rate_rps": rate}),
    st.integers(1, 300),
    st.integers(0, 20),
    st.sampled_from([5.0, 40.0]),
)
independent = st.builds(
    lambda n, seed, out, rate: (
        queueing.IndependentRequests(requests=n, seed=seed, output_tokens=out),
        {"rate_rps": rate},
    ),
    st.integers(1, 200),
    st.integers(0, 20),
    st.sampled_from([1, 30]),
    st.sampled_from([1.0, 10.0]),
)
runs = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(routing.ALL_POLICIES),
        "replicas": st.integers(1, 6),
        "cache_tokens": st.sampled_from([None, 0, 64, 1_000, 20_000, 400_000]),
        "chunk_tokens": st.sampled_from([None, None, 1, 16, 512]),
        "max_batch": st.sampled_from([1, 3, 256]),
        "prefill_only": st.booleans(),
        "cost": st.sampled_from(["book", "measured"]),
        "seed": st.integers(0, 30),
        "view": st.sampled_from([None, "stale", "exact"]),
        "load": st.sampled_from(["outstanding", "cumulative"]),
        "epsilon": st.sampled_from([0.0, 0.05, 0.5]),
        "lam": st.sampled_from([0.0, 0.0, 0.001]),
        "guard_slack_tokens": st.sampled_from([0.0, 500.0]),
        "sticky": st.sampled_from(["modulo", "ring"]),
        "vnodes": st.sampled_from([1, 20]),
        "record_tokens": st.sampled_from([None, 200, 5_000]),
        "load_factor": st.sampled_from([1.0, 1.25, 3.0]),
        "cache_threshold": st.sampled_from([0.0, 0.3, 1.0]),
        "balance_abs": st.sampled_from([0, 2, 64]),
        "balance_rel": st.sampled_from([1.0, 1.5]),
        "overlap_weight": st.sampled_from([0.0, 1.0, 2.5]),
        "router_replicas": st.sampled_from([1, 1, 2, 3]),
    }
)


@SETTINGS
@given(traffic=st.one_of(sessions, open_chats, independent, fake_streams()), kw=runs)
def test_compiled_loop_matches_reference(traffic, kw):
    w, arrivals = traffic
    bs = w.paths().block_size if isinstance(w, FakeStream) else 16
    args = dict(kw, block_size=bs, paths=w.paths(bs), **arrivals)
    assert fast.covers(None, None)
    assert_same(queueing.simulate(w, **args), queueing.simulate(w, _reference=True, **args))


@pytest.mark.parametrize("name", list(queueing.ROUTERS))
def test_problem_8_comparison_matches_reference(name):
    """p08-07's runs (closed-loop chats at 20 requests/s, 8 replicas), both calibrations, a roomy
    and a tight cache."""
    w = queueing.ChatSessions(requests=1_500, seed=3)
    paths = w.paths(16)
    for cost, cache in (("book", 400_000), ("measured", 50_000)):
        kw = dict(queueing.ROUTERS[name], rate_rps=20.0, seed=3, warmup_s=30.0, paths=paths)
        kw.update(cost=cost, cache_tokens=cache)
        assert_same(queueing.simulate(w, **kw), queueing.simulate(w, _reference=True, **kw))


def test_simulate_takes_the_compiled_loop_when_it_covers_the_run(monkeypatch):
    w = queueing.ChatSessions(requests=300, seed=1)
    calls = []
    real = reference.run

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(reference, "run", spy)
    queueing.simulate(w, "dynamo", rate_rps=20.0)
    queueing.simulate(w, "sglang", rate_rps=20.0, router_replicas=3)
    assert not calls  # the compiled loop served them
    for kw in (dict(add_replica_at_s=5.0), dict(fail_replica_at_s=5.0)):
        queueing.simulate(w, "cache_aware", rate_rps=20.0, **kw)
    assert len(calls) == 2  # a join, a failure: the reference
    big = Paths(
        4,
        np.array([0, 1, 2]),
        np.array([1, 2**63 + 5], dtype=np.uint64),
        np.ones(2, np.int64),
        np.zeros(2, np.int64),
    )
    queueing.simulate(FakeStream(big, [5, 5], [2, 2], [0, 1]), "sglang", rate_rps=1.0)
    assert len(calls) == 3  # keys beyond int64: the reference
    monkeypatch.setattr(fast, "MAX_SLOTS", 0)  # dense arrays too big: the reference
    queueing.simulate(w, "sticky", rate_rps=20.0)
    assert len(calls) == 4


def test_the_check_can_fail():
    """assert_same tells apart runs that differ in one request's time (by 1e-8 s) or replica."""
    w = queueing.ChatSessions(requests=300, seed=2)
    a = queueing.simulate(w, "cache_aware", rate_rps=20.0)
    assert_same(a, queueing.simulate(w, "cache_aware", rate_rps=20.0))
    late = a.finish_s.copy()
    late[7] += 1e-8
    moved = a.replica.copy()
    moved[7] = (moved[7] + 1) % a.replicas
    for change in (dict(finish_s=late), dict(replica=moved)):
        with pytest.raises(AssertionError):
            assert_same(dataclasses.replace(a, **change), a)
