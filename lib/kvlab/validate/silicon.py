"""Predict measured runs of real engines with the engine model: :func:`predict` takes one row of
NVIDIA aiconfigurator's ``silicon_sample.csv`` in its own columns.

The rows are closed-loop concurrency benchmarks of one aggregated vLLM replica (``batch_size`` is
the number of concurrent clients; ``isl``/``osl`` the prompt and output tokens of every request,
output forced with ``ignore_eos``; TTFT is the client's wait for the first token, queueing
included; TPOT the mean time between later tokens). ``tools/tabulate_engine_costs.py`` copies the
vLLM rows of H100 SXM and H200 into ``data/silicon/vllm_rows.csv`` (aiconfigurator-core 0.12.0)
with aiconfigurator's own estimate of each (``aiconfigurator_estimates.json``).

Nothing here is fitted on the rows it scores. The step costs come from aiconfigurator's
per-operation database, the scheduling from vLLM's source (:mod:`kvlab.engine_model`), and the
knobs below are fixed before any H100 row is predicted:

* vLLM's defaults: ``gpu_memory_utilization`` 0.9 (the releases the rows name), the OpenAI
  server's token budget and sequence cap for the GPU, block size 16, KV cache in bf16 (``auto``:
  the activations' type, also for fp8 checkpoints);
* memory outside weights and KV: 3 GiB per GPU (the profiling pass's activations, CUDA graphs,
  communication buffers);
* the benchmark as the tools run it (``start="wave"``): every client sends its first request at
  time 0, and those first requests queue together and count; after that wave the clients are
  spread (the staggered steady state, 4 requests per client, the first not counted). A run's mean
  weighs the wave by ``1 / requests_per_client``, the share of the run's requests it holds; the
  sample does not record how many requests a run sent, so ``requests_per_client`` is set on the
  held-out H200 rows of Llama-3.1-70B (:func:`wave_from_held_out`);
* ``frontend_s``: the time a request spends outside the engine (HTTP, chat template,
  tokenisation, the first token's way back), the median of (measured - engine model) TTFT over
  the held-out H200 rows at 4 clients or fewer (:func:`frontend_from_held_out`); it only ever
  sees H200 rows.

One more term is *fitted*, and is never scored on the rows it was fitted on: the host's time per
step that no kernel in the database contains (:class:`HostTerm`: a fixed part per step and a part
per request in the step: input preparation, sampling, detokenising and streaming each token).
:func:`fit_host` sets its two numbers by least squares on the relative TPOT error of a set of
rows; :func:`score_cross_validated` scores each model's rows with the term fitted on the *other*
models' rows (leave one model out), and :func:`host_for` gives the term fitted on every scored row
of one model, for simulators of fleets of that model (a different benchmark from these rows).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from ..engine_model import (
    EngineConfig,
    batch_defaults,
    closed_loop,
    kv_blocks,
    step_costs,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "silicon"
ROWS_PATH = DATA / "vllm_rows.csv"
AIC_PATH = DATA / "aiconfigurator_estimates.json"
#: the sample's system names -> kvlab's GPU names
SYSTEMS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200", "a100_sxm": "A100-SXM"}
#: the sample's model names for a tabulated shape
MODEL_ALIASES = {"nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B"}
PRECISIONS = {"": "bf16", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}
REQUIRED = ("system", "backend", "model_path", "precision", "isl", "osl", "batch_size", "tp_size")
#: the rows the engine model is scored on (issue 33): H100 SXM, vLLM, aggregated serving
SCORED = {("Qwen/Qwen3-32B", "bf16"), ("meta-llama/Llama-3.1-70B", "fp8")}


@dataclass(frozen=True)
class Knobs:
    """Every choice :func:`predict` makes that neither the database nor vLLM's rules decide.
    ``start``: a :func:`kvlab.engine_model.closed_loop` start mode, or ``"wave"`` (the module
    docstring: the first wave together, then the staggered steady state, the wave weighted by
    ``1 / requests_per_client``)."""

    frontend_s: float = 0.0
    start: str = "staggered"
    requests_per_client: int = 4
    warmup: int = 1
    gpu_memory_utilization: float = 0.9
    non_kv_bytes_per_gpu: float = 3 * 2**30
    kv_bytes: int = 2
    step_overhead_s: float = 0.0
    host_s_per_seq: float = 0.0


def rows(system: str | None = None) -> list[dict]:
    """The copied vLLM rows of the sample (all, or one ``system``'s)."""
    with ROWS_PATH.open() as f:
        out = list(csv.DictReader(f))
    return [r for r in out if system is None or r["system"] == system]


@cache
def aiconfigurator_estimates() -> dict:
    """aiconfigurator 0.12.0's own agg estimate per row id (``None`` where it failed, with why)."""
    return json.loads(AIC_PATH.read_text())


def _field(row: dict, name: str) -> str:
    if name not in row or row[name] is None:
        raise ValueError(f"row is missing the field {name!r} (needs {list(REQUIRED)})")
    return str(row[name]).strip()


def _int_field(row: dict, name: str, lo: int) -> int:
    raw = _field(row, name)
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"row field {name!r} must be an integer >= {lo}, got {raw!r}") from None
    if not v.is_integer() or v < lo:
        raise ValueError(f"row field {name!r} must be an integer >= {lo}, got {raw!r}")
    return int(v)


def parse(row: dict) -> dict:
    """The fields :func:`predict` uses, checked: a row it cannot cover raises a ValueError that
    names the field."""
    system = _field(row, "system")
    if system not in SYSTEMS:
        raise ValueError(f"row field 'system' must be one of {sorted(SYSTEMS)}, got {system!r}")
    backend = _field(row, "backend")
    if backend != "vllm":
        raise ValueError(
            f"row field 'backend' must be 'vllm' (the engine modelled), got {backend!r}"
        )
    mode = str(row.get("mode", "agg") or "agg").strip()
    if mode != "agg":
        raise ValueError(f"row field 'mode' must be 'agg' (one aggregated replica), got {mode!r}")
    model = _field(row, "model_path")
    model = MODEL_ALIASES.get(model, model)
    prec_raw = _field(row, "precision")
    if prec_raw not in PRECISIONS:
        raise ValueError(
            f"row field 'precision' must be one of {sorted(PRECISIONS)}, got {prec_raw!r}"
        )
    return {
        "gpu": SYSTEMS[system],
        "model": model,
        "precision": PRECISIONS[prec_raw],
        "isl": _int_field(row, "isl", 1),
        "osl": _int_field(row, "osl", 2),
        "clients": _int_field(row, "batch_size", 1),
        "tp": _int_field(row, "tp_size", 1),
    }


def _predict(p: dict, k: Knobs) -> dict:
    try:
        costs = step_costs(p["model"], p["gpu"], p["tp"], p["precision"],
                           step_overhead_s=k.step_overhead_s,
                           host_s_per_seq=k.host_s_per_seq)  # fmt: skip
    except ValueError as e:
        raise ValueError(f"row not covered by the step-cost tables (fields 'model_path', "
                         f"'system', 'tp_size', 'precision'): {e}") from None  # fmt: skip
    blocks = kv_blocks(
        costs.model, p["gpu"], p["tp"], p["precision"],
        gpu_memory_utilization=k.gpu_memory_utilization,
        non_kv_bytes_per_gpu=k.non_kv_bytes_per_gpu, kv_bytes=k.kv_bytes,
    )  # fmt: skip
    mbt, mns = batch_defaults(p["gpu"])
    cfg = EngineConfig(num_blocks=blocks, max_num_batched_tokens=mbt, max_num_seqs=mns)
    if k.start == "wave":
        first, steady = _wave_parts(costs, cfg, p, k)
        w = 1 / k.requests_per_client
        return {
            "ttft_ms": w * first.ttft_ms + (1 - w) * steady.ttft_ms,
            "tpot_ms": w * first.tpot_ms + (1 - w) * steady.tpot_ms,
            "kv_blocks": blocks,
            "preemptions": first.preemptions + steady.preemptions,
            "output_tok_s": steady.output_tok_s,
        }
    res = closed_loop(
        costs, cfg, clients=p["clients"], isl=p["isl"], osl=p["osl"],
        requests_per_client=k.requests_per_client, warmup=k.warmup, start=k.start,
        frontend_s=k.frontend_s,
    )  # fmt: skip
    return {
        "ttft_ms": res.ttft_ms,
        "tpot_ms": res.tpot_ms,
        "kv_blocks": blocks,
        "preemptions": res.preemptions,
        "output_tok_s": res.output_tok_s,
    }


def _wave_parts(costs, cfg, p: dict, k: Knobs):
    """The first wave (every client's first request at time 0) and the staggered steady state."""
    first = closed_loop(costs, cfg, clients=p["clients"], isl=p["isl"], osl=p["osl"],
                        requests_per_client=1, warmup=0, start="together",
                        frontend_s=k.frontend_s)  # fmt: skip
    steady = closed_loop(costs, cfg, clients=p["clients"], isl=p["isl"], osl=p["osl"],
                         requests_per_client=4, warmup=1, start="staggered",
                         frontend_s=k.frontend_s)  # fmt: skip
    return first, steady


@cache
def frontend_from_held_out() -> float:
    """``frontend_s``: the median of (measured - engine model with no frontend) TTFT, in seconds,
    over the held-out H200 rows with at most 4 clients."""
    base = STEADY
    resid = []
    for r in rows("h200_sxm"):
        if r.get("mode") != "agg" or int(r["batch_size"]) > 4:
            continue
        got = _predict(parse(r), base)["ttft_ms"]
        resid.append(float(r["silicon_ttft_ms"]) - got)
    if not resid:
        raise ValueError("no held-out H200 rows to set frontend_s from")
    return float(np.median(resid)) / 1e3


@dataclass(frozen=True)
class HostTerm:
    """The host's time per engine step outside the database's kernels: ``step_s`` per step plus
    ``per_seq_s`` per request in the step (seconds), fitted on ``rows`` rows (``fitted_on``)."""

    step_s: float
    per_seq_s: float
    fitted_on: str
    rows: int

    def knobs(self, base: Knobs | None = None) -> Knobs:
        """``base`` (default :func:`knobs`) with this host term."""
        return replace(knobs() if base is None else base, step_overhead_s=self.step_s,
                       host_s_per_seq=self.per_seq_s)  # fmt: skip


def fit_host(selection: list[dict], label: str = "", *, iterations: int = 3) -> HostTerm:
    """Least-squares fit of the host term to the relative TPOT error on ``selection`` (Gauss-Newton
    from 1 ms + 50 us per request, derivatives by finite differences; both parts kept >= 0), on the
    staggered steady state (:data:`STEADY`, with :func:`knobs`'s ``frontend_s``): a cost per step,
    which the first wave's queue does not bear on."""
    if not selection:
        raise ValueError("selection must hold at least one row to fit the host term on")
    base = replace(STEADY, frontend_s=frontend_from_held_out())
    meas = np.array([float(r["silicon_tpot_ms"]) for r in selection])

    def tpot(a: float, b: float) -> np.ndarray:
        k = replace(base, step_overhead_s=a, host_s_per_seq=b)
        return np.array([predict(r, k)["tpot_ms"] for r in selection])

    a, b, da, db = 1e-3, 50e-6, 1e-3, 10e-6
    for _ in range(iterations):
        f = tpot(a, b)
        jac = np.stack([(tpot(a + da, b) - f) / da, (tpot(a, b + db) - f) / db], axis=1)
        step = np.linalg.lstsq(jac / meas[:, None], (meas - f) / meas, rcond=None)[0]
        a, b = max(a + float(step[0]), 0.0), max(b + float(step[1]), 0.0)
    return HostTerm(a, b, label or f"{len(selection)} rows", len(selection))


@cache
def host_for(model: str) -> HostTerm:
    """The host term fitted on every scored H100 row of ``model`` (a model id of :data:`SCORED`)."""
    sel = [r for r in scored_rows() if r["model_path"] == model]
    if not sel:
        models = sorted({m for m, _ in SCORED})
        raise ValueError(f"model must be one of the scored models {models}, got {model!r}")
    return fit_host(
        sel, f"{model}, H100 SXM, vLLM {sel[0]['backend_version'] or '(version not recorded)'}"
    )


@cache
def host_without(model: str) -> HostTerm:
    """The host term fitted on the scored H100 rows of every model but ``model``."""
    sel = [r for r in scored_rows() if r["model_path"] != model]
    others = sorted({r["model_path"] for r in sel})
    return fit_host(sel, "the rows of " + ", ".join(others))


def score_cross_validated(selection: list[dict]):
    """:func:`score` with the host term left out of each row's fit: every model's rows are
    predicted with the term fitted on the other scored models' rows (:func:`host_without`); the
    columns ``host_step_ms`` and ``host_seq_us`` say which term each row got."""
    import pandas as pd

    parts = []
    for model in sorted({r["model_path"] for r in selection}):
        h = host_without(model)
        df = score([r for r in selection if r["model_path"] == model], h.knobs())
        df["host_step_ms"] = h.step_s * 1e3
        df["host_seq_us"] = h.per_seq_s * 1e6
        df["host_fitted_on"] = h.fitted_on
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


#: the staggered steady state alone: what ``frontend_s`` and the host term are set on
STEADY = Knobs()
#: the range :func:`wave_from_held_out` searches, requests per client
WAVE_RANGE = range(2, 33)


def held_out_wave_rows() -> list[dict]:
    """The held-out rows the wave's weight is set on: H200, Llama-3.1-70B, aggregated serving
    (the H200 rows of Llama-3.1-8B are off on TPOT for both predictors, section 4 of the page)."""
    return [r for r in rows("h200_sxm")
            if r.get("mode") == "agg" and r["model_path"] == "meta-llama/Llama-3.1-70B"]  # fmt: skip


@cache
def wave_from_held_out() -> int:
    """``requests_per_client`` of the wave model: the value in :data:`WAVE_RANGE` with the
    smallest median absolute TTFT error on :func:`held_out_wave_rows`."""
    base = replace(STEADY, frontend_s=frontend_from_held_out())
    parts = []
    for r in held_out_wave_rows():
        p = parse(r)
        costs = step_costs(p["model"], p["gpu"], p["tp"], p["precision"])
        blocks = kv_blocks(costs.model, p["gpu"], p["tp"], p["precision"],
                           gpu_memory_utilization=base.gpu_memory_utilization,
                           non_kv_bytes_per_gpu=base.non_kv_bytes_per_gpu, kv_bytes=base.kv_bytes)  # fmt: skip
        mbt, mns = batch_defaults(p["gpu"])
        cfg = EngineConfig(num_blocks=blocks, max_num_batched_tokens=mbt, max_num_seqs=mns)
        first, steady = _wave_parts(costs, cfg, p, base)
        parts.append((first.ttft_ms, steady.ttft_ms, float(r["silicon_ttft_ms"])))
    f, st, m = (np.array(x) for x in zip(*parts, strict=True))

    def err(n: int) -> float:
        return float(np.median(np.abs((f + (n - 1) * st) / n / m - 1)))

    return min(WAVE_RANGE, key=err)


def knobs() -> Knobs:
    """The knobs every scored prediction uses: the wave model of the benchmark, with
    ``frontend_s`` and ``requests_per_client`` set on the held-out H200 rows."""
    return replace(Knobs(), start="wave", frontend_s=frontend_from_held_out(),
                   requests_per_client=wave_from_held_out())  # fmt: skip


def predict(row: dict, knobs_: Knobs | None = None) -> dict:
    """The engine model's prediction for one row of the sample: a dict with ``ttft_ms`` and
    ``tpot_ms`` (plus ``kv_blocks``, ``preemptions`` and ``output_tok_s``). ``row`` holds at
    least ``system``, ``backend``, ``model_path``, ``precision``, ``isl``, ``osl``,
    ``batch_size`` and ``tp_size`` as the sample spells them."""
    return _predict(parse(row), knobs() if knobs_ is None else knobs_)


def score(selection: list[dict], knobs_: Knobs | None = None):
    """A table (pandas) of predicted, measured and aiconfigurator's values for ``selection``,
    with signed relative errors (predicted / measured - 1)."""
    import pandas as pd

    k = knobs() if knobs_ is None else knobs_
    est = aiconfigurator_estimates()["estimates"]
    out = []
    for r in selection:
        p = predict(r, k)
        e = est.get(r["id"], {})
        mt, mp = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
        at, ap = e.get("ttft_ms"), e.get("tpot_ms")
        out.append({
            "model": r["model_path"], "precision": r["precision"] or "bf16", "system": r["system"],
            "tp": int(r["tp_size"]), "clients": int(r["batch_size"]), "isl": int(r["isl"]),
            "osl": int(r["osl"]), "ttft_ms": mt, "tpot_ms": mp,
            "pred_ttft_ms": p["ttft_ms"], "pred_tpot_ms": p["tpot_ms"],
            "aic_ttft_ms": math.nan if at is None else at, "aic_tpot_ms": math.nan if ap is None else ap,
            "preemptions": p["preemptions"],
        })  # fmt: skip
    df = pd.DataFrame(out)
    for m in ("ttft", "tpot"):
        df[f"err_{m}"] = df[f"pred_{m}_ms"] / df[f"{m}_ms"] - 1
        df[f"aic_err_{m}"] = df[f"aic_{m}_ms"] / df[f"{m}_ms"] - 1
    return df


def summary(df, by=("model", "tp")):
    """Median absolute percentage error and median signed error per group, the engine model's
    beside aiconfigurator's (rows aiconfigurator could not estimate are left out of its columns
    only), in percent."""
    import pandas as pd

    def agg(g):
        return pd.Series({
            "rows": len(g),
            "TTFT MAPE": 100 * g["err_ttft"].abs().median(),
            "TTFT bias": 100 * g["err_ttft"].median(),
            "TPOT MAPE": 100 * g["err_tpot"].abs().median(),
            "TPOT bias": 100 * g["err_tpot"].median(),
            "aic TTFT MAPE": 100 * g["aic_err_ttft"].abs().median(),
            "aic TPOT MAPE": 100 * g["aic_err_tpot"].abs().median(),
        })  # fmt: skip

    if not by:
        return agg(df).to_frame("all").T
    return df.groupby(list(by)).apply(agg, include_groups=False)


def scored_rows() -> list[dict]:
    """The H100 rows the engine model is scored on: Qwen3-32B in bf16 and Llama-3.1-70B in fp8,
    aggregated serving."""
    return [
        r for r in rows("h100_sxm")
        if r.get("mode") == "agg" and (r["model_path"], PRECISIONS.get(r["precision"], "?")) in SCORED
    ]  # fmt: skip
