"""Problem 22 on the static site: SLO attainment of every P : D split beside colocated serving.

The book build runs :func:`kvlab.pdsim.point` (one steady-state trial) over the eight seeds of
:data:`SEEDS` for a fixed budget of :data:`BUDGET` replicas, colocated with chunked prefill and every prefill : decode split, over a
grid of request rates, prompt lengths, output lengths and prefix hit rates (:data:`GRID`). Each
bar is the mean over the seeds; its spread (lowest and highest seed, standard deviation) is drawn
as a line through the bar and shown on hover. The page only looks results up: the controls filter
the table and the chart marks the best split (by the means), so a reader can push the workload
and watch a fixed ratio go stale.

The grid is cached as JSON (:data:`CACHE`, committed) under a key of pdsim's source and the grid;
:func:`p22_grid` recomputes it, on every core it is given, when the key differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from .explorer import (
    ROOT,
    code_fingerprint,
    embed_html,
    house_style,
    load_cached,
    select_param,
    store,
)
from .seeds import DEFAULT_SEEDS, summarise

__all__ = [
    "BUDGET",
    "CACHE",
    "DEFAULTS",
    "GRID",
    "cache_key",
    "p22_explorer_html",
    "p22_grid",
    "write_page_data",
]

#: Replicas shared by every system of the explorer.
BUDGET = 10
#: The controls and their positions; the defaults are the book's Problem 22 workload.
GRID: dict[str, tuple] = {
    "rate_rps": (5.0, 10.0, 15.0, 20.0, 25.0, 30.0),
    "prompt_tokens": (1_000, 3_000, 8_000),
    "output_tokens": (100, 300, 1_000),
    "hit_rate": (0.0, 0.5, 0.75),
}
DEFAULTS: dict = {"rate_rps": 20.0, "prompt_tokens": 3_000, "output_tokens": 300, "hit_rate": 0.0}
#: Targets every attainment is measured against (the book's: TTFT 1 s, TPOT 40 ms).
TTFT_SLO_S, TPOT_SLO_S = 1.0, 0.040
#: Seeds of every point (:data:`kvlab.seeds.DEFAULT_SEEDS`): each bar is their mean.
SEEDS: tuple[int, ...] = tuple(DEFAULT_SEEDS)
FORMAT = 2
CACHE = ROOT / "data" / "explorer" / "p22-grid.json"


def systems() -> list:
    """The budget colocated (its replica count) and every (prefill, decode) split of it."""
    return [BUDGET] + [(p, BUDGET - p) for p in range(1, BUDGET)]


def cache_key() -> str:
    """sha256 of the code of every module of the pdsim package and of its helpers
    (:func:`kvlab.explorer.code_fingerprint`) and of the grid's definition."""
    from . import disagg, latency
    from .pdsim import capacity, goodput, kernel, reference, result, runs, systems, traffic

    h = hashlib.sha256()
    pdsim_modules = (capacity, goodput, kernel, reference, result, runs, systems, traffic)
    for module in (*pdsim_modules, disagg, latency):
        h.update(module.__name__.encode())
        h.update(code_fingerprint(module).encode())
    grid = {
        "grid": {k: list(v) for k, v in GRID.items()},
        "budget": BUDGET,
        "slo": [TTFT_SLO_S, TPOT_SLO_S],
        "seeds": list(SEEDS),
        "format": FORMAT,
    }
    h.update(json.dumps(grid, sort_keys=True).encode())
    return h.hexdigest()


def _label(split) -> str:
    return f"colocated x{split}" if isinstance(split, int) else f"{split[0]} : {split[1]}"


def _job(setting) -> list[dict]:
    from . import pdsim

    rate, prompt, output, hit = setting
    out = []
    for split in systems():
        pts = [
            pdsim.point(
                rate,
                prompt,
                output,
                hit,
                split,
                seed=seed,
                ttft_slo_s=TTFT_SLO_S,
                tpot_slo_s=TPOT_SLO_S,
            )
            for seed in SEEDS
        ]
        a = summarise([p.attainment for p in pts], SEEDS)
        g = summarise([p.goodput_rps for p in pts], SEEDS)
        out.append(
            {
                "r": rate,
                "P": prompt,
                "O": output,
                "H": hit,
                "sys": _label(split),
                "pf": 0 if isinstance(split, int) else split[0],
                "a": round(a.mean, 4),
                "a_lo": round(a.lo, 4),
                "a_hi": round(a.hi, 4),
                "a_sd": round(a.std, 4),
                "g": round(g.mean, 3),
                "g_sd": round(g.std, 3),
            }
        )
    return mark_best(out)


def mark_best(rows: list[dict], tie: float = 0.005) -> list[dict]:
    """Mark the best split(s) of one setting: ``best`` = 1 for every split whose attainment is
    within ``tie`` of the highest; ``mid`` = 1 for the middle one of those (the split with the
    most room either way), whose ``bl`` is the label the chart writes."""
    splits = [r for r in rows if r["pf"]]
    top = max(r["a"] for r in splits)
    if top < tie:  # nothing meets the targets: no best split to name
        for r in rows:
            r["best"] = r["mid"] = 0
            r.pop("bl", None)
        splits[0]["mid"], splits[0]["bl"] = 1, "no split meets the targets at this rate"
        return rows
    tied = [r for r in splits if r["a"] >= top - tie]
    mid = tied[(len(tied) - 1) // 2]
    for r in rows:
        r["best"] = int(r in tied)
        r["mid"] = int(r is mid)
        r.pop("bl", None)
    mid["bl"] = (
        f"best split {mid['sys']}"
        if len(tied) == 1
        else f"best split {mid['sys']} (tied: {tied[0]['sys']} to {tied[-1]['sys']})"
    )
    return rows


def _setting(row) -> tuple:
    return (row["r"], row["P"], row["O"], row["H"])


def page_rows(data: dict) -> list[dict]:
    """The cached rows with the best split(s) of every setting marked (:func:`mark_best`)."""
    groups: dict[tuple, list[dict]] = {}
    for row in data["rows"]:
        groups.setdefault(_setting(row), []).append(dict(row))
    return [row for rows in groups.values() for row in mark_best(rows)]


def settings() -> list[tuple]:
    return [
        (r, p, o, h)
        for r in GRID["rate_rps"]
        for p in GRID["prompt_tokens"]
        for o in GRID["output_tokens"]
        for h in GRID["hit_rate"]
    ]


def p22_grid(
    path: Path | str | None = None, processes: int | None = None, rebuild: bool = False
) -> dict:
    """The explorer's table, loaded from ``path`` (default :data:`CACHE`) when its key matches
    :func:`cache_key`, else computed on ``processes`` cores (default: all) and written there."""
    import multiprocessing as mp

    path = Path(path) if path is not None else CACHE
    key = cache_key()
    cached = None if rebuild else load_cached(path, key)
    if cached is not None:
        return cached
    jobs = settings()
    processes = processes or os.cpu_count() or 1
    t0 = time.perf_counter()
    from .pdsim import kernel

    kernel._kernel()  # compile (or load) once, before the workers fork
    if processes > 1 and "fork" in mp.get_all_start_methods():
        with mp.get_context("fork").Pool(processes) as pool:
            parts = pool.map(_job, jobs, chunksize=1)
    else:
        parts = [_job(j) for j in jobs]
    data = {
        "key": key,
        "grid": {k: list(v) for k, v in GRID.items()},
        "defaults": DEFAULTS,
        "budget": BUDGET,
        "seconds": round(time.perf_counter() - t0, 1),
        "processes": processes,
        "seeds": list(SEEDS),
        "rows": [row for part in parts for row in part],
    }
    return store(path, data)


def write_page_data(static: Path | str) -> Path | None:
    """Copy the cached table's rows to ``explorer/p22-grid.json`` under the site's ``_static``
    folder; None when there is no cache yet (called by ``_ext/kvlab_vega.py``)."""
    if not CACHE.is_file():
        return None
    rows = page_rows(json.loads(CACHE.read_text(encoding="utf-8")))
    out = Path(static) / "explorer" / "p22-grid.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, separators=(",", ":")), encoding="utf-8")
    return out


def p22_explorer_spec(data_url: str) -> dict:
    """Vega-Lite spec: attainment of colocated and every split at the chosen setting."""
    import altair as alt

    from .plots import COLORS

    d = DEFAULTS

    def select(name, key, label, fmt):
        return select_param(name, d[key], GRID[key], label, fmt)

    params = [
        select("rate", "rate_rps", "Request rate (requests/s) ", "{:g}".format),
        select("prompt", "prompt_tokens", "Prompt length (tokens) ", "{:,}".format),
        select("output", "output_tokens", "Output length (tokens) ", "{:,}".format),
        select("hit", "hit_rate", "Prefix hit rate ", lambda v: f"{v * 100:.0f} %"),
    ]
    data = alt.Data(url=data_url, format=alt.DataFormat(type="json", property="rows"))
    order = [_label(s) for s in systems()]
    base = (
        alt.Chart(data)
        .transform_filter(
            "datum.r == rate && datum.P == prompt && datum.O == output && abs(datum.H - hit) < 1e-9"
        )
        .transform_calculate(
            kind="datum.pf == 0 ? 'colocated' : (datum.best == 1 ? 'best split' : 'split')"
        )
    )
    n = len(SEEDS)
    tooltip = [
        alt.Tooltip("sys:N", title="system"),
        alt.Tooltip("a:Q", title=f"attainment, mean of {n} seeds", format=".1%"),
        alt.Tooltip("a_sd:Q", title="attainment, standard deviation", format=".1%"),
        alt.Tooltip("a_lo:Q", title="attainment, lowest seed", format=".1%"),
        alt.Tooltip("a_hi:Q", title="attainment, highest seed", format=".1%"),
        alt.Tooltip("g:Q", title=f"goodput, mean of {n} seeds (requests/s)", format=".2f"),
        alt.Tooltip("g_sd:Q", title="goodput, standard deviation (requests/s)", format=".2f"),
    ]
    x = alt.X(
        "sys:N",
        sort=order,
        title="system (colocated, then prefill : decode)",
        # slanted where the chart is narrowed to a phone's column: side by side they ran together
        axis=alt.Axis(
            labelAngle=alt.ExprRef("width < 420 ? -45 : 0"),
            labelAlign=alt.ExprRef("width < 420 ? 'right' : 'center'"),
            labelExpr="replace(datum.label, 'colocated ', 'col. ')",
        ),
    )
    bars = base.mark_bar().encode(
        x=x,
        y=alt.Y(
            "a:Q",
            title="share of requests meeting TTFT and TPOT",
            scale=alt.Scale(domain=[0, 1.2]),
            axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        ),
        color=alt.Color(
            "kind:N",
            scale=alt.Scale(
                domain=["colocated", "split", "best split"],
                range=[COLORS["colocated"], COLORS["prefill"], "#e67e22"],
            ),
            legend=alt.Legend(title=None, orient="bottom"),
        ),
        tooltip=tooltip,
    )
    spread = base.mark_rule(color="#222222", strokeWidth=1.5).encode(
        x=x, y="a_lo:Q", y2="a_hi:Q", tooltip=tooltip
    )
    labels = (
        base.transform_calculate(pct="format(datum.a * 100, '.0f') + ' %'")
        .mark_text(dy=-7, fontSize=10, color="#222222")
        .encode(x=x, y="a:Q", text="pct:N")
    )
    best = (
        base.transform_filter("datum.mid == 1")
        .transform_calculate(msg="datum.bl")
        .mark_text(align="right", baseline="top", fontSize=12, fontWeight="bold", color="#111111")
        .encode(text="msg:N", x=alt.value("width"), y=alt.value(2))
    )
    target = (
        alt.Chart(alt.Data(values=[{"t": 0.9}]))
        .mark_rule(strokeDash=[6, 4], color="#111111")
        .encode(y="t:Q")
    )
    chart = (bars + spread + labels + best + target).properties(
        width=560,
        height=260,
        title=alt.Title(
            "SLO attainment at the chosen rate",
            # short lines: a title does not wrap, and the chart must fit a 390 px phone
            subtitle=[
                f"{BUDGET} replicas, mean of {len(SEEDS)} seeds",
                "thin line: lowest to highest seed",
                "dashed line: the 90 % target",
            ],
        ),
    )
    return house_style(chart.add_params(*params)).to_dict()


def p22_explorer_html(
    data_url: str = "../_static/explorer/p22-grid.json",
    bundle_url: str = "../_static/kvlab-vega.js",
    element_id: str = "kvlab-p22-explorer",
) -> str:
    """The Problem 22 explorer as an HTML fragment (see :func:`kvlab.explorer.embed_html`)."""
    return embed_html(
        p22_explorer_spec(data_url),
        element_id,
        "Problem 22 explorer: choose a workload; the chart shows precomputed attainment",
        "The explorer draws here on the book's website (it needs the site's bundled Vega).",
        bundle_url,
    )
