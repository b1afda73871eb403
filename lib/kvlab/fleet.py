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
is the same as an LRU over entries whose victim is truncated from its tail. Each replica keeps an
``OrderedDict`` entry -> cached blocks; a request costs a few dictionary operations.
``lib/tests/test_fleet.py`` replays small streams through a brute-force block cache and demands
identical per-request hit tokens.

``cache_model="per_conversation"`` is the simplified model behind the published figures: a replica
holds one entry per conversation, overwritten (its old chat dropped) when a request of the
conversation's new chat arrives there; a stale old chat elsewhere matches nothing.

Load is the prefill tokens a replica has computed so far (prompt tokens minus hit tokens, warm-up
included); the reported ``prefill_tokens`` count only requests after the warm-up.
"""

from __future__ import annotations

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
) -> FleetResult:
    """Route every request of ``w`` (a ChatWorkload or a Trace) over ``replicas`` replicas with
    a per-replica LRU prefix cache of ``cache_tokens`` tokens (None: unlimited).

    ``policy`` in routing.POLICIES; ``epsilon``, ``lam``, ``view`` tune "cache_aware";
    ``sticky`` ("modulo" or "ring") and ``vnodes`` tune "sticky"; ``seed`` seeds "random".
    ``warmup``: the first requests only warm the caches. ``paths``: a precomputed
    ``w.paths(block_size)`` to reuse across calls.
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
    if paths.kind == "chat":
        reps, hits = _run_chat(w, paths, choices, R, cap, eps, lam, stale, per_conv, slow)
    else:
        reps, hits = _run_general(w, paths, choices, R, cap, eps, lam, stale, slow)

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
    """One (workload, seed) job: every policy's figures."""
    wkey, seed, policies, kwargs, fields = job
    from . import workload as _workload

    if wkey is None:
        w, paths = _SHARED["w"], _SHARED["paths"]
    else:
        w = _workload.ChatWorkload(**{**dict(wkey), "seed": seed})
        paths = w.paths(kwargs.get("block_size", 16))
    res = simulate_all(w, policies, paths=paths, seed=seed, **kwargs)
    return {p: {f: float(getattr(r, f)) for f in fields} for p, r in res.items()}


def _map(jobs: list, processes: int | None) -> list:
    """Run ``_seed_job`` over ``jobs``, on ``processes`` worker processes where fork exists
    (None: up to 2, the book's build machine's cores)."""
    import multiprocessing as mp
    import os

    if processes is None:
        processes = min(2, os.cpu_count() or 1)
    processes = check_int("processes", processes, lo=1, hi=256)
    if processes == 1 or len(jobs) == 1 or "fork" not in mp.get_all_start_methods():
        return [_seed_job(j) for j in jobs]
    with mp.get_context("fork").Pool(min(processes, len(jobs))) as pool:
        return pool.map(_seed_job, jobs, chunksize=1)


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
    return seeds, [(wkey, s, tuple(policies), dict(kwargs), tuple(fields)) for s in seeds]


def over_seeds(
    policies=routing.POLICIES,
    seeds=None,
    *,
    w=None,
    workload_kwargs: dict | None = None,
    fields=FIGURES,
    processes: int | None = None,
    **kwargs,
) -> dict[str, dict]:
    """Each policy's figures over several random streams: ``{policy: {field: Spread}}``.

    For each seed (default ``kvlab.seeds.DEFAULT_SEEDS``) a ChatWorkload is drawn with that seed
    from ``workload_kwargs`` (the demo's defaults when None) and every policy runs on it with the
    same ``seed`` (which also seeds random routing). A fixed workload ``w`` (a trace) is reused
    for every seed instead; then only random routing varies. ``fields`` name FleetResult
    attributes; ``kwargs`` go to :func:`simulate`. Seeds run on ``processes`` worker processes.
    """
    from .seeds import summarise

    seeds, jobs = _jobs(w, workload_kwargs, seeds, policies, kwargs, fields)
    if w is not None:
        _SHARED["w"], _SHARED["paths"] = w, w.paths(kwargs.get("block_size", 16))
    try:
        out = _map(jobs, processes)
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
    **kwargs,
) -> dict[str, dict[str, list]]:
    """:func:`over_seeds` as one parameter takes each of ``values``:
    ``{policy: {field: [Spread per value]}}``.

    ``param`` is a :func:`simulate` keyword (e.g. "cache_tokens") or a ChatWorkload keyword (e.g.
    "skew", "conversations"). All (value, seed) runs share the worker processes.
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
        out = _map(jobs, processes)
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
