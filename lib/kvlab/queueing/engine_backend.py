"""The timed fleet simulator on the engine model (:func:`run`): every replica is a
:class:`kvlab.engine_model.Engine` (vLLM v1's scheduling: a token budget per step, chunked prefill
of several prompts per step, admission on free KV blocks, preemption by recompute; the prefix cache
in the same KV pool, free cached blocks evicted least recently freed first), costed step by step
from aiconfigurator's measured database (:class:`kvlab.engine_model.EngineCalibration`).
:func:`kvlab.queueing.simulate` runs it when ``cost`` is an ``EngineCalibration``.

What stays as in :mod:`kvlab.queueing` (its module docstring): the traffic (closed-loop
:class:`~kvlab.queueing.ChatSessions`, whose next turn arrives a think time after the previous
answer finishes; open-loop workloads and traces), the arrivals (:func:`.replica.arrivals`,
:func:`.replica._next_turn`), the routers and their signals (:func:`.dispatch.route`, read at
each arrival) and the result (:class:`~kvlab.queueing.QueueResult`; TTFT = first token -
arrival, TPOT = (finish - first token) / (output tokens - 1)).

What the engine model changes:

* **Blocks.** A request's KV blocks are keyed by its cache path (:class:`kvlab.workload.Paths`,
  the entries the reference loop matches on): block ``j`` of entry ``key`` is ``(key, j)``, the
  prompt's full blocks first, then the answer's. Requests that share a prefix (a system prompt,
  a chat's earlier turns) share cached blocks in an engine's pool; a finished request's blocks
  stay cached, free and evictable (``kvlab.engine_model.kv_pool``).
* **Per replica**: one engine of ``tp`` GPUs (default 8, the book's replica) with the pool
  :meth:`EngineCalibration.num_blocks` gives (blocks of ``block_size`` tokens, the prefix cache
  included), ``max_num_seqs = max_batch`` and a step budget of ``max_batch + chunk_tokens``
  tokens, or vLLM's default (8,192 on an H100 or H200) when ``chunk_tokens`` is None, as
  :mod:`kvlab.pdsim.engine_backend` sets a colocated replica.
* **Per request**: ``start_s`` is its admission (the start of its first scheduled step),
  ``hit_tokens`` the engine's prefix-cache hit at admission (whole blocks, never the last prompt
  token), first token and finish the ends of the steps that sample them, ``output_tokens`` the
  tokens the engine sampled for it (at least one: the first comes from the prefill).
* **Signals**, from the engines (``view="exact"`` reads matches from the engines' pools by block
  keys; ``view="stale"`` from the router's own record, as the reference loop):
  ``out_tokens`` = prompt tokens still to compute for the requests without a first token (a
  waiting request counted by its match at arrival); ``assigned`` (``load="cumulative"``) = those
  estimates, corrected to the real hit at admission; live requests = the engine's waiting and
  running ones (with those finishing in the step under way); SGLang's tree size = blocks cached in
  the pool; Dynamo's held tokens = blocks in use in the pool (each shared block once) plus this
  request's blocks not among them, times ``block_size`` (a waiting request holds no block yet,
  where the reference loop counts every request in the replica with its whole path).
* ``busy_s`` (s): the engine's time in steps; ``prefill_busy_s`` (s): the time of steps that
  carried prompt tokens (a mixed step counted whole). ``params`` adds ``tp``, ``num_blocks`` (per
  replica), ``max_num_batched_tokens``, ``max_num_seqs`` and ``preemptions`` (per replica).

Not supported here (:func:`check_supported` raises ``ValueError`` naming the argument):
``cache_tokens`` other than None (its default, 400,000 tokens, included: the prefix cache is the
KV pool, sized from GPU memory by the calibration), ``add_replica_at_s``, ``fail_replica_at_s``,
``router_replicas`` > 1 and ``prefill_only``. ``fleet_age_s`` (read only at a join) and
``_reference`` have no effect.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from typing import cast

import numpy as np

from .. import routing
from .._validate import check_int
from ..costs import BOOK_TP
from ..engine_model import Engine, EngineCalibration, EngineConfig, Request, batch_defaults
from ..engine_model.engine import DecodeRun, StepRecord
from ..engine_model.kv_pool import KVPool
from .dispatch import route
from .replica import _INF, _deepest, _match, _next_turn, arrivals, split_paths


def _rid(r: Request) -> int:
    """A request's id: its index in the run (the engine types ids as any hashable)."""
    return cast(int, r.rid)


def check_supported(
    cal: EngineCalibration,
    *,
    tp: int | None,
    block_size: int,
    cache_tokens: int | None,
    add_replica_at_s: float | None,
    fail_replica_at_s: float | None,
    router_replicas: int,
    prefill_only: bool,
) -> int:
    """Raise ``ValueError`` naming the first argument the engine backend does not take; return
    the replica's GPUs (``tp``; None: the book's 8)."""
    tp = BOOK_TP if tp is None else check_int("tp", tp, lo=1, hi=64)
    if cache_tokens is not None:
        bs = check_int("block_size", block_size, lo=1, hi=1_000_000)
        blocks = cal.num_blocks(tp, bs)
        raise ValueError(
            f"cache_tokens must be None with an EngineCalibration, got {cache_tokens!r}: the "
            f"prefix cache is each engine's KV pool, sized from GPU memory by the calibration "
            f"({blocks:,} blocks of {bs} tokens = {blocks * bs:,} tokens per replica of {tp} "
            f"{cal.gpu})"
        )
    if add_replica_at_s is not None:
        raise ValueError("add_replica_at_s is not supported with an EngineCalibration")
    if fail_replica_at_s is not None:
        raise ValueError("fail_replica_at_s is not supported with an EngineCalibration")
    if router_replicas != 1:
        raise ValueError(
            f"router_replicas must be 1 with an EngineCalibration, got {router_replicas!r}"
        )
    if prefill_only:
        raise ValueError("prefill_only is not supported with an EngineCalibration")
    return tp


def engine_config(
    cal: EngineCalibration, tp: int, block_size: int, max_batch: int, chunk: int | None
) -> EngineConfig:
    """One replica's scheduler settings (module docstring): the calibration's pool at ``tp``,
    ``max_batch`` sequences, a budget of ``max_batch + chunk`` tokens (None: vLLM's default)."""
    mbt, _ = batch_defaults(cal.gpu)
    return EngineConfig(
        cal.num_blocks(tp, block_size),
        block_size=block_size,
        max_num_batched_tokens=max_batch + chunk if chunk else mbt,
        max_num_seqs=max_batch,
    )


def block_keys(ks: Sequence[Hashable], ns: Sequence[int]) -> list[tuple]:
    """The block keys of a cache path (entry keys ``ks``, full blocks ``ns`` of each): block ``j``
    of entry ``key`` is ``(key, j)``, in path order."""
    return [(key, j) for key, nb in zip(ks, ns, strict=True) for j in range(nb)]


def pool_match(pool: KVPool, ks, ns, mh: int) -> int:
    """Leading blocks of the path (ks, ns) cached in ``pool`` (in use or free), capped at ``mh``."""
    ref, lru = pool.ref, pool.lru
    x = 0
    for key, nb in zip(ks, ns, strict=True):
        for j in range(nb):
            if x >= mh:
                return mh
            b = (key, j)
            if b in ref or b in lru:
                x += 1
            else:
                return x
    return x if x < mh else mh


def pool_deepest(pool: KVPool, ks, ns) -> Hashable | None:
    """The key of the deepest entry of the path (ks, ns) with a leading block cached in ``pool``
    (None if none), as :func:`kvlab.queueing.replica._deepest` finds it in a record."""
    ref, lru = pool.ref, pool.lru
    node = None
    for key, nb in zip(ks, ns, strict=True):
        c = 0
        while c < nb and ((key, c) in ref or (key, c) in lru):
            c += 1
        if c:
            node = key
        if c < nb:
            break
    return node


class _Fleet:
    """What a run's replicas share: per-request results (s, tokens) and the event lists."""

    def __init__(self, n: int, nxt, think):
        self.start = [math.nan] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        self.hit = [0] * n
        self.generated = [0] * n  # output tokens each request received
        self.est = [0] * n  # prompt tokens to compute, as estimated at arrival
        self.ends: list[float] = []  # per replica: end of its step or run of steps (inf: idle)
        self.pending: list = []  # closed loop: heap of (arrival s, request id)
        self.nxt = None if nxt is None else nxt.tolist()
        self.think = [] if think is None else think.tolist()


class _EngineReplica:
    """One replica: an engine, the step or run of decode steps under way, and the signals the
    routers read. :func:`~kvlab.queueing.replica.arrivals` calls :meth:`step` when the step or run
    ends, the run loop :meth:`add` at each arrival routed here."""

    __slots__ = ("fleet", "idx", "engine", "plan", "rec", "prefill", "unstarted", "assigned",
                 "prefill_busy_s")  # fmt: skip

    def __init__(self, fleet: _Fleet, idx: int, engine: Engine):
        self.fleet = fleet
        self.idx = idx
        self.engine = engine
        self.plan: DecodeRun | None = None  # a run of decode steps under way
        self.rec: StepRecord | None = None  # a step under way (the engine has taken it)
        self.prefill: dict[int, Request] = {}  # requests without their first token yet
        self.unstarted: deque[Request] = deque()  # not yet admitted, in arrival order
        self.assigned = 0  # every prefill token assigned (estimates corrected at admission)
        self.prefill_busy_s = 0.0
        fleet.ends.append(_INF)

    # -- the routers' signals ----------------------------------------------------------------------
    @property
    def out_tokens(self) -> int:
        """Prompt tokens still to compute (those of the step under way counted as done) for the
        requests without a first token; one not yet admitted counts its estimate at arrival."""
        est = self.fleet.est
        x = 0
        for r in self.prefill.values():
            x += max(r.prompt_len - r.num_computed, 0) if r.cached_tokens >= 0 else est[_rid(r)]
        return x

    @property
    def n_sys(self) -> int:
        """Requests in the replica: waiting, running, or finishing in the step under way."""
        e = self.engine
        done = len(self.rec.finished) if self.rec is not None else 0
        return e.num_waiting + e.num_running + done

    @property
    def used(self) -> int:
        """Blocks cached in the pool (in use or free)."""
        pool = self.engine.pool
        return len(pool.ref) + len(pool.lru)

    def active_blocks(self, ks, ns) -> int:
        """Blocks in use in the pool (each shared block once) and the path's blocks not in use."""
        pool = self.engine.pool
        ref = pool.ref
        held = 0
        for key, nb in zip(ks, ns, strict=True):
            c = 0
            while c < nb and (key, c) in ref:
                c += 1
            held += c
            if c < nb:
                break
        return pool.num_blocks - pool.num_free + sum(ns) - held

    # -- events --------------------------------------------------------------------------------------
    def _set_end(self, t: float) -> None:
        self.fleet.ends[self.idx] = t

    def add(self, req: Request, est: int, t: float) -> None:
        """``req`` arrives at ``t`` (s) with ``est`` prompt tokens to compute as estimated now
        (every step or run ending before ``t`` is done)."""
        self.prefill[_rid(req)] = req
        self.unstarted.append(req)
        self.assigned += est
        e = self.engine
        plan = self.plan
        if plan is not None:  # a run of decode steps: stop it at the first step boundary >= t
            self.plan = None
            e.add(req)
            if t > plan.start_s:
                self.rec = e.apply_run(plan, plan.steps_before(t))
                self._set_end(self.rec.end_s)
            else:  # the run has not begun: plan again with the request
                self._schedule()
            return
        e.add(req)
        if self.rec is None:  # idle: start now
            e.now = max(e.now, t)
            self._schedule()
        # else a step is under way: the request waits for the next one

    def step(self) -> None:
        """The step or run under way ends: hand out its tokens, start the next."""
        if self.plan is not None:
            rec = self.engine.apply_run(self.plan)
            self.plan = None
        else:
            assert self.rec is not None, "step() with no step under way"
            rec = self.rec
            self.rec = None
        fleet = self.fleet
        t = rec.end_s
        for r in rec.first:
            fleet.first[_rid(r)] = t
            self.prefill.pop(_rid(r), None)
        for r in rec.finished:
            fleet.finish[_rid(r)] = t
            fleet.generated[_rid(r)] = r.generated
            r.keys = ()  # its blocks are in the pool; the list is no longer needed
            _next_turn(fleet.pending, fleet.nxt, fleet.think, _rid(r), t)
        self._schedule()

    def _schedule(self) -> None:
        e = self.engine
        if not e.has_work():
            self._set_end(_INF)
            return
        plan = e.plan_run()
        if plan is not None:
            self.plan = plan
            self._set_end(float(plan.ends_s[-1]))
            return
        rec = e.step()
        if not rec.prompt_tokens and not rec.decode_batch:  # pragma: no cover - checked upfront
            raise RuntimeError("queueing engine run: a step scheduled nothing")
        if rec.prompt_tokens:
            self.prefill_busy_s += rec.end_s - rec.start_s
        fleet, u = self.fleet, self.unstarted
        while u and u[0].cached_tokens >= 0:  # admitted in arrival order
            r = u.popleft()
            fleet.start[_rid(r)] = rec.start_s
            fleet.hit[_rid(r)] = r.cached_tokens
            self.assigned += r.prompt_len - r.cached_tokens - fleet.est[_rid(r)]
        self.rec = rec
        self._set_end(rec.end_s)


def run(w, paths, cal: EngineCalibration, tp: int, max_batch: int, chunk: int | None, nxt, think,
        fixed_t, fixed_r, policy: str, replicas: int, router, view: str, load: str,
        rec_cap: int) -> dict:  # fmt: skip
    """Serve every request of ``w`` on ``replicas`` engines (arguments as
    :func:`kvlab.queueing.simulate` checked them; ``router`` made for ``replicas``). Returns the
    per-request lists (by request id) and per-replica figures ``simulate`` builds its result
    from, as :func:`kvlab.queueing.reference.run` does."""
    n = len(w)
    bs = paths.block_size
    cfg = engine_config(cal, tp, bs, max_batch, chunk)
    costs = cal.costs(tp)
    ks_l, ns_l = split_paths(paths, n)
    mh_l = paths.max_hit_blocks.tolist()
    prompt = np.asarray(w.prompt_tokens, dtype=np.int64)
    out = np.maximum(np.asarray(w.output_tokens, dtype=np.int64), 1)  # the first comes anyway
    need = -(-(prompt + out) // bs)
    if need.max() > cfg.num_blocks:
        i = int(need.argmax())
        raise ValueError(
            f"request {i} ({prompt[i]} + {out[i]} tokens) needs {need[i]} KV blocks, more than a "
            f"replica's pool of {cfg.num_blocks} blocks of {bs} tokens"
        )
    prompt_l, out_l = prompt.tolist(), out.tolist()
    keys = np.asarray(w.key).tolist()
    fleet = _Fleet(n, nxt, think)
    reps = [_EngineReplica(fleet, r, Engine(costs, cfg)) for r in range(replicas)]
    live = list(range(replicas))
    stale = view == "stale"
    outstanding = load == "outstanding"
    uses_cache = "matched_tokens" in routing.SIGNALS[policy]
    known: list[OrderedDict] = [OrderedDict() for _ in range(replicas)]
    known_used = [0] * replicas
    pools = [rp.engine.pool for rp in reps]
    src = (known if stale else pools) if uses_cache else None
    match, deepest = (_match, _deepest) if stale else (pool_match, pool_deepest)
    choice = [0] * n
    arrival = [math.nan] * n
    order: list[int] = []
    for t, i in arrivals(fixed_t, fixed_r, fleet.pending, fleet.ends, reps):
        arrival[i] = t
        order.append(i)
        ks, ns, mh = ks_l[i], ns_l[i], mh_l[i]
        r = route(router, policy, keys[i], ks, ns, mh, prompt_l[i], bs, live, reps, src, stale,
                  outstanding, known, known_used, rec_cap, match, deepest)  # fmt: skip
        choice[i] = r
        rp = reps[r]
        est = prompt_l[i] - pool_match(rp.engine.pool, ks, ns, mh) * bs
        fleet.est[i] = est
        req = Request(i, prompt_l[i], out_l[i], arrival_s=t, keys=block_keys(ks, ns))
        rp.add(req, est, t)
    finish = np.asarray(fleet.finish)
    if np.isnan(finish).any():  # pragma: no cover - every arrival is served
        raise RuntimeError("queueing engine run: a request never finished")
    stay = finish - np.asarray(arrival)
    return dict(
        arrival=arrival,
        order=order,
        start=fleet.start,
        first=fleet.first,
        finish=fleet.finish,
        hit=fleet.hit,
        output_tokens=fleet.generated,
        choice=choice,
        busy_s=np.array([rp.engine.busy_s for rp in reps]),
        prefill_busy_s=np.array([rp.prefill_busy_s for rp in reps]),
        area=np.bincount(choice, weights=stay, minlength=replicas).tolist(),
        params=dict(
            tp=tp,
            num_blocks=cfg.num_blocks,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
            preemptions=[rp.engine.preemptions for rp in reps],
        ),
    )
