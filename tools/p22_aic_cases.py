"""aiconfigurator's own recommendation for every case the Problem 22 card states.

Run in aiconfigurator's own environment (see ``tools/fit_costs.py``; never installed into .venv):

    python tools/p22_aic_cases.py [CASE ...]   # with the venv of requirements-fit.txt

For each case of :data:`CASES` it calls ``aiconfigurator cli default`` (through
``aiconfigurator.cli.api.cli_default``, the same call as ``tools/fit_costs.py --default``: Llama-3.1-70B
in bf16 on H100 SXM, the TensorRT-LLM database, TTFT 1 s and TPOT 40 ms) with the case's prompt and
answer lengths, cached prefix and GPU count, and stores its best colocated ("agg") and disaggregated
configurations (the first rows of each table, aiconfigurator's per-op provenance dropped), the
experiment it chose, the exact command and the time it took, in ``data/costs/aic_cases.json``.
Cases already in the file are kept unless named on the command line. The notebook
``p22-06-measured-costs`` reads the file; nothing at build or test time runs aiconfigurator.

The worked scenario at 80 GPUs is ``data/costs/aic_default.json`` (``tools/fit_costs.py
--default-only``), not repeated here.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import logging
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "costs" / "aic_cases.json"
MODEL = "meta-llama/Meta-Llama-3.1-70B"
SYSTEM, BACKEND = "h100_sxm", "trtllm"
TTFT_MS, TPOT_MS = 1000.0, 40.0
ROWS = 10  # rows kept per table

#: case -> (prompt tokens, answer tokens, cached prefix tokens, total GPUs). The card's cases, in
#: 8-GPU replicas as the simulator runs them: 83 % hits on 9 replicas (2,490 of 3,000 tokens
#: cached: the simulator's uncached part is ceil(3,000 x 0.17) = 510 tokens), the shifted mix on 10,
#: 300 / 300 on 2, 3, 4 and 10; and the worked scenario on 16 GPUs (the small fleet) and on 24, 32
#: and 40 GPUs for the GPU count at 20 requests/s.
CASES = {
    "hits_72": (3000, 300, 2490, 72),
    "shift_80": (1000, 1000, 0, 80),
    "short_16": (300, 300, 0, 16),
    "short_24": (300, 300, 0, 24),
    "short_32": (300, 300, 0, 32),
    "short_80": (300, 300, 0, 80),
    "worked_16": (3000, 300, 0, 16),
    "worked_24": (3000, 300, 0, 24),
    "worked_32": (3000, 300, 0, 32),
    "worked_40": (3000, 300, 0, 40),
}


def command(isl: int, osl: int, prefix: int, gpus: int) -> str:
    return (
        f"aiconfigurator cli default --model-path {MODEL} --total-gpus {gpus} --system {SYSTEM} "
        f"--backend {BACKEND} --isl {isl} --osl {osl} --prefix {prefix} --ttft {TTFT_MS:g} "
        f"--tpot {TPOT_MS:g} (through aiconfigurator.cli.api.cli_default)"
    )


def _rows(table) -> list[dict]:
    rows = json.loads(table.head(ROWS).to_json(orient="records"))
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]


def run_case(isl: int, osl: int, prefix: int, gpus: int) -> dict:
    from aiconfigurator.cli.api import cli_default

    t0 = time.time()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res = cli_default(
            MODEL, gpus, SYSTEM, backend=BACKEND, isl=isl, osl=osl, prefix=prefix,
            ttft=TTFT_MS, tpot=TPOT_MS,
        )  # fmt: skip
    best = getattr(res, "best_configs", {}) or {}
    return {
        "command": command(isl, osl, prefix, gpus),
        "isl": isl,
        "osl": osl,
        "prefix": prefix,
        "total_gpus": gpus,
        "seconds": round(time.time() - t0, 1),
        "chosen_exp": getattr(res, "chosen_exp", None),
        "best_configs": {exp: _rows(t) for exp, t in best.items() if hasattr(t, "columns")},
        "outcomes": {k: str(v) for k, v in (getattr(res, "outcomes", {}) or {}).items()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help=f"cases to run (default: all missing): {list(CASES)}")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"cases": {}}
    names = args.cases or [c for c in CASES if c not in doc["cases"]]
    for name in names:
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}; the cases are {list(CASES)}")
        doc["cases"][name] = run_case(*CASES[name])
        doc.update(
            about="aiconfigurator cli default for the Problem 22 card's cases (tools/p22_aic_cases.py)",
            command="python tools/p22_aic_cases.py (in the aiconfigurator environment of tools/fit_costs.py)",
            aiconfigurator=metadata.version("aiconfigurator"),
            aiconfigurator_core=metadata.version("aiconfigurator-core"),
            python=platform.python_version(),
            date=dt.date.today().isoformat(),
        )
        OUT.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(
            f"{name}: {doc['cases'][name]['seconds']} s, chose {doc['cases'][name]['chosen_exp']}",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
