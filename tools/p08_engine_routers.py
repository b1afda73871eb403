"""Problem 8's router comparison (``p08-07-queues-and-latency``) on the engine model.

    .venv/bin/python tools/p08_engine_routers.py [--processes N]

The chapter compares seven routing rules on closed-loop chats with :mod:`kvlab.queueing`'s own
replica model (book and measured costs). This tool runs the same rules, the same traffic and the
same seeds through :mod:`kvlab.queueing.engine_backend`, where every replica is an engine-model
engine (vLLM v1's scheduling, the prefix cache inside the KV pool, step costs from aiconfigurator's
database) of Llama-3.1-70B on 8 H100 SXM GPUs, the chapter's replica, in three cases:

* ``roomy``: the chapter's rate; the pool that memory gives (``gpu_memory_utilization`` 0.9);
* ``tight``: the same rate with a pool of :data:`TIGHT_POOL_TOKENS` tokens per replica
  (``gpu_memory_utilization`` solved for it), running requests included: the chapter's tight case
  (a 50,000-token cache) in the only form an engine has, a small pool holding the cache and the
  running requests' KV, with the two guards' exact views beside their stale ones as in the chapter;
* ``high``: twice the chapter's rate, the roomy pool (6,000 requests per seed, as the chapter).

Every case also runs ``dynamo/w16``: Dynamo's cost with its overlap weight raised to 16, the rule
the Problem 8 card names for a working set beyond the pools (``p08-04-worked-answer``, section 5b).

Writes ``data/engine/p08-routers.json`` (every metric of :data:`kvlab.queueing.METRICS` per case,
rule and seed, and the engines' preemptions per request sent; the command, the time it took and a
key of the code and settings, :func:`cache_key`); ``p08-07-queues-and-latency`` reads it and ``lib/tests/test_p08_engine_routers.py``
fails when the key is stale. It takes tens of minutes on two cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "engine" / "p08-routers.json"
#: seeds of every case (the chapter uses 8 on its own model; the engine model is slower)
SEEDS = (0, 1, 2, 3)
#: requests per seed and warm-up (s), as the chapter's N and WARM_S (its high case sends 6,000)
REQUESTS, WARMUP_S = 4_000, 100.0
HIGH_REQUESTS = 6_000
#: the tight case's KV pool per replica (tokens, running requests included)
TIGHT_POOL_TOKENS = 60_000
#: the code whose change makes the recorded runs stale
SOURCES = (
    "tools/p08_engine_routers.py",
    "lib/kvlab/queueing/engine_backend.py",
    "lib/kvlab/queueing/dispatch.py",
    "lib/kvlab/queueing/replica.py",
    "lib/kvlab/queueing/traffic.py",
    "lib/kvlab/queueing/compare.py",
    "lib/kvlab/routing.py",
    "lib/kvlab/engine_model/engine.py",
    "lib/kvlab/engine_model/kv_pool.py",
    "lib/kvlab/engine_model/step_costs.py",
    "lib/kvlab/engine_model/calibration.py",
    "data/costs/engine_tables.json",
)


def cache_key() -> str:
    """sha256 of :data:`SOURCES` and the settings."""
    h = hashlib.sha256()
    for rel in SOURCES:
        h.update(rel.encode())
        h.update((ROOT / rel).read_bytes())
    settings = {"seeds": SEEDS, "requests": REQUESTS, "high_requests": HIGH_REQUESTS,
                "warmup_s": WARMUP_S, "tight": TIGHT_POOL_TOKENS}  # fmt: skip
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


def tight_utilisation(tp: int = 8) -> float:
    """The ``gpu_memory_utilization`` whose pool holds :data:`TIGHT_POOL_TOKENS` tokens."""
    from kvlab.engine_model import EngineCalibration

    lo, hi = 0.05, 0.9
    for _ in range(60):
        mid = (lo + hi) / 2
        blocks = EngineCalibration(gpu_memory_utilization=mid).num_blocks(tp)
        if blocks * 16 < TIGHT_POOL_TOKENS:
            lo = mid
        else:
            hi = mid
    return round(hi, 4)


def cases() -> dict:
    """case -> (rate (requests/s), gpu_memory_utilization, {rule: simulate() keywords},
    requests per seed)."""
    from kvlab import queueing
    from kvlab.assumptions import P8

    rate = float(P8.rate_rps)
    rules = dict(queueing.ROUTERS)
    # the card's rule for a working set beyond the pools: Dynamo's cost, overlap weight raised
    rules["dynamo/w16"] = dict(queueing.ROUTERS["dynamo"], overlap_weight=16.0)
    tight_rules = dict(rules)
    for k in ("guard_cumulative", "guard_live"):
        tight_rules[f"{k}/exact"] = dict(rules[k], view="exact")
    return {
        "roomy": (rate, 0.9, rules, REQUESTS),
        "tight": (rate, tight_utilisation(), tight_rules, REQUESTS),
        "high": (2 * rate, 0.9, rules, HIGH_REQUESTS),
    }


def _one(job):
    case, rule, kw, rate, util, requests, seed = job
    from kvlab import queueing
    from kvlab.assumptions import P8
    from kvlab.engine_model import EngineCalibration
    from kvlab.queueing.compare import _metrics

    cal = EngineCalibration(gpu_memory_utilization=util)
    t = time.perf_counter()
    # as queueing.compare runs one rule and seed, keeping the engines' preemption counts too
    w = queueing.ChatSessions(requests=requests, seed=seed)
    r = queueing.simulate(w, rate_rps=rate, seed=seed, warmup_s=WARMUP_S, paths=w.paths(16),
                          cost=cal, cache_tokens=None, replicas=P8.replicas, **kw)  # fmt: skip
    vals = {m: float(v) for m, v in _metrics(r).items()}
    vals["preempted_per_request"] = sum(r.params["preemptions"]) / requests
    return case, rule, seed, vals, time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "lib"))
    from kvlab.engine_model import EngineCalibration

    t0 = time.perf_counter()
    spec = cases()
    jobs = [(c, rule, kw, rate, util, n, seed) for c, (rate, util, rules, n) in spec.items()
            for rule, kw in rules.items() for seed in SEEDS]  # fmt: skip
    with ProcessPoolExecutor(args.processes) as ex:
        done = list(ex.map(_one, jobs))
    out: dict = {}
    for case, rule, seed, vals, secs in done:
        row = out.setdefault(case, {}).setdefault(rule, {m: [] for m in vals})
        for m, v in vals.items():
            row[m].append(v)
        print(f"{case} {rule} seed {seed}: {secs:.1f} s", file=sys.stderr)
    doc = {
        "key": cache_key(),
        "command": "python tools/p08_engine_routers.py",
        "date": dt.date.today().isoformat(),
        "seconds": round(time.perf_counter() - t0),
        "processes": args.processes,
        "seeds": list(SEEDS),
        "requests": REQUESTS,
        "warmup_s": WARMUP_S,
        "cases": {
            c: {
                "rate_rps": rate,
                "requests": n,
                "gpu_memory_utilization": util,
                "pool_tokens": EngineCalibration(gpu_memory_utilization=util).num_blocks(8) * 16,
                "rules": out[c],
            }
            for c, (rate, util, _, n) in spec.items()
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} in {doc['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
