"""SGLang's real router in front of Lab 1's two vLLM servers, and kvlab's model of its rule.

Measuring (next to the engines, inside the ``serving`` job of :mod:`.engine_jobs`):
:func:`measure_router` puts a :class:`~kvlab.measure.serving.sglang_router.TokenShim` before each
running server and sgl-model-gateway (:class:`~kvlab.measure.serving.sglang_router.SGLangRouterProcess`)
before the shims, sends Lab 1's token-id stream through it as id strings from one client (one
request at a time) or several (each takes the next request as soon as its last one is answered),
and reads back where each request went and when (the shims' logs), what vLLM found in its cache
(``usage.prompt_tokens_details.cached_tokens``), the router's worker order (``GET /workers``), its
sockets (loopback only) and whether its processes are gone after the run.

Modelling (in the book's environment, from the measured record): :func:`replay_router` replays
the router's decisions request by request with :class:`kvlab.routing.SGLangRouter` fed what the
router saw when it chose: its record of what it sent where (:class:`TextRecord`, the characters of
every prompt per worker, as its approximate tree holds them) and the requests in flight on each
worker at that moment (from the shims' logs); :func:`replay_pools` replays the router's actual
assignment through one :class:`kvlab.cache.VLLMBlockPool` per server.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ...cache import VLLMBlockPool

#: The router runs of Lab 1: policy, clients sending at once, requests (the stream's first ones).
LAB1_ROUTER_RUNS = (
    ("cache_aware", 1, 40),
    ("cache_aware", 2, 200),
    ("round_robin", 2, 200),
)


# -- measuring (engine side) ---------------------------------------------------------------------


def measure_router(
    servers,
    served_model: str,
    ids: list[list[int]],
    policy: str,
    clients: int,
    requests: int,
    python: str | None = None,
) -> dict:
    """One run of the real router over ``ids[:requests]`` to the running ``servers``
    (:class:`~kvlab.measure.serving.server.VllmServer`, prefix caches reset first). Returns a
    JSON-ready record (see the module docstring); the router and the shims are stopped, also on
    failure, and the record says whether the router's processes are gone."""
    from ..serving import procs
    from ..serving import sglang_router as sr

    if clients < 1:
        raise ValueError(f"clients must be at least 1, got {clients}")
    texts = [sr.ids_to_text(x) for x in ids[:requests]]
    index = {t: i for i, t in enumerate(texts)}
    if len(index) != len(texts):
        raise ValueError(
            "the stream holds two identical prompts: the shims could not tell them apart"
        )
    for s in servers:
        s.reset_prefix_cache()
    before = [s.counters() for s in servers]
    shims = [sr.TokenShim(s.base_url).start() for s in servers]
    out: dict = {"policy": policy, "clients": clients, "requests": len(texts)}
    router = None
    try:
        t0 = time.perf_counter()
        out["start_errors"] = []
        for _attempt in range(2):  # a router whose workers did not register is tried once more
            router = sr.SGLangRouterProcess([sh.url for sh in shims], policy, python=python)
            out["command"] = router.command()
            try:
                router.start()
                break
            except sr.EngineError as exc:
                out["start_errors"].append(str(exc).splitlines()[0])
        else:
            raise sr.EngineError("; ".join(out["start_errors"]))
        with router:
            pid = router.proc.pid if router.proc is not None else -1
            out["router_start_s"] = router.start_s
            out["router_pid"] = pid
            workers = router.workers()
            out["router_order"] = [[sh.url for sh in shims].index(u) for u in workers]
            sockets = procs.listening_sockets([pid])
            out["router_sockets"] = [str(s) for s in sockets]
            out["router_non_loopback"] = [str(s) for s in procs.non_loopback(sockets)]
            t1 = time.perf_counter()
            sent = _send(router, served_model, texts, clients)
            out["seconds"] = time.perf_counter() - t1
            out["router_counts"] = _router_counts(router.metrics_text(), [sh.url for sh in shims])
        out["router_alive_after_stop"] = router.alive()
        out["router_gone"] = procs.gone([pid])
        out["total_seconds"] = time.perf_counter() - t0
    finally:
        if router is not None:
            router.stop()
        for sh in shims:
            sh.stop()
    after = [s.counters() for s in servers]
    out["counters"] = [
        {"queries": a.queries - b.queries, "hits": a.hits - b.hits}
        for a, b in zip(after, before, strict=True)
    ]
    n = len(texts)
    server = [-1] * n
    t_in, t_out = [0.0] * n, [0.0] * n
    for r, sh in enumerate(shims):
        for e in sh.log:
            i = index[e["prompt"]]
            if server[i] != -1:
                raise RuntimeError(f"request {i} reached two servers")
            server[i], t_in[i], t_out[i] = r, e["t_in"] - t0, e["t_out"] - t0
    if -1 in server:
        raise RuntimeError(f"request {server.index(-1)} reached no server")
    out.update(
        server=server,
        shim_in_s=t_in,
        shim_out_s=t_out,
        sent_s=[x - t0 for x in sent["sent"]],
        answered_s=[x - t0 for x in sent["answered"]],
        cached_tokens=sent["cached_tokens"],
        prompt_tokens=sent["prompt_tokens"],
        client=sent["client"],
    )
    return out


def _router_counts(text: str, urls: list[str]) -> list[int]:
    """Requests the router itself counts per worker (``smg_worker_cb_outcomes_total``, its
    circuit breaker's successes and failures), in the order of ``urls``."""
    import re

    counts = [0] * len(urls)
    for line in text.splitlines():
        m = re.match(r"smg_worker_cb_outcomes_total\{(.*)\}\s+([0-9.eE+]+)$", line)
        if m:
            w = re.search(r'worker="([^"]+)"', m.group(1))
            if w and w.group(1) in urls:
                counts[urls.index(w.group(1))] += int(float(m.group(2)))
    return counts


def _send(router, model: str, texts: list[str], clients: int) -> dict:
    n = len(texts)
    res: dict = {
        "sent": [0.0] * n,
        "answered": [0.0] * n,
        "cached_tokens": [0] * n,
        "prompt_tokens": [0] * n,
        "client": [0] * n,
    }
    nxt = [0]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client(c: int) -> None:
        while not errors:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                return
            res["client"][i] = c
            res["sent"][i] = time.perf_counter()
            try:
                body = router.complete_text(model, texts[i])
            except BaseException as exc:  # stop the other clients too
                errors.append(exc)
                return
            res["answered"][i] = time.perf_counter()
            usage = body.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            res["cached_tokens"][i] = int(details.get("cached_tokens") or 0)
            res["prompt_tokens"][i] = int(usage.get("prompt_tokens") or 0)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return res


# -- modelling (book side) ---------------------------------------------------------------------


def text_lcp(a: str, b: str) -> int:
    """Characters two strings share from their start."""
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on slice equality (compared in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class TextRecord:
    """The router's record of what it sent where, as its approximate tree holds it: every prompt's
    characters, per worker (nothing is evicted: the tree's limit, 2**26 characters per worker,
    is far above a lab's stream). :meth:`matched` gives, per worker, the longest run of leading
    characters a prompt shares with one that worker was sent."""

    def __init__(self, workers: int):
        self.texts: list[list[str]] = [[] for _ in range(int(workers))]

    def matched(self, text: str) -> np.ndarray:
        return np.array(
            [max((text_lcp(text, t) for t in ts), default=0) for ts in self.texts], dtype=float
        )

    def insert(self, text: str, worker: int) -> None:
        self.texts[worker].append(text)


def inflight_at_arrival(server, t_in, t_out, replicas: int) -> list[list[int]]:
    """Requests in flight on each server when each request arrived: ``t_in`` when it reached its
    server (just after the router chose), ``t_out`` when its client had the answer (the router
    counts a request as load from its choice until the answer has gone out)."""
    n = len(server)
    out = []
    for i in range(n):
        load = [0] * replicas
        for j in range(n):
            if j != i and t_in[j] < t_in[i] < t_out[j]:
                load[server[j]] += 1
        out.append(load)
    return out


#: A request that reached its server within this many seconds of another one's answer or
#: arrival: the shims' clocks cannot tell which came first at the router.
CLOSE_CALL_S = 0.01


def close_calls(run: dict, within_s: float = CLOSE_CALL_S) -> list[int]:
    """Requests whose in-flight counts the record cannot pin down: another client's request was
    answered, or reached a server, within ``within_s`` of this one's arrival. (A client's own
    previous request was answered before it sent this one, and the router counted it done.)"""
    t_in, t_done, client = run["shim_in_s"], run["answered_s"], run["client"]
    n = len(t_in)
    return [
        i
        for i in range(n)
        if any(
            client[j] != client[i]
            and (abs(t_in[i] - t_done[j]) < within_s or abs(t_in[i] - t_in[j]) < within_s)
            for j in range(n)
        )
    ]


def replay_router(run: dict, texts: list[str] | None = None, ids=None) -> dict:
    """kvlab's model of the router's choice for every request of a measured ``run`` (a record of
    :func:`measure_router`), in the order the requests reached the servers, each fed what the
    router saw: its record of the requests before (where they actually went) and the requests
    then in flight. Worker indices follow the router's own list (``GET /workers``), whose first
    worker takes the low-match branch's ties. Returns the predicted server per request (the
    servers' indices), the branch taken, the agreement with the router, and the close calls
    (:func:`close_calls`: requests whose in-flight counts are uncertain by a few milliseconds)."""
    from ... import routing
    from ..serving.sglang_router import ids_to_text

    if texts is None:
        texts = [ids_to_text(x) for x in ids]
    order_of = list(run["router_order"])  # router position -> server index
    pos_of = {s: p for p, s in enumerate(order_of)}
    R = len(order_of)
    server = run["server"]
    n = len(server)
    loads = inflight_at_arrival(server, run["shim_in_s"], run["answered_s"], R)
    arrival = sorted(range(n), key=lambda i: run["shim_in_s"][i])
    predicted = [-1] * n
    branch = [""] * n
    if run["policy"] == "round_robin":
        rr = routing.RoundRobinRouter(R)
        for i in arrival:
            predicted[i] = order_of[rr.choose(i)]
            branch[i] = "round_robin"
    elif run["policy"] == "cache_aware":
        model = routing.SGLangRouter(R)
        record = TextRecord(R)
        for i in arrival:
            m = record.matched(texts[i])
            ld = np.array([loads[i][order_of[p]] for p in range(R)], dtype=float)
            counts = dict(model.branches)
            p = model.choose(i, m, ld, prompt_tokens=len(texts[i]), node=int(m.max()))
            branch[i] = next(k for k in counts if model.branches[k] != counts[k])
            if branch[i] == "match" and int((m == m.max()).sum()) > 1:
                branch[i] = "match_tie"
            predicted[i] = order_of[p]
            record.insert(texts[i], pos_of[server[i]])  # the router's actual choice
    else:
        raise ValueError(f"policy must be cache_aware or round_robin, got {run['policy']!r}")
    agree = sum(int(a == b) for a, b in zip(predicted, server, strict=True))
    close = close_calls(run)
    return {
        "close_calls": close,
        "predicted": predicted,
        "branch": branch,
        "agree": agree,
        "requests": n,
        "disagree_at": [i for i in range(n) if predicted[i] != server[i]],
        "split": np.bincount(server, minlength=R).tolist(),
        "predicted_split": np.bincount(predicted, minlength=R).tolist(),
    }


def replay_pools(run: dict, ids, num_blocks: int, block_size: int) -> list[int]:
    """Cached tokens of every request of ``run`` predicted by one :class:`VLLMBlockPool` per
    server, each serving its requests in the order they reached it (one at a time)."""
    R = len(run["router_order"])
    pools = [VLLMBlockPool(num_blocks, block_size, record_events=False) for _ in range(R)]
    out = [0] * len(run["server"])
    for i in sorted(range(len(out)), key=lambda i: run["shim_in_s"][i]):
        r = run["server"][i]
        out[i] = pools[r].serve(np.asarray(ids[i], dtype=np.int64), cache_output=False)
    return out


def overlapped(run: dict) -> list[int]:
    """Requests that ran on a server while another request was running there (vLLM batched
    them; the one-at-a-time pool replay does not apply to them exactly)."""
    s, a, b = run["server"], run["shim_in_s"], run["shim_out_s"]
    n = len(s)
    return [
        i
        for i in range(n)
        if any(j != i and s[j] == s[i] and a[j] < b[i] and a[i] < b[j] for j in range(n))
    ]


def hit_rate(cached, prompt) -> float:
    return sum(int(x) for x in cached) / sum(int(x) for x in prompt)


def summarize(run: dict, ids, num_blocks: int, block_size: int) -> dict:
    """A measured router run set against kvlab: the model's choices (:func:`replay_router`), the
    pool replay of the router's actual assignment (:func:`replay_pools`) and both hit rates over
    the run's requests; ``pool_exact_alone``: requests that ran alone on their server (not
    batched with another, :func:`overlapped`) whose cached tokens the pools reproduce exactly,
    out of ``alone``."""
    n = int(run["requests"])
    ids = list(ids[:n])
    rep = replay_router(run, ids=ids)
    pools = replay_pools(run, ids, num_blocks, block_size)
    batched = set(overlapped(run))
    alone = [i for i in range(n) if i not in batched]
    measured = run["cached_tokens"]
    return {
        **rep,
        "pool_cached": pools,
        "pool_exact": sum(int(a == b) for a, b in zip(pools, measured, strict=True)),
        "alone": len(alone),
        "pool_exact_alone": sum(int(pools[i] == measured[i]) for i in alone),
        "hit_rate": hit_rate(measured, run["prompt_tokens"]),
        "pool_hit_rate": hit_rate(pools, run["prompt_tokens"]),
        "first_worker": int(run["router_order"][0]),
    }
