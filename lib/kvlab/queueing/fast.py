"""When :func:`kvlab.queueing.simulate` takes the compiled loop (:mod:`kvlab.queueing.kernel`), and
the loop's inputs: every request's cache path as dense entry ids, the choices of the routers that
read neither cache nor load made in advance (the same router object, the same draws), the ring's
points and each key's hash for ``bounded_ring``.

The compiled loop covers runs with no replica joining or failing (Problem 8's comparisons in
time, router replicas included); operations (a join, a failure) run on the reference loop. Both give
the same results (``lib/tests/test_queueing_fast.py`` checks them against each other).
"""

from __future__ import annotations

import numpy as np

from ..routing import stable_hash
from . import kernel as kn

#: Above this many replica x entry slots the loop's dense arrays get too big: use the reference.
MAX_SLOTS = 100_000_000
#: Above this many replica x batch slots the running heaps get too big: use the reference.
MAX_HEAP_SLOTS = 50_000_000

_CODES = {
    "random": kn.RANDOM,
    "round_robin": kn.ROUND_ROBIN,
    "sticky": kn.STICKY,
    "cache_aware": kn.CACHE_AWARE,
    "bounded_ring": kn.BOUNDED_RING,
    "sglang": kn.SGLANG,
    "dynamo": kn.DYNAMO,
}


def covers(add_replica_at_s, fail_replica_at_s) -> bool:
    """Whether the compiled loop serves this run (no replica joining or failing)."""
    return add_replica_at_s is None and fail_replica_at_s is None


def _dense(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys, each key's index among them)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq, inv.astype(np.int64).ravel()


def run(
    w, paths, router, policy, R, fixed_t, fixed_r, nxt, think, cost, cap, rec_cap, max_batch,
    chunk, prefill_only, view, load, eps, lam, slack, seed, n_routers,
) -> dict | None:  # fmt: skip
    """The compiled run, or None when it does not apply (numba missing, arrays too big).
    Returns (arrival, arrival order, start, first token, finish, hit tokens, replica) per request
    (the first two in arrival order for ``order``) and per replica (busy, prefill busy, area)."""
    loop = kn.kernel()
    if loop is None:  # pragma: no cover - numba is a dependency
        return None
    n = len(w)
    i64 = np.int64
    keys = np.asarray(paths.keys)
    if keys.dtype.kind not in "iu" or (len(keys) and keys.dtype.kind == "u" and keys.max() >> 63):
        return None  # the loop numbers entries by int64 keys (SGLang's order hashes the key)
    ukeys, ent = _dense(keys.astype(i64))
    K = len(ukeys)
    width = max(1, min(max_batch, n))
    if n_routers * R * K > MAX_SLOTS or R * width > MAX_HEAP_SLOTS:
        return None
    code = _CODES[policy]
    prechosen = np.zeros(1, i64)
    khash = np.zeros(1, np.uint64)
    points = np.zeros(1, np.uint64)
    owners = np.zeros(1, i64)
    if code in kn.PRECHOSEN_BY_COUNT:  # the k-th arrival gets the router's k-th choice
        prechosen = np.ascontiguousarray(router.choose_many(np.zeros(n, i64)), dtype=i64)
    elif code == kn.STICKY:
        prechosen = np.ascontiguousarray(router.choose_many(np.asarray(w.key)), dtype=i64)
    elif code == kn.BOUNDED_RING:  # the loop walks the ring from each key's point
        ring = router.ring
        uk, inv = np.unique(np.asarray(w.key), return_inverse=True)
        hashes = [stable_hash(k, ring.seed) for k in uk.tolist()]
        khash = np.array(hashes, dtype=np.uint64)[inv.ravel()]
        points = np.array(ring._points, dtype=np.uint64)
        owners = np.array(ring._owners, dtype=i64)
    rng = router.rng if code == kn.DYNAMO else np.random.default_rng(0)
    router_of = (  # as the reference draws each request's router replica
        np.random.default_rng([seed, 7_177]).integers(0, n_routers, n).astype(i64)
        if n_routers > 1
        else np.zeros(1, i64)
    )
    out = np.asarray(w.output_tokens, dtype=i64)
    dec = np.zeros(n, i64) if prefill_only else np.maximum(out - 1, 0)
    p = np.zeros(kn.NP)
    p[kn.TAU] = cost.prefill_s_per_token
    p[kn.A] = cost.decode_base_s
    p[kn.K] = cost.decode_per_request_s
    p[kn.TP0] = cost.prefill_fixed_s
    p[kn.TPAIR] = cost.prefill_s_per_pair
    p[kn.CKV] = cost.decode_per_context_token_s
    p[kn.EPS], p[kn.LAM], p[kn.SLACK] = eps, lam, slack
    if code == kn.BOUNDED_RING:
        p[kn.LF] = router.load_factor
    if code == kn.SGLANG:
        p[kn.CTHR] = router.cache_threshold
        p[kn.BABS] = router.balance_abs
        p[kn.BREL] = router.balance_rel
    if code == kn.DYNAMO:
        p[kn.OW] = router.overlap_weight
    kv = bool(cost.prefill_fixed_s or cost.prefill_s_per_pair or cost.decode_per_context_token_s)
    arrival, order, start, first, finish, hit, choice, rf, branches = loop(
        code,
        R,
        paths.block_size,
        cap,
        rec_cap,
        max_batch,
        0 if chunk is None else chunk,
        kv,
        view == "stale",
        load == "outstanding",
        p,
        np.ascontiguousarray(fixed_t, dtype=np.float64),
        np.ascontiguousarray(fixed_r, dtype=i64),
        np.full(n, -1, i64) if nxt is None else np.ascontiguousarray(nxt, dtype=i64),
        np.zeros(n) if think is None else np.ascontiguousarray(think, dtype=np.float64),
        np.ascontiguousarray(paths.offsets, dtype=i64),
        ent,
        np.ascontiguousarray(paths.blocks, dtype=i64),
        np.ascontiguousarray(paths.max_hit_blocks, dtype=i64),
        np.ascontiguousarray(w.prompt_tokens, dtype=i64),
        dec,
        prechosen,
        khash,
        points,
        owners,
        ukeys if code == kn.SGLANG else np.zeros(1, i64),
        seed,
        rng,
        K,
        width,
        n_routers,
        router_of,
    )
    if code == kn.SGLANG:
        for name, c in zip(("imbalanced", "match", "low_match"), branches.tolist(), strict=True):
            router.branches[name] += c
    return dict(
        arrival=arrival,
        order=order,
        start=start,
        first=first,
        finish=finish,
        hit=hit,
        choice=choice,
        busy_s=rf[:, kn.BUSY].copy(),
        prefill_busy_s=rf[:, kn.PBUSY].copy(),
        area=rf[:, kn.AREA].tolist(),
    )
