"""The colocated-vs-disaggregated simulation as one compiled loop over arrays: the same events, in
the same order, with the same arithmetic as the event-by-event simulator of
:mod:`kvlab.pdsim.reference`, which it must match (request for request, time for time).

Rules it keeps, so that every float comes out as the reference's:

* one heap of events ordered by (time, sequence number), the sequence counted at every push in the
  order the reference schedules its callbacks; kinds: an arrival, the end of a replica's step (or
  run of identical decode steps), a transfer landing on a decode replica;
* a step's end carries the replica's step token; a run of decode steps cut short by new work gets
  a new token and the old end is skipped when it comes up, as the reference does;
* every expression is written as the reference writes it (same operands, same order), so the
  rounding is the same.

Queues are linked lists over request ids (a request waits in at most one prefill queue and one
decode queue at a time); each replica's running batch is a heap of (finishing step, request id).
Plain Python functions, compiled by numba on first use (``cache=True``: once per machine, then
loaded from ``__pycache__``); without numba they run as they are (slow, same results).

Why one module: it is longer than the library's 500 lines because its subject is one function: the
event handlers share some forty state arrays, and splitting them into calls would pass every one
of those arrays on each event.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..assumptions import CostModel
from ..costs import BOOK
from .result import SimResult
from .systems import Colocated, Disaggregated, at_tp, prefill_seconds
from .traffic import Traffic

_ARRIVE, _END, _LANDED = 0, 1, 2


def _ev_push(n, t, s, kind, a, b, c, d, et, es, ek, ea, eb, ec, ed):
    """Push an event on the heap of ``n`` events (arrays e*); returns the new size."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if et[p] < t or (et[p] == t and es[p] < s):
            break
        et[i], es[i], ek[i], ea[i], eb[i], ec[i], ed[i] = (
            et[p],
            es[p],
            ek[p],
            ea[p],
            eb[p],
            ec[p],
            ed[p],
        )
        i = p
    et[i], es[i], ek[i], ea[i], eb[i], ec[i], ed[i] = t, s, kind, a, b, c, d
    return n + 1


def _ev_pop(n, et, es, ek, ea, eb, ec, ed):
    """Remove the root of the heap of ``n`` events (read it first); returns the new size."""
    n -= 1
    t, s, kind, a, b, c, d = et[n], es[n], ek[n], ea[n], eb[n], ec[n], ed[n]
    i = 0
    while True:
        j = 2 * i + 1
        if j >= n:
            break
        if j + 1 < n and (et[j + 1] < et[j] or (et[j + 1] == et[j] and es[j + 1] < es[j])):
            j += 1
        if t < et[j] or (t == et[j] and s < es[j]):
            break
        et[i], es[i], ek[i], ea[i], eb[i], ec[i], ed[i] = (
            et[j],
            es[j],
            ek[j],
            ea[j],
            eb[j],
            ec[j],
            ed[j],
        )
        i = j
    if n > 0:
        et[i], es[i], ek[i], ea[i], eb[i], ec[i], ed[i] = t, s, kind, a, b, c, d
    return n


def _rh_push(r, n, step, rid, hs, hr):
    """Push (step, rid) on replica ``r``'s running heap of ``n`` entries; returns the new size."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if hs[r, p] < step or (hs[r, p] == step and hr[r, p] < rid):
            break
        hs[r, i], hr[r, i] = hs[r, p], hr[r, p]
        i = p
    hs[r, i], hr[r, i] = step, rid
    return n + 1


def _rh_pop(r, n, hs, hr):
    """Remove the root of replica ``r``'s running heap of ``n`` entries; returns the new size."""
    n -= 1
    step, rid = hs[r, n], hr[r, n]
    i = 0
    while True:
        j = 2 * i + 1
        if j >= n:
            break
        if j + 1 < n and (
            hs[r, j + 1] < hs[r, j] or (hs[r, j + 1] == hs[r, j] and hr[r, j + 1] < hr[r, j])
        ):
            j += 1
        if step < hs[r, j] or (step == hs[r, j] and rid < hr[r, j]):
            break
        hs[r, i], hr[r, i] = hs[r, j], hr[r, j]
        i = j
    if n > 0:
        hs[r, i], hr[r, i] = step, rid
    return n


def _loop(
    disagg,
    first_step,
    runs,
    n_front,
    arr,
    unc,
    cached,
    prompt,
    out,
    xf,
    role,
    maxb,
    chunk,
    overlap,
    tau,
    ca,
    ck,
    p0,
    pair,
    ckv,
    width,
    dwidth,
):
    """The whole simulation; returns (first token, finish, busy seconds per replica, window area,
    window end). ``role``: 0 colocated, 1 prefill, 2 decode; ``chunk`` -1 for none."""
    n = len(arr)
    nr = len(role)
    cap = 3 * n + 2 * nr + 16
    et = np.empty(cap)
    es = np.empty(cap, dtype=np.int64)
    ek = np.empty(cap, dtype=np.int64)
    ea = np.empty(cap, dtype=np.int64)
    eb = np.empty(cap, dtype=np.int64)
    ec = np.empty(cap, dtype=np.int64)
    ed = np.empty(cap, dtype=np.int64)
    ne = 0
    seq = 0
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    # per request
    left = np.zeros(n, dtype=np.int64)
    cq = np.zeros(n, dtype=np.int64)  # cached prompt tokens while queued (pair term)
    dtok = np.zeros(n, dtype=np.int64)  # prompt tokens computed so far (pair term)
    pq_next = np.full(n, -1, dtype=np.int64)
    wq_next = np.full(n, -1, dtype=np.int64)
    w_tok = np.zeros(n, dtype=np.int64)
    w_ctx = np.zeros(n, dtype=np.int64)
    w_first = np.zeros(n, dtype=np.bool_)
    ctx_of = np.zeros(n, dtype=np.int64)
    # per replica
    pq_head = np.full(nr, -1, dtype=np.int64)
    pq_tail = np.full(nr, -1, dtype=np.int64)
    wq_head = np.full(nr, -1, dtype=np.int64)
    wq_tail = np.full(nr, -1, dtype=np.int64)
    queued = np.zeros(nr, dtype=np.int64)
    pending = np.zeros(nr, dtype=np.int64)
    hs = np.zeros((nr, width), dtype=np.int64)
    hr = np.zeros((nr, width), dtype=np.int64)
    rn = np.zeros(nr, dtype=np.int64)
    steps = np.zeros(nr, dtype=np.int64)
    busy = np.zeros(nr, dtype=np.bool_)
    load = np.zeros(nr, dtype=np.int64)
    busy_s = np.zeros(nr)
    token = np.zeros(nr, dtype=np.int64)
    run_on = np.zeros(nr, dtype=np.bool_)
    run_start = np.zeros(nr)
    run_step_s = np.zeros(nr)
    run_steps = np.zeros(nr, dtype=np.int64)
    inc_of = np.zeros(nr)
    started = np.zeros(nr)
    ctx_base = np.zeros(nr, dtype=np.int64)
    fq = np.zeros((nr, width), dtype=np.int64)
    fq_n = np.zeros(nr, dtype=np.int64)
    done = np.zeros((nr, dwidth), dtype=np.int64)
    done_n = np.zeros(nr, dtype=np.int64)
    # wake / start work lists: replicas to wake, in order (a wake never starts another)
    in_sys = 0
    area = 0.0
    last = 0.0
    win_area = 0.0
    win_until = 0.0
    now = 0.0

    seq += 1
    ne = _ev_push(ne, arr[0], seq, _ARRIVE, 0, 0, 0, 0, et, es, ek, ea, eb, ec, ed)
    while ne > 0:
        t = et[0]
        kind, a, b, c, d = ek[0], ea[0], eb[0], ec[0], ed[0]
        ne = _ev_pop(ne, et, es, ek, ea, eb, ec, ed)
        now = t
        wake = -1  # the replica to wake after this event's bookkeeping (-1: none)
        wake_start = False  # start it unconditionally (the end of its step)
        if kind == _ARRIVE:
            rid = a
            area += in_sys * (now - last)
            last = now
            in_sys += 1
            if rid + 1 < n:
                seq += 1
                ne = _ev_push(
                    ne, arr[rid + 1], seq, _ARRIVE, rid + 1, 0, 0, 0, et, es, ek, ea, eb, ec, ed
                )
            else:
                win_area = area
                win_until = now
            r = 0
            if disagg:
                for j in range(1, n_front):
                    if pending[j] < pending[r]:
                        r = j
            else:
                for j in range(1, n_front):
                    if load[j] < load[r]:
                        r = j
            load[r] += 1
            tokens = unc[rid]
            if pq_tail[r] < 0:
                pq_head[r] = rid
            else:
                pq_next[pq_tail[r]] = rid
            pq_tail[r] = rid
            pq_next[rid] = -1
            left[rid] = tokens
            queued[r] += tokens
            pending[r] += tokens
            if pair[r]:
                cq[rid] = cached[rid]
                dtok[rid] = 0
            wake = r
        elif kind == _END:
            r = a
            if b != token[r]:
                continue
            run_on[r] = False
            busy_s[r] += now - started[r]
            pending[r] -= d
            if c:
                steps[r] += c
                if fq_n[r]:
                    for i in range(fq_n[r]):
                        first[fq[r, i]] = now
                    fq_n[r] = 0
                while rn[r] > 0 and hs[r, 0] <= steps[r]:
                    rid = hr[r, 0]
                    rn[r] = _rh_pop(r, rn[r], hs, hr)
                    if ckv[r]:
                        ctx_base[r] -= ctx_of[rid]
                    load[r] -= 1
                    finish[rid] = now
                    area += in_sys * (now - last)
                    last = now
                    in_sys -= 1
            for i in range(done_n[r]):
                rid = done[r, i]
                if disagg:
                    load[r] -= 1
                    tg = n_front
                    for j in range(n_front + 1, nr):
                        if load[j] < load[tg]:
                            tg = j
                    load[tg] += 1
                    seq += 1
                    ne = _ev_push(
                        ne, now + xf[rid], seq, _LANDED, tg, rid, 0, 0, et, es, ek, ea, eb, ec, ed
                    )
                else:  # the first token; decoding joins this replica's queue (it is busy)
                    first[rid] = now
                    tokens = out[rid] - 1
                    if tokens > 0:
                        if wq_tail[r] < 0:
                            wq_head[r] = rid
                        else:
                            wq_next[wq_tail[r]] = rid
                        wq_tail[r] = rid
                        wq_next[rid] = -1
                        w_tok[rid] = tokens
                        w_ctx[rid] = prompt[rid] + 1
                        w_first[rid] = False
                    else:
                        load[r] -= 1
                        finish[rid] = now
                        area += in_sys * (now - last)
                        last = now
                        in_sys -= 1
            done_n[r] = 0
            wake = r
            wake_start = True
        else:  # a transfer lands on decode replica a
            r = a
            rid = b
            if first_step:
                tokens = out[rid]
                context = prompt[rid]
                is_first = True
            else:
                first[rid] = now
                tokens = out[rid] - 1
                context = prompt[rid] + 1
                is_first = False
            if tokens > 0:
                if wq_tail[r] < 0:
                    wq_head[r] = rid
                else:
                    wq_next[wq_tail[r]] = rid
                wq_tail[r] = rid
                wq_next[rid] = -1
                w_tok[rid] = tokens
                w_ctx[rid] = context
                w_first[rid] = is_first
                wake = r
            else:
                load[r] -= 1
                finish[rid] = now
                area += in_sys * (now - last)
                last = now
                in_sys -= 1
        if wake < 0:
            continue
        r = wake
        if not wake_start and busy[r]:
            # new work on a busy replica: cut a run of identical decode steps at the next boundary
            if not run_on[r]:
                continue
            start = run_start[r]
            step_s = run_step_s[r]
            nsteps = run_steps[r]
            inc = inc_of[r]
            if inc:
                h = step_s - inc / 2
                dn = int(math.floor((-h + math.sqrt(h * h + 2 * inc * (now - start))) / inc + 1e-9))
            else:
                dn = int(math.floor((now - start) / step_s + 1e-9))
            if dn + 1 >= nsteps:
                continue
            token[r] += 1
            run_on[r] = False
            m = dn + 1
            end = start + m * step_s
            if inc:
                end += inc * m * (m - 1) / 2
            seq += 1
            ne = _ev_push(ne, end, seq, _END, r, token[r], m, 0, et, es, ek, ea, eb, ec, ed)
            continue
        # start the replica's next step
        while wq_head[r] >= 0 and rn[r] < maxb[r]:
            rid = wq_head[r]
            wq_head[r] = wq_next[rid]
            if wq_head[r] < 0:
                wq_tail[r] = -1
            rn[r] = _rh_push(r, rn[r], steps[r] + w_tok[rid], rid, hs, hr)
            if ckv[r]:
                ctx_of[rid] = w_ctx[rid] - steps[r]
                ctx_base[r] += w_ctx[rid] - steps[r]
            if w_first[rid]:
                fq[r, fq_n[r]] = rid
                fq_n[r] += 1
        dn = 0
        pre_tokens = 0
        pairs = 0.0
        if pq_head[r] >= 0:
            if role[r] == 0 and chunk[r] >= 0:
                budget = chunk[r]
                while pq_head[r] >= 0 and budget:
                    rid = pq_head[r]
                    take = min(budget, left[rid])
                    budget -= take
                    pre_tokens += take
                    if pair[r]:
                        before = cq[rid] + dtok[rid]
                        pairs += take * before + take * take / 2
                        dtok[rid] += take
                    if take == left[rid]:
                        pq_head[r] = pq_next[rid]
                        if pq_head[r] < 0:
                            pq_tail[r] = -1
                        left[rid] = 0
                        done[r, dn] = rid
                        dn += 1
                    else:
                        left[rid] -= take
            else:
                rid = pq_head[r]
                pq_head[r] = pq_next[rid]
                if pq_head[r] < 0:
                    pq_tail[r] = -1
                pre_tokens = left[rid]
                left[rid] = 0
                done[r, dn] = rid
                dn += 1
                if pair[r]:
                    pairs = pre_tokens * cq[rid] + pre_tokens * pre_tokens / 2
            queued[r] -= pre_tokens
        running = rn[r]
        decoding = running > 0 and (chunk[r] >= 0 or dn == 0)
        if dn == 0 and pre_tokens == 0 and not decoding:
            busy[r] = False
            continue
        pre_s = pre_tokens * tau[r]
        if pair[r]:
            pre_s += pair[r] * pairs
        if p0[r] and pre_tokens and not decoding:
            pre_s += p0[r]
        dec_s = ca[r] + ck[r] * running if decoding else 0.0
        if ckv[r] and decoding:
            dec_s += ckv[r] * (ctx_base[r] + running * steps[r])
        duration = pre_s + dec_s - overlap[r] * min(pre_s, dec_s)
        busy[r] = True
        started[r] = now
        token[r] += 1
        if runs and pre_tokens == 0 and fq_n[r] == 0 and (wq_head[r] < 0 or running >= maxb[r]):
            nsteps = hs[r, 0] - steps[r]
            if nsteps > 1:
                run_on[r] = True
                run_start[r] = now
                run_step_s[r] = duration
                run_steps[r] = nsteps
            else:
                run_on[r] = False
            end = now + nsteps * duration
            inc = ckv[r] * running
            inc_of[r] = inc
            if inc:
                end += inc * nsteps * (nsteps - 1) / 2
            done_n[r] = 0
            seq += 1
            ne = _ev_push(ne, end, seq, _END, r, token[r], nsteps, 0, et, es, ek, ea, eb, ec, ed)
            continue
        run_on[r] = False
        done_n[r] = dn
        seq += 1
        ne = _ev_push(
            ne,
            now + duration,
            seq,
            _END,
            r,
            token[r],
            1 if decoding else 0,
            pre_tokens,
            et,
            es,
            ek,
            ea,
            eb,
            ec,
            ed,
        )
    return first, finish, busy_s, win_area, win_until


_KERNEL: list = []
_KERNEL_LOCK = threading.Lock()


def _kernel():
    """The loop, compiled with numba on first use when it imports (loaded from the on-disk cache
    after the first time), else the plain Python function. Safe to call from several threads at
    once: one of them wraps the loop, the others wait for it."""
    if _KERNEL:
        return _KERNEL[0]
    with _KERNEL_LOCK:
        if not _KERNEL:
            _KERNEL.append(_wrap_kernel())
    return _KERNEL[0]


def _wrap_kernel():
    global _ev_push, _ev_pop, _rh_push, _rh_pop
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency; this keeps kvlab working
        return _loop
    inl = numba.njit(cache=True, nogil=True, inline="always")
    _ev_push, _ev_pop, _rh_push, _rh_pop = inl(_ev_push), inl(_ev_pop), inl(_rh_push), inl(_rh_pop)
    return numba.njit(cache=True, nogil=True)(_loop)


def run(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    cost: CostModel | str = BOOK,
    runs: bool = True,
) -> SimResult:
    """One simulation on the compiled loop: the result of
    ``kvlab.pdsim.reference.Simulation(system, traffic, cost).run()``. ``runs=False`` steps
    identical decode steps one by one (``Replica.runs``)."""
    if not isinstance(system, (Colocated, Disaggregated)):
        raise ValueError(f"system must be a Colocated or Disaggregated, got {system!r}")
    if not isinstance(traffic, Traffic):
        raise ValueError(f"traffic must be a Traffic, got {traffic!r}")
    if isinstance(system, Colocated):
        cost_p = cost_d = at_tp(cost, system.tp)
    else:
        cost_p, cost_d = at_tp(cost, system.p_tp), at_tp(cost, system.d_tp)
    s = traffic.sample()
    arrival, prompt, uncached, output = s["arrival_s"], s["prompt"], s["uncached"], s["output"]
    n = traffic.requests
    if isinstance(system, Disaggregated):
        xfer = system.transfer_seconds(prompt, prefill_seconds(cost_p, uncached, prompt - uncached))
        disagg = True
        roles = [1] * system.prefill + [2] * system.decode
        costs = [cost_p] * system.prefill + [cost_d] * system.decode
        maxbs = [1] * system.prefill + [system.max_batch] * system.decode
        chunks = [-1] * system.total
        overlaps = [0.0] * system.total
        n_front = system.prefill
        first_step = bool(system.first_step)
    else:
        xfer = np.zeros(n)
        disagg = False
        roles = [0] * system.replicas
        costs = [cost_p] * system.replicas
        maxbs = [system.max_batch] * system.replicas
        chunk = -1 if system.chunk_tokens is None else system.chunk_tokens
        chunks = [chunk] * system.replicas
        overlaps = [float(system.overlap)] * system.replicas
        n_front = system.replicas
        first_step = False

    def per(attr: str) -> np.ndarray:
        return np.array([float(getattr(c, attr)) for c in costs])

    width = max(1, min(max(maxbs), n))
    dwidth = max(1, min(max(max(chunks), 1), n))
    first, finish, busy, area, until = _kernel()(
        disagg,
        first_step,
        bool(runs),
        n_front,
        np.ascontiguousarray(arrival, dtype=np.float64),
        np.ascontiguousarray(uncached, dtype=np.int64),
        np.ascontiguousarray(prompt - uncached, dtype=np.int64),
        np.ascontiguousarray(prompt, dtype=np.int64),
        np.ascontiguousarray(output, dtype=np.int64),
        np.ascontiguousarray(xfer, dtype=np.float64),
        np.array(roles, dtype=np.int64),
        np.array(maxbs, dtype=np.int64),
        np.array(chunks, dtype=np.int64),
        np.array(overlaps),
        per("prefill_s_per_token"),
        per("decode_base_s"),
        per("decode_per_request_s"),
        per("prefill_fixed_s"),
        per("prefill_s_per_pair"),
        per("decode_per_context_token_s"),
        width,
        dwidth,
    )
    return SimResult(
        label=system.label,
        arrival_s=arrival,
        first_token_s=first,
        finish_s=finish,
        prompt_tokens=prompt,
        output_tokens=output,
        transfer_s=xfer,
        mean_in_system=area / until if until > 0 else 0.0,
        end_s=float(np.nanmax(finish)),
        replica_busy_s=busy,
    )
