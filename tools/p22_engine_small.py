"""Problem 22's small fleet (16 GPUs) on the engine model, at TP 8 and with each pool at its own TP.

    .venv/bin/python tools/p22_engine_small.py [--processes N]

The sensitivity table's "16 GPUs" row (``p22-02-worked-answer``) on the engine model, a sibling of
``tools/p22_engine_goodput.py`` with its scenario, seeds, resolution and two engine models (kernels
alone, and with the host term of :data:`HOST_MODEL`): colocated against every split of 16 H100 SXM
GPUs, as two TP-8 replicas and as TP-2 prefill / TP-4 decode workers (colocation at TP 4), the
cases of :data:`CASES`. Writes ``data/engine/p22-small.json`` with the command, the time it took and
a key of the code and settings (:func:`cache_key`); ``p22-02-worked-answer`` and
``p22-07-engine-model`` read it, and ``lib/tests/test_p22_engine_goodput.py`` fails when the key is
stale. It takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "engine" / "p22-small.json"
GPUS = 16
#: case -> (prefill TP, decode TP); colocation runs at the decode TP
CASES = {"TP 8": (8, 8), "TP 2 / 4": (2, 4)}
MODELS = ("engine", "engine + host")


def _big():
    spec = importlib.util.spec_from_file_location(
        "p22_engine_goodput", ROOT / "tools" / "p22_engine_goodput.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def systems(prefill_tp, decode_tp, gpus=GPUS):
    """Colocated replicas at the decode TP, then every split into prefill and decode workers."""
    sys.path.insert(0, str(ROOT / "lib"))
    from kvlab import pdsim

    out = [pdsim.Colocated(gpus // decode_tp, tp=decode_tp)]
    for p in range(1, gpus // prefill_tp):
        rest = gpus - prefill_tp * p
        if rest >= decode_tp and rest % decode_tp == 0:
            out.append(
                pdsim.Disaggregated(
                    p, rest // decode_tp, prefill_tp=prefill_tp, decode_tp=decode_tp
                )
            )
    return out


def cache_key(seeds=None) -> str:
    """sha256 of the big tool's key (its code, data, host term and settings) and this run's cases."""
    big = _big()
    h = hashlib.sha256(big.cache_key(seeds=big.SEEDS if seeds is None else seeds).encode())
    h.update(Path(__file__).read_bytes())
    h.update(json.dumps({"gpus": GPUS, "cases": CASES, "rtol": big.RTOL}, sort_keys=True).encode())
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "lib"))
    from kvlab import pdsim
    from kvlab.engine_model import EngineCalibration
    from kvlab.validate import silicon

    big = _big()
    host = silicon.host_for(big.HOST_MODEL)
    models = {
        "engine": EngineCalibration(),
        "engine + host": EngineCalibration(
            step_overhead_s=host.step_s, host_s_per_seq=host.per_seq_s
        ),
    }
    traffic = pdsim.Traffic(rate_rps=20, prompt_tokens=3000, output_tokens=300)
    t0 = time.perf_counter()
    rows = []
    for case, (ptp, dtp) in CASES.items():
        for name, model in models.items():
            t1 = time.perf_counter()
            table = pdsim.goodput_table(systems(ptp, dtp), traffic, big.TTFT_SLO_S, big.TPOT_SLO_S,
                                        seeds=big.SEEDS, rtol=big.RTOL, processes=args.processes,
                                        cost=model)  # fmt: skip
            for _, r in table.iterrows():
                rows.append({
                    "case": case, "gpus": GPUS, "model": name, "system": r["system"],
                    "prefill": int(r["prefill"]), "decode": int(r["decode"]),
                    "per_seed_rps": [float(x) for x in r["goodput"].values],
                })  # fmt: skip
            print(f"{case}, {name}: {time.perf_counter() - t1:.0f} s", file=sys.stderr, flush=True)
    doc = {
        "key": cache_key(),
        "command": "python tools/p22_engine_small.py",
        "date": dt.date.today().isoformat(),
        "seconds": round(time.perf_counter() - t0),
        "processes": args.processes,
        "seeds": list(big.SEEDS),
        "rtol": big.RTOL,
        "host": {"fitted_on": host.fitted_on, "step_s": host.step_s, "per_seq_s": host.per_seq_s},
        "rows": rows,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} in {doc['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
