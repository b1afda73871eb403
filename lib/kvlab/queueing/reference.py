"""The timed simulator's reference loop (:func:`run`): the event-by-event run over
:class:`~kvlab.queueing.replica._Replica` objects and ``OrderedDict`` caches, with every routing
policy, router replicas, a replica joining or failing. :func:`kvlab.queueing.simulate` runs it
when the compiled loop (:mod:`kvlab.queueing.kernel`) does not cover a run, or when asked
(``_reference=True``); the two must give the same results."""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import numpy as np

from .. import routing
from .dispatch import route
from .replica import _INF, _match, _Replica, _Sim, arrivals


def run(w, paths, cost, cap, rec_cap, max_batch, chunk, prefill_only, nxt, think, fixed_t,
        fixed_r, policy, replicas, router, make_router, sticky, view, load, n_routers, seed,
        add_at, fail_at, fail_idx, age) -> dict:  # fmt: skip
    """Serve every request of ``w`` (the arguments as :func:`kvlab.queueing.simulate` checked
    them; ``router`` made by ``make_router(replicas)``). Returns the per-request lists (by request
    id) and per-replica figures :func:`kvlab.queueing.simulate` builds its result from."""
    sim = _Sim(w, paths, cost, cap, max_batch, chunk, bool(prefill_only))
    if nxt is not None:
        sim.nxt = nxt.tolist()
        sim.think = think.tolist()
    n = len(w)
    R = replicas
    t0 = float(fixed_t[0])
    ends = sim.ends
    reps = []
    for r in range(R):
        ends.append(_INF)
        reps.append(_Replica(sim, r, t0))
    uses_cache = "matched_tokens" in routing.SIGNALS[policy]
    stale = view == "stale"
    # one record per router replica (each knows only what it routed), each per replica
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
    for t, i in arrivals(fixed_t, fixed_r, pending, ends, reps):
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
        if uses_cache and router_of is not None:  # the router replica that receives this request
            known, known_used = known_sets[router_of[i]], used_sets[router_of[i]]
            lknown = [known[j] for j in live]
        src = (lknown if stale else [rp.cache for rp in lreps]) if uses_cache else None
        r = route(router, policy, key, ks, ns, mh, prompt_l[i], sim.bs, live, lreps, src, stale,
                  outstanding, known, known_used, rec_cap)  # fmt: skip
        rp = reps[r]
        if policy == "sticky":
            seen_keys[key] = None
        choice[i] = r
        est = prompt_l[i] - _match(rp.cache, ks, ns, mh) * sim.bs
        est_l[i] = est
        rp.add(i, est, t)
    return dict(
        arrival=arrival,
        order=order,
        start=sim.start,
        first=sim.first,
        finish=sim.finish,
        hit=sim.hit,
        choice=choice,
        busy_s=np.array([rp.busy_s for rp in reps]),
        prefill_busy_s=np.array([rp.prefill_busy_s for rp in reps]),
        online_s=np.array([rp.online_s for rp in reps]),
        area=[rp.area for rp in reps],
        replicas=len(reps),
        retried=n_retried,
        resent=resent,
        keys_moved=keys_moved,
        router=router,
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
