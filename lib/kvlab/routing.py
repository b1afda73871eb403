"""Routing policies: which replica serves a request.

The object API is tiny and stable, for any simulator (the fleet simulator here, a time-based
queueing simulator elsewhere)::

    router = make_router("cache_aware", replicas=8, seed=0, epsilon=0.05, lam=0.0)
    r = router.choose(key, matched_tokens, loads)   # -> replica index in [0, replicas)

- ``key``: the request's conversation / session id (an int; strings are hashed with blake2b).
  Used by "sticky"; ignored by the others.
- ``matched_tokens``: per-replica array, the prompt tokens the router believes each replica has
  cached (its *view*). Used by "cache_aware" only; others accept None.
- ``loads``: per-replica array of load in the caller's unit (the fleet simulator passes prefill
  tokens computed so far; a queueing simulator may pass queued work). Used by "cache_aware" only.

Policies:

- ``random``: uniform over replicas from a seeded generator.
- ``round_robin``: 0, 1, 2, ... in turn.
- ``sticky``: ``key mod replicas`` ("modulo", default), or the owner of the key on a consistent-hash
  ring with virtual nodes (``sticky="ring"``, see :class:`HashRing`).
- ``cache_aware``: among replicas with load <= (1 + epsilon) x mean load, the one that maximises
  matched_tokens - lam x load; ties go to the less loaded, then to the lower index.

``view`` ("stale" or "exact") is recorded on the router for the caller: under "stale" the caller
passes the router's own record of what it routed where (it never learns of evictions, like
SGLang's approximate radix tree); under "exact" the real cache contents (replicas report KV events,
like NVIDIA Dynamo's KV router). The router itself only sees the numbers it is given.

Production rules, for the timed simulator (:mod:`kvlab.queueing`), which passes the extra signals
each one needs (see :data:`SIGNALS`):

- ``bounded_ring``: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
  2018): walk the ring from the key's point to the first replica whose live request count is
  below ceil(c x (total + 1) / N), ``load_factor`` c = 1.25.
- ``sglang``: SGLang's cache-aware router (sgl-model-gateway, ``policies/cache_aware.rs``): if the
  live request counts are imbalanced (max - min > ``balance_abs`` = 64 *and* max > ``balance_rel``
  = 1.5 x min) it sends the request to the least-loaded replica; otherwise, if the longest match in
  its approximate tree covers more than ``cache_threshold`` = 0.3 of the prompt it sends it to that
  replica (the first tenant of the deepest matched node, an arbitrary but fixed order per node),
  else to the healthy replica with the fewest live requests, ties to the lowest index (Rust's
  ``min_by_key`` keeps the first minimum). That low-match branch picked the smallest tree until
  sglang PR 14650 (merged 2025-12-08; in the pinned 0.3.2); PR 33138 (2026) later breaks
  that tie at random, not modelled here. Its tree is its own record of
  what it routed where, pruned LRU (the caller's ``view="stale"`` record).
- ``dynamo``: NVIDIA Dynamo's KV router: the lowest cost
  ``overlap_weight x prefill_blocks + active_blocks``, where prefill_blocks = (the replica's
  outstanding prefill tokens + this prompt's uncached tokens there) / block_size and active_blocks
  = distinct blocks held by the replica's requests in flight, this request's included (a block
  shared by several counts once); ``overlap_weight`` = 1 and
  temperature 0 (argmin, ties at random) are Dynamo's defaults. Its view is exact (KV events).
"""

from __future__ import annotations

import bisect
import hashlib
import math

import numpy as np

from ._validate import check_choice, check_int, check_number, non_negative

__all__ = [
    "POLICIES",
    "CacheAwareRouter",
    "ALL_POLICIES",
    "BoundedRingRouter",
    "DynamoRouter",
    "HashRing",
    "PRODUCTION_POLICIES",
    "SGLangRouter",
    "SIGNALS",
    "RandomRouter",
    "RoundRobinRouter",
    "Router",
    "StickyRouter",
    "make_router",
    "stable_hash",
]

POLICIES = ("random", "round_robin", "sticky", "cache_aware")
#: rules of production routers, simulated in time by :mod:`kvlab.queueing` (not by kvlab.fleet)
PRODUCTION_POLICIES = ("bounded_ring", "sglang", "dynamo")
ALL_POLICIES = POLICIES + PRODUCTION_POLICIES
#: what each policy's ``choose`` reads besides the key (for a simulator)
SIGNALS = {
    "random": (),
    "round_robin": (),
    "sticky": (),
    "cache_aware": ("matched_tokens", "loads"),
    "bounded_ring": ("loads",),
    "sglang": ("matched_tokens", "loads", "prompt_tokens", "tree_tokens", "node"),
    "dynamo": ("matched_tokens", "loads", "prompt_tokens", "active_tokens"),
}
_BUFFER = 4096


def stable_hash(key, seed: int = 0) -> int:
    """A 64-bit hash of ``key`` (int or str) that is the same in every process (blake2b)."""
    data = f"{seed}\x1f{key}".encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class HashRing:
    """A consistent-hash ring: each replica owns ``vnodes`` points; a key goes to the owner of the
    first point clockwise from the key's hash. Adding a replica moves only the keys that land on
    its new points (about 1 / (N + 1) of them)."""

    def __init__(self, replicas: int, vnodes: int = 100, seed: int = 0):
        self.replicas = 0
        self.vnodes = check_int("vnodes", vnodes, lo=1, hi=100_000)
        self.seed = check_int("seed", seed, lo=0)
        self._points: list[int] = []
        self._owners: list[int] = []
        for _ in range(check_int("replicas", replicas, lo=1, hi=100_000)):
            self.add_replica()

    def add_replica(self) -> int:
        """Add one replica (index = the old replica count) and return its index."""
        r = self.replicas
        for v in range(self.vnodes):
            h = stable_hash(f"replica-{r}-vnode-{v}", self.seed)
            i = bisect.bisect_left(self._points, h)
            self._points.insert(i, h)
            self._owners.insert(i, r)
        self.replicas += 1
        return r

    def lookup(self, key) -> int:
        """The replica that owns ``key``."""
        h = stable_hash(key, self.seed)
        i = bisect.bisect_right(self._points, h)
        return self._owners[i % len(self._points)]

    def walk(self, key):
        """The replicas in the order a bounded-load lookup tries them: the owner of ``key``, then
        each further distinct owner clockwise."""
        h = stable_hash(key, self.seed)
        i = bisect.bisect_right(self._points, h)
        seen: set[int] = set()
        n = len(self._points)
        for j in range(n):
            r = self._owners[(i + j) % n]
            if r not in seen:
                seen.add(r)
                yield r
                if len(seen) == self.replicas:
                    return

    def lookup_many(self, keys) -> np.ndarray:
        return np.array(
            [self.lookup(int(k) if isinstance(k, np.integer) else k) for k in keys], dtype=np.int64
        )


class Router:
    """Base class: ``choose(key, matched_tokens, loads) -> int``."""

    policy = ""
    view = "stale"

    def __init__(self, replicas: int):
        self.replicas = check_int("replicas", replicas, lo=1, hi=100_000)

    def choose(self, key, matched_tokens=None, loads=None) -> int:  # pragma: no cover
        raise NotImplementedError

    def choose_many(self, keys) -> np.ndarray:
        """Choices for a whole stream of keys (only for policies that ignore cache and load);
        identical to calling :meth:`choose` once per key."""
        return np.array([self.choose(k) for k in keys], dtype=np.int64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(replicas={self.replicas})"


class RandomRouter(Router):
    policy = "random"

    def __init__(self, replicas: int, seed: int = 0):
        super().__init__(replicas)
        self.rng = np.random.default_rng(check_int("seed", seed, lo=0))
        self._buf = np.empty(0, dtype=np.int64)
        self._pos = 0

    def _refill(self):
        self._buf = self.rng.integers(0, self.replicas, size=_BUFFER)
        self._pos = 0

    def choose(self, key=None, matched_tokens=None, loads=None) -> int:
        if self._pos >= len(self._buf):
            self._refill()
        self._pos += 1
        return int(self._buf[self._pos - 1])

    def choose_many(self, keys) -> np.ndarray:
        n = len(keys)
        out = np.empty(n, dtype=np.int64)
        done = 0
        while done < n:
            if self._pos >= len(self._buf):
                self._refill()
            take = min(n - done, len(self._buf) - self._pos)
            out[done : done + take] = self._buf[self._pos : self._pos + take]
            self._pos += take
            done += take
        return out


class RoundRobinRouter(Router):
    policy = "round_robin"

    def __init__(self, replicas: int):
        super().__init__(replicas)
        self._next = 0

    def choose(self, key=None, matched_tokens=None, loads=None) -> int:
        r = self._next
        self._next = (r + 1) % self.replicas
        return r

    def choose_many(self, keys) -> np.ndarray:
        out = (self._next + np.arange(len(keys))) % self.replicas
        self._next = int((self._next + len(keys)) % self.replicas)
        return out.astype(np.int64)


class StickyRouter(Router):
    policy = "sticky"

    def __init__(self, replicas: int, sticky: str = "modulo", vnodes: int = 100, seed: int = 0):
        super().__init__(replicas)
        self.sticky = check_choice("sticky", sticky, {"modulo", "ring"})
        self.ring = HashRing(replicas, vnodes, seed) if sticky == "ring" else None
        self.seed = seed

    def choose(self, key, matched_tokens=None, loads=None) -> int:
        if self.ring is not None:
            return self.ring.lookup(int(key) if isinstance(key, np.integer) else key)
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return int(key) % self.replicas
        return stable_hash(key, self.seed) % self.replicas

    def choose_many(self, keys) -> np.ndarray:
        keys = np.asarray(keys)
        if self.ring is None and keys.dtype.kind in "iu":
            return (keys % self.replicas).astype(np.int64)
        uniq, inv = np.unique(keys, return_inverse=True)
        return np.array([self.choose(k) for k in uniq.tolist()], dtype=np.int64)[inv]


class CacheAwareRouter(Router):
    policy = "cache_aware"

    def __init__(
        self,
        replicas: int,
        epsilon: float = 0.05,
        lam: float = 0.0,
        view: str = "stale",
        slack: float = 0.0,
    ):
        super().__init__(replicas)
        self.epsilon = non_negative("epsilon", epsilon)
        #: absolute allowance on top of (1 + epsilon) x mean load, in the caller's load unit
        self.slack = non_negative("slack", slack)
        self.lam = non_negative("lam", lam)
        self.view = check_choice("view", view, {"stale", "exact"})

    # Router.choose's defaults serve the cache-blind policies; this one needs matched_tokens and
    # loads. Giving them defaults (None fails the shape check below) is a code change, and this
    # class is fingerprinted by kvlab.explorer.cache_key(): it waits for the next grid recompute.
    def choose(self, key, matched_tokens, loads) -> int:  # type: ignore[override]
        m = np.asarray(matched_tokens, dtype=float)
        ld = np.asarray(loads, dtype=float)
        if m.shape != (self.replicas,) or ld.shape != (self.replicas,):
            raise ValueError(
                f"matched_tokens and loads must have shape ({self.replicas},), got "
                f"{m.shape} and {ld.shape}"
            )
        threshold = (1.0 + self.epsilon) * (float(ld.sum()) / self.replicas) + self.slack
        best, best_score, best_load = -1, 0.0, 0.0
        for r in range(self.replicas):
            load = ld[r]
            if load > threshold:
                continue
            score = m[r] - self.lam * load
            if best < 0 or score > best_score or (score == best_score and load < best_load):
                best, best_score, best_load = r, score, load
        return best

    def choose_many(self, keys):  # pragma: no cover - needs the cache state
        raise TypeError("cache_aware needs matched_tokens and loads per request: call choose()")


def _check_shape(name: str, x, replicas: int) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.shape != (replicas,):
        raise ValueError(f"{name} must have shape ({replicas},), got {a.shape}")
    return a


class BoundedRingRouter(Router):
    """Consistent hashing with bounded loads: the key's ring owner unless its live load (requests
    in flight) has reached ceil(load_factor x (total + 1) / N); then the next owner clockwise."""

    policy = "bounded_ring"

    def __init__(self, replicas: int, load_factor: float = 1.25, vnodes: int = 100, seed: int = 0):
        super().__init__(replicas)
        self.load_factor = check_number("load_factor", load_factor, lo=1.0)
        self.ring = HashRing(replicas, vnodes, seed)

    def choose(self, key, matched_tokens=None, loads=None) -> int:
        ld = _check_shape("loads", loads, self.replicas)
        cap = math.ceil(self.load_factor * (float(ld.sum()) + 1) / self.replicas)
        k = int(key) if isinstance(key, np.integer) else key
        for r in self.ring.walk(k):
            if ld[r] < cap:
                return r
        return int(np.argmin(ld))  # pragma: no cover - some replica is always below the cap


class SGLangRouter(Router):
    """SGLang's cache-aware rule (see the module docstring). ``loads``: live request counts;
    ``node``: the deepest matched entry (its key fixes the order in which tied replicas are
    tried). ``tree_tokens`` (each replica's part of the router's tree) is accepted and ignored:
    the low-match branch reads the live load since sglang PR 14650."""

    policy = "sglang"

    def __init__(
        self,
        replicas: int,
        cache_threshold: float = 0.3,
        balance_abs: float = 64,
        balance_rel: float = 1.5,
        seed: int = 0,
    ):
        super().__init__(replicas)
        self.cache_threshold = check_number("cache_threshold", cache_threshold, lo=0, hi=1)
        self.balance_abs = non_negative("balance_abs", balance_abs)
        self.balance_rel = check_number("balance_rel", balance_rel, lo=1)
        self.seed = check_int("seed", seed, lo=0)
        self._order: dict = {}
        #: how often each branch was taken: imbalanced, cache match, low match (least loaded)
        self.branches = {"imbalanced": 0, "match": 0, "low_match": 0}

    def _rank(self, node) -> list[int]:
        rank = self._order.get(node)
        if rank is None:
            rank = [stable_hash(f"{node}/{r}", self.seed) for r in range(self.replicas)]
            self._order[node] = rank
        return rank

    def choose(
        self, key, matched_tokens=None, loads=None, prompt_tokens=1, tree_tokens=None, node=None
    ) -> int:
        # matched_tokens and loads are required: None fails the shape checks (ValueError)
        ld = _check_shape("loads", loads, self.replicas)
        m = _check_shape("matched_tokens", matched_tokens, self.replicas)
        hi, lo = float(ld.max()), float(ld.min())
        if hi - lo > self.balance_abs and hi > self.balance_rel * lo:
            self.branches["imbalanced"] += 1
            return int(np.argmin(ld))
        best = float(m.max())
        if best / max(float(prompt_tokens), 1.0) > self.cache_threshold:
            self.branches["match"] += 1
            tied = np.flatnonzero(m == best).tolist()
            if len(tied) == 1:
                return tied[0]
            rank = self._rank(node)
            return min(tied, key=rank.__getitem__)
        self.branches["low_match"] += 1
        if tree_tokens is not None:
            _check_shape("tree_tokens", tree_tokens, self.replicas)
        return int(np.argmin(ld))  # the first replica with the fewest live requests


class DynamoRouter(Router):
    """NVIDIA Dynamo's KV-router cost (see the module docstring). ``loads``: outstanding prefill
    tokens per replica; ``active_tokens``: tokens held by requests in flight."""

    policy = "dynamo"

    def __init__(
        self, replicas: int, overlap_weight: float = 1.0, block_size: int = 16, seed: int = 0
    ):
        super().__init__(replicas)
        self.overlap_weight = non_negative("overlap_weight", overlap_weight)
        self.block_size = check_int("block_size", block_size, lo=1)
        self.rng = np.random.default_rng(check_int("seed", seed, lo=0))

    def cost(self, matched_tokens, loads, prompt_tokens, active_tokens) -> np.ndarray:
        """Each replica's cost in blocks (lower is better)."""
        m = _check_shape("matched_tokens", matched_tokens, self.replicas)
        ld = _check_shape("loads", loads, self.replicas)
        act = _check_shape("active_tokens", active_tokens, self.replicas)
        prefill = (ld + np.maximum(float(prompt_tokens) - m, 0.0)) / self.block_size
        return self.overlap_weight * prefill + act / self.block_size

    def choose(
        self, key, matched_tokens=None, loads=None, prompt_tokens=0, active_tokens=None
    ) -> int:
        # matched_tokens and loads are required: None fails cost()'s shape checks (ValueError)
        if active_tokens is None:
            active_tokens = np.zeros(self.replicas)
        c = self.cost(matched_tokens, loads, prompt_tokens, active_tokens)
        tied = np.flatnonzero(c == c.min())
        return int(tied[0] if len(tied) == 1 else tied[self.rng.integers(len(tied))])


def make_router(
    policy: str,
    replicas: int,
    *,
    seed: int = 0,
    epsilon: float = 0.05,
    lam: float = 0.0,
    sticky: str = "modulo",
    view: str = "stale",
    vnodes: int = 100,
    slack: float = 0.0,
    load_factor: float = 1.25,
    cache_threshold: float = 0.3,
    balance_abs: float = 64,
    balance_rel: float = 1.5,
    overlap_weight: float = 1.0,
    block_size: int = 16,
) -> Router:
    """A router for ``policy`` in ALL_POLICIES over ``replicas`` replicas (module docstring)."""
    check_choice("policy", policy, set(ALL_POLICIES))
    check_choice("view", view, {"stale", "exact"})
    check_choice("sticky", sticky, {"modulo", "ring"})
    check_number("epsilon", epsilon, lo=0)
    router: Router
    if policy == "random":
        router = RandomRouter(replicas, seed)
    elif policy == "round_robin":
        router = RoundRobinRouter(replicas)
    elif policy == "sticky":
        router = StickyRouter(replicas, sticky, vnodes, seed)
    elif policy == "cache_aware":
        router = CacheAwareRouter(replicas, epsilon, lam, view, slack)
    elif policy == "bounded_ring":
        router = BoundedRingRouter(replicas, load_factor, vnodes, seed)
    elif policy == "sglang":
        router = SGLangRouter(replicas, cache_threshold, balance_abs, balance_rel, seed)
    else:
        router = DynamoRouter(replicas, overlap_weight, block_size, seed)
    router.view = view
    return router
