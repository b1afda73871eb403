"""The timed simulator's traffic: closed-loop chat sessions (:class:`ChatSessions`), requests that
share nothing (:class:`IndependentRequests`), and the arrival times of either."""

from __future__ import annotations

import math

import numpy as np

from .._validate import check_int, check_number, non_negative, positive
from ..workload import ChatPrompt, ChatWorkload, Paths, ShapedChats


class IndependentRequests:
    """Requests that share nothing: prompt lengths lognormal with mean ``prompt_tokens`` and shape
    ``sigma`` (at least 1 token), ``output_tokens`` each. For queueing checks (M/G/1)."""

    def __init__(
        self,
        requests: int = 10_000,
        prompt_tokens: float = 2_000,
        sigma: float = 0.8,
        output_tokens: int = 1,
        seed: int = 0,
    ):
        n = check_int("requests", requests, lo=1, hi=100_000_000)
        mean = check_number("prompt_tokens", prompt_tokens, lo=1)
        sigma = non_negative("sigma", sigma)
        out = check_int("output_tokens", output_tokens, lo=1, hi=10_000_000)
        rng = np.random.default_rng(check_int("seed", seed, lo=0))
        mu = math.log(mean) - sigma**2 / 2
        self.prompt_tokens = np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)
        self.output_tokens = np.full(n, out, dtype=np.int64)
        self.conversation = np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def key(self) -> np.ndarray:
        return self.conversation

    def paths(self, block_size: int = 16) -> Paths:
        """One entry per request (its own content, never shared)."""
        bs = check_int("block_size", block_size, lo=1, hi=1_000_000)
        n = len(self)
        return Paths(
            bs,
            np.arange(n + 1),
            np.arange(n, dtype=np.int64),
            (self.prompt_tokens + self.output_tokens) // bs,
            (self.prompt_tokens - 1) // bs,
        )


class ChatSessions(ShapedChats):
    """Closed-loop chat traffic, the timed simulator's default chat workload.

    ``sessions`` users each run one chat; a chat of T turns has T geometric with mean
    ``mean_turns`` (at least 1), capped at the turns before its history reaches ``history_max``.
    Prompts are shaped by a :class:`kvlab.workload.ChatPrompt`, as
    :class:`kvlab.workload.ChatWorkload`'s (a system prompt of ``system_tokens`` shared by every
    chat on it, a history growing by ``history_step`` a turn, ``new_tokens`` new,
    ``output_tokens`` answered): give ``prompt=`` or its fields as keywords. Sessions are generated until ``requests``
    requests exist (the last one is cut short). Turn t > 0 waits a think time, exponential with
    mean ``think_s``, after the answer to turn t - 1 has finished; :func:`simulate` starts the
    sessions as a Poisson process at ``rate_rps / mean turns`` so that ``rate_rps`` requests/s are
    offered. Per-request arrays (in session, turn order): ``conversation`` (the session),
    ``turn``, ``think_s``, ``predecessor`` (the previous turn's index, -1 for a first turn),
    ``prompt_tokens``, ``output_tokens``, ... ``key`` is a random 62-bit session id (sticky
    routing hashes it).
    """

    closed_loop = True

    def __init__(
        self,
        requests: int = 6_000,
        mean_turns: float = 6.0,
        think_s: float = 10.0,
        seed: int = 0,
        prompt: ChatPrompt | None = None,
        **shape: int,
    ):
        self.requests = check_int("requests", requests, lo=1, hi=100_000_000)
        self.mean_turns = check_number("mean_turns", mean_turns, lo=1, hi=10_000)
        self.think_mean_s = non_negative("think_s", think_s)
        self.seed = check_int("seed", seed, lo=0)
        self.shape = shape_ = ChatPrompt.of(prompt, shape)

        rng = np.random.default_rng([self.seed, 5_113])
        p = 1.0 / self.mean_turns
        lengths: list[np.ndarray] = []
        total = 0
        while total < self.requests:
            t = np.minimum(rng.geometric(p, size=max(64, self.requests // 2)), self.turns_per_chat)
            lengths.append(t)
            total += int(t.sum())
        turns = np.concatenate(lengths)
        ends = np.cumsum(turns)
        k = int(np.searchsorted(ends, self.requests)) + 1
        turns = turns[:k].copy()
        turns[-1] -= int(ends[k - 1] - self.requests)
        self.sessions = k
        self.session_turns = turns
        starts = np.r_[0, np.cumsum(turns)[:-1]]
        self.first_request = starts.astype(np.int64)
        sess = np.repeat(np.arange(k, dtype=np.int64), turns)
        turn = np.arange(self.requests, dtype=np.int64) - np.repeat(starts, turns)
        self.conversation = sess
        self.generation = np.zeros(self.requests, dtype=np.int64)
        self.turn = turn
        self.predecessor = np.where(turn > 0, np.arange(self.requests) - 1, -1).astype(np.int64)
        think = rng.exponential(1.0, self.requests) * self.think_mean_s
        self.think_s = np.where(turn > 0, think, 0.0)
        self.system_prompt = sess % self.system_prompts
        self.history_tokens = shape_.history_tokens(turn)
        self.prompt_tokens = shape_.prompt_tokens(self.history_tokens)
        self.output_tokens = np.full(self.requests, self.output_tokens_per_turn, dtype=np.int64)
        self.chat_id = sess
        self.conversations = k
        self._key = rng.integers(0, 1 << 62, size=k, dtype=np.int64)[sess]

    def __len__(self) -> int:
        return self.requests

    def __repr__(self) -> str:
        return (
            f"ChatSessions(requests={self.requests}, sessions={self.sessions}, "
            f"mean_turns={self.mean_turns:g}, think_s={self.think_mean_s:g}, seed={self.seed})"
        )

    @property
    def key(self) -> np.ndarray:
        """The routing key of each request (its session's random id)."""
        return self._key

    @property
    def turns_per_session(self) -> float:
        """Requests per session in this sample (sets the session rate for an offered rate)."""
        return self.requests / self.sessions

    _check_index = ChatWorkload._check_index
    tokens = ChatWorkload.tokens
    paths = ChatWorkload.paths


def _open_arrivals(w, rate_rps, arrival_s, speedup, seed) -> np.ndarray:
    n = len(w)
    if rate_rps is not None and arrival_s is not None:
        raise ValueError("give rate_rps or arrival_s, not both")
    if rate_rps is not None:
        rate = positive("rate_rps", rate_rps)
        rng = np.random.default_rng(seed + 7_919)  # a stream apart from the router's
        return np.cumsum(rng.exponential(1.0 / rate, n))
    if arrival_s is None:
        arrival_s = getattr(w, "arrival_s", None)
        if arrival_s is None:
            raise ValueError("rate_rps must be a number > 0 when the workload has no arrival_s")
    arr = np.asarray(arrival_s, dtype=float)
    if arr.shape != (n,):
        raise ValueError(f"arrival_s must have one time per request ({n}), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or (n and arr.min() < 0) or np.any(np.diff(arr) < 0):
        raise ValueError("arrival_s must be finite, >= 0 and non-decreasing")
    return arr / positive("speedup", speedup)


def _session_starts(w, rate_rps, seed) -> np.ndarray:
    """Start times of a closed-loop workload's sessions: Poisson at rate_rps / turns per session."""
    if rate_rps is None:
        raise ValueError("rate_rps must be a number > 0 for closed-loop chat sessions")
    rate = positive("rate_rps", rate_rps) / w.turns_per_session
    rng = np.random.default_rng(seed + 7_919)
    return np.cumsum(rng.exponential(1.0 / rate, w.sessions))
