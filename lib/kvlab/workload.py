"""The routing demo's chat workload (see spec/demo.md), materialisable as token ids.

A fleet of ``conversations`` chats shares ``system_prompts`` system prompts of ``system_tokens``
tokens (conversation c uses prompt c mod system_prompts). Each request picks a conversation with
Zipf probability proportional to 1 / (c + 1)**skew. Turn t of a chat has a history of
``history_start + t * history_step`` tokens; the prompt is system prompt + history + ``new_tokens``
new user tokens, and the model answers ``output_tokens`` tokens. The previous prompt plus its answer
is a prefix of the next prompt of the same chat. After the turn whose history reaches
``history_max`` the conversation starts over as a new chat ("generation" + 1) that shares nothing
with the old one but the system prompt.

Token ids are drawn from a stable 64-bit mix of (seed, content stream, position), reduced to
[0, 2**31): every request can be replayed through any cache implementation, including a
brute-force one. The simulator itself only needs the per-request arrays (``conversation``,
``generation``, ``history_tokens``, ``prompt_tokens`` ...) and :meth:`ChatWorkload.paths`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np

from ._validate import check_int, check_number

__all__ = ["ChatPrompt", "ChatWorkload", "Paths", "ShapedChats", "stream_ids"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _stream_key(*parts) -> int:
    """A stable 64-bit key for a content stream (blake2b of its description)."""
    text = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def stream_ids(key: int, start: int, stop: int) -> np.ndarray:
    """Token ids at positions [start, stop) of the content stream ``key`` (splitmix64, < 2**31)."""
    with np.errstate(over="ignore"):
        x = np.uint64(key) + np.arange(start, stop, dtype=np.uint64) * _GOLD
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(33)).astype(np.int64)


@dataclass(frozen=True)
class Paths:
    """A request stream as cache paths, the simulator's input.

    Request i touches the entries ``keys[offsets[i]:offsets[i+1]]`` in path order; entry j holds
    ``blocks[j]`` full blocks of prompt + answer. An entry is a run of blocks that is always touched
    whole (a system prompt, a chat, a trace block): equal keys mean equal content and equal prefix.
    ``max_hit_blocks[i]`` = (prompt_tokens - 1) // block_size: the last prompt token is always
    computed. ``kind`` is "chat" (two entries per request: system prompt, chat) or "general".
    """

    block_size: int
    offsets: np.ndarray
    keys: np.ndarray
    blocks: np.ndarray
    max_hit_blocks: np.ndarray
    kind: str = "general"


@dataclass(frozen=True)
class ChatPrompt:
    """The shape of a chat's prompts, one definition for :class:`ChatWorkload` and
    :class:`kvlab.queueing.ChatSessions`.

    ``system_prompts`` system prompts of ``system_tokens`` tokens (a chat uses one, shared with
    every chat on it); turn t has a history of ``history_start + t * history_step`` tokens, then
    ``new_tokens`` new user tokens, and the model answers ``output_tokens`` tokens. The history
    grows by at least the previous turn's new message and answer (``history_step >= new_tokens +
    output_tokens``); the turn whose history reaches ``history_max`` is a chat's last.
    """

    system_prompts: int = 4
    system_tokens: int = 2000
    history_start: int = 500
    history_step: int = 500
    history_max: int = 20_000
    new_tokens: int = 300
    output_tokens: int = 200

    def __post_init__(self):
        def put(name: str, value: int) -> None:
            object.__setattr__(self, name, value)

        put("system_prompts", check_int("system_prompts", self.system_prompts, lo=1, hi=1_000_000))
        put("system_tokens", check_int("system_tokens", self.system_tokens, lo=0, hi=10_000_000))
        put("history_start", check_int("history_start", self.history_start, lo=0, hi=10_000_000))
        put("new_tokens", check_int("new_tokens", self.new_tokens, lo=1, hi=10_000_000))
        put("output_tokens", check_int("output_tokens", self.output_tokens, lo=0, hi=10_000_000))
        step = check_int(
            "history_step",
            self.history_step,
            lo=self.new_tokens + self.output_tokens,
            hi=10_000_000,
        )  # the next history holds the previous new message and answer
        put("history_step", step)
        put(
            "history_max",
            check_int("history_max", self.history_max, lo=self.history_start, hi=1_000_000_000),
        )

    @classmethod
    def of(cls, prompt: ChatPrompt | None, shape: dict) -> ChatPrompt:
        """``prompt``, or one built from the keyword arguments ``shape`` (a workload's ``**shape``):
        not both; unknown names are a ValueError naming the allowed ones."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(shape) - set(names))
        if unknown:
            raise ValueError(f"unknown prompt-shape argument(s) {unknown}: allowed are {names}")
        if prompt is None:
            return cls(**shape)
        if not isinstance(prompt, ChatPrompt):
            raise ValueError(f"prompt must be a ChatPrompt or None, got {prompt!r}")
        if shape:
            raise ValueError(f"give prompt or the prompt-shape arguments {sorted(shape)}, not both")
        return prompt

    @property
    def turns_per_chat(self) -> int:
        """Turns of a chat: the turn whose history reaches ``history_max`` is the last one."""
        return -(-(self.history_max - self.history_start) // self.history_step) + 1

    def history_tokens(self, turn: np.ndarray) -> np.ndarray:
        """History tokens of each turn (0 for a chat's first request)."""
        return self.history_start + turn * self.history_step

    def prompt_tokens(self, history_tokens: np.ndarray) -> np.ndarray:
        """Prompt tokens of turns with these histories: system prompt + history + new message."""
        return self.system_tokens + history_tokens + self.new_tokens


class ShapedChats:
    """A chat workload whose prompts a :class:`ChatPrompt` shapes (``shape``): its figures read as
    the workload's attributes (``output_tokens_per_turn`` for the shape's ``output_tokens``, since
    the workload's ``output_tokens`` is the per-request array)."""

    shape: ChatPrompt

    @property
    def system_prompts(self) -> int:
        return self.shape.system_prompts

    @property
    def system_tokens(self) -> int:
        return self.shape.system_tokens

    @property
    def history_start(self) -> int:
        return self.shape.history_start

    @property
    def history_step(self) -> int:
        return self.shape.history_step

    @property
    def history_max(self) -> int:
        return self.shape.history_max

    @property
    def new_tokens(self) -> int:
        return self.shape.new_tokens

    @property
    def output_tokens_per_turn(self) -> int:
        return self.shape.output_tokens

    @property
    def turns_per_chat(self) -> int:
        return self.shape.turns_per_chat


class _ChatArrays(Protocol):
    """What :class:`ChatWorkload`'s ``_check_index``, ``tokens`` and ``paths`` read, so that
    :class:`kvlab.queueing.ChatSessions`, which has the same attributes, can borrow them."""

    @property
    def requests(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def system_prompts(self) -> int: ...
    @property
    def system_tokens(self) -> int: ...
    @property
    def new_tokens(self) -> int: ...
    @property
    def output_tokens_per_turn(self) -> int: ...
    @property
    def conversation(self) -> np.ndarray: ...
    @property
    def generation(self) -> np.ndarray: ...
    @property
    def system_prompt(self) -> np.ndarray: ...
    @property
    def history_tokens(self) -> np.ndarray: ...
    @property
    def prompt_tokens(self) -> np.ndarray: ...
    @property
    def output_tokens(self) -> np.ndarray: ...
    @property
    def chat_id(self) -> np.ndarray: ...
    def _check_index(self, i) -> int: ...


class ChatWorkload(ShapedChats):
    """The demo's chat traffic: ``len(w)`` requests, ``w.tokens(i)`` -> (prompt_ids, output_ids).

    Per-request arrays (numpy, length ``len(w)``): ``conversation``, ``generation`` (how many times
    the conversation started over before this request), ``turn`` (0 at a chat's first request),
    ``system_prompt``, ``history_tokens``, ``prompt_tokens``, ``output_tokens``. The prompts'
    shape is a :class:`ChatPrompt`: give ``prompt=`` or its fields as keywords
    (``system_tokens=...``); ``w.shape`` holds it and its figures are attributes of ``w``.
    """

    def __init__(
        self,
        conversations: int = 500,
        skew: float = 1.0,
        requests: int = 20_000,
        seed: int = 0,
        prompt: ChatPrompt | None = None,
        **shape: int,
    ):
        self.conversations = check_int("conversations", conversations, lo=1, hi=10_000_000)
        self.skew = check_number("skew", skew, lo=0, hi=10)
        self.requests = check_int("requests", requests, lo=1, hi=100_000_000)
        self.seed = check_int("seed", seed, lo=0)
        self.shape = shape_ = ChatPrompt.of(prompt, shape)

        rng = np.random.default_rng(self.seed)
        weights = 1.0 / np.arange(1, self.conversations + 1, dtype=float) ** self.skew
        conv = rng.choice(self.conversations, size=self.requests, p=weights / weights.sum())
        # k-th visit of each conversation (0-based), vectorised
        order = np.argsort(conv, kind="stable")
        sorted_conv = conv[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_conv)) + 1]
        group_start = np.repeat(starts, np.diff(np.r_[starts, len(conv)]))
        visit = np.empty(len(conv), dtype=np.int64)
        visit[order] = np.arange(len(conv)) - group_start

        self.conversation = conv.astype(np.int64)
        self.generation = visit // self.turns_per_chat
        self.turn = visit % self.turns_per_chat
        self.system_prompt = self.conversation % self.system_prompts
        self.history_tokens = shape_.history_tokens(self.turn)
        self.prompt_tokens = shape_.prompt_tokens(self.history_tokens)
        self.output_tokens = np.full(self.requests, self.output_tokens_per_turn, dtype=np.int64)
        #: a dense id per chat (conversation, generation), used as its cache-entry key
        self.chat_id = self.conversation + self.conversations * self.generation

    def __len__(self) -> int:
        return self.requests

    def __repr__(self) -> str:
        return (
            f"ChatWorkload(conversations={self.conversations}, skew={self.skew:g}, "
            f"requests={self.requests}, seed={self.seed})"
        )

    @property
    def key(self) -> np.ndarray:
        """The routing key of each request (its conversation id)."""
        return self.conversation

    def _check_index(self: _ChatArrays, i) -> int:
        return check_int("i", i, lo=0, hi=self.requests - 1)

    def tokens(self: _ChatArrays, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of request ``i``: (prompt_ids, output_ids), 1-D int64 arrays."""
        i = self._check_index(i)
        c, g = int(self.conversation[i]), int(self.generation[i])
        sys_ids = stream_ids(
            _stream_key(self.seed, "system", int(self.system_prompt[i])), 0, self.system_tokens
        )
        chat = _stream_key(self.seed, "chat", c, g)
        n_hist = int(self.history_tokens[i]) + self.new_tokens
        prompt = np.concatenate([sys_ids, stream_ids(chat, 0, n_hist)])
        output = stream_ids(chat, n_hist, n_hist + self.output_tokens_per_turn)
        return prompt, output

    def paths(self: _ChatArrays, block_size: int = 16) -> Paths:
        """Each request as two cache entries: its system prompt (the S // block_size blocks shared
        by every chat on that prompt) and its chat (all later full blocks of prompt + answer)."""
        bs = check_int("block_size", block_size, lo=1, hi=1_000_000)
        n = self.requests
        sys_blocks = self.system_tokens // bs
        total = (self.prompt_tokens + self.output_tokens) // bs
        keys = np.empty(2 * n, dtype=np.int64)
        blocks = np.empty(2 * n, dtype=np.int64)
        keys[0::2] = self.system_prompt
        keys[1::2] = self.system_prompts + self.chat_id
        blocks[0::2] = sys_blocks
        blocks[1::2] = total - sys_blocks
        return Paths(
            bs,
            np.arange(0, 2 * n + 1, 2),
            keys,
            blocks,
            (self.prompt_tokens - 1) // bs,
            kind="chat",
        )
