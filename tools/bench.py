"""Speed of the simulators (not a test): fleet's compiled kernels against its reference loops,
pdsim's compiled loop against its event-by-event reference and the timed queueing simulator's
compiled loop against its reference loop (requests simulated per second and the ratio, measured in
the same run), simulated requests per second per policy and cache model, the routing demo's
recompute time (all four policies at the defaults), and the routing explorer's grid (its stored
compute time, one job timed now and the whole grid extrapolated; ``--explorer-grid`` recomputes
the whole grid on every core, into a temporary file), the 73-capacity fleet benchmark's
four-scheduler ladder (kvlab.fleetbench, one seed on two processes); then the real engine's
figures (vLLM, the engine environment of `make engine`): start-up, cold and cached TTFT, requests
per second of a chat-stream replay, memory peak.

Usage: python tools/bench.py [--repeat N] [--explorer-grid] [--no-engine] [--simulators-only]
"""

from __future__ import annotations

import argparse
import math
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


def cpu_best_of(fn, repeat):
    """Best CPU time of this process over ``repeat`` calls (fair on a shared, busy machine)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def fleet_fast_vs_reference(repeat: int) -> None:
    """fleet.simulate's compiled kernels against the kept reference loops, in this run, on the
    routing explorer's settings (its default point, the grid's extremes of replicas and cache)."""
    from kvlab import explorer

    d = explorer.DEFAULTS
    w = workload.ChatWorkload(
        conversations=d["conversations"], skew=d["skew"], requests=explorer.REQUESTS, seed=0
    )
    paths = w.paths(16)
    t0 = time.perf_counter()
    fleet.simulate(w, paths=paths)  # compile (or load the compiled kernels from disk)
    first = time.perf_counter() - t0
    print(
        f"fleet.simulate, compiled kernels vs reference loops (kvlab.fleet_reference), "
        f"{len(w):,} requests ({explorer.WARMUP:,} warm-up), best CPU time of {repeat}; "
        f"first call (compile or load) {first:.2f} s"
    )
    print(f"  {'setting':28s} {'policy':12s} {'fast req/s':>12s} {'reference':>12s} {'ratio':>7s}")
    tf = tr = 0.0
    for r, c in ((d["replicas"], d["cache_tokens"]), (32, 10_000), (1, 1_000_000)):
        for p in routing.POLICIES:
            kw = dict(policy=p, replicas=r, cache_tokens=c, warmup=explorer.WARMUP, paths=paths)
            f = cpu_best_of(lambda kw=kw: fleet.simulate(w, **kw), repeat)
            ref = cpu_best_of(lambda kw=kw: fleet.simulate(w, _reference=True, **kw), repeat)
            tf, tr = tf + f, tr + ref
            print(
                f"  R={r:<3d} C={c:<9,d}{'':11s} {p:12s} {len(w) / f:12,.0f} "
                f"{len(w) / ref:12,.0f} {ref / f:6.1f}x"
            )
    print(f"  all twelve runs: {tr / tf:.1f}x faster ({tf:.3f} s vs {tr:.3f} s CPU)")


def pdsim_fast_vs_reference(repeat: int) -> None:
    """pdsim.simulate's compiled loop against the kept event-by-event simulator, in this run: the
    Problem 22 explorer's trials (a steady-state run at its defaults, colocated and three splits,
    both calibrations) and 20,000 requests of lognormal lengths."""
    from kvlab import explorer_p22, pdsim
    from kvlab.pdsim import kernel

    t0 = time.perf_counter()
    kernel._kernel()
    first = time.perf_counter() - t0
    d = explorer_p22.DEFAULTS
    print(
        "pdsim.simulate, compiled loop vs reference (kvlab.pdsim.reference), best CPU time of "
        f"{repeat}; first call (compile or load) {first:.2f} s"
    )
    print(f"  {'run':52s} {'requests':>9s} {'fast req/s':>12s} {'reference':>12s} {'ratio':>7s}")
    cases = []
    for cost in ("book", "measured"):
        traffic = pdsim.Traffic(
            rate_rps=d["rate_rps"],
            prompt_tokens=d["prompt_tokens"],
            output_tokens=d["output_tokens"],
            hit_rate=d["hit_rate"],
        )
        window = pdsim.window_for(traffic, explorer_p22.TTFT_SLO_S, explorer_p22.TPOT_SLO_S)
        mean = traffic.rate_rps * window.total_s
        n = max(2, math.ceil(mean + 6 * math.sqrt(mean) + 10))  # as pdsim.steady_run sizes it
        steady = pdsim.Traffic(**{**traffic.__dict__, "requests": n})
        for split in (explorer_p22.BUDGET, (3, 7), (5, 5), (7, 3)):
            cases.append(
                (f"explorer trial, {cost}, {pdsim.system_for(split).label}", split, steady, cost)
            )
    for split, rate in ((8, 14.0), ((5, 3), 15.0)):
        t = pdsim.Traffic(
            rate_rps=rate, requests=20_000, prompt_dist="lognormal", output_dist="lognormal"
        )
        cases.append(
            (f"lognormal lengths, book, {pdsim.system_for(split).label}", split, t, "book")
        )
    tf = tr = 0.0
    for name, split, traffic, cost in cases:
        system = pdsim.system_for(split)
        f = cpu_best_of(lambda s=system, t=traffic, c=cost: pdsim.simulate(s, t, c), repeat)
        r = cpu_best_of(
            lambda s=system, t=traffic, c=cost: pdsim.simulate(s, t, c, _reference=True), repeat
        )
        tf, tr = tf + f, tr + r
        n = traffic.requests
        print(f"  {name:52s} {n:9,d} {n / f:12,.0f} {n / r:12,.0f} {r / f:6.1f}x")
    print(f"  all {len(cases)} runs: {tr / tf:.1f}x faster ({tf:.3f} s vs {tr:.3f} s CPU)")


def queueing_fast_vs_reference(repeat: int) -> None:
    """queueing.simulate's compiled loop against the kept reference loop, in this run: Problem 8's
    comparison in time (p08-07: closed-loop chats at 20 requests/s on 8 replicas, every router of
    queueing.ROUTERS), the book's calibration with a roomy cache and the measured one with a tight
    cache."""
    from kvlab import queueing

    w = queueing.ChatSessions(requests=20_000)
    paths = w.paths(16)
    t0 = time.perf_counter()
    queueing.simulate(w, rate_rps=20.0, paths=paths)  # compile (or load the compiled loop)
    first = time.perf_counter() - t0
    print(
        f"queueing.simulate, compiled loop vs reference (kvlab.queueing.reference), {len(w):,} "
        f"closed-loop chat requests, 8 replicas, 20 requests/s, best CPU time of {repeat}; "
        f"first call (compile or load) {first:.2f} s"
    )
    print(f"  {'setting':24s} {'router':18s} {'fast req/s':>12s} {'reference':>12s} {'ratio':>7s}")
    tf = tr = 0.0
    runs = 0
    for cost, cache in (("book", 400_000), ("measured", 50_000)):
        for name, kw in queueing.ROUTERS.items():
            kw = dict(kw, rate_rps=20.0, paths=paths, cost=cost, cache_tokens=cache)
            f = cpu_best_of(lambda kw=kw: queueing.simulate(w, **kw), repeat)
            r = cpu_best_of(lambda kw=kw: queueing.simulate(w, _reference=True, **kw), repeat)
            tf, tr, runs = tf + f, tr + r, runs + 1
            print(
                f"  {cost + ', C=' + format(cache, ','):24s} {name:18s} {len(w) / f:12,.0f} "
                f"{len(w) / r:12,.0f} {r / f:6.1f}x"
            )
    print(f"  all {runs} runs: {tr / tf:.1f}x faster ({tf:.3f} s vs {tr:.3f} s CPU)")


def explorer_bench(full: bool) -> None:
    """The routing explorer's grid: what it holds, what it cost, what one job costs now."""
    import json
    import os
    import tempfile

    from kvlab import explorer

    jobs = explorer._jobs()
    runs = sum(len(j[3]) for j in jobs)
    print(
        f"routing explorer grid (kvlab.explorer): {len(explorer.grid_settings()):,} settings x 4 "
        f"policies, {runs:,} simulate_all runs in {len(jobs)} jobs"
    )
    if explorer.CACHE.is_file():
        data = json.loads(explorer.CACHE.read_text(encoding="utf-8"))
        state = (
            "fresh" if data.get("key") == explorer.cache_key() else "STALE (rebuilt at next run)"
        )
        print(
            f"  stored grid: computed in {data.get('seconds')} s on {data.get('processes')} "
            f"processes; {state}"
        )
    else:
        print("  no stored grid yet (the routing demo notebook computes it)")
    job = max(jobs, key=lambda j: len(j[3]))
    t0 = time.perf_counter()
    explorer._run_job(job)
    s = time.perf_counter() - t0
    per_run = s / len(job[3])
    cores = os.cpu_count() or 1
    print(
        f"  one job ({len(job[3])} runs) now: {s:.1f} s, {per_run:.2f} s a run; whole grid about "
        f"{per_run * runs / cores / 60:.1f} min on {cores} cores"
    )
    from kvlab import explorer_p22

    n22 = len(explorer_p22.settings()) * len(explorer_p22.systems())
    print(f"Problem 22 explorer grid (kvlab.explorer_p22): {n22:,} pdsim.point trials")
    if explorer_p22.CACHE.is_file():
        d22 = json.loads(explorer_p22.CACHE.read_text(encoding="utf-8"))
        state = "fresh" if d22.get("key") == explorer_p22.cache_key() else "STALE"
        print(
            f"  stored table: computed in {d22.get('seconds')} s on {d22.get('processes')} "
            f"processes; {state}"
        )
    t0 = time.perf_counter()
    explorer_p22._job((20.0, 3_000, 300, 0.0))
    s22 = time.perf_counter() - t0
    print(f"  one setting ({len(explorer_p22.systems())} trials, the defaults) now: {s22:.1f} s")
    if full:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            explorer.routing_grid(os.path.join(d, "grid.json"), rebuild=True)
            print(f"  whole grid recomputed: {time.perf_counter() - t0:.1f} s on {cores} cores")


def fleetbench_ladder(jobs: int = 2) -> None:
    """The 73-capacity benchmark's four-scheduler ladder (kvlab.fleetbench), one seed, on ``jobs``
    processes: wall time of the whole ladder (the issue's target: under 2 minutes a seed on 2
    cores) and each scheduler's own time."""
    from concurrent.futures import ProcessPoolExecutor

    from kvlab.fleetbench.__main__ import _one
    from kvlab.fleetbench.spec import load_spec

    path = str(Path(__file__).resolve().parents[1] / "data" / "fleetbench" / "73-capacity.yaml")
    spec = load_spec(path)
    todo = [(path, name, 0, 0.05) for name in spec.schedulers]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(jobs) as ex:
        out = list(ex.map(_one, todo))
    wall = time.perf_counter() - t0
    n = sum(s.num_requests for s in spec.workload.stages) * len(todo)
    print(f"fleetbench, 73-capacity ladder (4 schedulers x 17 stages, {n:,} requests), seed 0, "
          f"{jobs} processes: {wall:.1f} s wall, {n / wall:,.0f} simulated requests/s")  # fmt: skip
    for (_, name, _, _), (_, secs) in zip(todo, out, strict=True):
        print(f"  {name:22s} {secs:6.1f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--explorer-grid", action="store_true", help="recompute the explorer's whole grid (slow)"
    )
    ap.add_argument("--no-engine", action="store_true", help="skip the real engine's figures")
    ap.add_argument(
        "--simulators-only",
        action="store_true",
        help="only the simulators against their references (fleet, pdsim, queueing)",
    )
    args = ap.parse_args(argv)
    fleet_fast_vs_reference(args.repeat)
    pdsim_fast_vs_reference(args.repeat)
    queueing_fast_vs_reference(args.repeat)
    if args.simulators_only:
        return 0
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
    explorer_bench(args.explorer_grid)
    fleetbench_ladder()
    from kvlab import pdsim, queueing

    print(
        "queueing simulator (kvlab.queueing), 100,000 chat requests on 8 replicas at 20 requests/s:"
    )
    queueing.bench()
    print("colocated vs disaggregated simulator (kvlab.pdsim), 100,000 requests on 8 replicas:")
    out = pdsim.bench(requests=100_000)
    for key, value in out.items():
        print(f"  {key}: {value:,.2f}")
    if not args.no_engine:
        bench_engine()
    return 0


def bench_engine() -> None:
    """The real engine (one start): start-up, TTFT cold and with a hit, replay throughput."""
    import statistics

    from kvlab.measure.prefix import runs
    from kvlab.measure.prefix.engine_jobs import LAB1_REPLAY
    from kvlab.measure.serving import engine

    try:
        out = runs.run_job("lab1", {"requests": 10, "fit_repeats": 2, "replay": LAB1_REPLAY})
    except engine.EngineError as exc:
        print(f"engine figures skipped: {exc}".splitlines()[0])
        return
    ms = 1e3
    pairs = out["pairs"]
    cold, hit = pairs["engine_ttft_s"][0::2], pairs["engine_ttft_s"][1::2]
    rep = out["replay"]
    print(
        f"vLLM {out['vllm']} ({out['where']}), block size {out['block_size']}, "
        f"{out['num_blocks']} blocks:"
    )
    print(f"  engine start-up: {out['start_s']:.1f} s")
    print(
        f"  TTFT of a {pairs['prompt_tokens']:,}-token prompt: cold "
        f"{statistics.median(cold) * ms:.1f} ms (engine), with {pairs['cached_tokens'][1]:,} "
        f"tokens cached {statistics.median(hit) * ms:.1f} ms"
    )
    print(
        f"  chat-stream replay: {len(rep['cached_tokens'])} requests one at a time in "
        f"{rep['seconds']:.2f} s ({len(rep['cached_tokens']) / rep['seconds']:.0f} requests/s)"
    )
    print(f"  memory peak (all engine processes): {out['memory_peak_bytes'] / 1e9:.2f} GB")


if __name__ == "__main__":
    sys.exit(main())
