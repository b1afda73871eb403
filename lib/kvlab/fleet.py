"""The fast fleet simulator: token hit rate and prefill load per replica under a routing policy.

Cache semantics (``cache_model="prefix"``, as vLLM's automatic prefix caching): KV lives in blocks
of ``block_size`` tokens; only full blocks are cached or matched; a block is identified by its
tokens and everything before it. A request's hit is the longest run of leading prompt blocks
cached on its replica, and the last prompt token is always computed. After serving, the replica
holds every full block of prompt + answer. Capacity is ``cache_tokens // block_size`` blocks; the
least recently used block goes first, and among blocks touched by the same request the deepest goes
first. An old chat stays cached after its conversation starts over, until LRU evicts it.

How it is fast and still exact: a request touches its blocks as a few *entries* (runs of blocks
always touched whole: a system prompt, a chat, a trace block; see ``Paths``). Every block of an
entry shares one recency, deeper entries are touched before shallower ones, so a block-level LRU
is the same as an LRU over entries whose victim is truncated from its tail. Each replica's entries
form a doubly linked list in LRU order over dense arrays (node = entry id x replicas + replica),
walked by loops that numba compiles once per machine (``cache=True``: later processes load them
from ``__pycache__``); a request costs a few array reads and writes. Without numba the same loops
run as Python. The loops they replaced (an ``OrderedDict`` per replica) are kept in
:mod:`kvlab.fleet_reference`: ``lib/tests/test_fleet_fast.py`` drives both with random streams and
demands equal results, and ``lib/tests/test_fleet.py`` replays small streams through a brute-force
block cache and demands identical per-request hit tokens.

``cache_model="per_conversation"`` is the simplified model behind the published figures: a replica
holds one entry per conversation, overwritten (its old chat dropped) when a request of the
conversation's new chat arrives there; a stale old chat elsewhere matches nothing.

Load is the prefill tokens a replica has computed so far (prompt tokens minus hit tokens, warm-up
included); the reported ``prefill_tokens`` count only requests after the warm-up.

Why one module: it is one simulator. The entry bookkeeping, the numba loops over it, the two cache
models and the request loop that asks :mod:`kvlab.routing` for each request's replica all act on
the same dense arrays; and :mod:`kvlab.explorer` keys its committed grid by this module's functions
by name, so moving any of them out would change the key and throw the grid away.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from . import routing
from ._validate import check_choice, check_int, non_negative

__all__ = [
    "FIGURES",
    "FleetResult",
    "over_seeds",
    "simulate",
    "simulate_all",
    "sweep",
    "sweep_over_seeds",
]


@dataclass
class FleetResult:
    """What :func:`simulate` returns. Per-request arrays cover every request (warm-up included);
    ``hit_rate``, ``imbalance`` and ``prefill_tokens`` count requests after the warm-up only."""

    policy: str
    replicas: int
    cache_tokens: int | None
    warmup: int
    cache_model: str
    view: str
    hit_rate: float
    imbalance: float
    prefill_tokens: np.ndarray
    replica: np.ndarray
    hit_tokens: np.ndarray
    prompt_tokens: np.ndarray
    params: dict = field(default_factory=dict)

    @property
    def requests_per_replica(self) -> np.ndarray:
        """Counted requests (after the warm-up) served by each replica."""
        return np.bincount(self.replica[self.warmup :], minlength=self.replicas)

    @property
    def hottest_replica(self) -> int:
        """The replica that computed the most prefill tokens (counted requests)."""
        return int(np.argmax(self.prefill_tokens))

    @property
    def hot_request_share(self) -> float:
        """Share (0..1) of the counted requests served by the hottest replica."""
        n = self.requests_per_replica
        return float(n[self.hottest_replica] / n.sum())

    @property
    def hot_prefill_share(self) -> float:
        """Share (0..1) of the counted prefill tokens computed by the hottest replica
        (``imbalance / replicas``)."""
        total = self.prefill_tokens.sum()
        return float(self.prefill_tokens[self.hottest_replica] / total) if total else 0.0

    @property
    def hot_hit_rate(self) -> float:
        """Token hit rate (0..1) of the counted requests served by the hottest replica."""
        mask = self.replica[self.warmup :] == self.hottest_replica
        p = self.prompt_tokens[self.warmup :][mask].sum()
        return float(self.hit_tokens[self.warmup :][mask].sum() / p) if p else 0.0

    def hit_rate_over_time(self, window: int = 1000) -> np.ndarray:
        """Token hit rate over consecutive windows of ``window`` requests (all requests)."""
        window = check_int("window", window, lo=1)
        n = len(self.hit_tokens) // window * window
        h = self.hit_tokens[:n].reshape(-1, window).sum(1)
        p = self.prompt_tokens[:n].reshape(-1, window).sum(1)
        return h / p

    def __repr__(self) -> str:
        return (
            f"FleetResult(policy={self.policy!r}, hit_rate={self.hit_rate:.3f}, "
            f"imbalance={self.imbalance:.2f})"
        )


# --- the entry LRU on an OrderedDict (kvlab.queueing's caches use it) ---------------------------


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


# --- the kernels ---------------------------------------------------------------------------------
# Each replica's cache is a doubly linked list of entries in LRU order (head: least recent) over
# dense arrays indexed by node = entry id * R + replica (entry ids: the request keys renumbered
# 0..K-1). ``cnt[node]`` is the entry's cached blocks, 0 when absent (an entry with no blocks
# changes nothing, so it is never stored). Plain Python functions, compiled by numba when it is
# installed (``cache=True``: compiled once per machine, then loaded from __pycache__); without
# numba they run as they are (slow, same results). fleet_reference keeps the OrderedDict loops.


def _unlink(node, r, prv, nxt, head, tail):
    p = prv[node]
    q = nxt[node]
    if p >= 0:
        nxt[p] = q
    else:
        head[r] = q
    if q >= 0:
        prv[q] = p
    else:
        tail[r] = p


def _push_back(node, r, prv, nxt, head, tail):
    t = tail[r]
    prv[node] = t
    nxt[node] = -1
    if t >= 0:
        nxt[t] = node
    else:
        head[r] = node
    tail[r] = node


def _evict_lru(r, used, cap, cnt, prv, nxt, head, tail):
    """Drop least recent entries until ``used <= cap``; a victim bigger than the excess keeps
    its shallow blocks and stays least recent. Returns the blocks in use."""
    while used > cap:
        node = head[r]
        n = cnt[node]
        excess = used - cap
        if n > excess:
            cnt[node] = n - excess
            return cap
        _unlink(node, r, prv, nxt, head, tail)
        cnt[node] = 0
        used -= n
    return used


def _set_mru(node, r, nb, used, cnt, prv, nxt, head, tail):
    """Store ``nb`` blocks under ``node`` as most recent (chat loop: the count is replaced)."""
    old = cnt[node]
    if old == 0:
        used += nb
        cnt[node] = nb
        _push_back(node, r, prv, nxt, head, tail)
    else:
        used += nb - old
        cnt[node] = nb
        _unlink(node, r, prv, nxt, head, tail)
        _push_back(node, r, prv, nxt, head, tail)
    return used


def _pick_cache_aware(m, loads, R, eps, lam):
    """routing.CacheAwareRouter.choose on int arrays (matched tokens, loads)."""
    total = 0
    for r in range(R):
        total += loads[r]
    thr = (1.0 + eps) * (total / R)
    best = -1
    bsc = 0.0
    bld = 0
    for r in range(R):
        ld = loads[r]
        if ld > thr:
            continue
        sc = m[r] - lam * ld if lam != 0.0 else float(m[r])
        if best < 0 or sc > bsc or (sc == bsc and ld < bld):
            best = r
            bsc = sc
            bld = ld
    return best


def _chat_loop(
    sys_id, ck_id, view_id, ns_a, nc_a, mh_a, prompt, gen_a, choices, R, cap, eps, lam, bs, ca,
    stale, per_conv, cnt, prv, nxt, gens, ksys, kchat,
):  # fmt: skip
    """Two entries per request (system prompt ``sys_id``, chat ``ck_id``); the router's stale
    record of chats is keyed by ``view_id``. Returns (replica, hit tokens) per request."""
    n = sys_id.shape[0]
    head = np.full(R, -1, np.int64)
    tail = np.full(R, -1, np.int64)
    used = np.zeros(R, np.int64)
    loads = np.zeros(R, np.int64)
    m = np.zeros(R, np.int64)
    reps = np.empty(n, np.int64)
    hits = np.empty(n, np.int64)
    for i in range(n):
        s = sys_id[i]
        k = ck_id[i]
        ns = ns_a[i]
        nc = nc_a[i]
        mh = mh_a[i]
        g1 = gen_a[i] + 1
        if ca:
            if stale:
                v = view_id[i]
                for r in range(R):
                    if ksys[s * R + r]:
                        x = ns + kchat[v * R + r]
                        m[r] = (x if x < mh else mh) * bs
                    else:
                        m[r] = 0
            else:
                for r in range(R):
                    x = cnt[s * R + r]
                    if x >= ns:
                        if per_conv and gens[k * R + r] != g1:
                            x = ns
                        else:
                            x = ns + cnt[k * R + r]
                    m[r] = (x if x < mh else mh) * bs
            r = _pick_cache_aware(m, loads, R, eps, lam)
            if stale:
                ksys[s * R + r] = True
                kchat[view_id[i] * R + r] = nc
        else:
            r = choices[i]
        reps[i] = r
        u = used[r]
        if per_conv and gens[k * R + r] != g1:
            old = cnt[k * R + r]
            if old > 0:
                _unlink(k * R + r, r, prv, nxt, head, tail)
                cnt[k * R + r] = 0
                u -= old
            gens[k * R + r] = g1
        x = cnt[s * R + r]
        if x >= ns:
            x = ns + cnt[k * R + r]
        if x > mh:
            x = mh
        hit = x * bs
        hits[i] = hit
        loads[r] += prompt[i] - hit
        # touch the chat (deeper) first, then the system prompt, so the chat is evicted first
        if nc > 0:
            u = _set_mru(k * R + r, r, nc, u, cnt, prv, nxt, head, tail)
        if ns > 0:
            u = _set_mru(s * R + r, r, ns, u, cnt, prv, nxt, head, tail)
        if u > cap:
            u = _evict_lru(r, u, cap, cnt, prv, nxt, head, tail)
        used[r] = u
    return reps, hits


def _general_loop(
    offsets, key_id, blocks, mh_a, prompt, choices, R, cap, eps, lam, bs, ca, stale, cnt, prv,
    nxt, known,
):  # fmt: skip
    """Any number of entries per request (the trace): request i touches ``key_id[offsets[i]:
    offsets[i+1]]`` in path order. Returns (replica, hit tokens) per request."""
    n = offsets.shape[0] - 1
    head = np.full(R, -1, np.int64)
    tail = np.full(R, -1, np.int64)
    used = np.zeros(R, np.int64)
    loads = np.zeros(R, np.int64)
    m = np.zeros(R, np.int64)
    reps = np.empty(n, np.int64)
    hits = np.empty(n, np.int64)
    for i in range(n):
        a = offsets[i]
        b = offsets[i + 1]
        mh = mh_a[i]
        if ca:
            for r in range(R):
                x = 0
                if stale:
                    for j in range(a, b):
                        if known[key_id[j] * R + r]:
                            x += blocks[j]
                        else:
                            break
                else:
                    for j in range(a, b):
                        c = cnt[key_id[j] * R + r]
                        x += c
                        if c < blocks[j]:
                            break
                m[r] = (x if x < mh else mh) * bs
            r = _pick_cache_aware(m, loads, R, eps, lam)
            if stale:
                for j in range(a, b):
                    known[key_id[j] * R + r] = True
        else:
            r = choices[i]
        reps[i] = r
        x = 0
        for j in range(a, b):
            c = cnt[key_id[j] * R + r]
            x += c
            if c < blocks[j]:
                break
        if x > mh:
            x = mh
        hit = x * bs
        hits[i] = hit
        loads[r] += prompt[i] - hit
        # touch deepest first (an entry only grows), so the deepest is evicted first
        u = used[r]
        for j in range(b - 1, a - 1, -1):
            node = key_id[j] * R + r
            nb = blocks[j]
            old = cnt[node]
            if old == 0:
                if nb > 0:
                    u += nb
                    cnt[node] = nb
                    _push_back(node, r, prv, nxt, head, tail)
            else:
                if nb > old:
                    u += nb - old
                    cnt[node] = nb
                _unlink(node, r, prv, nxt, head, tail)
                _push_back(node, r, prv, nxt, head, tail)
        if u > cap:
            u = _evict_lru(r, u, cap, cnt, prv, nxt, head, tail)
        used[r] = u
    return reps, hits


_KERNELS: list = []
_KERNELS_LOCK = threading.Lock()


def _kernels():
    """(chat kernel, general kernel): compiled with numba on first use when it imports (loaded
    from the on-disk cache after the first time), else the plain Python functions. Safe to call
    from several threads at once (a Dask worker's, a thread pool's): one of them wraps the loops,
    the others wait for it."""
    if _KERNELS:
        return _KERNELS
    with _KERNELS_LOCK:
        if not _KERNELS:
            _KERNELS.extend(_wrap_kernels())
    return _KERNELS


def _wrap_kernels() -> tuple:
    global _unlink, _push_back, _evict_lru, _set_mru, _pick_cache_aware
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency; this keeps kvlab working
        return _chat_loop, _general_loop
    jit = numba.njit(cache=True, nogil=True)
    # The loops call the helpers by their global names: compile those first, inlined into the
    # loops (a call would count references on each array it passes, costing more than its work).
    inl = numba.njit(cache=True, nogil=True, inline="always")
    _unlink, _push_back = inl(_unlink), inl(_push_back)
    _evict_lru, _set_mru, _pick_cache_aware = inl(_evict_lru), inl(_set_mru), inl(_pick_cache_aware)
    return jit(_chat_loop), jit(_general_loop)


#: Above this many replica x entry slots the kernels' dense arrays get too big: use the reference.
MAX_SLOTS = 200_000_000


def _dense(*arrays: np.ndarray) -> tuple[int, list[np.ndarray]]:
    """Number the keys of ``arrays`` (together) 0..K-1; returns K and the numbered arrays. Small
    non-negative keys (the chat workload's, the trace's block ids) are their own numbers."""
    allk = np.concatenate(arrays)
    lo, hi = (int(allk.min()), int(allk.max())) if len(allk) else (0, 0)
    if lo >= 0 and hi < 2 * len(allk) + 1024:
        return hi + 1, [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]
    uniq, inv = np.unique(allk, return_inverse=True)
    out, at = [], 0
    for a in arrays:
        out.append(inv[at : at + len(a)].astype(np.int64))
        at += len(a)
    return len(uniq), out


def _node_arrays(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cnt, prv, nxt) per node, as columns of one zeroed array: a node's three numbers share a
    cache line (the loops are bound by memory, not arithmetic). ``np.zeros`` is calloc'd: the
    OS hands over a page only when it is first touched."""
    st = np.zeros((size, 3), np.int64)
    return st[:, 0], st[:, 1], st[:, 2]


def _run_fast(w, paths, choices, R, cap, eps, lam, stale, per_conv):
    """The kernels' inputs built from ``paths``; returns (replica, hit tokens) arrays, or None
    when the dense arrays would be too big. The per-node arrays come from numpy's ``zeros`` and
    ``empty`` (pages the OS hands over only when touched); ``prv``/``nxt`` are read only for
    nodes that are present, so they need no initial values."""
    i64 = np.int64
    ca = choices is None
    ch = np.zeros(1, i64) if ca else np.ascontiguousarray(choices, dtype=i64)
    prompt = np.ascontiguousarray(w.prompt_tokens, dtype=i64)
    mh = np.ascontiguousarray(paths.max_hit_blocks, dtype=i64)
    keys = np.asarray(paths.keys, dtype=i64)
    blocks = np.ascontiguousarray(paths.blocks, dtype=i64)
    if paths.kind == "chat":
        sys_k, view_k = keys[0::2], keys[1::2]
        if per_conv:
            ck = np.asarray(w.system_prompts + w.conversation, dtype=i64)
            gen = np.ascontiguousarray(w.generation, dtype=i64)
        else:
            ck, gen = view_k, np.zeros(len(sys_k), i64)
        K, (s_id, c_id, v_id) = _dense(sys_k, ck, view_k)
        if R * K > MAX_SLOTS:
            return None
        size = R * K
        cnt, prv, nxt = _node_arrays(size)
        gens = np.zeros(size if per_conv else 1, i64)
        ksys = np.zeros(size if (ca and stale) else 1, np.bool_)
        kchat = np.zeros(size if (ca and stale) else 1, i64)
        return _kernels()[0](
            s_id, c_id, v_id, np.ascontiguousarray(blocks[0::2]), np.ascontiguousarray(blocks[1::2]),
            mh, prompt, gen, ch, R, cap, float(eps), float(lam), paths.block_size, ca, stale,
            per_conv, cnt, prv, nxt, gens, ksys, kchat,
        )  # fmt: skip
    K, (k_id,) = _dense(keys)
    if R * K > MAX_SLOTS:
        return None
    size = R * K
    cnt, prv, nxt = _node_arrays(size)
    known = np.zeros(size if (ca and stale) else 1, np.bool_)
    off = np.ascontiguousarray(paths.offsets, dtype=i64)
    return _kernels()[1](
        off, k_id, blocks, mh, prompt, ch, R, cap, float(eps), float(lam), paths.block_size, ca,
        stale, cnt, prv, nxt, known,
    )  # fmt: skip


def simulate(
    w,
    policy: str = "cache_aware",
    replicas: int = 8,
    cache_tokens: int | None = 400_000,
    warmup: int = 5_000,
    seed: int = 0,
    block_size: int = 16,
    cache_model: str = "prefix",
    epsilon: float = 0.05,
    lam: float = 0.0,
    view: str = "stale",
    sticky: str = "modulo",
    vnodes: int = 100,
    *,
    paths=None,
    _use_router_object: bool = False,
    _reference: bool = False,
) -> FleetResult:
    """Route every request of ``w`` (a ChatWorkload or a Trace) over ``replicas`` replicas with
    a per-replica LRU prefix cache of ``cache_tokens`` tokens (None: unlimited).

    ``policy`` in routing.POLICIES; ``epsilon``, ``lam``, ``view`` tune "cache_aware";
    ``sticky`` ("modulo" or "ring") and ``vnodes`` tune "sticky"; ``seed`` seeds "random".
    ``warmup``: the first requests only warm the caches. ``paths``: a precomputed
    ``w.paths(block_size)`` to reuse across calls. ``_reference``: run the pure-Python loops of
    :mod:`kvlab.fleet_reference` (same results, slower; for tests and ``make bench``).
    """
    check_choice("policy", policy, set(routing.POLICIES))
    R = check_int("replicas", replicas, lo=1, hi=4096)
    if cache_tokens is None:
        cap = 1 << 62
    else:
        cap = check_int("cache_tokens", cache_tokens, lo=0) // check_int(
            "block_size", block_size, lo=1, hi=1_000_000
        )
    warmup = check_int("warmup", warmup, lo=0, hi=len(w) - 1)
    check_int("seed", seed, lo=0)
    cache_model = check_choice("cache_model", cache_model, {"prefix", "per_conversation"})
    eps = non_negative("epsilon", epsilon)
    lam = non_negative("lam", lam)
    view = check_choice("view", view, {"stale", "exact"})
    check_choice("sticky", sticky, {"modulo", "ring"})
    if paths is None:
        paths = w.paths(block_size)
    elif paths.block_size != block_size:
        raise ValueError(f"paths were built for block_size {paths.block_size}, got {block_size}")
    per_conv = cache_model == "per_conversation"
    if per_conv and paths.kind != "chat":
        raise ValueError("cache_model 'per_conversation' needs a ChatWorkload")

    router = routing.make_router(
        policy, R, seed=seed, epsilon=eps, lam=lam, sticky=sticky, view=view, vnodes=vnodes
    )
    choices = None if policy == "cache_aware" else router.choose_many(w.key)
    slow = router if (policy == "cache_aware" and _use_router_object) else None
    stale = view == "stale"
    out = None
    if slow is None and not _reference:
        out = _run_fast(w, paths, choices, R, cap, eps, lam, stale, per_conv)
    if out is None:
        from . import fleet_reference as ref

        if paths.kind == "chat":
            out = ref.run_chat(w, paths, choices, R, cap, eps, lam, stale, per_conv, slow)
        else:
            out = ref.run_general(w, paths, choices, R, cap, eps, lam, stale, slow)
    reps, hits = out

    prompt = np.asarray(w.prompt_tokens, dtype=np.int64)
    counted = slice(warmup, None)
    prefill = np.bincount(
        reps[counted], weights=prompt[counted] - hits[counted], minlength=R
    ).astype(np.int64)
    mean = prefill.mean()
    return FleetResult(
        policy=policy,
        replicas=R,
        cache_tokens=cache_tokens,
        warmup=warmup,
        cache_model=cache_model,
        view=view,
        hit_rate=float(hits[counted].sum() / prompt[counted].sum()),
        imbalance=float(prefill.max() / mean) if mean > 0 else 1.0,
        prefill_tokens=prefill,
        replica=reps,
        hit_tokens=hits,
        prompt_tokens=prompt,
        params=dict(
            seed=seed, block_size=block_size, epsilon=eps, lam=lam, sticky=sticky, vnodes=vnodes
        ),
    )


def simulate_all(w, policies=routing.POLICIES, **kwargs) -> dict[str, FleetResult]:
    """:func:`simulate` for each policy on the same workload (paths built once)."""
    block_size = kwargs.get("block_size", 16)
    paths = kwargs.pop("paths", None) or w.paths(block_size)
    return {p: simulate(w, policy=p, paths=paths, **kwargs) for p in policies}


def sweep(
    w,
    param: str,
    values,
    policies=routing.POLICIES,
    progress: bool = False,
    workload_kwargs: dict | None = None,
    **kwargs,
) -> dict[str, list[FleetResult]]:
    """Results per policy as one parameter varies.

    ``param``: a :func:`simulate` keyword (e.g. "cache_tokens", "replicas") or a ChatWorkload
    keyword (e.g. "skew", "conversations"; the workload is rebuilt from ``workload_kwargs`` for
    each value, ``w`` is then ignored and may be None). ``progress`` shows a tqdm bar.
    """
    from . import workload as _workload

    values = list(values)
    is_workload = param in {
        "skew",
        "conversations",
        "requests",
        "system_prompts",
        "system_tokens",
        "new_tokens",
        "output_tokens",
        "history_max",
    }
    it = values
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(values, desc=f"sweep {param}", leave=False)
    out: dict[str, list[FleetResult]] = {p: [] for p in policies}
    block_size = kwargs.get("block_size", 16)
    paths = None if is_workload else w.paths(block_size)
    for v in it:
        if is_workload:
            wk = _workload.ChatWorkload(**{**(workload_kwargs or {}), param: v})
            res = simulate_all(wk, policies, **kwargs)
        else:
            res = simulate_all(w, policies, paths=paths, **{**kwargs, param: v})
        for p in policies:
            out[p].append(res[p])
    return out


#: The figures :func:`over_seeds` summarises by default (attributes of FleetResult).
FIGURES = ("hit_rate", "imbalance")

# Jobs handed to worker processes: forked children inherit this (a trace is never pickled).
_SHARED: dict = {}


def _seed_job(job) -> dict[str, dict[str, float]]:
    """One (workload, seed) job: every policy's figures. A fixed workload travels in the job
    (``w`` set: an executor given by the caller) or is inherited from the parent (``_SHARED``)."""
    wkey, seed, policies, kwargs, fields, w = job
    from . import workload as _workload

    if wkey is None:
        if w is None:
            w, paths = _SHARED["w"], _SHARED["paths"]
        else:
            paths = w.paths(kwargs.get("block_size", 16))
    else:
        w = _workload.ChatWorkload(**{**dict(wkey), "seed": seed})
        paths = w.paths(kwargs.get("block_size", 16))
    res = simulate_all(w, policies, paths=paths, seed=seed, **kwargs)
    return {p: {f: float(getattr(r, f)) for f in fields} for p, r in res.items()}


def _map(jobs: list, processes: int | None, executor=None, w=None) -> list:
    """Run ``_seed_job`` over ``jobs`` through :func:`kvlab.sweep.sweep`: on ``executor`` when
    given (a fixed workload ``w`` then travels with each job), else on ``processes`` local worker
    processes (None: up to 2, the book's build machine's cores), which inherit ``w``."""
    import os

    from .sweep import sweep as _sweep

    if executor is not None:
        if processes is not None:
            raise ValueError("give either an executor or processes, not both")
        if w is not None:
            jobs = [j[:-1] + (w,) for j in jobs]
        return _sweep(_seed_job, jobs, executor=executor, progress=False)
    if processes is None:
        processes = min(2, os.cpu_count() or 1)
    processes = check_int("processes", processes, lo=1, hi=256)
    return _sweep(_seed_job, jobs, processes=processes, progress=False)


def _jobs(w, workload_kwargs, seeds, policies, kwargs, fields):
    from .seeds import DEFAULT_SEEDS

    seeds = list(DEFAULT_SEEDS if seeds is None else seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    for s in seeds:
        check_int("seed", s, lo=0)
    for p in policies:
        check_choice("policy", p, set(routing.POLICIES))
    if w is not None and workload_kwargs:
        raise ValueError("give either a fixed workload w or workload_kwargs, not both")
    wkey = None if w is not None else tuple(sorted((workload_kwargs or {}).items()))
    if "seed" in dict(wkey or ()):
        raise ValueError("workload_kwargs must not hold 'seed': the seeds come from `seeds`")
    return seeds, [(wkey, s, tuple(policies), dict(kwargs), tuple(fields), None) for s in seeds]


def over_seeds(
    policies=routing.POLICIES,
    seeds=None,
    *,
    w=None,
    workload_kwargs: dict | None = None,
    fields=FIGURES,
    processes: int | None = None,
    executor=None,
    **kwargs,
) -> dict[str, dict]:
    """Each policy's figures over several random streams: ``{policy: {field: Spread}}``.

    For each seed (default ``kvlab.seeds.DEFAULT_SEEDS``) a ChatWorkload is drawn with that seed
    from ``workload_kwargs`` (the demo's defaults when None) and every policy runs on it with the
    same ``seed`` (which also seeds random routing). A fixed workload ``w`` (a trace) is reused
    for every seed instead; then only random routing varies. ``fields`` name FleetResult
    attributes; ``kwargs`` go to :func:`simulate`. Seeds run on ``processes`` worker processes,
    or on ``executor`` (any ``concurrent.futures.Executor``, e.g. a Dask client's
    ``get_executor()``; see :mod:`kvlab.sweep`).
    """
    from .seeds import summarise

    seeds, jobs = _jobs(w, workload_kwargs, seeds, policies, kwargs, fields)
    if w is not None:
        _SHARED["w"], _SHARED["paths"] = w, w.paths(kwargs.get("block_size", 16))
    try:
        out = _map(jobs, processes, executor, w)
    finally:
        _SHARED.clear()
    return {p: {f: summarise([o[p][f] for o in out], seeds) for f in fields} for p in policies}


def sweep_over_seeds(
    param: str,
    values,
    policies=routing.POLICIES,
    seeds=None,
    *,
    w=None,
    workload_kwargs: dict | None = None,
    fields=FIGURES,
    processes: int | None = None,
    executor=None,
    **kwargs,
) -> dict[str, dict[str, list]]:
    """:func:`over_seeds` as one parameter takes each of ``values``:
    ``{policy: {field: [Spread per value]}}``.

    ``param`` is a :func:`simulate` keyword (e.g. "cache_tokens") or a ChatWorkload keyword (e.g.
    "skew", "conversations"). All (value, seed) runs share the worker processes (or
    ``executor``, as in :func:`over_seeds`).
    """
    from .seeds import summarise

    values = list(values)
    if not values:
        raise ValueError("values must hold at least one value, got none")
    import inspect

    from . import workload as _workload

    wparams = set(inspect.signature(_workload.ChatWorkload).parameters) - {"seed"}
    sparams = set(inspect.signature(simulate).parameters) - {"w", "policy", "seed", "paths"}
    if param not in wparams | sparams:
        raise ValueError(
            f"param must be a simulate or ChatWorkload keyword, got {param!r}; "
            f"allowed: {sorted(wparams | sparams)}"
        )
    if param in wparams and w is not None:
        raise ValueError(f"param {param!r} changes the workload: give workload_kwargs, not w")
    jobs, seed_lists = [], []
    for v in values:
        wk, kw = dict(workload_kwargs or {}), dict(kwargs)
        (wk if param in wparams else kw)[param] = v
        seeds_v, js = _jobs(w, None if w is not None else wk, seeds, policies, kw, fields)
        seed_lists.append(seeds_v)
        jobs.extend(js)
    if w is not None:
        _SHARED["w"], _SHARED["paths"] = w, w.paths(kwargs.get("block_size", 16))
    try:
        out = _map(jobs, processes, executor, w)
    finally:
        _SHARED.clear()
    n = len(seed_lists[0])
    res: dict[str, dict[str, list]] = {p: {f: [] for f in fields} for p in policies}
    for i, sds in enumerate(seed_lists):
        chunk = out[i * n : (i + 1) * n]
        for p in policies:
            for f in fields:
                res[p][f].append(summarise([o[p][f] for o in chunk], sds))
    return res
