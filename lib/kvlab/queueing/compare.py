"""Routers side by side in time over seeds (:func:`compare`), operations in time (a replica joins,
one fails: :func:`operations`), and the simulator's speed (:func:`bench`)."""

from __future__ import annotations

import time

import numpy as np

from .. import routing
from .._validate import check_int, check_number, positive
from .result import QueueResult
from .simulator import simulate
from .traffic import ChatSessions

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
    from ..seeds import DEFAULT_SEEDS, summarise

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
    from ..seeds import DEFAULT_SEEDS, summarise

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
