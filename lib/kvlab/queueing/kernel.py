"""The timed simulator's run as one compiled loop over arrays: the same events, in the same order,
with the same arithmetic as the reference loop of :mod:`kvlab.queueing.reference` (its
:class:`~kvlab.queueing.replica._Replica` objects and ``OrderedDict`` caches), which it must match
request for request and time for time. :mod:`kvlab.queueing.fast` decides when it is used and
builds its inputs.

Rules it keeps, so that every choice and every float comes out as the reference's:

* events in the reference's order: the next arrival (a session's start or, closed loop, a heap of
  (time, request id) next turns) against the earliest end of a replica's run of steps, the lowest
  replica index first on ties;
* every expression written as the reference writes it (same operands, same order, ints kept
  ints until the reference turns them into floats), so the rounding is the same;
* the routers' rules on the same numbers: loads and matches are integers, summed exactly;
  Dynamo's random tie-break draws from the router's own ``numpy`` Generator (numba's
  ``Generator.integers`` draws the same numbers and advances the same state); SGLang's per-node
  order of replicas (a blake2b hash) is asked of Python once per node, in object mode.

Layout: a replica's scalars are columns of two small arrays (``ri``: ints, ``rf``: floats; the
column names below). Its prefill queue, its waiting list and the requests finishing their prefill
with the current run are linked lists over request ids (a request is in at most one of each); its
running batch is a heap of (finishing decode step, request id) in row ``r`` of ``hs``/``hr``. Each
cache (a replica's prefix cache, the router's stale record of it) is a doubly linked LRU list over
dense arrays indexed by node = entry id x R + replica; a count of 0 means absent (an entry with no
blocks matches nothing and is dropped first at eviction, so it is never stored).

Why one module: it is one function, the event loop, and the helpers it inlines; they share some
forty state arrays, and splitting them into modules would only spread one loop's bookkeeping.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..routing import stable_hash

_INF = math.inf

# policies
RANDOM, ROUND_ROBIN, STICKY, CACHE_AWARE, BOUNDED_RING, SGLANG, DYNAMO = range(7)
#: by arrival count (random, round robin) or per request (sticky): choices made in advance
PRECHOSEN_BY_COUNT = (RANDOM, ROUND_ROBIN)

# ri columns (ints per replica)
QH, QT, LEFT, STARTED, OUT, ASG, ACT, STEPS, SEGN, SEGDEC = range(10)
DH, DT, WH, WT, RUNN, USED, KUSED, NSYS, CTX, LH, LT, KH, KT = range(10, 23)  # K*: records
NI = 23
# rf columns (floats per replica)
END, SEGS, SEGD, SEGG, BUSY, PBUSY, AREA, LAST = range(8)
NF = 8
# p: float parameters
TAU, A, K, TP0, TPAIR, CKV, EPS, LAM, SLACK, LF, CTHR, BABS, BREL, OW = range(14)
NP = 14


def _rank_row(node: int, seed: int, replicas: int) -> np.ndarray:
    """routing.SGLangRouter._rank(node): the node's order of replicas, one hash each."""
    out = np.empty(replicas, np.uint64)
    for r in range(replicas):
        out[r] = stable_hash(f"{node}/{r}", seed)
    return out


# --- LRU lists ---------------------------------------------------------------------------------


def _unlink(node, r, prv, nxt, ri, hcol, tcol):
    p = prv[node]
    q = nxt[node]
    if p >= 0:
        nxt[p] = q
    else:
        ri[r, hcol] = q
    if q >= 0:
        prv[q] = p
    else:
        ri[r, tcol] = p


def _push_back(node, r, prv, nxt, ri, hcol, tcol):
    t = ri[r, tcol]
    prv[node] = t
    nxt[node] = -1
    if t >= 0:
        nxt[t] = node
    else:
        ri[r, hcol] = node
    ri[r, tcol] = node


def _touch(a, b, ent, blk, R, r, base, cnt, prv, nxt, ri, row, hcol, tcol, used, cap):
    """fleet._touch: the path's entries as most recent, deepest first; evict down to ``cap``
    (a victim bigger than the excess keeps its shallow blocks and stays least recent). Nodes are
    ``base`` + entry x R + ``r``; the list's head and tail are ``ri[row, hcol]``, ``ri[row, tcol]``."""
    for j in range(b - 1, a - 1, -1):
        node = base + ent[j] * R + r
        nb = blk[j]
        old = cnt[node]
        if old == 0:
            if nb > 0:
                used += nb
                cnt[node] = nb
                _push_back(node, row, prv, nxt, ri, hcol, tcol)
        else:
            if nb > old:
                used += nb - old
                cnt[node] = nb
            _unlink(node, row, prv, nxt, ri, hcol, tcol)
            _push_back(node, row, prv, nxt, ri, hcol, tcol)
    while used > cap:
        node = ri[row, hcol]
        nb = cnt[node]
        excess = used - cap
        if nb > excess:
            cnt[node] = nb - excess
            return cap
        _unlink(node, row, prv, nxt, ri, hcol, tcol)
        cnt[node] = 0
        used -= nb
    return used


def _match(a, b, ent, blk, mh, R, r, base, cnt):
    """Blocks of the path found in the cache ``cnt`` of replica ``r``, capped at ``mh``."""
    x = 0
    for j in range(a, b):
        c = cnt[base + ent[j] * R + r]
        nb = blk[j]
        if c >= nb:
            x += nb
        else:
            x += c
            break
    return x if x < mh else mh


def _deepest(a, b, ent, blk, R, r, base, cnt):
    """Entry id of the deepest entry of the path found in the cache (-1 if none)."""
    node = -1
    for j in range(a, b):
        c = cnt[base + ent[j] * R + r]
        if c:
            node = ent[j]
        if c < blk[j]:
            break
    return node


# --- heaps -------------------------------------------------------------------------------------


def _hpush(n, key, rid, hk, hr):
    """Push (key, rid) on the heap of ``n`` items (arrays hk, hr: one row); returns the size."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] < key or (hk[p] == key and hr[p] < rid):
            break
        hk[i] = hk[p]
        hr[i] = hr[p]
        i = p
    hk[i] = key
    hr[i] = rid
    return n + 1


def _hpop(n, hk, hr):
    """Remove the root of the heap of ``n`` items (read it first); returns the new size."""
    n -= 1
    key = hk[n]
    rid = hr[n]
    i = 0
    while True:
        j = 2 * i + 1
        if j >= n:
            break
        if j + 1 < n and (hk[j + 1] < hk[j] or (hk[j + 1] == hk[j] and hr[j + 1] < hr[j])):
            j += 1
        if key < hk[j] or (key == hk[j] and rid < hr[j]):
            break
        hk[i] = hk[j]
        hr[i] = hr[j]
        i = j
    hk[i] = key
    hr[i] = rid
    return n


# --- a replica's steps ---------------------------------------------------------------------------


def _count(r, t, delta, ri, rf):
    rf[r, AREA] += ri[r, NSYS] * (t - rf[r, LAST])
    rf[r, LAST] = t
    ri[r, NSYS] += delta


def _done(r, rid, t, ri, rf, off, ent, R, fc, fb, finish, nxt_turn, think, ctl, pt, pr, track):
    finish[rid] = t
    _count(r, t, -1, ri, rf)
    if track:
        for j in range(off[rid], off[rid + 1]):
            node = ent[j] * R + r
            fc[node] -= 1
            if fc[node] == 0:
                ri[r, ACT] -= fb[node]
                fb[node] = 0
    nx = nxt_turn[rid]
    if nx >= 0:  # closed loop: the next turn arrives a think time after this answer
        ctl[0] = _hpush(ctl[0], t + think[nx], nx, pt, pr)


def _begin_prefill(r, rid, now, ri, off, ent, blk, mh, prompt, est, hit, start, R, bs, cc):
    h = _match(off[rid], off[rid + 1], ent, blk, mh[rid], R, r, 0, cc) * bs
    left = prompt[rid] - h
    hit[rid] = h
    start[rid] = now
    e = est[rid]
    ri[r, OUT] += left - e
    ri[r, ASG] += left - e
    ri[r, LEFT] = left
    ri[r, STARTED] = 1


def _run_s(steps, d, g):
    return steps * d + g * steps * (steps - 1) / 2


def _start(
    r, now, ri, rf, p, kv, chunk, max_batch, off, ent, blk, mh, prompt, dec, est, hit, start,
    R, bs, cc, qn, wn, dn, hs, hr,
):  # fmt: skip
    """_Replica._start (and _start_kv): fill the batch, start the next run of steps."""
    while ri[r, WH] >= 0 and ri[r, RUNN] < max_batch:
        rid = ri[r, WH]
        ri[r, WH] = wn[rid]
        if ri[r, WH] < 0:
            ri[r, WT] = -1
        ri[r, RUNN] = _hpush(ri[r, RUNN], ri[r, STEPS] + dec[rid], rid, hs[r], hr[r])
        ri[r, CTX] += prompt[rid] + 1
    rf[r, SEGS] = now
    B = ri[r, RUNN]
    if ri[r, QH] >= 0:
        pre = 0
        pre_s = 0.0
        ri[r, DH] = -1
        ri[r, DT] = -1
        budget = chunk
        while ri[r, QH] >= 0:
            rid = ri[r, QH]
            if not ri[r, STARTED]:
                _begin_prefill(
                    r, rid, now, ri, off, ent, blk, mh, prompt, est, hit, start, R, bs, cc
                )
            left = ri[r, LEFT]
            if budget:
                take = min(budget, left)
                budget -= take
            else:
                take = left
            if kv:
                c = prompt[rid] - left
                pre_s += p[TAU] * take + p[TPAIR] * (take * c + take * take / 2)
            pre += take
            ri[r, LEFT] = left - take
            if ri[r, LEFT]:
                break
            ri[r, QH] = qn[rid]
            if ri[r, QH] < 0:
                ri[r, QT] = -1
            ri[r, STARTED] = 0
            dn[rid] = -1
            if ri[r, DT] >= 0:
                dn[ri[r, DT]] = rid
            else:
                ri[r, DH] = rid
            ri[r, DT] = rid
            if not chunk or not budget:
                break
        ri[r, OUT] -= pre
        decoding = B > 0 and chunk != 0
        if kv:
            if decoding:
                dur = pre_s + p[A] + p[K] * B + p[CKV] * ri[r, CTX]
            else:
                pre_s += p[TP0]
                dur = pre_s
        else:
            pre_s = pre * p[TAU]
            dur = pre_s + (p[A] + p[K] * B if decoding else 0.0)
        rf[r, PBUSY] += pre_s
        rf[r, BUSY] += dur
        ri[r, SEGN] = 1 if decoding else 0
        ri[r, SEGDEC] = 1 if decoding else 0
        rf[r, END] = now + dur
        return
    if B:  # decode only until the next finish (cut short by an arrival)
        ri[r, DH] = -1
        ri[r, DT] = -1
        ri[r, SEGDEC] = 1
        n = hs[r, 0] - ri[r, STEPS]
        ri[r, SEGN] = n
        if kv:
            rf[r, SEGD] = p[A] + p[K] * B + p[CKV] * ri[r, CTX]
            rf[r, SEGG] = p[CKV] * B
            run = _run_s(n, rf[r, SEGD], rf[r, SEGG])
            rf[r, BUSY] += run
            rf[r, END] = now + run
        else:
            d = p[A] + p[K] * B
            rf[r, BUSY] += n * d
            rf[r, SEGD] = d
            rf[r, END] = now + n * d
        return
    ri[r, SEGN] = 0
    rf[r, END] = _INF


def _finish_segment(
    r, t, ri, rf, off, ent, blk, prompt, dec, first, finish, R, cap, cc, cp, cx, wn, dn, hs, hr,
    fc, fb, nxt_turn, think, ctl, pt, pr, track,
):  # fmt: skip
    """_Replica._finish_segment: the run of steps ends at ``t``."""
    if ri[r, SEGDEC]:
        ri[r, STEPS] += ri[r, SEGN]
        ri[r, CTX] += ri[r, RUNN] * ri[r, SEGN]
        while ri[r, RUNN] and hs[r, 0] <= ri[r, STEPS]:
            rid = hr[r, 0]
            ri[r, RUNN] = _hpop(ri[r, RUNN], hs[r], hr[r])
            ri[r, CTX] -= prompt[rid] + 1 + dec[rid]
            _done(
                r, rid, t, ri, rf, off, ent, R, fc, fb, finish, nxt_turn, think, ctl, pt, pr, track
            )
    rid = ri[r, DH]
    while rid >= 0:
        nxt = dn[rid]
        first[rid] = t
        ri[r, USED] = _touch(
            off[rid], off[rid + 1], ent, blk, R, r, 0, cc, cp, cx, ri, r, LH, LT, ri[r, USED], cap
        )
        if dec[rid] > 0:
            wn[rid] = -1
            if ri[r, WT] >= 0:
                wn[ri[r, WT]] = rid
            else:
                ri[r, WH] = rid
            ri[r, WT] = rid
        else:
            _done(
                r, rid, t, ri, rf, off, ent, R, fc, fb, finish, nxt_turn, think, ctl, pt, pr, track
            )
        rid = nxt
    ri[r, SEGN] = 0
    rf[r, END] = _INF


def _cut_growing_run(r, t, ri, rf):
    """_Replica._cut_growing_run: stop a run whose steps lengthen at the first boundary >= t."""
    x = t - rf[r, SEGS]
    d = rf[r, SEGD]
    g = rf[r, SEGG]
    b = d - g / 2
    k = max(1, math.ceil((-b + math.sqrt(b * b + 2 * g * max(x, 0.0))) / g))
    while k > 1 and _run_s(k - 1, d, g) >= x:
        k -= 1
    while _run_s(k, d, g) < x:
        k += 1
    n = ri[r, SEGN]
    if k < n:
        rf[r, BUSY] -= _run_s(n, d, g) - _run_s(k, d, g)
        ri[r, SEGN] = k
        rf[r, END] = rf[r, SEGS] + _run_s(k, d, g)


# --- the loop ------------------------------------------------------------------------------------


def _loop(
    policy, R, bs, cap, rec_cap, max_batch, chunk, kv, stale, outstanding, p, fixed_t, fixed_r,
    nxt_turn, think, off, ent, blk, mh, prompt, dec, prechosen, khash, points, owners, ukeys, seed,
    rng, K, width, n_routers, router_of,
):  # fmt: skip
    """Serve every request; returns (arrival, arrival order, start, first token, finish, hit
    tokens, replica) per request, the replicas' float columns and SGLang's branch counts."""
    n = prompt.shape[0]
    nan = np.nan
    arrival = np.full(n, nan)
    start = np.full(n, nan)
    first = np.full(n, nan)
    finish = np.full(n, nan)
    hit = np.zeros(n, np.int64)
    est = np.zeros(n, np.int64)
    choice = np.zeros(n, np.int64)
    order = np.zeros(n, np.int64)
    qn = np.full(n, -1, np.int64)
    wn = np.full(n, -1, np.int64)
    dn = np.full(n, -1, np.int64)
    pt = np.zeros(n)
    pr = np.zeros(n, np.int64)
    ctl = np.zeros(1, np.int64)
    ri = np.zeros((R, NI), np.int64)
    for col in (QH, QT, DH, DT, WH, WT, LH, LT):
        ri[:, col] = -1
    rf = np.zeros((R, NF))
    rf[:, END] = _INF
    rf[:, SEGS] = fixed_t[0]
    rf[:, LAST] = fixed_t[0]
    hs = np.zeros((R, width), np.int64)
    hr = np.zeros((R, width), np.int64)
    size = R * K
    cc = np.zeros(size, np.int64)
    cp = np.zeros(size, np.int64)
    cx = np.zeros(size, np.int64)
    uses_cache = policy == CACHE_AWARE or policy == SGLANG or policy == DYNAMO
    rec = uses_cache and stale
    # the stale records: one per router replica (each knows only what it routed), per replica
    ksz = n_routers * size if rec else 1
    rk = np.zeros((n_routers * R if rec else 1, NI), np.int64)
    rk[:, KH] = -1
    rk[:, KT] = -1
    kc = np.zeros(ksz, np.int64)
    kp = np.zeros(ksz, np.int64)
    kx = np.zeros(ksz, np.int64)
    track = policy == DYNAMO
    fsz = size if track else 1
    fc = np.zeros(fsz, np.int64)
    fb = np.zeros(fsz, np.int64)
    sg = policy == SGLANG
    ranks = np.zeros((K if sg else 1, R), np.uint64)
    ranked = np.zeros(K if sg else 1, np.bool_)
    branches = np.zeros(3, np.int64)
    m = np.zeros(R, np.int64)
    ldf = np.zeros(R)
    cost = np.zeros(R)
    nf = fixed_t.shape[0]
    ptr = 0
    arrived = 0
    while True:
        tf = fixed_t[ptr] if ptr < nf else _INF
        tp = pt[0] if ctl[0] > 0 else _INF
        ta = tf if tf <= tp else tp
        while True:  # every run of steps that ends before the next arrival
            e = _INF
            first_r = -1
            for r in range(R):
                if rf[r, END] < e:
                    e = rf[r, END]
                    first_r = r
            if e >= ta:
                break
            _finish_segment(
                first_r, e, ri, rf, off, ent, blk, prompt, dec, first, finish, R, cap, cc, cp, cx,
                wn, dn, hs, hr, fc, fb, nxt_turn, think, ctl, pt, pr, track,
            )  # fmt: skip
            _start(
                first_r, e, ri, rf, p, kv, chunk, max_batch, off, ent, blk, mh, prompt, dec, est,
                hit, start, R, bs, cc, qn, wn, dn, hs, hr,
            )  # fmt: skip
            if ctl[0] > 0 and pt[0] < ta:
                tp = pt[0]
                ta = tp
        if ta == _INF:
            break
        if tf <= tp:
            i = fixed_r[ptr]
            ptr += 1
        else:
            i = pr[0]
            ctl[0] = _hpop(ctl[0], pt, pr)
        t = ta
        arrival[i] = t
        order[arrived] = i
        a = off[i]
        b = off[i + 1]
        mhi = mh[i]
        g = router_of[i] if n_routers > 1 else 0  # the router replica that receives it
        kbase = g * size
        # -- routing: the reference's router, on the same numbers
        if policy == RANDOM or policy == ROUND_ROBIN:
            r = prechosen[arrived]
        elif policy == STICKY:
            r = prechosen[i]
        elif policy == BOUNDED_RING:
            tot = 0
            for j in range(R):
                tot += ri[j, NSYS]
            capl = math.ceil(p[LF] * (float(tot) + 1) / R)
            # HashRing.walk from the key's point: an owner met again was already below no cap
            h = khash[i]
            lo_ = 0
            hi_ = points.shape[0]
            while lo_ < hi_:  # bisect_right
                mid = (lo_ + hi_) // 2
                if h < points[mid]:
                    hi_ = mid
                else:
                    lo_ = mid + 1
            r = -1
            npt = points.shape[0]
            for j in range(npt):
                c = owners[(lo_ + j) % npt]
                if ri[c, NSYS] < capl:
                    r = c
                    break
            if r < 0:  # pragma: no cover - some replica is always below the cap
                r = 0
                for j in range(1, R):
                    if ri[j, NSYS] < ri[r, NSYS]:
                        r = j
        else:
            for j in range(R):
                if rec:
                    m[j] = _match(a, b, ent, blk, mhi, R, j, kbase, kc) * bs
                else:
                    m[j] = _match(a, b, ent, blk, mhi, R, j, 0, cc) * bs
            if policy == CACHE_AWARE:
                tot = 0
                for j in range(R):
                    ldf[j] = ri[j, OUT] if outstanding else ri[j, ASG]
                    tot += ri[j, OUT] if outstanding else ri[j, ASG]
                thr = (1.0 + p[EPS]) * (float(tot) / R) + p[SLACK]
                best = -1
                bsc = 0.0
                bld = 0.0
                for j in range(R):
                    ld = ldf[j]
                    if ld > thr:
                        continue
                    sc = m[j] - p[LAM] * ld
                    if best < 0 or sc > bsc or (sc == bsc and ld < bld):
                        best = j
                        bsc = sc
                        bld = ld
                r = best if best >= 0 else R - 1  # live[-1], as the reference indexes it
            elif policy == SGLANG:
                hi = ri[0, NSYS]
                lo = ri[0, NSYS]
                lo_at = 0
                for j in range(1, R):
                    x = ri[j, NSYS]
                    if x > hi:
                        hi = x
                    if x < lo:
                        lo = x
                        lo_at = j
                if float(hi) - float(lo) > p[BABS] and float(hi) > p[BREL] * float(lo):
                    branches[0] += 1
                    r = lo_at
                else:
                    bi = 0
                    for j in range(1, R):
                        if m[j] > m[bi]:
                            bi = j
                    best_f = float(m[bi])
                    if best_f / max(float(prompt[i]), 1.0) > p[CTHR]:
                        branches[1] += 1
                        ntied = 0
                        for j in range(R):
                            if m[j] == m[bi]:
                                ntied += 1
                        if ntied == 1:
                            r = bi
                        else:
                            if rec:
                                node = _deepest(a, b, ent, blk, R, bi, kbase, kc)
                            else:
                                node = _deepest(a, b, ent, blk, R, bi, 0, cc)
                            if not ranked[node]:
                                nk = ukeys[node]
                                with numba_objmode(row="uint64[:]"):
                                    row = _rank_row(int(nk), seed, R)
                                for j in range(R):
                                    ranks[node, j] = row[j]
                                ranked[node] = True
                            r = -1
                            for j in range(R):
                                if m[j] == m[bi] and (r < 0 or ranks[node, j] < ranks[node, r]):
                                    r = j
                    else:
                        branches[2] += 1
                        r = lo_at
            else:  # dynamo
                ow = p[OW]
                for j in range(R):
                    x = 0
                    for q in range(a, b):
                        node = ent[q] * R + j
                        nb = blk[q]
                        if fc[node] > 0:
                            if fb[node] < nb:
                                x += nb - fb[node]
                        else:
                            x += nb
                    act = (ri[j, ACT] + x) * bs
                    pre = (float(ri[j, OUT]) + max(float(prompt[i]) - float(m[j]), 0.0)) / bs
                    cost[j] = ow * pre + act / bs
                cmin = cost[0]
                for j in range(1, R):
                    if cost[j] < cmin:
                        cmin = cost[j]
                ntied = 0
                r = -1
                for j in range(R):
                    if cost[j] == cmin:
                        if r < 0:
                            r = j
                        ntied += 1
                if ntied > 1:
                    pick = rng.integers(0, ntied)
                    for j in range(R):
                        if cost[j] == cmin:
                            if pick == 0:
                                r = j
                                break
                            pick -= 1
            if rec:
                krow = g * R + r
                rk[krow, KUSED] = _touch(
                    a, b, ent, blk, R, r, kbase, kc, kp, kx, rk, krow, KH, KT, rk[krow, KUSED],
                    rec_cap,
                )  # fmt: skip
        choice[i] = r
        e_tok = prompt[i] - _match(a, b, ent, blk, mhi, R, r, 0, cc) * bs
        est[i] = e_tok
        # -- _Replica.add
        _count(r, t, 1, ri, rf)
        qn[i] = -1
        if ri[r, QT] >= 0:
            qn[ri[r, QT]] = i
        else:
            ri[r, QH] = i
        ri[r, QT] = i
        ri[r, OUT] += e_tok
        ri[r, ASG] += e_tok
        if track:
            for q in range(a, b):
                node = ent[q] * R + r
                nb = blk[q]
                if fc[node] == 0:
                    fc[node] = 1
                    fb[node] = nb
                    ri[r, ACT] += nb
                else:
                    fc[node] += 1
                    if nb > fb[node]:
                        ri[r, ACT] += nb - fb[node]
                        fb[node] = nb
        if rf[r, END] == _INF:
            _start(
                r, t, ri, rf, p, kv, chunk, max_batch, off, ent, blk, mh, prompt, dec, est, hit,
                start, R, bs, cc, qn, wn, dn, hs, hr,
            )  # fmt: skip
        elif ri[r, SEGN] > 1:  # a decode-only run: stop at the first step boundary >= t
            if rf[r, SEGG]:
                _cut_growing_run(r, t, ri, rf)
            else:
                kk = max(1, math.ceil((t - rf[r, SEGS]) / rf[r, SEGD]))
                if kk < ri[r, SEGN]:
                    rf[r, BUSY] -= (ri[r, SEGN] - kk) * rf[r, SEGD]
                    ri[r, SEGN] = kk
                    rf[r, END] = rf[r, SEGS] + kk * rf[r, SEGD]
        arrived += 1
    return arrival, order[:arrived], start, first, finish, hit, choice, rf, branches


def numba_objmode(**kw):  # pragma: no cover - replaced by numba.objmode when compiled
    raise RuntimeError("the queueing kernel runs compiled only")


_KERNEL: list = []
_KERNEL_LOCK = threading.Lock()


def kernel():
    """The loop, compiled with numba on first use (loaded from the on-disk cache after the first
    time); None when numba is missing (the caller then runs the reference). Safe to call from
    several threads at once: one of them wraps the loop, the others wait for it."""
    if _KERNEL:
        return _KERNEL[0]
    with _KERNEL_LOCK:
        if not _KERNEL:
            _KERNEL.append(_wrap_kernel())
    return _KERNEL[0]


def _wrap_kernel():
    global _unlink, _push_back, _touch, _match, _deepest, _hpush, _hpop, _count, _done
    global _begin_prefill, _run_s, _start, _finish_segment, _cut_growing_run, numba_objmode
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    numba_objmode = numba.objmode
    inl = numba.njit(cache=True, nogil=True, inline="always")
    _unlink, _push_back, _touch, _match = inl(_unlink), inl(_push_back), inl(_touch), inl(_match)
    _deepest, _hpush, _hpop, _count = inl(_deepest), inl(_hpush), inl(_hpop), inl(_count)
    _done, _begin_prefill, _run_s = inl(_done), inl(_begin_prefill), inl(_run_s)
    _start, _finish_segment = inl(_start), inl(_finish_segment)
    _cut_growing_run = inl(_cut_growing_run)
    return numba.njit(cache=True)(_loop)  # object mode inside: no nogil
