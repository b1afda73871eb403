"""Problem 22's colocated-vs-split goodput on the engine model, beside pdsim's measured calibration.

    .venv/bin/python tools/p22_engine_goodput.py [--processes N]

Runs :func:`kvlab.pdsim.goodput_table` for the book's scenario (3,000-token prompts, 300-token
answers, TTFT 1 s, TPOT 40 ms, 90 % of requests meeting both, replicas of 8 H100 SXM GPUs), the
cases of ``p22-06-measured-costs`` (:data:`CASES`), on two models of a replica: the engine model
(:class:`kvlab.engine_model.EngineCalibration`: vLLM's batching and chunking, measured kernel
costs of Llama-3.1-70B in bf16) and pdsim's own replica on the measured linear calibration
(``kvlab.costs``, one prompt per prefill pass). Writes ``data/engine/p22-goodput.json`` with the
command, the time it took and a key of the code and settings (:func:`cache_key`); the notebook
``p22-07-engine-model`` reads it, and ``lib/tests/test_p22_engine_goodput.py`` fails when the key
is stale. It takes about half an hour on two cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "engine" / "p22-goodput.json"
TTFT_SLO_S, TPOT_SLO_S = 1.0, 0.040
#: case -> (prefix hit rate, replicas): p22-06's cases (10 replicas without hits, 9 with 83 % hits),
#: every split of the replicas searched
CASES = {
    "no hits": (0.0, 10),
    "83 % hits": (0.83, 9),
}
SEEDS = (0, 1, 2, 3)
#: the engine model is run twice: without a host term, and with the one fitted on this model's
#: single-replica vLLM 0.12.0 runs (kvlab.validate.silicon.host_for), the largest measured
HOST_MODEL = "Qwen/Qwen3-32B"
#: the goodput search's relative resolution (pdsim.max_rate's rtol): gaps below it are not read
RTOL = 0.02


def cache_key(seeds=SEEDS) -> str:
    """sha256 of the code that decides the figures, of the host term's two numbers and of the
    settings."""
    sys.path.insert(0, str(ROOT / "lib"))
    from kvlab import disagg, latency
    from kvlab.engine_model import (
        calibration,
        closed_loop,
        engine,
        kv_pool,
        shapes,
        step_costs,
        tables,
    )
    from kvlab.explorer import code_fingerprint
    from kvlab.pdsim import (
        capacity,
        engine_backend,
        goodput,
        kernel,
        reference,
        result,
        runs,
        systems,
        traffic,
    )
    from kvlab.validate import silicon

    h = hashlib.sha256()
    modules = (calibration, engine, kv_pool, shapes, step_costs, tables, capacity, engine_backend,
               goodput, kernel, reference, result, runs, systems, traffic, disagg, latency,
               closed_loop)  # fmt: skip
    for m in modules:
        h.update(m.__name__.encode())
        h.update(code_fingerprint(m).encode())
    h.update((ROOT / "data" / "costs" / "engine_tables.json").read_bytes())
    h.update((ROOT / "data" / "costs" / "measured.json").read_bytes())
    # the host term enters by its two numbers (fitted on measured rows by kvlab.validate.silicon)
    host = silicon.host_for(HOST_MODEL)
    h.update(json.dumps([host.step_s, host.per_seq_s]).encode())
    settings = {"cases": {k: list(v) for k, v in CASES.items()}, "seeds": list(seeds),
                "rtol": RTOL, "slo": [TTFT_SLO_S, TPOT_SLO_S], "host_model": HOST_MODEL}  # fmt: skip
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "lib"))
    from kvlab import costs, pdsim
    from kvlab.engine_model import EngineCalibration
    from kvlab.validate import silicon

    host = silicon.host_for(HOST_MODEL)
    models = {
        "engine": EngineCalibration(),
        "engine + host": EngineCalibration(step_overhead_s=host.step_s,
                                           host_s_per_seq=host.per_seq_s),
        "measured": costs.cost_model("measured", tp=8),
    }  # fmt: skip
    t0 = time.perf_counter()
    rows = []
    for case, (hit, replicas) in CASES.items():
        traffic = pdsim.Traffic(rate_rps=20, prompt_tokens=3000, output_tokens=300, hit_rate=hit)
        splits = pdsim.splits(replicas)
        systems = [pdsim.Colocated(replicas)] + [pdsim.Disaggregated(p, d) for p, d in splits]
        for name, model in models.items():
            t1 = time.perf_counter()
            table = pdsim.goodput_table(systems, traffic, TTFT_SLO_S, TPOT_SLO_S, seeds=SEEDS,
                                        rtol=RTOL, processes=args.processes, cost=model)  # fmt: skip
            for _, r in table.iterrows():
                rows.append({
                    "case": case, "hit_rate": hit, "replicas": replicas, "model": name,
                    "system": r["system"],
                    "prefill": int(r["prefill"]), "decode": int(r["decode"]),
                    "per_seed_rps": [float(x) for x in r["goodput"].values],
                })  # fmt: skip
            print(f"{case}, {name}: {time.perf_counter() - t1:.0f} s", file=sys.stderr)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "key": cache_key(),
        "command": "python tools/p22_engine_goodput.py",
        "date": dt.date.today().isoformat(),
        "seconds": round(time.perf_counter() - t0),
        "processes": args.processes,
        "seeds": list(SEEDS),
        "rtol": RTOL,
        "host": {"fitted_on": host.fitted_on, "step_s": host.step_s, "per_seq_s": host.per_seq_s},
        "rows": rows,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} in {doc['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
