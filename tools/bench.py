"""Speed of the fleet simulator (not a test): simulated requests per second per policy and cache
model, and the routing demo's recompute time (all four policies at the defaults).

Usage: python tools/bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from kvlab import fleet, routing, traces, workload


def best_of(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    w = workload.ChatWorkload()
    paths = w.paths(16)
    print(f"chat workload: {len(w):,} requests, 8 replicas, 400,000-token caches")
    for model in ("prefix", "per_conversation"):
        for p in routing.POLICIES:
            s = best_of(
                lambda p=p, model=model: fleet.simulate(
                    w, policy=p, cache_model=model, paths=paths
                ),
                args.repeat,
            )
            print(f"  {model:17s} {p:12s} {len(w) / s:10,.0f} requests/s  ({s * 1e3:6.1f} ms)")
    demo = best_of(lambda: fleet.simulate_all(workload.ChatWorkload()), args.repeat)
    print(f"demo recompute (workload + 4 policies, {4 * len(w):,} requests): {demo:.3f} s")
    t = traces.load_mooncake()
    tp = t.paths(16)
    print(f"Mooncake trace: {len(t):,} requests")
    for p in routing.POLICIES:
        s = best_of(lambda p=p: fleet.simulate(t, policy=p, warmup=2_000, paths=tp), 1)
        print(f"  prefix            {p:12s} {len(t) / s:10,.0f} requests/s  ({s * 1e3:6.1f} ms)")
    from kvlab import pdsim, queueing

    print(
        "queueing simulator (kvlab.queueing), 100,000 chat requests on 8 replicas at 20 requests/s:"
    )
    queueing.bench()
    print("colocated vs disaggregated simulator (kvlab.pdsim), 100,000 requests on 8 replicas:")
    out = pdsim.bench(requests=100_000)
    for key, value in out.items():
        print(f"  {key}: {value:,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
