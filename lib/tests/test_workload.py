"""The demo's chat workload."""

import numpy as np
import pytest

from kvlab import workload


@pytest.fixture(scope="module")
def w():
    return workload.ChatWorkload(conversations=50, requests=3_000, seed=1)


def test_defaults_and_shapes():
    d = workload.ChatWorkload()
    assert len(d) == 20_000 and d.turns_per_chat == 40
    for a in (d.conversation, d.generation, d.turn, d.history_tokens, d.prompt_tokens):
        assert a.shape == (20_000,) and a.dtype.kind == "i"
    assert d.prompt_tokens.min() == 2000 + 500 + 300
    assert d.prompt_tokens.max() <= 2000 + 20_000 + 300
    assert abs((d.conversation == 0).mean() - 1 / np.sum(1 / np.arange(1, 501))) < 0.01


def test_deterministic_and_seeded():
    a, b = workload.ChatWorkload(seed=4, requests=500), workload.ChatWorkload(seed=4, requests=500)
    assert np.array_equal(a.conversation, b.conversation)
    assert np.array_equal(a.tokens(7)[0], b.tokens(7)[0])
    c = workload.ChatWorkload(seed=5, requests=500)
    assert not np.array_equal(a.conversation, c.conversation)


def test_turns_and_restarts(w):
    for c in (0, 1, 7):
        idx = np.flatnonzero(w.conversation == c)
        h = w.history_tokens[idx]
        assert h[0] == 500
        steps = np.diff(h)
        # +500 each turn, back to 500 after the turn that reached 20,000
        assert set(steps[h[:-1] < 20_000]) <= {500}
        assert np.all(h[1:][h[:-1] == 20_000] == 500)
        assert np.all(np.diff(w.generation[idx]) >= 0)


def test_previous_prompt_and_answer_is_prefix_of_next(w):
    for c in (0, 3):
        idx = np.flatnonzero(w.conversation == c)[:45]
        for a, b in zip(idx[:-1], idx[1:], strict=True):
            pa, oa = w.tokens(a)
            pb, _ = w.tokens(b)
            prev = np.concatenate([pa, oa])
            if w.generation[b] == w.generation[a]:
                assert np.array_equal(pb[: len(prev)], prev)
            else:  # a new chat shares only the system prompt
                assert np.array_equal(pb[:2000], pa[:2000])
                assert not np.array_equal(pb[2000:2016], pa[2000:2016])


def test_tokens_lengths_and_system_prompt_sharing(w):
    for i in range(0, 3_000, 397):
        p, o = w.tokens(i)
        assert p.ndim == o.ndim == 1 and p.dtype.kind == "i"
        assert len(p) == w.prompt_tokens[i] and len(o) == 200
    i, j = [int(k) for k in np.flatnonzero(w.conversation % 4 == 2)[:2]]
    k = int(np.flatnonzero(w.conversation % 4 == 1)[0])
    assert np.array_equal(w.tokens(i)[0][:2000], w.tokens(j)[0][:2000])
    assert not np.array_equal(w.tokens(i)[0][:16], w.tokens(k)[0][:16])


def test_different_chats_share_nothing_beyond_the_system_prompt(w):
    a, b = (int(np.flatnonzero(w.conversation == c)[0]) for c in (0, 4))  # same system prompt
    pa, pb = w.tokens(a)[0], w.tokens(b)[0]
    assert np.array_equal(pa[:2000], pb[:2000]) and not np.array_equal(pa[2000:2016], pb[2000:2016])


def test_paths_match_token_counts(w):
    p = w.paths(16)
    assert p.kind == "chat" and len(p.offsets) == len(w) + 1
    total = p.blocks[0::2] + p.blocks[1::2]
    assert np.array_equal(total, (w.prompt_tokens + 200) // 16)
    assert np.array_equal(p.max_hit_blocks, (w.prompt_tokens - 1) // 16)


def test_skew_zero_is_uniform():
    u = workload.ChatWorkload(skew=0.0, conversations=10, requests=20_000)
    counts = np.bincount(u.conversation, minlength=10)
    assert counts.min() > 1800 and counts.max() < 2200


@pytest.mark.parametrize(
    "kw",
    [
        dict(conversations=0),
        dict(skew=-1),
        dict(requests=0),
        dict(seed=-1),
        dict(system_prompts=0),
        dict(new_tokens=0),
        dict(history_step=100),
        dict(history_max=100),
        dict(conversations=2.5),
        dict(skew="1"),
    ],
)
def test_bad_arguments(kw):
    with pytest.raises(ValueError):
        workload.ChatWorkload(**kw)


def test_bad_index(w):
    for i in (-1, 3_000, 1.5):
        with pytest.raises(ValueError, match="i must be"):
            w.tokens(i)
