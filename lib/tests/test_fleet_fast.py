"""The compiled fleet kernels against the kept reference loops (kvlab.fleet_reference): random
workloads, policies and cache sizes must give identical results, field by field."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import explorer, fleet, routing, workload
from kvlab.workload import Paths

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def assert_same(a: fleet.FleetResult, b: fleet.FleetResult) -> None:
    """Every field equal: arrays element by element, floats exactly (same integer inputs)."""
    assert type(a) is type(b)
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name


class FakeStream:
    """A request stream given directly as cache paths (any keys, any block counts), so the
    kernels meet inputs no real workload makes: shrinking entries, empty entries, repeats."""

    def __init__(self, paths: Paths, prompt, key, conversation=None, generation=None, sp=0):
        self._paths = paths
        self.prompt_tokens = np.asarray(prompt, dtype=np.int64)
        self.key = np.asarray(key, dtype=np.int64)
        self.conversation = conversation
        self.generation = generation
        self.system_prompts = sp

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def paths(self, block_size: int = 16) -> Paths:
        return self._paths


policy_kw = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(routing.POLICIES),
        "replicas": st.integers(1, 6),
        "cache_tokens": st.one_of(st.none(), st.integers(0, 3_000)),
        "epsilon": st.sampled_from([0.0, 0.05, 0.5]),
        "lam": st.sampled_from([0.0, 0.0, 0.01, 1.0]),
        "view": st.sampled_from(["stale", "exact"]),
        "sticky": st.sampled_from(["modulo", "ring"]),
        "seed": st.integers(0, 5),
    }
)


@st.composite
def general_streams(draw):
    bs = draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(2, 40))
    big = draw(st.booleans())  # keys far above the request count: the renumbering path
    pool = draw(st.integers(1, 12))
    offsets, keys, blocks, prompt = [0], [], [], []
    for _ in range(n):
        k = draw(st.integers(1, 4))
        ks = draw(st.lists(st.integers(0, pool - 1), min_size=k, max_size=k))
        nb = draw(st.lists(st.integers(0, 6), min_size=k, max_size=k))
        keys += [(x * 7919 + (1 << 40)) if big else x for x in ks]
        blocks += nb
        offsets.append(len(keys))
        prompt.append(draw(st.integers(1, bs * (sum(nb) + 1))))
    prompt_a = np.array(prompt, dtype=np.int64)
    paths = Paths(
        bs,
        np.array(offsets, dtype=np.int64),
        np.array(keys, dtype=np.int64),
        np.array(blocks, dtype=np.int64),
        (prompt_a - 1) // bs,
        kind="general",
    )
    key = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    return FakeStream(paths, prompt_a, key), bs


@st.composite
def chat_streams(draw):
    bs = draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(2, 40))
    sp = draw(st.integers(1, 3))
    conv = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype=np.int64)
    gen = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    ns = draw(st.integers(0, 4))
    nc = np.array(draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)), dtype=np.int64)
    keys = np.empty(2 * n, dtype=np.int64)
    keys[0::2] = conv % sp
    keys[1::2] = sp + conv + 6 * gen
    blocks = np.empty(2 * n, dtype=np.int64)
    blocks[0::2] = ns
    blocks[1::2] = nc
    prompt = np.array([draw(st.integers(1, bs * (ns + int(c) + 1))) for c in nc], dtype=np.int64)
    paths = Paths(bs, np.arange(0, 2 * n + 1, 2), keys, blocks, (prompt - 1) // bs, kind="chat")
    return FakeStream(paths, prompt, conv, conv, gen, sp), bs


def run_both(w, bs, kw, **extra):
    kw = {**kw, **extra, "block_size": bs, "warmup": 0}
    return fleet.simulate(w, **kw), fleet.simulate(w, _reference=True, **kw)


@SETTINGS
@given(general_streams(), policy_kw)
def test_general_kernel_equals_reference(stream, kw):
    w, bs = stream
    assert_same(*run_both(w, bs, kw))


@SETTINGS
@given(chat_streams(), policy_kw, st.sampled_from(["prefix", "per_conversation"]))
def test_chat_kernel_equals_reference_on_any_paths(stream, kw, model):
    w, bs = stream
    assert_same(*run_both(w, bs, kw, cache_model=model))


chat_kw = st.fixed_dictionaries(
    {
        "conversations": st.integers(1, 30),
        "skew": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        "requests": st.integers(2, 300),
        "seed": st.integers(0, 3),
        "system_prompts": st.integers(1, 3),
        "system_tokens": st.sampled_from([0, 10, 40, 64]),
        "history_start": st.sampled_from([0, 20, 50]),
        "history_step": st.sampled_from([60, 100]),
        "history_max": st.sampled_from([100, 300, 600]),
        "new_tokens": st.sampled_from([1, 30]),
        "output_tokens": st.sampled_from([0, 13]),
    }
)


@SETTINGS
@given(chat_kw, policy_kw, st.sampled_from(["prefix", "per_conversation"]), st.integers(0, 5))
def test_chat_workloads_equal_reference(wkw, kw, model, warm):
    w = workload.ChatWorkload(**wkw)
    warm = min(warm, len(w) - 1)
    kw = {**kw, "cache_model": model, "warmup": warm}
    assert_same(fleet.simulate(w, **kw), fleet.simulate(w, _reference=True, **kw))


def test_too_many_slots_falls_back_to_the_reference(monkeypatch):
    w = workload.ChatWorkload(conversations=20, requests=200, system_tokens=40)
    want = fleet.simulate(w, _reference=True, replicas=4, cache_tokens=2_000, warmup=10)
    monkeypatch.setattr(fleet, "MAX_SLOTS", 0)
    assert_same(fleet.simulate(w, replicas=4, cache_tokens=2_000, warmup=10), want)


def test_explorer_default_setting_equals_reference():
    """The routing explorer's default point, every policy, as the grid computes it."""
    d = explorer.DEFAULTS
    w = workload.ChatWorkload(
        conversations=d["conversations"], skew=d["skew"], requests=explorer.REQUESTS, seed=0
    )
    paths = w.paths(16)
    kw = dict(replicas=d["replicas"], cache_tokens=d["cache_tokens"], warmup=explorer.WARMUP)
    fast = fleet.simulate_all(w, paths=paths, **kw)
    for p in routing.POLICIES:
        ref = fleet.simulate(w, _reference=True, policy=p, paths=paths, **kw)
        assert_same(fast[p], ref)
    assert fast["cache_aware"].hit_rate > fast["random"].hit_rate  # the demo's point stands


@pytest.mark.parametrize("policy", routing.POLICIES)
def test_trace_equals_reference(policy):
    from kvlab import traces

    t = traces.load_mooncake(limit=1_500)
    kw = dict(policy=policy, replicas=4, cache_tokens=200_000, warmup=100)
    assert_same(fleet.simulate(t, **kw), fleet.simulate(t, _reference=True, **kw))
