"""The timed simulator's run (:func:`simulate`): its arguments checked, the arrivals drawn, then
the compiled loop (:mod:`~kvlab.queueing.fast`) when it covers the run, else the reference loop
(:mod:`~kvlab.queueing.reference`), or the engine-model loop
(:mod:`~kvlab.queueing.engine_backend`) for an engine calibration, and the per-request result in
arrival order."""

from __future__ import annotations

import numpy as np

from .. import routing
from .._validate import check_choice, check_int, non_negative, positive
from ..assumptions import CostModel
from ..costs import BOOK, as_costs
from ..engine_model import EngineCalibration
from . import engine_backend, fast, reference
from .replica import _INF
from .result import QueueResult
from .traffic import _open_arrivals, _session_starts


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
    cost: CostModel | str | EngineCalibration = BOOK,
    tp: int | None = None,
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
    _reference: bool = False,
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

    A run with no replica joining or failing runs on a compiled loop
    (:mod:`~kvlab.queueing.kernel`), the rest on the reference loop
    (:mod:`~kvlab.queueing.reference`); ``_reference=True`` forces the reference (same results).

    With an :class:`kvlab.engine_model.EngineCalibration` as ``cost``, every replica is an
    engine-model engine of ``tp`` GPUs (None: 8) instead (:mod:`kvlab.queueing.engine_backend`:
    ``cache_tokens`` must then be None, the prefix cache being the engine's KV pool; no replica
    joins or fails, one router replica, no ``prefill_only``). ``tp`` is for that case only.
    """
    check_choice("policy", policy, set(routing.ALL_POLICIES))
    R = check_int("replicas", replicas, lo=1, hi=4096)
    bs = check_int("block_size", block_size, lo=1, hi=1_000_000)
    cal = cost if isinstance(cost, EngineCalibration) else None
    if cal is not None:
        tp = engine_backend.check_supported(
            cal,
            tp=tp,
            block_size=bs,
            cache_tokens=cache_tokens,
            add_replica_at_s=add_replica_at_s,
            fail_replica_at_s=fail_replica_at_s,
            router_replicas=router_replicas,
            prefill_only=prefill_only,
        )
    elif tp is not None:
        raise ValueError(
            f"tp is for an EngineCalibration only, got tp={tp!r} with cost={cost!r} (a cost model "
            "is for its own TP: kvlab.costs.cost_model(..., tp=...))"
        )
    cap = (1 << 62) if cache_tokens is None else check_int("cache_tokens", cache_tokens, lo=0) // bs
    rec_cap = (
        (1 << 62)
        if record_tokens is None
        else check_int("record_tokens", record_tokens, lo=0) // bs
    )
    seed = check_int("seed", seed, lo=0)
    if not isinstance(cost, EngineCalibration):
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

    n_routers = check_int("router_replicas", router_replicas, lo=1, hi=1024)
    nxt = think = None
    if closed:
        pred = np.asarray(w.predecessor, dtype=np.int64)
        nxt = np.full(n, -1, dtype=np.int64)
        has = pred >= 0
        nxt[pred[has]] = np.flatnonzero(has)
        think = np.asarray(w.think_s, dtype=float) / speedup

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
    out = None
    if cal is not None:
        assert tp is not None  # check_supported gave it
        out = engine_backend.run(w, paths, cal, tp, max_batch, chunk, nxt, think, fixed_t, fixed_r,
                                 policy, R, router, view, load, rec_cap)  # fmt: skip
        out.update(online_s=np.full(R, t0), replicas=R, retried=0, resent=None,
                   keys_moved=None, router=router)  # fmt: skip
    elif not _reference and fast.covers(add_replica_at_s, fail_replica_at_s):
        out = fast.run(w, paths, router, policy, R, fixed_t, fixed_r, nxt, think, cost, cap,
                       rec_cap, max_batch, chunk, prefill_only, view, load, eps, lam, slack,
                       seed, n_routers)  # fmt: skip
        if out is not None:
            out.update(online_s=np.full(R, t0), replicas=R, retried=0, resent=None,
                       keys_moved=None, router=router)  # fmt: skip
    if out is None:
        out = reference.run(w, paths, cost, cap, rec_cap, max_batch, chunk, prefill_only, nxt,
                            think, fixed_t, fixed_r, policy, R, router, make_router, sticky, view,
                            load, n_routers, seed, add_at, fail_at, fail_idx, age)  # fmt: skip
    order, arrival, router = out["order"], out["arrival"], out["router"]
    perm = np.asarray(order, dtype=np.int64)
    if len(perm) != n:  # pragma: no cover - every request arrives exactly once
        raise RuntimeError(f"{len(perm)} of {n} requests arrived")
    arr = np.asarray(arrival)[perm]
    finish = np.asarray(out["finish"])[perm]
    end = float(finish.max())
    area = sum(out["area"])
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
    if "output_tokens" in out:  # the engine's count
        out_tokens = np.asarray(out["output_tokens"], dtype=np.int64)
    elif prefill_only:
        out_tokens = np.ones(n, dtype=np.int64)
    else:
        out_tokens = np.asarray(w.output_tokens, dtype=np.int64)
    return QueueResult(
        policy=policy,
        replicas=out["replicas"],
        warmup=warmup,
        arrival_s=arr,
        start_s=np.asarray(out["start"])[perm],
        first_token_s=np.asarray(out["first"])[perm],
        finish_s=finish,
        prompt_tokens=np.asarray(w.prompt_tokens, dtype=np.int64)[perm],
        output_tokens=out_tokens[perm],
        hit_tokens=np.asarray(out["hit"], dtype=np.int64)[perm],
        replica=np.asarray(out["choice"], dtype=np.int64)[perm],
        busy_s=out["busy_s"],
        prefill_busy_s=out["prefill_busy_s"],
        online_s=out["online_s"],
        mean_in_system=area / (end - t0) if end > t0 else 0.0,
        end_s=end,
        added_at_s=None if add_replica_at_s is None else float(add_replica_at_s),
        failed_at_s=None if fail_replica_at_s is None else float(fail_replica_at_s),
        retried=out["retried"],
        resent=None if fail_replica_at_s is None else out["resent"][perm],
        keys_moved=out["keys_moved"],
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
            **out.get("params", {}),
        ),
        predecessor=predecessor,
        count_until=count_until,
    )


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
