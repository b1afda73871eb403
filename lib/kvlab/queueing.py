"""Queues, not just hit rates: a discrete-event simulator of a fleet of replicas in time.

**Traffic.** Chats are closed-loop by default (:class:`ChatSessions`): users arrive as a Poisson
process, each runs one chat, and each turn after the first arrives a think time (exponential, mean
``think_s``, seeded) *after the previous answer has finished*, since its prompt contains that
answer. The session arrival rate is set so that the offered load is ``rate_rps`` requests/s.
Open-loop arrivals stay available for traffic whose requests are independent or whose times are
recorded: a seeded Poisson process at ``rate_rps`` for :class:`IndependentRequests` or a
:class:`kvlab.workload.ChatWorkload` (whose turns then ignore each other's finish times: use it to
reproduce the untimed demo's traffic, not as a model of chat), or a trace's own ``arrival_s``.

Each request is routed to a replica by a :mod:`kvlab.routing` policy, waits in that replica's FIFO
prefill queue, is prefilled, then decodes with continuous batching.

Per replica (costs from :mod:`kvlab.costs`, default its book calibration :data:`kvlab.costs.BOOK`;
any calibration, e.g. ``cost="measured"``: its fixed prefill part, attention and KV-read terms are
simulated step by step, see "Context-dependent costs" below):

* **Prefix cache**: the exact semantics of :mod:`kvlab.fleet` (blocks of ``block_size`` tokens, LRU,
  deepest blocks of a request evicted first), kept as fleet's per-entry ``OrderedDict`` and
  :func:`kvlab.fleet._touch` over the workload's :class:`kvlab.workload.Paths`. Timing matters: a
  request's hit is looked up when its prefill *starts*, and its blocks (prompt and answer, as
  fleet's "after serving") enter the cache when its prefill *ends*. Blocks of running requests are
  not pinned and their KV memory is not modelled (``cache_tokens`` is the cache pool).
* **Prefill**: ``prefill_s_per_token`` per uncached prompt token (at least one token is computed).
  Without chunking (``chunk_tokens=None``) a prompt is prefilled whole and decoding pauses meanwhile
  (prefill first, as vLLM's classic scheduler). With chunking a step carries up to ``chunk_tokens``
  prompt tokens (of one or more queued requests, FIFO) beside the decode batch; its time is the
  decode step's plus the chunk's prefill time.
* **Decode**: a step takes ``decode_base_s + decode_per_request_s x running`` and gives every running
  request one token; at most ``max_batch`` run, the rest wait for a slot. The first output token
  comes from prefill, so a request of ``o`` output tokens needs ``o - 1`` decode steps
  (``prefill_only=True``, or ``o <= 1``: none).

**Context-dependent costs** (a calibration with a fixed prefill part ``t_p0``, an attention term
``t_pair`` or a KV-read term ``c_kv``, such as :func:`kvlab.costs.cost_model` ``("measured")``):
a prefill step of pieces of ``U`` tokens after ``c`` already in context (the hit plus the chunks
done) takes ``t_p0`` plus each piece's marginal cost ``tau U + t_pair (U c + U^2 / 2)``
(``prefill_seconds_model``); a step that also decodes is one forward pass
(``mixed_step_seconds_model``: the decode step plus the pieces' marginal costs, ``t_p0`` not paid
again). A decode step takes ``a + k n + c_kv S`` (``decode_step_seconds_model``), where ``S`` is the
batch's total context: every running request's prompt plus the tokens it has generated. ``S`` grows
by the batch size at every step, so the steps of a decode-only run lengthen linearly and the run is
still taken in one jump (an arithmetic series). With the book's calibration those terms are zero
and the simulator does exactly what it did before.

TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1).

**Routing**: every policy of :data:`kvlab.routing.ALL_POLICIES`. The signals, all read at the
request's arrival:

* ``cache_aware`` (the book's guarded argmax): matched tokens and a load, either the replicas'
  *outstanding* prefill work (tokens queued plus the rest of those in progress; queued requests
  counted by their hit at arrival), ``load="outstanding"`` (default, a live signal), or fleet's
  cumulative count (``load="cumulative"``: all prefill tokens ever assigned, the demo's signal).
  ``guard_slack_tokens`` = s adds an absolute slack: load <= (1 + epsilon) x mean + s.
* ``sglang``: live request counts (requests in the replica: queued, prefilling or decoding), its
  tree's matches and sizes; ``dynamo``: outstanding prefill tokens, matches and the tokens (prompt
  plus answer) held by requests in flight, each shared block counted once; ``bounded_ring``: live request counts.
* ``view="stale"``: matches from the router's own record of what it sent where (it never learns of
  evictions; ``record_tokens`` caps each replica's record, forgotten LRU, like SGLang's tree);
  ``"exact"``: from the caches (KV events). ``view=None`` picks each policy's own: exact for
  ``dynamo``, stale for the others.

A replica can join at ``add_replica_at_s`` (empty cache): modulo-sticky remaps ``key mod (N+1)``,
a ring (``sticky="ring"``) adds the new replica's points; the share of keys seen so far that move
is reported as ``keys_moved``. A replica (``fail_replica``) can fail at ``fail_replica_at_s``: its
cache is lost, the routers stop choosing it at once (a health check that has already noticed;
SGLang's and the book's records forget it, a ring drops its points, modulo remaps over the
survivors), and every request in it (queued, prefilling or decoding) is sent again at that moment
from the start; such a request keeps its first arrival time, so its TTFT includes the lost work.

How it is fast: events are taken in time order (the next arrival or the next end of a replica's
run of steps), and a run of decode-only steps between two events is taken in one jump, cut short
at the first step boundary after an arrival joins that replica. 100,000 chat requests on 8
replicas take a few seconds (:func:`bench`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from . import calc, routing
from ._validate import check_choice, check_int, check_number, non_negative, positive
from .assumptions import CostModel
from .costs import BOOK, as_costs
from .fleet import _touch
from .latency import RequestTimes
from .workload import ChatWorkload, Paths

__all__ = [
    "METRICS",
    "OPS_METRICS",
    "OPS_PHASES",
    "ROUTERS",
    "ROUTER_LABELS",
    "ChatSessions",
    "compare",
    "IndependentRequests",
    "QueueResult",
    "bench",
    "mg1_wait_s",
    "operations",
    "simulate",
    "simulate_all",
    "sweep_rate",
]

_INF = math.inf


def mg1_wait_s(rate_rps: float, mean_service_s: float, second_moment_s2: float) -> float:
    """Pollaczek-Khinchine mean wait in an M/G/1 FIFO queue: Wq = lambda E[S^2] / (2 (1 - rho)),
    rho = lambda E[S] (inf when rho >= 1)."""
    lam = positive("rate_rps", rate_rps)
    es = positive("mean_service_s", mean_service_s)
    es2 = check_number("second_moment_s2", second_moment_s2, lo=es * es * (1 - 1e-12))
    if lam * es >= 1:
        return _INF
    return calc.evaluate("mg1_wait", **{"lambda": lam}, E_S=es, E_S2=es2)


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


class ChatSessions:
    """Closed-loop chat traffic, the timed simulator's default chat workload.

    ``sessions`` users each run one chat; a chat of T turns has T geometric with mean
    ``mean_turns`` (at least 1), capped at the turns before its history reaches ``history_max``.
    Prompts are shaped as :class:`kvlab.workload.ChatWorkload`'s (a system prompt of
    ``system_tokens`` shared by every chat on it, a history growing by ``history_step`` a turn,
    ``new_tokens`` new, ``output_tokens`` answered). Sessions are generated until ``requests``
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
        system_prompts: int = 4,
        system_tokens: int = 2000,
        history_start: int = 500,
        history_step: int = 500,
        history_max: int = 20_000,
        new_tokens: int = 300,
        output_tokens: int = 200,
    ):
        self.requests = check_int("requests", requests, lo=1, hi=100_000_000)
        self.mean_turns = check_number("mean_turns", mean_turns, lo=1, hi=10_000)
        self.think_mean_s = non_negative("think_s", think_s)
        self.seed = check_int("seed", seed, lo=0)
        self.system_prompts = check_int("system_prompts", system_prompts, lo=1, hi=1_000_000)
        self.system_tokens = check_int("system_tokens", system_tokens, lo=0, hi=10_000_000)
        self.history_start = check_int("history_start", history_start, lo=0, hi=10_000_000)
        self.new_tokens = check_int("new_tokens", new_tokens, lo=1, hi=10_000_000)
        self.output_tokens_per_turn = check_int("output_tokens", output_tokens, lo=0, hi=10_000_000)
        self.history_step = check_int(
            "history_step",
            history_step,
            lo=self.new_tokens + self.output_tokens_per_turn,
            hi=10_000_000,
        )
        self.history_max = check_int(
            "history_max", history_max, lo=self.history_start, hi=1_000_000_000
        )
        self.turns_per_chat = -(-(self.history_max - self.history_start) // self.history_step) + 1

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
        self.history_tokens = self.history_start + turn * self.history_step
        self.prompt_tokens = self.system_tokens + self.history_tokens + self.new_tokens
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


@dataclass
class QueueResult(RequestTimes):
    """Per-request times (s) and tokens in arrival order, per-replica busy time. Statistics count
    requests from index ``warmup`` (arrival order) up to ``count_until``."""

    policy: str
    replicas: int
    warmup: int
    arrival_s: np.ndarray
    start_s: np.ndarray  # prefill start
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hit_tokens: np.ndarray
    replica: np.ndarray
    busy_s: np.ndarray  # per replica: time spent in steps (prefill or decode)
    prefill_busy_s: np.ndarray  # per replica: the prefill part of it
    online_s: np.ndarray  # per replica: when it joined (0 or add_replica_at_s)
    mean_in_system: float  # time average of requests in the system, first arrival to last finish
    end_s: float
    added_at_s: float | None = None
    failed_at_s: float | None = None
    retried: int = 0  # requests in the failed replica, sent again
    #: per request: was it in the failed replica, sent again (None: no failure)
    resent: np.ndarray | None = None
    keys_moved: float | None = None  # share of keys seen before the addition whose owner changed
    params: dict = field(default_factory=dict)
    #: closed loop: each request's previous turn (index in these arrays), -1 for none
    predecessor: np.ndarray | None = None
    #: statistics stop before this index (closed loop: the requests that arrive after the last
    #: session has started, while the load drains away); None: count to the end
    count_until: int | None = None

    # -- per-request metrics -----------------------------------------------------------------------

    @property
    def wait_s(self) -> np.ndarray:
        """Queueing delay before prefill starts."""
        return self.start_s - self.arrival_s

    # -- summaries ---------------------------------------------------------------------------------
    @property
    def counted(self) -> slice:
        return slice(self.warmup, self.count_until)

    @property
    def imbalance(self) -> float:
        """Max over mean of the prefill tokens each replica computed for the counted requests
        (the routing demo's metric, here per counted request)."""
        c = self.counted
        work = np.bincount(
            self.replica[c],
            weights=(self.prompt_tokens - self.hit_tokens)[c],
            minlength=self.replicas,
        )
        return float(work.max() / work.mean()) if work.mean() > 0 else 1.0

    @property
    def hit_rate(self) -> float:
        c = self.counted
        return float(self.hit_tokens[c].sum() / self.prompt_tokens[c].sum())

    @property
    def utilisation(self) -> np.ndarray:
        """Busy share of each replica from when it joined to the last finish."""
        return self.busy_s / np.maximum(self.end_s - self.online_s, 1e-12)

    @property
    def prefill_utilisation(self) -> np.ndarray:
        return self.prefill_busy_s / np.maximum(self.end_s - self.online_s, 1e-12)

    def percentile(self, metric: str, q: float) -> float:
        """``q``-th percentile (s) of 'ttft', 'tpot', 'wait' or 'latency' over counted requests."""
        check_choice("metric", metric, ("ttft", "tpot", "wait", "latency"))
        q = check_number("q", q, lo=0, hi=100)
        return float(np.percentile(getattr(self, f"{metric}_s")[self.counted], q))

    def summary(self) -> dict:
        """Hit rate, TTFT and TPOT p50/p95/p99 (s), mean and max replica utilisation."""
        out = {"policy": self.policy, "hit_rate": self.hit_rate}
        for m in ("ttft", "tpot"):
            for q in (50, 95, 99):
                out[f"{m}_p{q}_s"] = self.percentile(m, q)
        u = self.utilisation
        out["util_mean"], out["util_max"] = float(u.mean()), float(u.max())
        return out

    def over_time(self, metric: str, window_s: float, q: float = 50.0):
        """(window centres, values) over windows of ``window_s`` by arrival time, all requests:
        metric 'hit_rate' (token hit rate) or 'ttft'/'tpot'/'wait' (``q``-th percentile)."""
        check_choice("metric", metric, ("hit_rate", "ttft", "tpot", "wait"))
        window_s = positive("window_s", window_s)
        b = np.floor((self.arrival_s - self.arrival_s[0]) / window_s).astype(np.int64)
        nb = int(b.max()) + 1
        centres = self.arrival_s[0] + (np.arange(nb) + 0.5) * window_s
        if metric == "hit_rate":
            h = np.bincount(b, weights=self.hit_tokens, minlength=nb)
            p = np.bincount(b, weights=self.prompt_tokens, minlength=nb)
            with np.errstate(invalid="ignore"):
                return centres, h / p
        vals = getattr(self, f"{metric}_s")
        order = np.argsort(b, kind="stable")
        splits = np.searchsorted(b[order], np.arange(1, nb))
        out = np.array(
            [np.percentile(g, q) if len(g) else np.nan for g in np.split(vals[order], splits)]
        )
        return centres, out

    def __repr__(self) -> str:
        return (
            f"QueueResult(policy={self.policy!r}, hit_rate={self.hit_rate:.3f}, "
            f"ttft_p50={self.percentile('ttft', 50):.3f}s, "
            f"ttft_p95={self.percentile('ttft', 95):.3f}s)"
        )


class _Replica:
    """One replica's queues, batch and cache. The simulator calls :meth:`step` at the end of each
    run of steps (in global time order) and :meth:`add` at each arrival routed here."""

    __slots__ = (
        "sim",
        "idx",
        "q",
        "left",
        "started",
        "out_tokens",
        "assigned",
        "active",
        "inflight",
        "running",
        "waiting",
        "steps",
        "end",
        "seg_start",
        "seg_d",
        "seg_g",
        "ctx",
        "seg_steps",
        "seg_decode",
        "seg_done",
        "cache",
        "used",
        "busy_s",
        "prefill_busy_s",
        "n_sys",
        "area",
        "last",
        "online_s",
    )

    def __init__(self, sim, idx: int, now: float):
        self.sim = sim
        self.idx = idx
        self.q: deque = deque()  # request ids waiting for (the rest of) their prefill
        self.left = 0  # prefill tokens still to compute for the head of q (when started)
        self.started = False  # has the head of q started (hit looked up)?
        self.out_tokens = 0  # outstanding prefill tokens (queued estimates + rest in progress)
        self.assigned = 0  # every prefill token ever assigned (estimates corrected at start)
        self.active = 0  # distinct blocks (prompt + answer) held by the requests in this replica
        self.inflight: dict = {}  # entry key -> [requests holding it, blocks]
        self.running: list = []  # heap of (decode step at which it finishes, request id)
        self.waiting: deque = deque()  # (request id, decode tokens) waiting for a batch slot
        self.steps = 0  # decode steps done
        self.end = _INF  # end time of the current run of steps; inf when idle
        self.seg_start = now
        self.seg_d = 0.0  # duration of one step of a decode-only run (its first, with c_kv)
        self.seg_g = 0.0  # how much each step of that run is longer than the one before (c_kv)
        self.ctx = 0  # total context of the running batch (prompt + generated, tokens)
        self.seg_steps = 0  # decode steps in the current run
        self.seg_decode = False
        self.seg_done: list = []  # requests whose prefill ends with the current run
        self.cache: OrderedDict = OrderedDict()
        self.used = 0
        self.busy_s = 0.0
        self.prefill_busy_s = 0.0
        self.n_sys = 0
        self.area = 0.0
        self.last = now
        self.online_s = now

    def _set_end(self, t: float) -> None:
        self.end = t
        self.sim.ends[self.idx] = t

    def _count(self, t: float, delta: int) -> None:
        self.area += self.n_sys * (t - self.last)
        self.last = t
        self.n_sys += delta

    def add(self, rid: int, est_tokens: int, t: float) -> None:
        """Request ``rid`` arrives at ``t`` (every run of steps ending before ``t`` is done)."""
        self._count(t, +1)
        self.q.append(rid)
        self.out_tokens += est_tokens
        self.assigned += est_tokens
        sim = self.sim
        fl = self.inflight
        for key, nb in zip(sim.ks[rid], sim.ns[rid], strict=True):
            e = fl.get(key)
            if e is None:
                fl[key] = [1, nb]
                self.active += nb
            else:
                e[0] += 1
                if nb > e[1]:
                    self.active += nb - e[1]
                    e[1] = nb
        if self.end == _INF:
            self._start(t)
        elif self.seg_steps > 1:  # a decode-only run: stop at the first step boundary >= t
            if self.seg_g:
                self._cut_growing_run(t)
                return
            k = max(1, math.ceil((t - self.seg_start) / self.seg_d))
            if k < self.seg_steps:
                self.busy_s -= (self.seg_steps - k) * self.seg_d
                self.seg_steps = k
                self._set_end(self.seg_start + k * self.seg_d)

    def _run_s(self, steps: int) -> float:
        """Duration of the first ``steps`` steps of the current decode-only run (steps lengthen by
        ``seg_g`` each: d, d + g, d + 2 g, ...)."""
        return steps * self.seg_d + self.seg_g * steps * (steps - 1) / 2

    def _cut_growing_run(self, t: float) -> None:
        """Cut a decode-only run whose steps lengthen at the first step boundary >= ``t``."""
        x = t - self.seg_start
        d, g = self.seg_d, self.seg_g
        # smallest k >= 1 with k d + g k (k - 1) / 2 >= x: the positive root, then corrected
        b = d - g / 2
        k = max(1, math.ceil((-b + math.sqrt(b * b + 2 * g * max(x, 0.0))) / g))
        while k > 1 and self._run_s(k - 1) >= x:
            k -= 1
        while self._run_s(k) < x:
            k += 1
        if k < self.seg_steps:
            self.busy_s -= self._run_s(self.seg_steps) - self._run_s(k)
            self.seg_steps = k
            self._set_end(self.seg_start + self._run_s(k))

    def step(self) -> None:
        """End the current run of steps at ``self.end`` and start the next one."""
        now = self.end
        self._finish_segment(now)
        self._start(now)

    def fail(self, t: float) -> list[int]:
        """The replica dies at ``t``: return the requests in it (to be sent again), empty it."""
        lost = list(self.q) + [rid for _, rid in self.running]
        lost += [rid for rid, _ in self.waiting] + [r for r in self.seg_done if r not in self.q]
        lost = list(dict.fromkeys(lost))
        if self.end != _INF and self.end > t:  # the rest of the run of steps never happens
            self.busy_s -= self.end - t
        self._count(t, -self.n_sys)
        self.q.clear()
        self.running.clear()
        self.waiting.clear()
        self.seg_done = []
        self.inflight.clear()
        self.cache.clear()
        self.used = self.active = self.out_tokens = self.left = self.ctx = 0
        self.started = False
        self.seg_steps = 0
        self._set_end(_INF)
        return lost

    # -- steps -------------------------------------------------------------------------------------
    def _start(self, now: float) -> None:
        sim = self.sim
        running, waiting = self.running, self.waiting
        while waiting and len(running) < sim.max_batch:
            rid, tokens = waiting.popleft()
            heapq.heappush(running, (self.steps + tokens, rid))
            self.ctx += sim.prompt[rid] + 1  # its prompt and the first token (from prefill)
        q = self.q
        self.seg_start = now
        if sim.kv:
            self._start_kv(now)
            return
        if q:
            pre = 0
            done = []
            budget = sim.chunk if sim.chunk else 0
            while q:
                rid = q[0]
                if not self.started:
                    self._begin_prefill(rid, now)
                if budget:
                    take = min(budget, self.left)
                    budget -= take
                else:
                    take = self.left
                pre += take
                self.left -= take
                if self.left:
                    break
                q.popleft()
                self.started = False
                done.append(rid)
                if not sim.chunk or not budget:
                    break
            self.out_tokens -= pre
            pre_s = pre * sim.tau
            decoding = bool(running) and sim.chunk is not None
            dur = pre_s + (sim.a + sim.k * len(running) if decoding else 0.0)
            self.prefill_busy_s += pre_s
            self.busy_s += dur
            self.seg_steps = 1 if decoding else 0
            self.seg_decode = decoding
            self.seg_done = done
            self._set_end(now + dur)
            return
        if running:  # decode only until the next finish (cut short by :meth:`add`)
            d = sim.a + sim.k * len(running)
            n = running[0][0] - self.steps
            self.busy_s += n * d
            self.seg_d = d
            self.seg_steps = n
            self.seg_decode = True
            self.seg_done = []
            self._set_end(now + n * d)
            return
        self.seg_steps = 0
        self._set_end(_INF)

    def _start_kv(self, now: float) -> None:
        """:meth:`_start` under a calibration with context terms (module docstring)."""
        sim = self.sim
        running, q = self.running, self.q
        B = len(running)
        if q:
            pre = 0
            pre_s = 0.0
            done = []
            budget = sim.chunk if sim.chunk else 0
            while q:
                rid = q[0]
                if not self.started:
                    self._begin_prefill(rid, now)
                if budget:
                    take = min(budget, self.left)
                    budget -= take
                else:
                    take = self.left
                c = sim.prompt[rid] - self.left  # context before this piece: hit + chunks done
                pre += take
                pre_s += sim.tau * take + sim.t_pair * (take * c + take * take / 2)
                self.left -= take
                if self.left:
                    break
                q.popleft()
                self.started = False
                done.append(rid)
                if not sim.chunk or not budget:
                    break
            self.out_tokens -= pre
            decoding = bool(running) and sim.chunk is not None
            if decoding:  # one forward pass: the decode step, the pieces' marginal cost
                dur = pre_s + sim.a + sim.k * B + sim.c_kv * self.ctx
            else:
                pre_s += sim.t_p0
                dur = pre_s
            self.prefill_busy_s += pre_s
            self.busy_s += dur
            self.seg_steps = 1 if decoding else 0
            self.seg_decode = decoding
            self.seg_done = done
            self._set_end(now + dur)
            return
        if running:  # decode only until the next finish; each step reads B more context tokens
            self.seg_d = sim.a + sim.k * B + sim.c_kv * self.ctx
            self.seg_g = sim.c_kv * B
            self.seg_steps = running[0][0] - self.steps
            self.seg_decode = True
            self.seg_done = []
            run = self._run_s(self.seg_steps)
            self.busy_s += run
            self._set_end(now + run)
            return
        self.seg_steps = 0
        self._set_end(_INF)

    def _begin_prefill(self, rid: int, now: float) -> None:
        sim = self.sim
        hit = _match(self.cache, sim.ks[rid], sim.ns[rid], sim.mh[rid]) * sim.bs
        left = sim.prompt[rid] - hit
        sim.hit[rid] = hit
        sim.start[rid] = now
        est = sim.est[rid]
        self.out_tokens += left - est
        self.assigned += left - est
        self.left = left
        self.started = True

    def _done(self, rid: int, t: float) -> None:
        sim = self.sim
        sim.finish[rid] = t
        self._count(t, -1)
        fl = self.inflight
        for key in sim.ks[rid]:
            e = fl[key]
            e[0] -= 1
            if not e[0]:
                self.active -= e[1]
                del fl[key]
        nxt = sim.nxt[rid] if sim.nxt is not None else -1
        if nxt >= 0:  # closed loop: the user reads the answer, thinks, sends the next turn
            heapq.heappush(sim.pending, (t + sim.think[nxt], nxt))

    def _finish_segment(self, t: float) -> None:
        sim = self.sim
        if self.seg_decode:
            self.steps += self.seg_steps
            running = self.running
            self.ctx += len(running) * self.seg_steps
            while running and running[0][0] <= self.steps:
                _, rid = heapq.heappop(running)
                self.ctx -= sim.prompt[rid] + 1 + sim.dec[rid]
                self._done(rid, t)
        for rid in self.seg_done:
            sim.first[rid] = t
            self._insert(rid)
            d = sim.dec[rid]
            if d > 0:
                self.waiting.append((rid, d))
            else:
                self._done(rid, t)
        self.seg_steps = 0
        self._set_end(_INF)

    def _insert(self, rid: int) -> None:
        sim = self.sim
        self.used = _touch(self.cache, sim.ks[rid], sim.ns[rid], self.used, sim.cap)


def _match(od, ks, ns, mh) -> int:
    """Blocks of the path (ks, ns) found in the cache ``od``, capped at ``mh``."""
    x = 0
    for key, nb in zip(ks, ns, strict=True):
        c = od.get(key, 0)
        if c >= nb:
            x += nb
        else:
            x += c
            break
    return x if x < mh else mh


def _new_blocks(inflight: dict, ks, ns) -> int:
    """Blocks of the path (ks, ns) not already held by a request in flight on that replica."""
    x = 0
    for key, nb in zip(ks, ns, strict=True):
        e = inflight.get(key)
        x += nb - e[1] if e is not None and e[1] < nb else (0 if e is not None else nb)
    return x


def _deepest(od, ks, ns) -> object:
    """The key of the deepest entry of the path (ks, ns) found in ``od`` (None if none)."""
    node = None
    for key, nb in zip(ks, ns, strict=True):
        c = od.get(key, 0)
        if c:
            node = key
        if c < nb:
            break
    return node


class _Sim:
    """State shared by the replicas of one run (request arrays as lists, costs, event lists)."""

    def __init__(self, w, paths, cost, cap, max_batch, chunk, prefill_only):
        n = len(w)
        off = paths.offsets.tolist()
        keys = paths.keys.tolist()
        blks = paths.blocks.tolist()
        self.ks = [tuple(keys[off[i] : off[i + 1]]) for i in range(n)]
        self.ns = [tuple(blks[off[i] : off[i + 1]]) for i in range(n)]
        self.mh = paths.max_hit_blocks.tolist()
        self.bs = paths.block_size
        self.prompt = np.asarray(w.prompt_tokens, dtype=np.int64).tolist()
        out = np.asarray(w.output_tokens, dtype=np.int64)
        self.dec = (
            np.zeros(n, dtype=np.int64) if prefill_only else np.maximum(out - 1, 0)
        ).tolist()
        c = as_costs(cost)
        self.tau = c.prefill_s_per_token
        self.a = c.decode_base_s
        self.k = c.decode_per_request_s
        self.t_p0 = c.prefill_fixed_s
        self.t_pair = c.prefill_s_per_pair
        self.c_kv = c.decode_per_context_token_s
        # context terms: steps are costed by _Replica._start_kv (a linear model keeps the old path)
        self.kv = bool(self.t_p0 or self.t_pair or self.c_kv)
        self.cap = cap
        self.max_batch = max_batch
        self.chunk = chunk
        self.hit = [0] * n
        self.est = [0] * n
        self.start = [math.nan] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        self.ends: list[float] = []  # per replica: end of its current run of steps
        self.pending: list = []  # closed loop: heap of (arrival time, request id)
        self.nxt = None  # closed loop: each request's next turn (-1: none)
        self.think: list[float] = []


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


def simulate(
    w,
    policy: str = "cache_aware",
    replicas: int = 8,
    rate_rps: float | None = None,
    *,
    arrival_s=None,
    speedup: float = 1.0,
    cache_tokens: int | None = 400_000,
    seed: int = 0,
    block_size: int = 16,
    cost: CostModel | str = BOOK,
    max_batch: int = 256,
    chunk_tokens: int | None = None,
    prefill_only: bool = False,
    epsilon: float = 0.05,
    lam: float = 0.0,
    view: str | None = None,
    load: str = "outstanding",
    guard_slack_tokens: float = 0.0,
    sticky: str = "modulo",
    vnodes: int = 100,
    add_replica_at_s: float | None = None,
    fail_replica_at_s: float | None = None,
    fail_replica: int = 0,
    fleet_age_s: float | None = None,
    router_replicas: int = 1,
    warmup: int = 0,
    warmup_s: float | None = None,
    paths=None,
    record_tokens: int | None = None,
    load_factor: float = 1.25,
    cache_threshold: float = 0.3,
    balance_abs: float = 64,
    balance_rel: float = 1.5,
    overlap_weight: float = 1.0,
) -> QueueResult:
    """Serve every request of ``w`` (ChatSessions, ChatWorkload, Trace, IndependentRequests) in time.

    Arrivals: a closed-loop workload (:class:`ChatSessions`) starts its sessions as a Poisson
    process offering ``rate_rps`` requests/s and sends each later turn a think time after the
    previous answer. Any other workload is open loop: Poisson at ``rate_rps`` (seeded by
    ``seed``), else ``arrival_s``, else the workload's ``arrival_s`` (a trace), divided by
    ``speedup``. ``replicas``: 1 to 4096 replicas, each with an LRU prefix cache of
    ``cache_tokens`` (None: unlimited) and at most ``max_batch`` decoding requests;
    ``chunk_tokens`` turns on chunked prefill. ``policy`` in routing.ALL_POLICIES; ``epsilon``,
    ``lam``, ``load`` ("outstanding"/"cumulative") and ``guard_slack_tokens`` tune "cache_aware";
    ``sticky`` ("modulo"/"ring") and ``vnodes`` tune "sticky"; ``load_factor`` "bounded_ring";
    ``cache_threshold``, ``balance_abs``, ``balance_rel`` "sglang"; ``overlap_weight`` "dynamo".
    ``view`` ("stale"/"exact"/None: the policy's own) and ``record_tokens`` (the stale record's
    size per replica, None: unlimited) set what the cache-using policies see.
    ``add_replica_at_s``: one more replica joins then; ``fail_replica_at_s``: replica
    ``fail_replica`` (an index among the first ``replicas``) fails then and its requests are sent
    again (module docstring). ``fleet_age_s`` (with ``add_replica_at_s``): at the join, the
    replicas already there carry the cumulative prefill of a fleet that has served the same
    traffic for ``fleet_age_s`` seconds (their counts so far scaled by ``fleet_age_s`` over the
    time since the first arrival), since a run lasts minutes and a fleet days; only the
    cumulative signal (``load="cumulative"``) reads it. ``router_replicas``: each request reaches
    one of that many router replicas (uniformly, seeded), each with its own stale record of what
    *it* routed (the records diverge; live loads and, for ``view="exact"``, the caches are seen
    by all alike). ``warmup``: statistics skip the first
    requests in arrival order (they still run); ``warmup_s``: instead, skip those that arrive
    before this time (s), the same window for every policy. A closed loop's statistics stop at
    the last session's start (the load drains away after it). ``paths``: a precomputed ``w.paths(block_size)``.
    """
    check_choice("policy", policy, set(routing.ALL_POLICIES))
    R = check_int("replicas", replicas, lo=1, hi=4096)
    bs = check_int("block_size", block_size, lo=1, hi=1_000_000)
    cap = (1 << 62) if cache_tokens is None else check_int("cache_tokens", cache_tokens, lo=0) // bs
    rec_cap = (
        (1 << 62)
        if record_tokens is None
        else check_int("record_tokens", record_tokens, lo=0) // bs
    )
    seed = check_int("seed", seed, lo=0)
    cost = as_costs(cost)  # a calibration's name, or a cost model
    max_batch = check_int("max_batch", max_batch, lo=1, hi=1_000_000)
    chunk = None if chunk_tokens is None else check_int("chunk_tokens", chunk_tokens, lo=1)
    eps = non_negative("epsilon", epsilon)
    lam = non_negative("lam", lam)
    if view is None:
        view = "exact" if policy == "dynamo" else "stale"
    view = check_choice("view", view, {"stale", "exact"})
    load = check_choice("load", load, {"outstanding", "cumulative"})
    slack = non_negative("guard_slack_tokens", guard_slack_tokens)
    check_choice("sticky", sticky, {"modulo", "ring"})
    vnodes = check_int("vnodes", vnodes, lo=1, hi=100_000)
    n = len(w)
    if n < 1:
        raise ValueError("w must hold at least one request")
    warmup = check_int("warmup", warmup, lo=0, hi=n - 1)
    if warmup_s is not None:
        warmup_s = non_negative("warmup_s", warmup_s)
    closed = bool(getattr(w, "closed_loop", False))
    if closed:
        if arrival_s is not None:
            raise ValueError("arrival_s must be None for closed-loop chat sessions (use rate_rps)")
        starts = _session_starts(w, rate_rps, seed)
        fixed_t = (starts / positive("speedup", speedup)).tolist()
        fixed_r = np.asarray(w.first_request).tolist()
    else:
        fixed_t = _open_arrivals(w, rate_rps, arrival_s, speedup, seed).tolist()
        fixed_r = list(range(n))
    add_at = (
        _INF if add_replica_at_s is None else non_negative("add_replica_at_s", add_replica_at_s)
    )
    fail_at = (
        _INF if fail_replica_at_s is None else non_negative("fail_replica_at_s", fail_replica_at_s)
    )
    fail_idx = check_int("fail_replica", fail_replica, lo=0, hi=R - 1)
    age = None if fleet_age_s is None else positive("fleet_age_s", fleet_age_s)
    if fail_replica_at_s is not None and R < 2 and add_replica_at_s is None:
        raise ValueError("fail_replica_at_s needs at least 2 replicas (or one joining)")
    if paths is None:
        paths = w.paths(bs)
    elif paths.block_size != bs:
        raise ValueError(f"paths were built for block_size {paths.block_size}, got {block_size}")

    sim = _Sim(w, paths, cost, cap, max_batch, chunk, bool(prefill_only))
    if closed:
        pred = np.asarray(w.predecessor, dtype=np.int64)
        nxt = np.full(n, -1, dtype=np.int64)
        has = pred >= 0
        nxt[pred[has]] = np.flatnonzero(has)
        sim.nxt = nxt.tolist()
        sim.think = (np.asarray(w.think_s, dtype=float) / speedup).tolist()

    def make_router(n: int):
        return routing.make_router(
            policy,
            n,
            seed=seed,
            epsilon=eps,
            lam=lam,
            sticky=sticky,
            view=view,
            vnodes=vnodes,
            slack=slack,
            load_factor=load_factor,
            cache_threshold=cache_threshold,
            balance_abs=balance_abs,
            balance_rel=balance_rel,
            overlap_weight=overlap_weight,
            block_size=bs,
        )

    router = make_router(R)
    t0 = float(fixed_t[0])
    ends = sim.ends
    reps = []
    for r in range(R):
        ends.append(_INF)
        reps.append(_Replica(sim, r, t0))
    signals = routing.SIGNALS[policy]
    uses_cache = "matched_tokens" in signals
    stale = view == "stale"
    # one record per router replica (each knows only what it routed), each per replica
    n_routers = check_int("router_replicas", router_replicas, lo=1, hi=1024)
    known_sets: list[list[OrderedDict]] = [
        [OrderedDict() for _ in range(R)] for _ in range(n_routers)
    ]
    used_sets: list[list[int]] = [[0] * R for _ in range(n_routers)]
    known, known_used = known_sets[0], used_sets[0]
    router_of = (
        np.random.default_rng([seed, 7_177]).integers(0, n_routers, n).tolist()
        if n_routers > 1
        else None
    )
    # the replicas the router can choose, in its index order (real indices into reps)
    live = list(range(R))
    lreps = list(reps)
    lknown = list(known)
    retried: set = set()
    n_retried = 0
    resent = np.zeros(n, dtype=bool)
    outstanding = load == "outstanding"
    keys = np.asarray(w.key).tolist()
    choice = [0] * n
    arrival = [math.nan] * n
    order: list[int] = []
    seen_keys: dict = {}
    keys_moved = None
    ks_l, ns_l, mh_l, est_l, prompt_l = sim.ks, sim.ns, sim.mh, sim.est, sim.prompt
    pending = sim.pending
    ptr, nf = 0, len(fixed_t)
    while True:
        tf = fixed_t[ptr] if ptr < nf else _INF
        tp = pending[0][0] if pending else _INF
        ta = tf if tf <= tp else tp
        while True:  # every run of steps that ends before the next arrival
            e = min(ends)
            if e >= ta:
                break
            reps[ends.index(e)].step()
            if pending and pending[0][0] < ta:
                tp = ta = pending[0][0]
        if ta == _INF:
            break
        if tf <= tp:
            i = fixed_r[ptr]
            ptr += 1
        else:
            i = heapq.heappop(pending)[1]
        t = ta
        if i in retried:  # sent again after a failure: keeps its first arrival
            retried.discard(i)
        else:
            arrival[i] = t
            order.append(i)
        if t >= add_at:
            add_at = _INF
            if age is not None and t > t0:
                scale = max(age / (t - t0), 1.0)
                for rp_old in reps:
                    rp_old.assigned = int(rp_old.assigned * scale)
            ends.append(_INF)
            live.append(len(reps))
            reps.append(_Replica(sim, len(reps), t))
            for kset, uset in zip(known_sets, used_sets, strict=True):
                kset.append(OrderedDict())
                uset.append(0)
            new = _grow(router, policy, sticky, R + 1, make_router)
            if policy == "sticky":
                moved = sum(router.choose(k) != new.choose(k) for k in seen_keys)
                keys_moved = moved / max(len(seen_keys), 1)
            router, R = new, R + 1
            lreps = [reps[j] for j in live]
            lknown = [known[j] for j in live]
        if t >= fail_at:
            fail_at = _INF
            gone = live.index(fail_idx)
            live.pop(gone)
            router, R = _shrink(router, policy, sticky, gone, R - 1, make_router), R - 1
            lreps = [reps[j] for j in live]
            lknown = [known[j] for j in live]
            for rid in reps[fail_idx].fail(t):
                retried.add(rid)
                resent[rid] = True
                n_retried += 1
                heapq.heappush(pending, (t, rid))
        key = keys[i]
        ks, ns, mh = ks_l[i], ns_l[i], mh_l[i]
        if uses_cache:
            if router_of is not None:  # the router replica that receives this request
                known, known_used = known_sets[router_of[i]], used_sets[router_of[i]]
                lknown = [known[j] for j in live]
            src = lknown if stale else [rp.cache for rp in lreps]
            m = [_match(od, ks, ns, mh) * sim.bs for od in src]
            if policy == "cache_aware":
                loads = (
                    [rp.out_tokens for rp in lreps]
                    if outstanding
                    else [rp.assigned for rp in lreps]
                )
                r = live[router.choose(key, m, loads)]
            elif policy == "sglang":
                best = max(range(R), key=m.__getitem__)
                tree = [known_used[j] for j in live] if stale else [rp.used for rp in lreps]
                r = live[
                    router.choose(
                        key,
                        m,
                        [rp.n_sys for rp in lreps],
                        prompt_l[i],
                        [u * sim.bs for u in tree],
                        _deepest(src[best], ks, ns),
                    )
                ]
            else:  # dynamo
                act = [(rp.active + _new_blocks(rp.inflight, ks, ns)) * sim.bs for rp in lreps]
                r = live[router.choose(key, m, [rp.out_tokens for rp in lreps], prompt_l[i], act)]
            if stale:
                known_used[r] = _touch(known[r], ks, ns, known_used[r], rec_cap)
        elif policy == "bounded_ring":
            r = live[router.choose(key, None, [rp.n_sys for rp in lreps])]
        else:
            r = live[router.choose(key)]
        rp = reps[r]
        if policy == "sticky":
            seen_keys[key] = None
        choice[i] = r
        est = prompt_l[i] - _match(rp.cache, ks, ns, mh) * sim.bs
        est_l[i] = est
        rp.add(i, est, t)

    perm = np.asarray(order, dtype=np.int64)
    if len(perm) != n:  # pragma: no cover - every request arrives exactly once
        raise RuntimeError(f"{len(perm)} of {n} requests arrived")
    arr = np.asarray(arrival)[perm]
    finish = np.asarray(sim.finish)[perm]
    end = float(finish.max())
    area = sum(rp.area for rp in reps)
    predecessor = None
    count_until = None
    if warmup_s is not None:
        warmup = min(int(np.searchsorted(arr, warmup_s, side="left")), n - 1)
    if closed:
        pos = np.empty(n, dtype=np.int64)
        pos[perm] = np.arange(n)
        p = np.asarray(w.predecessor, dtype=np.int64)[perm]
        predecessor = np.where(p >= 0, pos[np.maximum(p, 0)], -1)
        count_until = int(np.searchsorted(arr, fixed_t[-1], side="right"))
        if count_until <= warmup:
            raise ValueError(
                f"warmup must leave requests before the last session starts at "
                f"{fixed_t[-1]:.1f} s ({count_until} requests), got {warmup} requests"
            )
    out_tokens = (
        np.ones(n, dtype=np.int64) if prefill_only else np.asarray(w.output_tokens, dtype=np.int64)
    )
    return QueueResult(
        policy=policy,
        replicas=len(reps),
        warmup=warmup,
        arrival_s=arr,
        start_s=np.asarray(sim.start)[perm],
        first_token_s=np.asarray(sim.first)[perm],
        finish_s=finish,
        prompt_tokens=np.asarray(w.prompt_tokens, dtype=np.int64)[perm],
        output_tokens=out_tokens[perm],
        hit_tokens=np.asarray(sim.hit, dtype=np.int64)[perm],
        replica=np.asarray(choice, dtype=np.int64)[perm],
        busy_s=np.array([rp.busy_s for rp in reps]),
        prefill_busy_s=np.array([rp.prefill_busy_s for rp in reps]),
        online_s=np.array([rp.online_s for rp in reps]),
        mean_in_system=area / (end - t0) if end > t0 else 0.0,
        end_s=end,
        added_at_s=None if add_replica_at_s is None else float(add_replica_at_s),
        failed_at_s=None if fail_replica_at_s is None else float(fail_replica_at_s),
        retried=n_retried,
        resent=None if fail_replica_at_s is None else resent[perm],
        keys_moved=keys_moved,
        params=dict(
            rate_rps=rate_rps,
            closed_loop=closed,
            speedup=speedup,
            cache_tokens=cache_tokens,
            seed=seed,
            block_size=bs,
            max_batch=max_batch,
            chunk_tokens=chunk,
            prefill_only=bool(prefill_only),
            epsilon=eps,
            lam=lam,
            view=view,
            load=load,
            guard_slack_tokens=slack,
            sticky=sticky,
            vnodes=vnodes,
            record_tokens=record_tokens,
            fleet_age_s=age,
            router_replicas=n_routers,
            warmup_s=warmup_s,
            cost=cost,
            router=router,
        ),
        predecessor=predecessor,
        count_until=count_until,
    )


def _grow(router, policy, sticky, R, make_router):
    """The router after one replica joins: a ring gains the new replica's points, the others are
    rebuilt by ``make_router(R)`` (modulo-sticky then maps key mod R)."""
    if (policy == "sticky" and sticky == "ring") or policy == "bounded_ring":
        import copy

        new = copy.deepcopy(router)
        new.ring.add_replica()
        new.replicas = R
        return new
    new = make_router(R)
    if policy == "round_robin":
        new._next = router._next % R
    return new


def _shrink(router, policy, sticky, pos, R, make_router):
    """The router after the replica at position ``pos`` of its index order fails (``R`` remain):
    a ring loses that replica's points (the others keep theirs), the others are rebuilt by
    ``make_router(R)`` (modulo-sticky then maps key mod R over the survivors)."""
    if (policy == "sticky" and sticky == "ring") or policy == "bounded_ring":
        import copy

        new = copy.deepcopy(router)
        ring = new.ring
        kept = [(h, o) for h, o in zip(ring._points, ring._owners, strict=True) if o != pos]
        ring._points = [h for h, _ in kept]
        ring._owners = [o - (o > pos) for _, o in kept]
        ring.replicas -= 1
        new.replicas = R
        return new
    new = make_router(R)
    if policy == "round_robin":
        new._next = router._next % R
    return new


def simulate_all(w, policies=routing.POLICIES, **kwargs) -> dict[str, QueueResult]:
    """:func:`simulate` for each policy on the same workload and arrivals (paths built once)."""
    bs = kwargs.get("block_size", 16)
    paths = kwargs.pop("paths", None) or w.paths(bs)
    return {p: simulate(w, policy=p, paths=paths, **kwargs) for p in policies}


def sweep_rate(
    w, rates_rps, policies=routing.POLICIES, progress: bool = False, **kwargs
) -> dict[str, list[QueueResult]]:
    """Results per policy at each arrival rate (same workload; ``progress``: a tqdm bar)."""
    rates = [positive("rates_rps", r) for r in rates_rps]
    bs = kwargs.get("block_size", 16)
    paths = kwargs.pop("paths", None) or w.paths(bs)
    it = rates
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(rates, desc="arrival rate", leave=False)
    out: dict[str, list[QueueResult]] = {p: [] for p in policies}
    for rate in it:
        for p in policies:
            out[p].append(simulate(w, policy=p, rate_rps=rate, paths=paths, **kwargs))
    return out


#: the routers compared side by side in time: name -> simulate() keywords
ROUTERS = {
    "random": dict(policy="random"),
    "sticky": dict(policy="sticky"),
    "bounded_ring": dict(policy="bounded_ring"),
    "guard_cumulative": dict(policy="cache_aware", load="cumulative"),
    "guard_live": dict(policy="cache_aware", load="outstanding"),
    "sglang": dict(policy="sglang"),
    "dynamo": dict(policy="dynamo"),
}
ROUTER_LABELS = {
    "random": "Random",
    "sticky": "Sticky hash",
    "bounded_ring": "Ring, bounded loads",
    "guard_cumulative": "Guarded argmax, cumulative load",
    "guard_live": "Guarded argmax, live load",
    "sglang": "SGLang rule",
    "dynamo": "Dynamo rule",
}
#: the figures :func:`compare` summarises over seeds
METRICS = ("hit_rate", "ttft_p50_s", "ttft_p95_s", "imbalance")


def _metrics(r: QueueResult) -> dict:
    return {
        "hit_rate": r.hit_rate,
        "ttft_p50_s": r.percentile("ttft", 50),
        "ttft_p95_s": r.percentile("ttft", 95),
        "imbalance": r.imbalance,
    }


def compare(
    variants: dict | None = None,
    *,
    rate_rps: float = 20.0,
    requests: int = 4_000,
    warmup_s: float = 100.0,
    seeds=None,
    progress: bool = False,
    workload: dict | None = None,
    **kwargs,
) -> dict:
    """Each variant ({name: simulate() keywords}, default :data:`ROUTERS`) on closed-loop chats
    over ``seeds`` (default :data:`kvlab.seeds.DEFAULT_SEEDS`): per seed one
    :class:`ChatSessions` of ``requests`` (``workload``: its other arguments) served at
    ``rate_rps`` by every variant, statistics from ``warmup_s`` to the last session's start.
    Returns {name: {metric: Spread}} for :data:`METRICS`."""
    from .seeds import DEFAULT_SEEDS, summarise

    variants = ROUTERS if variants is None else variants
    sds = list(DEFAULT_SEEDS if seeds is None else seeds)
    it = sds
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(sds, desc="seeds", leave=False)
    rows: dict = {name: {m: [] for m in METRICS} for name in variants}
    for seed in it:
        w = ChatSessions(requests=requests, seed=seed, **(workload or {}))
        paths = w.paths(kwargs.get("block_size", 16))
        for name, kw in variants.items():
            r = simulate(
                w, rate_rps=rate_rps, seed=seed, warmup_s=warmup_s, paths=paths, **kwargs, **kw
            )
            for m, v in _metrics(r).items():
                rows[name][m].append(v)
    return {
        name: {m: summarise(vals, sds) for m, vals in per.items()} for name, per in rows.items()
    }


#: the windows :func:`operations` reports, in time order
OPS_PHASES = ("before", "join", "failure", "after")
#: the figures :func:`operations` reports per window
OPS_METRICS = ("hit_rate", "ttft_p95_s", "new_share")


def _window_metrics(r: QueueResult, lo: float, hi: float, new_replica: int) -> dict:
    sel = (r.arrival_s >= lo) & (r.arrival_s < hi)
    n = int(sel.sum())
    if n < 10:  # an overloaded closed loop sends few turns: users wait for their answers
        raise ValueError(
            f"the window [{lo:g}, {hi:g}) s holds {n} requests (at least 10 needed): give more "
            "requests, or move join_s and fail_s earlier"
        )
    return {
        "hit_rate": float(r.hit_tokens[sel].sum() / r.prompt_tokens[sel].sum()),
        "ttft_p95_s": float(np.percentile(r.ttft_s[sel], 95)),
        "new_share": float(np.mean(r.replica[sel] == new_replica)),
    }


def operations(
    variants: dict | None = None,
    *,
    rate_rps: float = 20.0,
    requests: int = 3_600,
    replicas: int = 8,
    join_s: float = 100.0,
    fail_s: float = 135.0,
    window_s: float = 15.0,
    fail_replica: int = 0,
    fleet_age_s: float = 3_600.0,
    seeds=None,
    progress: bool = False,
    workload: dict | None = None,
    **kwargs,
) -> dict:
    """Operations in time: one replica joins at ``join_s`` (empty cache) and replica
    ``fail_replica`` fails at ``fail_s`` (its requests are sent again) in a fleet that has been up
    ``fleet_age_s`` at the join (see :func:`simulate`), for each variant
    ({name: simulate() keywords}, default :data:`ROUTERS`) on closed-loop chats over ``seeds``.

    Windows by arrival time, each ``window_s`` long: "before" ends at the join, "join" starts at
    it, "failure" starts at the failure, "after" follows the failure window. Per window: the token
    hit rate, TTFT p95 (a request sent again keeps its first arrival) and "new_share", the share of
    the window's requests routed to the replica that joined. Windows hold the requests that
    *arrive* in them: the requests caught in the failed replica (sent again, their TTFT counted
    from their first arrival, decoding lost included) arrived earlier and are left out. Returns
    {name: {phase: {metric: Spread}}} over :data:`OPS_PHASES` and :data:`OPS_METRICS`."""
    from .seeds import DEFAULT_SEEDS, summarise

    variants = ROUTERS if variants is None else variants
    R = check_int("replicas", replicas, lo=2, hi=4096)
    window_s = positive("window_s", window_s)
    join_s = check_number("join_s", join_s, lo=window_s)
    fail_s = check_number("fail_s", fail_s, lo=join_s + window_s)
    check_int("fail_replica", fail_replica, lo=0, hi=R - 1)
    windows = {
        "before": (join_s - window_s, join_s),
        "join": (join_s, join_s + window_s),
        "failure": (fail_s, fail_s + window_s),
        "after": (fail_s + window_s, fail_s + 2 * window_s),
    }
    sds = list(DEFAULT_SEEDS if seeds is None else seeds)
    it = sds
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(sds, desc="seeds", leave=False)
    rows: dict = {
        name: {ph: {m: [] for m in OPS_METRICS} for ph in OPS_PHASES} for name in variants
    }
    for seed in it:
        w = ChatSessions(requests=requests, seed=seed, **(workload or {}))
        paths = w.paths(kwargs.get("block_size", 16))
        for name, kw in variants.items():
            r = simulate(
                w,
                replicas=R,
                rate_rps=rate_rps,
                seed=seed,
                paths=paths,
                add_replica_at_s=join_s,
                fail_replica_at_s=fail_s,
                fail_replica=fail_replica,
                fleet_age_s=fleet_age_s,
                **kwargs,
                **kw,
            )
            for ph, (lo, hi) in windows.items():
                for m, v in _window_metrics(r, lo, hi, R).items():
                    rows[name][ph][m].append(v)
    return {
        name: {ph: {m: summarise(v, sds) for m, v in per.items()} for ph, per in d.items()}
        for name, d in rows.items()
    }


def bench(requests: int = 100_000, replicas: int = 8, rate_rps: float = 20.0) -> dict:
    """Time one run per policy of ``requests`` closed-loop chat requests on ``replicas`` replicas
    (one core) and print the times. Returns {policy: seconds}."""
    w = ChatSessions(requests=check_int("requests", requests, lo=1))
    paths = w.paths(16)
    times = {}
    for p in routing.ALL_POLICIES:
        t = time.perf_counter()
        simulate(w, policy=p, replicas=replicas, rate_rps=rate_rps, paths=paths)
        times[p] = time.perf_counter() - t
        print(
            f"queueing {p:12s} {requests:,} requests, {replicas} replicas, {rate_rps:g} req/s: "
            f"{times[p]:.2f} s"
        )
    return times


if __name__ == "__main__":  # pragma: no cover
    bench()
