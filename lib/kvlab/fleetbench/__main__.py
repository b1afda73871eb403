"""``python -m kvlab.fleetbench SPEC.yaml [--seeds N] [--out FILE.csv] [--jobs J]
[--frontend-s S] [--host {silicon,none}] [--kernel-scale X]``: every scheduler of the spec over
the whole workload, ``N`` seeds (0 .. N-1); one CSV row per seed, scheduler and stage.

``--frontend-s``: the time a request spends outside the engine, added to TTFT; by default the one
the engine model's validation sets on held-out H200 rows (:func:`kvlab.validate.silicon.knobs`),
never on the rows a spec is scored against. ``--host``: ``none`` (the default) prices a step by
its kernels alone; ``silicon`` adds the host's time per step that
:func:`kvlab.validate.silicon.host_for` fits on the single-replica vLLM runs of the cluster's
model on H100 SXM (a different benchmark from any fleet's), where the sample has that model on
that GPU, and none elsewhere. ``--kernel-scale``: the pods' kernel times over the database's (1
by default; :mod:`kvlab.fleetbench.calibrate` fits it on a spec's light-load stages)."""

from __future__ import annotations

import argparse
import csv
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from .fleet import METRICS, run_scheduler
from .spec import load_spec

COLUMNS = ("seed", "stage", "stage_qps", "scheduler", *METRICS, "tpot_mean_s", "preempted",
           "duration_s", "frontend_s", "host_step_ms", "host_seq_us", "kernel_scale")  # fmt: skip


def _one(args):
    path, name, seed, frontend_s, (step_s, per_seq_s), scale = args
    spec = load_spec(path)
    t = time.perf_counter()
    rows = run_scheduler(spec.cluster, spec.workload, spec.schedulers[name], name=name, seed=seed,
                         frontend_s=frontend_s, step_overhead_s=step_s,
                         host_s_per_seq=per_seq_s, kernel_scale=scale)  # fmt: skip
    for r in rows:
        r["scheduler"] = name
        r["seed"] = seed
        r["frontend_s"] = frontend_s
        r["host_step_ms"] = step_s * 1e3
        r["host_seq_us"] = per_seq_s * 1e6
        r["kernel_scale"] = scale
    return rows, time.perf_counter() - t


def host_term(cluster) -> tuple[float, float]:
    """(seconds per step, seconds per request in a step) for ``cluster``'s pods: the host term
    fitted on the single-replica runs of its model on H100 SXM, or zeros where the sample has
    none (said on standard error)."""
    from ..validate import silicon

    known = {m for m, _ in silicon.SCORED}
    if cluster.gpu != "H100-SXM" or cluster.model not in known:
        print(f"no single-replica runs of {cluster.model} on {cluster.gpu} to fit a host term on: "
              "none used", file=sys.stderr)  # fmt: skip
        return (0.0, 0.0)
    h = silicon.host_for(cluster.model)
    return (h.step_s, h.per_seq_s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvlab.fleetbench", description=__doc__)
    ap.add_argument("spec")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--out", default=None, help="CSV file (default: standard output)")
    ap.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    ap.add_argument(
        "--frontend-s",
        type=float,
        default=None,
        help="seconds outside the engine per request (default: kvlab.validate's)",
    )
    ap.add_argument("--host", choices=("none", "silicon"), default="none",
                    help="the pods' host time per step: none, or fitted on single-replica runs")  # fmt: skip
    ap.add_argument("--kernel-scale", type=float, default=1.0,
                    help="the pods' kernel times over the database's (default 1)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.seeds < 1:
        ap.error(f"--seeds must be at least 1, got {a.seeds}")
    if a.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {a.jobs}")
    if not 0.1 <= a.kernel_scale <= 10:
        ap.error(f"--kernel-scale must be in [0.1, 10], got {a.kernel_scale}")
    try:
        spec = load_spec(a.spec)
    except ValueError as e:
        print(f"{a.spec}: {e}", file=sys.stderr)
        return 2
    frontend_s = a.frontend_s
    if frontend_s is None:
        from ..validate import silicon

        frontend_s = silicon.knobs().frontend_s
    if frontend_s < 0:
        ap.error(f"--frontend-s must be at least 0, got {frontend_s}")
    print(f"frontend_s = {frontend_s * 1e3:.1f} ms", file=sys.stderr)
    host = host_term(spec.cluster) if a.host == "silicon" else (0.0, 0.0)
    print(f"host time per step = {host[0] * 1e3:.2f} ms + {host[1] * 1e6:.1f} us per request",
          file=sys.stderr)  # fmt: skip
    jobs = [(a.spec, n, seed, frontend_s, host, a.kernel_scale) for seed in range(a.seeds)
            for n in spec.schedulers]  # fmt: skip
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as ex:
            results = list(ex.map(_one, jobs))
    else:
        results = [_one(j) for j in jobs]
    out = open(a.out, "w", newline="") if a.out else sys.stdout
    try:
        w = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for rows, _ in results:
            for r in rows:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    finally:
        if a.out:
            out.close()
    for (_, name, seed, *_), (_, secs) in zip(jobs, results, strict=True):
        print(f"seed {seed} {name}: {secs:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
