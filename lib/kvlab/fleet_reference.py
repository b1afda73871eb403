"""The fleet simulator's loops as they were before the compiled kernels (kept as the reference).

:func:`kvlab.fleet.simulate` runs :mod:`kvlab.fleet`'s kernels (compiled with numba when it is
installed); ``simulate(..., _reference=True)`` runs these pure-Python loops instead (an ``OrderedDict`` of entries per replica, see :mod:`kvlab.fleet`'s docstring).
``lib/tests/test_fleet_fast.py`` drives both with random streams and demands equal results.
Do not optimise this module: its only job is to be obviously what the simulator used to do. It
imports nothing from kvlab, so :mod:`kvlab.fleet` uses it without an import cycle.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

__all__ = ["run_chat", "run_general"]


def _evict(od: OrderedDict, used: int, cap: int) -> int:
    while used > cap:
        key, n = od.popitem(last=False)
        excess = used - cap
        if n > excess:  # keep the entry's shallow blocks, drop its deepest ones
            od[key] = n - excess
            od.move_to_end(key, last=False)
            return cap
        used -= n
    return used


def _touch(od: OrderedDict, ks, ns, used: int, cap: int) -> int:
    """Store a served request's entries (``ks`` keys, ``ns`` cached blocks each) as most recently
    used, deepest first so the deepest is evicted first; an entry only grows. Evict down to ``cap``
    and return the blocks in use. (``_run_chat`` inlines the same steps for speed.)"""
    for j in range(len(ks) - 1, -1, -1):
        key, nb = ks[j], ns[j]
        old = od.get(key)
        if old is None:
            used += nb
            od[key] = nb
        else:
            if nb > old:
                used += nb - old
                od[key] = nb
            od.move_to_end(key)
    return _evict(od, used, cap) if used > cap else used


def _choose_cache_aware(m, loads, R, eps, lam):
    """Inline twin of routing.CacheAwareRouter.choose (m: matched tokens, loads: ints)."""
    thr = (1.0 + eps) * (sum(loads) / R)
    best = -1
    bsc = bld = 0
    for r in range(R):
        ld = loads[r]
        if ld > thr:
            continue
        sc = m[r] - lam * ld if lam else m[r]
        if best < 0 or sc > bsc or (sc == bsc and ld < bld):
            best, bsc, bld = r, sc, ld
    return best


def _run_chat(w, paths, choices, R, cap, eps, lam, stale, per_conv, router):
    """Two entries per request (system prompt, chat): the demo's hot loop."""
    bs = paths.block_size
    n = len(w)
    sys_l = paths.keys[0::2].tolist()
    ns_l = paths.blocks[0::2].tolist()
    nc_l = paths.blocks[1::2].tolist()
    mh_l = paths.max_hit_blocks.tolist()
    prompt_l = w.prompt_tokens.tolist()
    if per_conv:
        ckey_l = (w.system_prompts + w.conversation).tolist()
        gen_l = w.generation.tolist()
        gens = [dict() for _ in range(R)]
    else:
        ckey_l = paths.keys[1::2].tolist()
    view_l = paths.keys[1::2].tolist()  # the router's record is keyed by chat content
    caches = [OrderedDict() for _ in range(R)]
    used = [0] * R
    loads = [0] * R
    hits = [0] * n
    reps = choices.tolist() if choices is not None else [0] * n
    ca = choices is None
    known_sys: dict[int, list] = {}
    known_chat: dict[int, list] = {}
    rng_R = range(R)
    for i in range(n):
        s = sys_l[i]
        k = ckey_l[i]
        ns = ns_l[i]
        nc = nc_l[i]
        mh = mh_l[i]
        if ca:
            if stale:
                ks = known_sys.get(s)
                if ks is None:
                    ks = known_sys[s] = [False] * R
                kc = known_chat.get(view_l[i])
                if kc is None:
                    kc = known_chat[view_l[i]] = [0] * R
                m = [min(ns + kc[r], mh) * bs if ks[r] else 0 for r in rng_R]
            else:
                m = []
                for r in rng_R:
                    od = caches[r]
                    x = od.get(s, 0)
                    if x >= ns:
                        if per_conv and gens[r].get(k) != gen_l[i]:
                            x = ns
                        else:
                            x = ns + od.get(k, 0)
                    m.append(min(x, mh) * bs)
            if router is not None:
                r = router.choose(w.key[i], np.array(m), np.array(loads))
            else:
                r = _choose_cache_aware(m, loads, R, eps, lam)
            reps[i] = r
            if stale:
                ks[r] = True
                kc[r] = nc
        else:
            r = reps[i]
        od = caches[r]
        u = used[r]
        if per_conv:
            g = gen_l[i]
            gr = gens[r]
            if gr.get(k) != g:
                old = od.pop(k, None)
                if old is not None:
                    u -= old
                gr[k] = g
        x = od.get(s, 0)
        if x >= ns:
            x = ns + od.get(k, 0)
        if x > mh:
            x = mh
        hit = x * bs
        hits[i] = hit
        loads[r] += prompt_l[i] - hit
        # touch: the chat (deeper) first, then the system prompt, so the chat is evicted first
        for key, nb in ((k, nc), (s, ns)):
            if nb:
                old = od.get(key)
                if old is None:
                    u += nb
                    od[key] = nb
                else:
                    u += nb - old
                    od[key] = nb
                    od.move_to_end(key)
        if u > cap:
            u = _evict(od, u, cap)
        used[r] = u
    return np.asarray(reps, dtype=np.int64), np.asarray(hits, dtype=np.int64)


def _run_general(w, paths, choices, R, cap, eps, lam, stale, router):
    """Any number of entries per request (the trace)."""
    bs = paths.block_size
    n = len(w)
    off = paths.offsets.tolist()
    keys = paths.keys.tolist()
    blks = paths.blocks.tolist()
    mh_l = paths.max_hit_blocks.tolist()
    prompt_l = w.prompt_tokens.tolist()
    caches = [OrderedDict() for _ in range(R)]
    known = [set() for _ in range(R)]
    used = [0] * R
    loads = [0] * R
    hits = [0] * n
    reps = choices.tolist() if choices is not None else [0] * n
    ca = choices is None
    for i in range(n):
        a, b = off[i], off[i + 1]
        ks = keys[a:b]
        ns = blks[a:b]
        mh = mh_l[i]
        if ca:
            m = []
            for r in range(R):
                x = 0
                if stale:
                    seen = known[r]
                    for key, nb in zip(ks, ns, strict=True):
                        if key in seen:
                            x += nb
                        else:
                            break
                else:
                    od = caches[r]
                    for key, nb in zip(ks, ns, strict=True):
                        c = od.get(key, 0)
                        x += c
                        if c < nb:
                            break
                m.append(min(x, mh) * bs)
            if router is not None:
                r = router.choose(w.key[i], np.array(m), np.array(loads))
            else:
                r = _choose_cache_aware(m, loads, R, eps, lam)
            reps[i] = r
            if stale:
                known[r].update(ks)
        else:
            r = reps[i]
        od = caches[r]
        x = 0
        for key, nb in zip(ks, ns, strict=True):
            c = od.get(key, 0)
            x += c
            if c < nb:
                break
        if x > mh:
            x = mh
        hit = x * bs
        hits[i] = hit
        loads[r] += prompt_l[i] - hit
        used[r] = _touch(od, ks, ns, used[r], cap)
    return np.asarray(reps, dtype=np.int64), np.asarray(hits, dtype=np.int64)


run_chat = _run_chat
run_general = _run_general
