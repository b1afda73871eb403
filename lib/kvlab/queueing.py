"""Queues, not just hit rates: a discrete-event simulator of a fleet of replicas in time.

Each request arrives at a time (a seeded Poisson process at ``rate_rps``, or the trace's own
``arrival_s``), is routed to a replica by a :mod:`kvlab.routing` policy, waits in that replica's
FIFO prefill queue, is prefilled, then decodes with continuous batching.

Per replica (costs from :data:`kvlab.assumptions.COST`, configurable):

* **Prefix cache**: the exact semantics of :mod:`kvlab.fleet` (blocks of ``block_size`` tokens, LRU,
  deepest blocks of a request evicted first), kept as fleet's per-entry ``OrderedDict`` and
  :func:`kvlab.fleet._touch` over the workload's :class:`kvlab.workload.Paths`. Timing matters: a
  request's hit is looked up when its prefill *starts*, and its blocks (prompt and answer, as
  fleet's "after serving") enter the cache when its prefill *ends*. Two turns of one chat that
  overlap in time therefore miss each other. Blocks of running requests are not pinned and their
  KV memory is not modelled (``cache_tokens`` is the cache pool).
* **Prefill**: ``prefill_s_per_token`` per uncached prompt token (at least one token is computed).
  Without chunking (``chunk_tokens=None``) a prompt is prefilled whole and decoding pauses meanwhile
  (prefill first, as vLLM's classic scheduler). With chunking a step carries up to ``chunk_tokens``
  prompt tokens (of one or more queued requests, FIFO) beside the decode batch; its time is the
  decode step's plus the chunk's prefill time.
* **Decode**: a step takes ``decode_base_s + decode_per_request_s x running`` and gives every running
  request one token; at most ``max_batch`` run, the rest wait for a slot. The first output token
  comes from prefill, so a request of ``o`` output tokens needs ``o - 1`` decode steps
  (``prefill_only=True``, or ``o <= 1``: none).

TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1).

Routing: ``make_router(policy, ...)``. The cache-aware load guard is fed the replicas' real
*outstanding* prefill work (tokens queued plus the rest of those in progress; queued requests are
counted by their hit at arrival) with ``load="outstanding"`` (default), or fleet's cumulative count
(``load="cumulative"``: all prefill tokens ever assigned). On outstanding work a purely relative
guard (load <= (1 + epsilon) x mean) is strict: the mean is small and any replica with a prompt in
its queue is above it. ``guard_slack_tokens`` = s adds an absolute slack, load <= (1 + epsilon) x
mean + s (like SGLang's absolute balance threshold), passed to the router as its ``slack``. ``view="stale"``: matched tokens from the
router's own record of what it sent where (never learns of evictions); ``"exact"``: from the caches.

A replica can join at ``add_replica_at_s`` (empty cache): modulo-sticky remaps ``key mod (N+1)``,
a ring (``sticky="ring"``) adds the new replica's points; the share of keys seen so far that move
is reported as ``keys_moved``.

How it is fast: replicas only interact through the router, so each replica is advanced lazily to
the next arrival that needs it, and a run of decode-only steps between two events (an arrival or a
request finishing) is taken in one jump. 100,000 chat requests on 8 replicas take a few seconds
(:func:`bench`).
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
from .assumptions import COST, CostModel
from .fleet import _touch
from .latency import RequestTimes
from .workload import Paths

__all__ = [
    "IndependentRequests",
    "QueueResult",
    "bench",
    "mg1_wait_s",
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


@dataclass
class QueueResult(RequestTimes):
    """Per-request times (s) and tokens, per-replica busy time. Statistics count requests from
    index ``warmup`` on (arrival order)."""

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
    keys_moved: float | None = None  # share of keys seen before the addition whose owner changed
    params: dict = field(default_factory=dict)

    # -- per-request metrics -----------------------------------------------------------------------

    @property
    def wait_s(self) -> np.ndarray:
        """Queueing delay before prefill starts."""
        return self.start_s - self.arrival_s

    # -- summaries ---------------------------------------------------------------------------------
    @property
    def counted(self) -> slice:
        return slice(self.warmup, None)

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
    """One replica's queues, batch and cache, advanced lazily in time by :meth:`advance`."""

    __slots__ = (
        "sim",
        "q",
        "left",
        "started",
        "out_tokens",
        "assigned",
        "running",
        "waiting",
        "steps",
        "end",
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

    def __init__(self, sim, now: float):
        self.sim = sim
        self.q: deque = deque()  # request ids waiting for (the rest of) their prefill
        self.left = 0  # prefill tokens still to compute for the head of q (when started)
        self.started = False  # has the head of q started (hit looked up)?
        self.out_tokens = 0  # outstanding prefill tokens (queued estimates + rest in progress)
        self.assigned = 0  # every prefill token ever assigned (estimates corrected at start)
        self.running: list = []  # heap of (decode step at which it finishes, request id)
        self.waiting: deque = deque()  # (request id, decode tokens) waiting for a batch slot
        self.steps = 0  # decode steps done
        self.end = _INF  # end time of the current segment of steps; inf when idle
        self.seg_steps = 0  # decode steps in the current segment
        self.seg_decode = False
        self.seg_done: list = []  # requests whose prefill ends with the current segment
        self.cache: OrderedDict = OrderedDict()
        self.used = 0
        self.busy_s = 0.0
        self.prefill_busy_s = 0.0
        self.n_sys = 0
        self.area = 0.0
        self.last = now
        self.online_s = now

    def _count(self, t: float, delta: int) -> None:
        self.area += self.n_sys * (t - self.last)
        self.last = t
        self.n_sys += delta

    def add(self, rid: int, est_tokens: int, t: float) -> None:
        """Request ``rid`` arrives at ``t`` (the replica has been advanced to ``t``)."""
        self._count(t, +1)
        self.q.append(rid)
        self.out_tokens += est_tokens
        self.assigned += est_tokens
        if self.end == _INF:
            self._start(t, t)

    def advance(self, t: float) -> None:
        """Process every step that ends strictly before ``t`` (``inf``: run to completion)."""
        while self.end < t:
            now = self.end
            self._finish_segment(now)
            self._start(now, t)

    # -- steps -------------------------------------------------------------------------------------
    def _start(self, now: float, horizon: float) -> None:
        sim = self.sim
        running, waiting = self.running, self.waiting
        while waiting and len(running) < sim.max_batch:
            rid, tokens = waiting.popleft()
            heapq.heappush(running, (self.steps + tokens, rid))
        q = self.q
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
            self.end = now + dur
            self.seg_steps = 1 if decoding else 0
            self.seg_decode = decoding
            self.seg_done = done
            return
        if running:  # decode only until the next finish or the first step boundary >= horizon
            d = sim.a + sim.k * len(running)
            n = running[0][0] - self.steps
            if horizon < _INF:
                n = min(n, max(1, math.ceil((horizon - now) / d)))
            dur = n * d
            self.busy_s += dur
            self.end = now + dur
            self.seg_steps = n
            self.seg_decode = True
            self.seg_done = []
            return
        self.end = _INF

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

    def _finish_segment(self, t: float) -> None:
        sim = self.sim
        if self.seg_decode:
            self.steps += self.seg_steps
            running = self.running
            while running and running[0][0] <= self.steps:
                _, rid = heapq.heappop(running)
                sim.finish[rid] = t
                self._count(t, -1)
        for rid in self.seg_done:
            sim.first[rid] = t
            self._insert(rid)
            d = sim.dec[rid]
            if d > 0:
                self.waiting.append((rid, d))
            else:
                sim.finish[rid] = t
                self._count(t, -1)
        self.end = _INF

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


class _Sim:
    """State shared by the replicas of one run (request arrays as lists, costs)."""

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
        self.tau = cost.prefill_s_per_token
        self.a = cost.decode_base_s
        self.k = cost.decode_per_request_s
        self.cap = cap
        self.max_batch = max_batch
        self.chunk = chunk
        self.hit = [0] * n
        self.est = [0] * n
        self.start = [math.nan] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n


def _arrivals(w, rate_rps, arrival_s, speedup, seed) -> np.ndarray:
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
    cost: CostModel = COST,
    max_batch: int = 256,
    chunk_tokens: int | None = None,
    prefill_only: bool = False,
    epsilon: float = 0.05,
    lam: float = 0.0,
    view: str = "stale",
    load: str = "outstanding",
    guard_slack_tokens: float = 0.0,
    sticky: str = "modulo",
    vnodes: int = 100,
    add_replica_at_s: float | None = None,
    warmup: int = 0,
    paths=None,
) -> QueueResult:
    """Serve every request of ``w`` (ChatWorkload, Trace, IndependentRequests) in time.

    Arrivals: Poisson at ``rate_rps`` (seeded by ``seed``), else ``arrival_s``, else the
    workload's ``arrival_s`` (a trace), divided by ``speedup``. ``replicas``: 1 to 4096 replicas,
    each with an LRU prefix cache of ``cache_tokens`` (None: unlimited) and at most ``max_batch``
    decoding requests; ``chunk_tokens`` turns on chunked prefill. ``policy`` in
    routing.POLICIES; ``epsilon``, ``lam``, ``view`` ("stale"/"exact") and ``load``
    ("outstanding"/"cumulative") tune "cache_aware"; ``sticky`` ("modulo"/"ring") and ``vnodes``
    tune "sticky". ``add_replica_at_s``: one more replica joins then. ``warmup``: statistics skip
    the first requests (they still run). ``paths``: a precomputed ``w.paths(block_size)``.
    """
    check_choice("policy", policy, set(routing.POLICIES))
    R = check_int("replicas", replicas, lo=1, hi=4096)
    bs = check_int("block_size", block_size, lo=1, hi=1_000_000)
    cap = (1 << 62) if cache_tokens is None else check_int("cache_tokens", cache_tokens, lo=0) // bs
    seed = check_int("seed", seed, lo=0)
    if not isinstance(cost, CostModel):
        raise ValueError(f"cost must be a kvlab.assumptions.CostModel, got {cost!r}")
    max_batch = check_int("max_batch", max_batch, lo=1, hi=1_000_000)
    chunk = None if chunk_tokens is None else check_int("chunk_tokens", chunk_tokens, lo=1)
    eps = non_negative("epsilon", epsilon)
    lam = non_negative("lam", lam)
    view = check_choice("view", view, {"stale", "exact"})
    load = check_choice("load", load, {"outstanding", "cumulative"})
    slack = non_negative("guard_slack_tokens", guard_slack_tokens)
    check_choice("sticky", sticky, {"modulo", "ring"})
    vnodes = check_int("vnodes", vnodes, lo=1, hi=100_000)
    n = len(w)
    if n < 1:
        raise ValueError("w must hold at least one request")
    warmup = check_int("warmup", warmup, lo=0, hi=n - 1)
    arr = _arrivals(w, rate_rps, arrival_s, speedup, seed)
    add_at = (
        _INF if add_replica_at_s is None else non_negative("add_replica_at_s", add_replica_at_s)
    )
    if paths is None:
        paths = w.paths(bs)
    elif paths.block_size != bs:
        raise ValueError(f"paths were built for block_size {paths.block_size}, got {block_size}")

    sim = _Sim(w, paths, cost, cap, max_batch, chunk, bool(prefill_only))

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
        )

    router = make_router(R)
    t0 = float(arr[0])
    reps = [_Replica(sim, t0) for _ in range(R)]
    known: list[dict] = [dict() for _ in range(R)]
    ca = policy == "cache_aware"
    stale = view == "stale"
    outstanding = load == "outstanding"
    keys = np.asarray(w.key).tolist()
    arr_l = arr.tolist()
    choice = [0] * n
    seen_keys: dict = {}
    keys_moved = None
    ks_l, ns_l, mh_l, est_l, prompt_l = sim.ks, sim.ns, sim.mh, sim.est, sim.prompt
    for i in range(n):
        t = arr_l[i]
        if t >= add_at:
            add_at = _INF
            reps.append(_Replica(sim, t))
            known.append(dict())
            new = _grow(router, policy, sticky, R + 1, make_router)
            if policy == "sticky":
                moved = sum(router.choose(k) != new.choose(k) for k in seen_keys)
                keys_moved = moved / max(len(seen_keys), 1)
            router, R = new, R + 1
        key = keys[i]
        ks, ns, mh = ks_l[i], ns_l[i], mh_l[i]
        if ca:
            for rp in reps:
                rp.advance(t)
            if stale:
                m = [_match(kn, ks, ns, mh) * sim.bs for kn in known]
            else:
                m = [_match(rp.cache, ks, ns, mh) * sim.bs for rp in reps]
            loads = [rp.out_tokens for rp in reps] if outstanding else [rp.assigned for rp in reps]
            r = router.choose(key, m, loads)
            if stale:
                kn = known[r]
                for kk, nb in zip(ks, ns, strict=True):
                    if kn.get(kk, 0) < nb:
                        kn[kk] = nb
            rp = reps[r]
        else:
            r = router.choose(key)
            rp = reps[r]
            rp.advance(t)
        if policy == "sticky":
            seen_keys[key] = None
        choice[i] = r
        est = prompt_l[i] - _match(rp.cache, ks, ns, mh) * sim.bs
        est_l[i] = est
        rp.add(i, est, t)
    for rp in reps:
        rp.advance(_INF)

    finish = np.asarray(sim.finish)
    end = float(finish.max())
    area = sum(rp.area for rp in reps)
    return QueueResult(
        policy=policy,
        replicas=R,
        warmup=warmup,
        arrival_s=arr,
        start_s=np.asarray(sim.start),
        first_token_s=np.asarray(sim.first),
        finish_s=finish,
        prompt_tokens=np.asarray(w.prompt_tokens, dtype=np.int64),
        output_tokens=(
            np.ones(n, dtype=np.int64)
            if prefill_only
            else np.asarray(w.output_tokens, dtype=np.int64)
        ),
        hit_tokens=np.asarray(sim.hit, dtype=np.int64),
        replica=np.asarray(choice, dtype=np.int64),
        busy_s=np.array([rp.busy_s for rp in reps]),
        prefill_busy_s=np.array([rp.prefill_busy_s for rp in reps]),
        online_s=np.array([rp.online_s for rp in reps]),
        mean_in_system=area / (end - t0) if end > t0 else 0.0,
        end_s=end,
        added_at_s=None if add_replica_at_s is None else float(add_replica_at_s),
        keys_moved=keys_moved,
        params=dict(
            rate_rps=rate_rps,
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
            cost=cost,
        ),
    )


def _grow(router, policy, sticky, R, make_router):
    """The router after one replica joins: a ring gains the new replica's points, the others are
    rebuilt by ``make_router(R)`` (modulo-sticky then maps key mod R)."""
    if policy == "sticky" and sticky == "ring":
        import copy

        new = copy.deepcopy(router)
        new.ring.add_replica()
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


def bench(requests: int = 100_000, replicas: int = 8, rate_rps: float = 20.0) -> dict:
    """Time one run per policy of ``requests`` demo chat requests on ``replicas`` replicas (one
    core) and print the times. Returns {policy: seconds}."""
    from .workload import ChatWorkload

    w = ChatWorkload(requests=check_int("requests", requests, lo=1))
    paths = w.paths(16)
    times = {}
    for p in routing.POLICIES:
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
