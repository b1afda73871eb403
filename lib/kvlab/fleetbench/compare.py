"""Simulated stages against a measured table (the 73-capacity report's), by the issue's criteria.

The measured table has one row per load rate and an overall row per scheduler (the report's
"Summary across QPS" is the plain mean of its per-rate rows). A rate the workload runs twice (the
warm-up at 15 QPS, then the ladder's 15 QPS stage) is matched to its *last* stage: the report
shows one row per rate, and its 15 QPS row (300 requests that fit the fleet's KV) is the ladder's.
The KV-usage and wait-queue figures are measured over the whole run only (the EPP's time series):
the simulated ones are averaged over every stage, weighted by the stage's duration.

Criteria (issue 34): order of the schedulers by TTFT p90 at every rate where two measured values
differ by more than 2x; the first rate at which each scheduler's TTFT p90 passes 10 s, within one
rate of the measured one; output tokens/s within 15 % (median absolute error over rates and
schedulers); KV usage mean within 10 points.
"""

from __future__ import annotations

import csv
import functools
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

SIDE = ("output_tok_s", "ttft_p90_s", "ttft_mean_s", "itl_mean_s")


def read_csv(path: str | Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(v) -> float:
    if v is None or v == "":
        return math.nan
    return float(v)


def _qps_key(v) -> str:
    return "all" if str(v) == "all" else f"{float(v):g}"


def simulated_by_rate(sim: list[dict]) -> dict:
    """{(qps, scheduler): {metric: [value per seed]}} from simulated stage rows, each rate taken
    from its last stage; and ``("all", scheduler)``: the per-seed mean over rates, with KV usage
    and wait queue weighted by stage duration over all stages."""
    last_stage: dict[tuple[str, str, str], int] = {}
    for r in sim:
        k = (_qps_key(r["stage_qps"]), r["scheduler"], str(r.get("seed", 0)))
        last_stage[k] = max(last_stage.get(k, -1), int(r["stage"]))
    out: dict = defaultdict(lambda: defaultdict(list))
    per_seed: dict = defaultdict(lambda: defaultdict(list))
    weights: dict = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in sim:
        q, s, seed = _qps_key(r["stage_qps"]), r["scheduler"], str(r.get("seed", 0))
        d = _num(r.get("duration_s", 1.0))
        w = weights[(s, seed)]
        w[0] += d
        w[1] += d * _num(r["kv_usage_mean"])
        w[2] += d * _num(r["wait_queue_mean"])
        if int(r["stage"]) != last_stage[(q, s, seed)]:
            continue
        for m in ("output_tok_s", "requests_s", "ttft_p90_s", "ttft_mean_s", "itl_mean_s",
                  "kv_usage_mean", "wait_queue_mean", "hit_rate"):  # fmt: skip
            out[(q, s)][m].append(_num(r[m]))
            per_seed[(s, seed)][m].append(_num(r[m]))
    for (s, _seed), ms in per_seed.items():
        for m, vals in ms.items():
            if m not in ("kv_usage_mean", "wait_queue_mean"):
                out[("all", s)][m].append(float(np.mean(vals)))
    for (s, _seed), (d, kv, wq) in weights.items():
        out[("all", s)]["kv_usage_mean"].append(kv / d)
        out[("all", s)]["wait_queue_mean"].append(wq / d)
    return out


def compare(measured: list[dict], sim: list[dict], fit_qps=()) -> dict:
    """The side-by-side table (rows of measured and simulated mean, min, max over seeds) and the
    criteria. ``fit_qps``: rates a calibration was fitted on
    (:mod:`kvlab.fleetbench.calibrate`); the tokens/s error is then also given over the other
    rates alone (``output_tok_s_held_out_*``)."""
    meas = {(_qps_key(r["stage_qps"]), r["scheduler"]): r for r in measured}
    simd = simulated_by_rate(sim)
    scheds = sorted({s for _, s in meas})
    rates = sorted({q for q, _ in meas if q != "all"}, key=float)
    table = []
    for q in [*rates, "all"]:
        for s in scheds:
            if (q, s) not in meas or (q, s) not in simd:
                continue
            row = {"stage_qps": q, "scheduler": s}
            for m in (*SIDE, "kv_usage_mean", "wait_queue_mean", "hit_rate"):
                vals = simd[(q, s)].get(m, [])
                row[f"{m}_measured"] = _num(meas[(q, s)].get(m))
                row[f"{m}_sim"] = float(np.mean(vals)) if vals else math.nan
                row[f"{m}_sim_min"] = float(np.min(vals)) if vals else math.nan
                row[f"{m}_sim_max"] = float(np.max(vals)) if vals else math.nan
            table.append(row)
    by = {(r["stage_qps"], r["scheduler"]): r for r in table}
    # 1. order by TTFT p90 where two measured values differ by more than 2x
    pairs = agree = 0
    disagreements = []
    for q in rates:
        present = [s for s in scheds if (q, s) in by]
        for i, a in enumerate(present):
            for b in present[i + 1 :]:
                ma, mb = by[(q, a)]["ttft_p90_s_measured"], by[(q, b)]["ttft_p90_s_measured"]
                if max(ma, mb) <= 2 * min(ma, mb):
                    continue
                pairs += 1
                sa, sb = by[(q, a)]["ttft_p90_s_sim"], by[(q, b)]["ttft_p90_s_sim"]
                if (ma < mb) == (sa < sb):
                    agree += 1
                else:
                    disagreements.append((q, a, b))
    # 2. first rate past 10 s of TTFT p90
    first = {}
    for s in scheds:

        def first_past(key, s=s):
            for i, q in enumerate(rates):
                if (q, s) in by and by[(q, s)][key] > 10:
                    return i
            return None

        fm, fs = first_past("ttft_p90_s_measured"), first_past("ttft_p90_s_sim")
        ok = (fm is None and fs is None) or (
            fm is not None and fs is not None and abs(fm - fs) <= 1
        )
        first[s] = {
            "measured": rates[fm] if fm is not None else None,
            "sim": rates[fs] if fs is not None else None,
            "within_one": ok,
        }
    # 3. output tokens/s
    errs = [
        abs(by[(q, s)]["output_tok_s_sim"] / by[(q, s)]["output_tok_s_measured"] - 1)
        for q in rates
        for s in scheds
        if (q, s) in by
    ]
    bias = [
        by[(q, s)]["output_tok_s_sim"] / by[(q, s)]["output_tok_s_measured"] - 1
        for q in rates
        for s in scheds
        if (q, s) in by
    ]
    fitted = {_qps_key(q) for q in fit_qps}
    held = [
        by[(q, s)]["output_tok_s_sim"] / by[(q, s)]["output_tok_s_measured"] - 1
        for q in rates
        for s in scheds
        if (q, s) in by and q not in fitted
    ]
    # 4. KV usage
    kv = {
        s: (by[("all", s)]["kv_usage_mean_measured"], by[("all", s)]["kv_usage_mean_sim"])
        for s in scheds
        if ("all", s) in by
    }
    return {
        "table": table,
        "order_pairs": pairs,
        "order_agree": agree,
        "order_disagreements": disagreements,
        "first_past_10s": first,
        "output_tok_s_median_abs_err": float(np.median(errs)) if errs else math.nan,
        "output_tok_s_median_bias": float(np.median(bias)) if bias else math.nan,
        "output_tok_s_held_out_median_abs_err": (
            float(np.median(np.abs(held))) if held else math.nan
        ),
        "output_tok_s_held_out_median_bias": float(np.median(held)) if held else math.nan,
        "kv_usage_points": {s: 100 * (b - a) for s, (a, b) in kv.items()},
    }


def _cell(r: dict, m: str, fmt: str) -> str:
    lo, hi = r[f"{m}_sim_min"], r[f"{m}_sim_max"]
    s = format(r[f"{m}_sim"], fmt)
    if hi > lo:
        s += f" [{format(lo, fmt)}, {format(hi, fmt)}]"
    return s


def markdown(result: dict) -> str:
    """The side-by-side table as Markdown (simulated: mean over seeds [min, max])."""
    lines = [
        "| QPS | scheduler | TTFT p90 meas. | TTFT p90 sim | out tok/s meas. | out tok/s sim "
        "| TTFT mean meas. | TTFT mean sim | ITL mean meas. | ITL mean sim |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["table"]:
        cell = functools.partial(_cell, r)
        lines.append(
            f"| {r['stage_qps']} | {r['scheduler'].replace('-scheduling', '')} "
            f"| {r['ttft_p90_s_measured']:.2f} | {cell('ttft_p90_s', '.2f')} "
            f"| {r['output_tok_s_measured']:.0f} | {cell('output_tok_s', '.0f')} "
            f"| {r['ttft_mean_s_measured']:.2f} | {cell('ttft_mean_s', '.2f')} "
            f"| {r['itl_mean_s_measured']:.3f} | {cell('itl_mean_s', '.3f')} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m kvlab.fleetbench.compare SIM.csv MEASURED.csv``: the side-by-side table and the
    criteria."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kvlab.fleetbench.compare")
    ap.add_argument("sim")
    ap.add_argument("measured")
    ap.add_argument("--fit-qps", default="", help="rates a calibration was fitted on, e.g. 3,10")
    a = ap.parse_args(argv)
    fit_qps = [float(q) for q in a.fit_qps.split(",") if q.strip()]
    res = compare(read_csv(a.measured), read_csv(a.sim), fit_qps=fit_qps)
    print(markdown(res))
    print()
    print(f"TTFT p90 order: {res['order_agree']} of {res['order_pairs']} pairs that differ >2x "
          f"agree; disagreements: {res['order_disagreements']}")  # fmt: skip
    for s, f in res["first_past_10s"].items():
        print(f"first QPS past 10 s, {s}: measured {f['measured']}, sim {f['sim']} "
              f"({'within one stage' if f['within_one'] else 'MISSED'})")  # fmt: skip
    print(f"output tok/s: median abs. error {100 * res['output_tok_s_median_abs_err']:.1f} %, "
          f"median bias {100 * res['output_tok_s_median_bias']:+.1f} %")  # fmt: skip
    if fit_qps:
        print(f"output tok/s without the fitted rates: median abs. error "
              f"{100 * res['output_tok_s_held_out_median_abs_err']:.1f} %, median bias "
              f"{100 * res['output_tok_s_held_out_median_bias']:+.1f} %")  # fmt: skip
    for s, d in res["kv_usage_points"].items():
        print(f"KV usage mean, {s}: sim - measured = {d:+.1f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
