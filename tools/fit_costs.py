"""Fit kvlab's measured cost calibration to NVIDIA aiconfigurator's measured database.

One command, run in its own environment (aiconfigurator is pinned in requirements-fit.txt and
never installed into .venv):

    python3 -m venv /work/venv-aic && /work/venv-aic/bin/pip install -r requirements-fit.txt
    /work/venv-aic/bin/python tools/fit_costs.py

It asks aiconfigurator's TensorRT-LLM database (static single-pass estimates, the same numbers as
``aiconfigurator cli estimate --estimate-mode static_ctx`` / ``static_gen``) for the book's model,
Llama-3.1-70B in bf16, on H100 SXM and H200 at TP 1, 2, 4 and 8:

* prefill of ``tokens`` new tokens after ``cached`` ones (batch 1);
* one decode step (``static_gen`` with 2 output tokens) for a batch x context grid;

skips the points aiconfigurator reports as out of memory (and a TP whose weights alone do not
fit), fits kvlab.costs' model per GPU and TP (relative least squares, coefficients >= 0), and
writes ``data/costs/measured.json``: raw points, fitted parameters, residuals, what was not
covered and why, versions, date and this command. With ``--default`` it also records
aiconfigurator's own ``cli default`` recommendation for Problem 22's scenario
(``data/costs/aic_default.json``). Tests and notebooks read the JSON files only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import itertools
import json
import logging
import math
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "costs"
MODEL = "meta-llama/Meta-Llama-3.1-70B"
BACKEND = "trtllm"
SYSTEMS = {"H100-SXM": "h100_sxm", "H200": "h200_sxm"}
TPS = (1, 2, 4, 8)
#: prefill points: (new tokens, cached tokens), batch 1
PREFILL = [(t, 0) for t in (256, 512, 1024, 2048, 3000, 4096, 6000, 8192, 16384, 32768)] + [
    (1000, 2000),
    (1000, 5000),
    (3000, 5000),
    (2000, 14000),
    (1000, 31000),
]
#: decode points: batch x context tokens per request
BATCHES = (1, 8, 32, 64, 100, 128, 192, 256)
CONTEXTS = (1000, 3000, 8000, 16000, 32000)
#: mixed steps (checked, not fitted): chunk of prompt tokens x decode batch x decode context
MIXED = [(c, b, n) for c in (256, 512, 2048) for b in (1, 32, 128) for n in (3000, 8000)]


def _session(system: str, tp: int):
    from aiconfigurator.sdk.backends.factory import get_backend
    from aiconfigurator.sdk.config_builders import build_model_config
    from aiconfigurator.sdk.inference_session import InferenceSession
    from aiconfigurator.sdk.models import get_model
    from aiconfigurator.sdk.perf_database import get_database_view, get_latest_database_version

    version = get_latest_database_version(system=system, backend=BACKEND)
    db = get_database_view(
        system, BACKEND, version, allow_missing_data=False, database_mode="SILICON",
        transfer_policy=None,
    )  # fmt: skip
    mc = build_model_config(tp, 1, 1, 1, 1)
    model = get_model(MODEL, mc, BACKEND)
    return InferenceSession(model, db, get_backend(BACKEND)), version


def _run(session, mode: str, batch: int, isl: int, osl: int, prefix: int):
    """(milliseconds, out of memory?, memory GB per GPU) of one static estimate."""
    from aiconfigurator.sdk.config import RuntimeConfig

    rc = RuntimeConfig(batch_size=batch, isl=isl, osl=osl, prefix=prefix)
    with contextlib.redirect_stdout(io.StringIO()):
        summary = session.run_static(runtime_config=rc, mode=mode)
    row = summary.get_result_dict()
    ms = float(row["ttft"] if mode == "static_ctx" else row["tpot"])
    return ms, bool(summary.check_oom()), float(row.get("memory", math.nan))


def _mixed_ms(session, chunk: int, batch: int, ctx: int) -> float:
    """One mixed step (aiconfigurator's run_mixed): ``chunk`` prompt tokens with ``batch`` decoding
    requests of ``ctx`` tokens of context."""
    from aiconfigurator.sdk.config import RuntimeConfig
    from aiconfigurator.sdk.step_estimate import MixedStepInput

    rc = RuntimeConfig(batch_size=batch, isl=ctx, osl=2, prefix=0)
    with contextlib.redirect_stdout(io.StringIO()):
        est = session.run_mixed(rc, MixedStepInput(context_tokens=chunk, num_decode_requests=batch))
    return float(est.latency_ms)


def query() -> tuple[list[dict], list[dict], dict, str, list[dict], list[dict]]:
    prefill, decode, missing = [], [], {}
    mixed: list[dict] = []  # checked against the fitted model, not fitted
    skipped: list[dict] = []  # points aiconfigurator reports as out of memory
    version = ""
    for gpu, system in SYSTEMS.items():
        missing[gpu] = {}
        for tp in TPS:
            t0 = time.time()
            session, version = _session(system, tp)
            _, oom, mem = _run(session, "static_gen", 1, 1000, 2, 0)
            if oom:
                missing[gpu][str(tp)] = (
                    f"out of memory in aiconfigurator's check at batch 1, 1,000-token context "
                    f"({mem:.0f} GB per GPU needed): the bf16 weights do not fit on {tp} GPU(s)"
                )
                print(f"{gpu} TP {tp}: weights do not fit, skipped", file=sys.stderr)
                continue
            n_oom = 0
            for tokens, cached in PREFILL:
                ms, oom, mem = _run(session, "static_ctx", 1, tokens + cached, 1, cached)
                if oom:
                    n_oom += 1
                    skipped.append({"gpu": gpu, "tp": tp, "phase": "prefill", "tokens": tokens,
                                    "cached": cached, "memory_gb": mem})  # fmt: skip
                    continue
                prefill.append(
                    {"gpu": gpu, "tp": tp, "tokens": tokens, "cached": cached, "seconds": ms / 1e3}
                )
            for batch, ctx in itertools.product(BATCHES, CONTEXTS):
                ms, oom, mem = _run(session, "static_gen", batch, ctx, 2, 0)
                if oom:
                    n_oom += 1
                    skipped.append({"gpu": gpu, "tp": tp, "phase": "decode", "batch": batch,
                                    "context": ctx, "memory_gb": mem})  # fmt: skip
                    continue
                decode.append(
                    {"gpu": gpu, "tp": tp, "batch": batch, "context": ctx, "seconds": ms / 1e3}
                )
            fits_in_memory = {
                (d["batch"], d["context"]) for d in decode if d["gpu"] == gpu and d["tp"] == tp
            }
            for chunk, batch, ctx in MIXED:
                if (batch, ctx) not in fits_in_memory:
                    continue
                ms = _mixed_ms(session, chunk, batch, ctx)
                mixed.append({"gpu": gpu, "tp": tp, "chunk": chunk, "batch": batch, "context": ctx,
                              "seconds": ms / 1e3})  # fmt: skip
            print(
                f"{gpu} TP {tp}: {time.time() - t0:.0f} s, {n_oom} points out of memory",
                file=sys.stderr,
            )
    return prefill, decode, missing, version, skipped, mixed


def _nnls_rel(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients >= 0 minimising the relative squared error sum(((X c - y) / y)^2): every
    subset of active columns solved by least squares, the best non-negative one kept."""
    A = X / y[:, None]
    ones = np.ones_like(y)
    best, best_err = np.zeros(X.shape[1]), math.inf
    for r in range(1, X.shape[1] + 1):
        for cols in itertools.combinations(range(X.shape[1]), r):
            c, *_ = np.linalg.lstsq(A[:, cols], ones, rcond=None)
            if np.any(c < 0):
                continue
            full = np.zeros(X.shape[1])
            full[list(cols)] = c
            err = float(np.sum((A @ full - 1) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def fit(prefill: list[dict], decode: list[dict]) -> tuple[dict, list[dict], list[dict]]:
    fits: dict = {}
    for gpu in SYSTEMS:
        for tp in TPS:
            pre = [p for p in prefill if p["gpu"] == gpu and p["tp"] == tp]
            dec = [d for d in decode if d["gpu"] == gpu and d["tp"] == tp]
            if not pre or not dec:
                continue
            u = np.array([p["tokens"] for p in pre], float)
            c = np.array([p["cached"] for p in pre], float)
            y = np.array([p["seconds"] for p in pre])
            t0, tau, pair = _nnls_rel(np.column_stack([np.ones_like(u), u, u * c + u * u / 2]), y)
            b = np.array([d["batch"] for d in dec], float)
            n = np.array([d["context"] for d in dec], float)
            yd = np.array([d["seconds"] for d in dec])
            a, k, ckv = _nnls_rel(np.column_stack([np.ones_like(b), b, b * n]), yd)
            fits.setdefault(gpu, {})[str(tp)] = {
                "prefill_fixed_s": float(t0),
                "prefill_s_per_token": float(tau),
                "prefill_s_per_pair": float(pair),
                "decode_base_s": float(a),
                "decode_per_request_s": float(k),
                "decode_per_context_token_s": float(ckv),
                "prefill_tokens_range": [int(u.min()), int(u.max())],
                "prefill_cached_range": [int(c.min()), int(c.max())],
                "decode_batch_range": [int(b.min()), int(b.max())],
                "decode_context_range": [int(n.min()), int(n.max())],
            }
    for p in prefill:
        f = fits[p["gpu"]][str(p["tp"])]
        u, c = p["tokens"], p["cached"]
        model = f["prefill_fixed_s"] + f["prefill_s_per_token"] * u
        model += f["prefill_s_per_pair"] * (u * c + u * u / 2)
        p["model_seconds"] = model
        p["rel_error"] = model / p["seconds"] - 1
    for d in decode:
        f = fits[d["gpu"]][str(d["tp"])]
        model = f["decode_base_s"] + f["decode_per_request_s"] * d["batch"]
        model += f["decode_per_context_token_s"] * d["batch"] * d["context"]
        d["model_seconds"] = model
        d["rel_error"] = model / d["seconds"] - 1
    return fits, prefill, decode


def check_mixed(fits: dict, mixed: list[dict]) -> list[dict]:
    """The fitted model's mixed step (one pass: the decode step plus the chunk's marginal prefill,
    kvlab.formulas' mixed_step_seconds_model) and the sum of the two separate passes, each against
    aiconfigurator's run_mixed."""
    for m in mixed:
        f = fits[m["gpu"]][str(m["tp"])]
        b, n, u = m["batch"], m["context"], m["chunk"]
        dec = f["decode_base_s"] + f["decode_per_request_s"] * b
        dec += f["decode_per_context_token_s"] * b * n
        marginal = f["prefill_s_per_token"] * u + f["prefill_s_per_pair"] * u * u / 2
        m["model_seconds"] = dec + marginal
        m["rel_error"] = m["model_seconds"] / m["seconds"] - 1
        m["sum_of_two_rel_error"] = (dec + marginal + f["prefill_fixed_s"]) / m["seconds"] - 1
    return mixed


def aic_default(out: Path) -> None:
    """aiconfigurator's own recommendation for Problem 22's worked scenario (3,000 / 300 tokens,
    TTFT 1 s, TPOT 40 ms, 80 H100 SXM GPUs), its summary tables captured as text."""
    from aiconfigurator.cli.api import cli_default

    t0 = time.time()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res = cli_default(
            MODEL, 80, "h100_sxm", backend=BACKEND, isl=3000, osl=300, ttft=1000.0, tpot=40.0
        )
    record: dict = {
        "command": "aiconfigurator cli default --model-path "
        f"{MODEL} --total-gpus 80 --system h100_sxm --backend {BACKEND} --isl 3000 --osl 300 "
        "--ttft 1000 --tpot 40 (through aiconfigurator.cli.api.cli_default)",
        "seconds": round(time.time() - t0, 1),
        "stdout": buf.getvalue()[-20000:],
    }
    for name in dir(res):
        if name.startswith("_"):
            continue
        val = getattr(res, name)
        if hasattr(val, "to_dict") and hasattr(val, "columns"):
            record[name] = json.loads(val.head(20).to_json(orient="records"))
        elif isinstance(val, (str, int, float, bool)) or val is None:
            record[name] = val
        elif isinstance(val, dict):
            if any(hasattr(v, "columns") for v in val.values()):  # experiment -> table
                record[name] = {
                    exp: json.loads(v.head(10).to_json(orient="records"))
                    for exp, v in val.items()
                    if hasattr(v, "columns")
                }
                continue
            with contextlib.suppress(TypeError, ValueError):
                record[name] = json.loads(json.dumps(val, default=str))
    out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"wrote {out} ({record['seconds']} s)", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT / "measured.json")
    ap.add_argument("--default", action="store_true", help="also run aiconfigurator cli default")
    ap.add_argument("--default-only", action="store_true", help="only run cli default")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    if args.default_only:
        aic_default(args.out.parent / "aic_default.json")
        return 0
    start = time.time()
    prefill, decode, missing, db_version, skipped, mixed = query()
    fits, prefill, decode = fit(prefill, decode)
    mixed = check_mixed(fits, mixed)
    errs = {
        "prefill": [abs(p["rel_error"]) for p in prefill],
        "decode": [abs(d["rel_error"]) for d in decode],
    }
    data = {
        "about": "kvlab.costs measured calibration: aiconfigurator's measured database, fitted",
        "model": MODEL,
        "dtype": "bf16 (weights, KV cache and attention)",
        "backend": BACKEND,
        "backend_version": db_version,
        "aiconfigurator": metadata.version("aiconfigurator"),
        "aiconfigurator_core": metadata.version("aiconfigurator-core"),
        "database_mode": "SILICON",
        "estimate": "InferenceSession.run_static: static_ctx (prefill, batch 1) and static_gen "
        "(decode, 2 output tokens: one step at the given context); mixed steps (checked, not "
        "fitted): InferenceSession.run_mixed",
        "date": dt.date.today().isoformat(),
        "python": platform.python_version(),
        "command": "python tools/fit_costs.py " + " ".join(argv or sys.argv[1:]),
        "fit_seconds": round(time.time() - start, 1),
        "summary": {
            phase: {"median_abs_rel_error": float(np.median(e)), "max_abs_rel_error": max(e)}
            for phase, e in errs.items()
        },
        "fits": fits,
        "missing": missing,
        "out_of_memory": skipped,
        "points": {"prefill": prefill, "decode": decode},
        "mixed_check": mixed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}: {json.dumps(data['summary'])}", file=sys.stderr)
    if args.default:
        aic_default(args.out.parent / "aic_default.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
