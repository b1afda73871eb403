"""One definition of a chat's prompt shape (kvlab.workload.ChatPrompt) for the untimed chat
workload and the timed chat sessions."""

from __future__ import annotations

import numpy as np
import pytest

from kvlab import queueing, workload
from kvlab.workload import ChatPrompt

SHAPE = dict(
    system_prompts=2,
    system_tokens=40,
    history_start=0,
    history_step=800,
    history_max=3_000,
    new_tokens=100,
    output_tokens=50,
)


def test_both_workloads_take_the_same_shape():
    p = ChatPrompt(**SHAPE)
    w = workload.ChatWorkload(conversations=20, requests=400, seed=1, prompt=p)
    s = queueing.ChatSessions(requests=400, seed=1, prompt=p)
    assert w.shape is p and s.shape is p
    for x in (w, s):
        assert x.system_tokens == 40 and x.output_tokens_per_turn == 50
        assert x.turns_per_chat == p.turns_per_chat == 5  # histories 0, 800, ..., 3,200
        np.testing.assert_array_equal(x.history_tokens, 800 * x.turn)
        np.testing.assert_array_equal(x.prompt_tokens, 40 + 800 * x.turn + 100)
        assert x.turn.max() < p.turns_per_chat


def test_keywords_and_prompt_give_the_same_workload():
    a = workload.ChatWorkload(requests=500, seed=2, **SHAPE)
    b = workload.ChatWorkload(requests=500, seed=2, prompt=ChatPrompt(**SHAPE))
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_array_equal(a.paths(16).keys, b.paths(16).keys)
    c = queueing.ChatSessions(requests=500, seed=2, **SHAPE)
    d = queueing.ChatSessions(requests=500, seed=2, prompt=ChatPrompt(**SHAPE))
    np.testing.assert_array_equal(c.prompt_tokens, d.prompt_tokens)
    np.testing.assert_array_equal(c.think_s, d.think_s)


def test_defaults_are_the_book_chat():
    assert workload.ChatWorkload(requests=10).shape == ChatPrompt()
    assert queueing.ChatSessions(requests=10).shape == ChatPrompt()
    assert ChatPrompt().turns_per_chat == 40


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(history_step=10), "history_step"),
        (dict(new_tokens=0), "new_tokens"),
        (dict(history_max=1), "history_max"),
        (dict(system_prompts=0), "system_prompts"),
        (dict(output_tokens=-1), "output_tokens"),
    ],
)
def test_a_bad_shape_names_its_parameter(kw, name):
    for make in (ChatPrompt, workload.ChatWorkload, queueing.ChatSessions):
        with pytest.raises(ValueError, match=name):
            make(**kw)


def test_unknown_or_doubled_shape_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown prompt-shape"):
        workload.ChatWorkload(system_token=40)
    with pytest.raises(ValueError, match="not both"):
        queueing.ChatSessions(prompt=ChatPrompt(), new_tokens=10)
    with pytest.raises(ValueError, match="ChatPrompt"):
        workload.ChatWorkload(prompt=dict(SHAPE))  # type: ignore[arg-type]


def test_the_shape_is_frozen():
    p = ChatPrompt()
    with pytest.raises(AttributeError):
        p.new_tokens = 5  # type: ignore[misc]
