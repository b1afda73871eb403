"""The timed simulator's run (:func:`simulate`): arrivals in time order, routing at each arrival,
the replicas' runs of steps in between; a replica joining or failing mid-run."""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import numpy as np

from .. import routing
from .._validate import check_choice, check_int, non_negative, positive
from ..assumptions import CostModel
from ..costs import BOOK, as_costs
from ..fleet import _touch
from .replica import _INF, _deepest, _match, _new_blocks, _Replica, _Sim
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
