"""One request's routing in a timed run (:func:`route`): the signals each policy of
:data:`kvlab.routing.SIGNALS` reads, read from the replicas (or the router's own record) at the
request's arrival, and the router's choice. Shared by the reference loop
(:mod:`~kvlab.queueing.reference`) and the engine-model backend
(:mod:`~kvlab.queueing.engine_backend`), whose replicas expose the same signals."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from .. import routing
from ..fleet import _touch
from .replica import _deepest, _match


def route(
    router: Any,  # a kvlab.routing router of ``policy`` (their choose() signatures differ)
    policy: str,
    key: Hashable,
    ks: Sequence[Hashable],
    ns: Sequence[int],
    mh: int,
    prompt: int,
    bs: int,
    live: list[int],
    lreps: list,
    src: list | None,
    stale: bool,
    outstanding: bool,
    known: list[OrderedDict],
    known_used: list[int],
    rec_cap: int,
    match: Callable = _match,
    deepest: Callable = _deepest,
) -> int:
    """The replica (an index into all replicas) that ``router`` picks for one request, with every
    signal read now. The request: routing ``key``, cache path (``ks``, ``ns``: entry keys and
    their blocks), ``mh`` blocks at most hit, ``prompt`` tokens; blocks of ``bs`` tokens.
    ``live``: the replicas the router can choose (indices, in its order) and ``lreps`` their
    objects, each with ``out_tokens`` and ``assigned`` (prefill tokens), ``n_sys`` (requests in
    it), ``used`` (blocks cached) and ``active_blocks(ks, ns)`` (blocks held in flight, this
    request's included). ``src``: per live replica, what the matches are read from (the router's
    records if ``stale``, else the caches), through ``match(src, ks, ns, mh)`` (blocks) and
    ``deepest(src, ks, ns)`` (the deepest entry matched). With ``stale``, the request is recorded
    in ``known`` (per replica, all of them; ``known_used`` their sizes, capped at ``rec_cap``
    blocks)."""
    signals = routing.SIGNALS[policy]
    if "matched_tokens" in signals:
        assert src is not None, "a policy that reads matches needs src"
        m = [match(od, ks, ns, mh) * bs for od in src]
        if policy == "cache_aware":
            loads = (
                [rp.out_tokens for rp in lreps] if outstanding else [rp.assigned for rp in lreps]
            )
            r = live[router.choose(key, m, loads)]
        elif policy == "sglang":
            best = max(range(len(m)), key=m.__getitem__)
            tree = [known_used[j] for j in live] if stale else [rp.used for rp in lreps]
            r = live[
                router.choose(
                    key,
                    m,
                    [rp.n_sys for rp in lreps],
                    prompt,
                    [u * bs for u in tree],
                    deepest(src[best], ks, ns),
                )
            ]
        else:  # dynamo
            act = [rp.active_blocks(ks, ns) * bs for rp in lreps]
            r = live[router.choose(key, m, [rp.out_tokens for rp in lreps], prompt, act)]
        if stale:
            known_used[r] = _touch(known[r], ks, ns, known_used[r], rec_cap)
        return r
    if policy == "bounded_ring":
        return live[router.choose(key, None, [rp.n_sys for rp in lreps])]
    return live[router.choose(key)]
