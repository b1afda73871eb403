"""Tabulate the per-step costs of kvlab's engine model from NVIDIA aiconfigurator's measured
per-operation database (vLLM backend), and record aiconfigurator's own estimates for the rows of
its silicon sample that ``kvlab.validate.silicon`` scores.

One command, run in its own environment (aiconfigurator is pinned in requirements-fit.txt and
never installed into .venv):

    python3 -m venv /work/venv-aic && /work/venv-aic/bin/pip install -r requirements-fit.txt
    /work/venv-aic/bin/python tools/tabulate_engine_costs.py

What it asks the database, per model, GPU, TP and precision (aiconfigurator's Rust step engine,
``BaseBackend.run_mixed`` and the decode-step breakdown: sums of measured per-operation times, none
of the vLLM backend's silicon-calibrated corrections, which live in ``run_agg`` only):

* ``shared_ms[m]``: everything but attention (GEMMs, norms, activations, all-reduce, embedding,
  logits) of one forward pass over ``m`` tokens of prompt;
* ``decode_shared_ms[b]``: the same for a decode-only pass of ``b`` requests (the generation ops);
* ``context_attn_ms[n][p]``: attention of one prompt chunk of ``n`` new tokens after ``p`` tokens
  already in the KV cache;
* ``decode_attn_ms[b][c]``: attention of ``b`` decoding requests with ``c`` tokens of context each.

and the model's shape, read from the ``config.json`` that aiconfigurator ships. It writes
``data/costs/engine_tables.json`` (tables, shapes, versions, date and this command) and
``data/silicon/`` (the scored rows of ``silicon_sample.csv``, copied unchanged, and
aiconfigurator's own agg estimate for each). Tests and notebooks read the JSON files only.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import io
import json
import logging
import platform
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "costs" / "engine_tables.json"
SILICON_OUT = ROOT / "data" / "silicon"
BACKEND = "vllm"
#: aiconfigurator system names of the GPUs kvlab names
SYSTEMS = {"H100-SXM": "h100_sxm", "H200": "h200_sxm", "A100-SXM": "a100_sxm"}
#: the models tabulated: the sample's name -> aiconfigurator's model path
MODELS = {
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
}
#: the sample's other names for a tabulated shape (an fp8 checkpoint of the same model)
ALIASES = {"nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B"}
PRECISIONS = ("bf16", "fp8")
TPS = (1, 2, 4, 8)
M_GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
          6144, 8192, 12288, 16384, 24576, 32768]  # fmt: skip
B_GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
N_GRID = [16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384]
P_GRID = [0, 1024, 4096, 8192, 16384, 32768]
C_GRID = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
#: the systems whose vLLM rows are copied: H100 SXM (scored), H200 (held out: chooses knobs)
ROW_SYSTEMS = ("h100_sxm", "h200_sxm")


def _quiet():
    logging.disable(logging.WARNING)
    return contextlib.redirect_stdout(io.StringIO())


def _db(system: str):
    from aiconfigurator.sdk.perf_database import get_database_view, get_latest_database_version

    version = get_latest_database_version(system=system, backend=BACKEND)
    db = get_database_view(
        system, BACKEND, version, allow_missing_data=False, database_mode="SILICON",
        transfer_policy=None,
    )  # fmt: skip
    return db, version


def _model(path: str, tp: int, precision: str):
    from aiconfigurator.sdk.config_builders import build_model_config
    from aiconfigurator.sdk.models import get_model

    gemm = "fp8" if precision == "fp8" else None
    mc = build_model_config(tp, 1, 1, 1, 1, gemm_quant_mode=gemm)
    return get_model(path, mc, BACKEND)


def _mixed(backend, model, db, ctx: int, gen: int, isl: int, prefix: int) -> dict:
    from aiconfigurator.sdk.config import RuntimeConfig
    from aiconfigurator.sdk.step_estimate import MixedStepInput

    rc = RuntimeConfig(batch_size=1, isl=isl, osl=2, prefix=prefix)
    est = backend.run_mixed(
        model, db, rc, MixedStepInput(context_tokens=ctx, num_decode_requests=gen)
    )
    return dict(est.component_latency_ms)


def _decode(model, db, b: int, ctx: int) -> tuple[float, float]:
    from aiconfigurator.sdk.rust_engine_step import estimate_decode_step_breakdown_with_rust

    r = estimate_decode_step_breakdown_with_rust(
        model, db, gen_tokens=b, isl=ctx, osl=2, gen_seq_imbalance_correction_scale=1.0
    )
    total, per_op = float(r[0]), r[2]
    return total, float(per_op.get("generation_attention", 0.0))


def tabulate(system: str, model_path: str, tp: int, precision: str) -> dict:
    from aiconfigurator.sdk.backends.factory import get_backend

    db, version = _db(system)
    model = _model(model_path, tp, precision)
    be = get_backend(BACKEND)
    shared = [_mixed(be, model, db, m, 0, m, 0)["shared_non_attention"] for m in M_GRID]
    ctx_attn = [
        [_mixed(be, model, db, n, 0, n + p, p)["context_attention"] for p in P_GRID] for n in N_GRID
    ]
    dec_attn = [
        [_mixed(be, model, db, 1, b, c, 0)["decode_attention"] for c in C_GRID] for b in B_GRID
    ]
    dec_shared = []
    for b in B_GRID:
        total, attn = _decode(model, db, b, 1024)
        dec_shared.append(total - attn)
    return {
        "database_version": version,
        "shared_ms": shared,
        "decode_shared_ms": dec_shared,
        "context_attn_ms": ctx_attn,
        "decode_attn_ms": dec_attn,
    }


def shape(model_path: str) -> dict:
    import aiconfigurator_core

    name = model_path.replace("/", "--") + "_config.json"
    cfg_path = Path(aiconfigurator_core.__file__).parent / "model_configs" / name
    cfg = json.loads(cfg_path.read_text())
    keep = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
            "max_position_embeddings", "torch_dtype")  # fmt: skip
    out = {k: cfg[k] for k in keep if k in cfg}
    out.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    out["source"] = f"aiconfigurator_core/model_configs/{name}"
    return out


def silicon_rows() -> list[dict]:
    import aiconfigurator_core

    path = Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [
        r for r in rows
        if r["system"] in ROW_SYSTEMS and r["backend"] == "vllm"
        and (r["model_path"] in MODELS or r["model_path"] in ALIASES)
    ]  # fmt: skip


def aic_estimate(row: dict) -> dict:
    from aiconfigurator.cli.api import cli_estimate

    kwargs = dict(
        mode=row["mode"], backend_name=BACKEND, isl=int(row["isl"]), osl=int(row["osl"]),
    )  # fmt: skip
    if row["precision"] == "fp8":
        kwargs["gemm_quant_mode"] = "fp8"
    if row["mode"] == "agg":
        kwargs.update(batch_size=int(row["batch_size"]), tp_size=int(row["tp_size"]))
    else:
        kwargs.update(
            prefill_tp_size=int(row["prefill_tp_size"]), decode_tp_size=int(row["decode_tp_size"]),
            prefill_batch_size=int(float(row["prefill_batch_size"])),
            decode_batch_size=int(float(row["decode_batch_size"])),
            prefill_num_workers=int(float(row["prefill_num_workers"])),
            decode_num_workers=int(float(row["decode_num_workers"])),
        )  # fmt: skip
    try:
        with _quiet():
            name = ALIASES.get(row["model_path"], row["model_path"])
            res = cli_estimate(MODELS[name], row["system"], **kwargs)
        return {"ttft_ms": float(res.ttft), "tpot_ms": float(res.tpot), "error": None}
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        return {"ttft_ms": None, "tpot_ms": None, "error": f"{type(e).__name__}: {e}"[:300]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--skip-tables", action="store_true", help="only the silicon rows and estimates"
    )
    args = ap.parse_args(argv)
    versions = {p: metadata.version(p) for p in ("aiconfigurator", "aiconfigurator-core")}
    stamp = {
        "command": "python tools/tabulate_engine_costs.py",
        "date": dt.date.today().isoformat(),
        "python": platform.python_version(),
        "versions": versions,
        "backend": BACKEND,
    }
    if not args.skip_tables:
        tables: dict = {}
        missing: dict = {}
        for gpu, system in SYSTEMS.items():
            for name, path in MODELS.items():
                for prec in PRECISIONS:
                    for tp in TPS:
                        key = f"{name}|{gpu}|{tp}|{prec}"
                        try:
                            with _quiet():
                                tables[key] = tabulate(system, path, tp, prec)
                        except Exception as e:  # noqa: BLE001 - recorded as not covered
                            missing[key] = f"{type(e).__name__}: {e}"[:300]
                        print(key, "ok" if key in tables else missing[key][:80], file=sys.stderr)
        doc = {
            **stamp,
            "grids": {"m": M_GRID, "b": B_GRID, "n": N_GRID, "p": P_GRID, "c": C_GRID},
            "shapes": {name: shape(path) for name, path in MODELS.items()},
            "tables": tables,
            "missing": missing,
        }
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}: {len(tables)} tables, {len(missing)} missing")
    rows = silicon_rows()
    SILICON_OUT.mkdir(parents=True, exist_ok=True)
    fields = list(rows[0].keys())
    with (SILICON_OUT / "vllm_rows.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    est = {}
    for r in rows:
        e = aic_estimate(r)
        est[r["id"]] = e
        print(r["id"], r["model_path"], r["isl"], r["osl"], r["batch_size"], r["tp_size"], e,
              file=sys.stderr)  # fmt: skip
    (SILICON_OUT / "aiconfigurator_estimates.json").write_text(
        json.dumps({**stamp, "estimates": est}, indent=1, sort_keys=True) + "\n"
    )
    print(
        f"wrote data/silicon: {len(rows)} rows, {sum(e['error'] is None for e in est.values())} estimated"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
