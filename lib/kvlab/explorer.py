"""The routing demo on the static site: a grid of kvlab.fleet results and a Vega-Lite explorer.

The book's website runs no kernel, so the live demo of :mod:`kvlab.widgets` cannot run there.
Instead the book build computes :func:`kvlab.fleet.simulate_all` over a grid of settings
(:data:`GRID`) and the page only looks results up: no second simulator whose numbers could drift.
Every grid point is the mean over the book's eight seeds with its spread (``hs``, ``is``; the
labels ``hl``, ``il`` read "mean ± spread"), like the figures in the text, so at the defaults the
explorer shows exactly the glued figures.

The grid is cached as JSON (:data:`CACHE`, committed) under a key made of the simulator's source
(the functions of fleet, routing and workload that decide a result) and the grid's definition:
:func:`routing_grid` recomputes it, on every core it is given, whenever the key differs, so a
stale cache is rebuilt, never reused. :func:`routing_explorer_html` is the page's HTML: controls
bound to Vega-Lite parameters that filter the table, drawn by the Vega bundle the site serves once
(``_static/kvlab-vega.js``, written by ``_ext/kvlab_vega.py`` with vl-convert).

Why one module: it is one pipeline, the routing grid from its cache key to the page that looks it
up. Two of its parts are also used by :mod:`kvlab.explorer_p22`: the code fingerprint
(:func:`code_fingerprint`) and the page embedding (:func:`embed_html`, :func:`house_style`); each
could stand as a module of its own, which issue 25 leaves for when the second explorer's rework
lands.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import fleet, routing, workload
from .seeds import DEFAULT_SEEDS, Spread, summarise

__all__ = [
    "CACHE",
    "DEFAULTS",
    "GRID",
    "cache_key",
    "code_fingerprint",
    "fmt_hit",
    "fmt_imbalance",
    "grid_settings",
    "lookup",
    "embed_html",
    "routing_explorer_html",
    "routing_explorer_spec",
    "page_csv",
    "read_page_csv",
    "routing_grid",
    "write_page_data",
]

#: The explorer's controls and their positions (the defaults are the demo's).
GRID: dict[str, tuple] = {
    "replicas": (1, 2, 4, 8, 16, 32),
    "cache_tokens": (10_000, 50_000, 100_000, 400_000, 1_000_000),
    "conversations": (10, 100, 500, 5_000),
    "skew": (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0),
}
DEFAULTS: dict = {"replicas": 8, "cache_tokens": 400_000, "conversations": 500, "skew": 1.0}
#: Requests per run and warm-up, as in the demo and the text.
REQUESTS, WARMUP = 20_000, 5_000
#: Seeds of every point: each point is the mean over these seeds, with its spread.
LINE_SEEDS: tuple[int, ...] = DEFAULT_SEEDS
#: Bump when the rows' format or the seeds behind them change (2: every point over LINE_SEEDS).
FORMAT = 2

ROOT = Path(__file__).resolve().parents[2]
#: The committed cache of the grid (also the data the page loads).
CACHE = ROOT / "data" / "explorer" / "routing-grid.json"

_SIM_SOURCES = (
    (
        fleet,
        (
            "FleetResult",
            "_unlink",
            "_push_back",
            "_evict_lru",
            "_set_mru",
            "_pick_cache_aware",
            "_chat_loop",
            "_kernels",
            "_wrap_kernels",
            "_dense",
            "_node_arrays",
            "_run_fast",
            "simulate",
        ),
    ),
    (fleet, ("simulate_all",)),
    (
        routing,
        (
            "stable_hash",
            "HashRing",
            "Router",
            "RandomRouter",
            "RoundRobinRouter",
            "StickyRouter",
            "CacheAwareRouter",
            "make_router",
        ),
    ),
    (workload, ("_stream_key", "stream_ids", "Paths", "ChatPrompt", "ShapedChats", "ChatWorkload")),
)


def fmt_hit(sp: Spread) -> str:
    """A hit rate as the text prints it: ``52 ± 0.3 %`` (mean over seeds) or ``52 %`` (one)."""
    if sp.n == 1:
        return f"{sp.mean * 100:.0f} %"
    return f"{sp.mean * 100:.0f} ± {sp.std * 100:.1f} %"


def fmt_imbalance(sp: Spread) -> str:
    """An imbalance as the text prints it: ``1.86 ± 0.13x`` (mean over seeds) or ``1.86x``."""
    if sp.n == 1:
        return f"{sp.mean:.2f}x"
    return f"{sp.mean:.2f} ± {sp.std:.2f}x"


class _DropNonSemantics(ast.NodeTransformer):
    """Removes what cannot change a result: docstrings and type annotations (inside a function,
    ``x: T = v`` is ``x = v``; in a class body the annotation stays, since it makes a dataclass
    field)."""

    def __init__(self) -> None:
        self.in_function = 0

    def _drop_docstring(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        return node

    def visit_Module(self, node):
        return self._drop_docstring(self.generic_visit(node))

    def visit_ClassDef(self, node):
        depth, self.in_function = self.in_function, 0
        node = self.generic_visit(node)
        self.in_function = depth
        return self._drop_docstring(node)

    def visit_FunctionDef(self, node):
        node.returns = None
        self.in_function += 1
        node = self.generic_visit(node)
        self.in_function -= 1
        return self._drop_docstring(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_AnnAssign(self, node):
        node = self.generic_visit(node)
        if not self.in_function:
            return node
        if node.value is None:  # a bare declaration does nothing at run time
            return None
        return ast.Assign(targets=[node.target], value=node.value)


def _dump(tree: ast.AST) -> str:
    """``ast.dump`` in the same text on Python 3.11, 3.12 and 3.13: 3.12 added an empty
    ``type_params`` field to functions and classes, 3.13 leaves empty fields out unless asked. A
    cache made on one Python (the book's) is then found on another (Colab's), instead of the grid
    being recomputed for minutes."""
    for node in ast.walk(tree):
        if "type_params" in node._fields and getattr(node, "type_params", None) == []:
            delattr(node, "type_params")
    if sys.version_info >= (3, 13):
        return ast.dump(tree, include_attributes=False, show_empty=True)
    return ast.dump(tree, include_attributes=False)


def code_fingerprint(obj) -> str:
    """The source of a module, class or function as it executes: parsed, with docstrings, type
    annotations, comments and layout removed, dumped as text (the same on Pythons 3.11 to 3.13).
    A change there (a docstring, a type hint) leaves the fingerprint, and the grids cached under
    it, as they were."""
    obj = getattr(obj, "py_func", obj)  # a numba-compiled function: its Python source
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    return _dump(_DropNonSemantics().visit(tree))


def cache_key() -> str:
    """sha256 of the simulator's code (:func:`code_fingerprint` of the functions that decide a
    result) and the grid."""
    h = hashlib.sha256()
    for module, names in _SIM_SOURCES:
        for name in names:
            h.update(f"{module.__name__}.{name}\n".encode())
            h.update(code_fingerprint(getattr(module, name)).encode())
    grid = {
        "grid": {k: list(v) for k, v in GRID.items()},
        "defaults": DEFAULTS,
        "requests": REQUESTS,
        "warmup": WARMUP,
        "line_seeds": list(LINE_SEEDS),
        "policies": list(routing.POLICIES),
        "format": FORMAT,
    }
    h.update(json.dumps(grid, sort_keys=True).encode())
    return h.hexdigest()


def grid_settings() -> list[tuple[int, int, int, float]]:
    """Every (replicas, cache_tokens, conversations, skew) of the grid."""
    return [
        (r, c, n, s)
        for n in GRID["conversations"]
        for s in GRID["skew"]
        for r in GRID["replicas"]
        for c in GRID["cache_tokens"]
    ]


def _jobs() -> list[tuple[int, float, int, list[tuple[int, int]]]]:
    """(conversations, skew, seed, [(replicas, cache_tokens)]): one workload per job, every
    point of the grid over every seed of :data:`LINE_SEEDS`."""
    rc = [(r, c) for r in GRID["replicas"] for c in GRID["cache_tokens"]]
    return [
        (n, s, seed, rc) for n in GRID["conversations"] for s in GRID["skew"] for seed in LINE_SEEDS
    ]


def _run_job(job) -> list[tuple]:
    """Run one job: [(replicas, cache, conversations, skew, seed, policy, hit, imb, prefill)]."""
    n, s, seed, rc = job
    w = workload.ChatWorkload(conversations=n, skew=s, requests=REQUESTS, seed=seed)
    paths = w.paths(16)
    out = []
    for r, c in rc:
        # with one replica every policy routes alike: run one, report it for all
        pols = ("round_robin",) if r == 1 else routing.POLICIES
        res = fleet.simulate_all(
            w, pols, paths=paths, replicas=r, cache_tokens=c, warmup=WARMUP, seed=seed
        )
        for p in routing.POLICIES:
            x = res[pols[0]] if r == 1 else res[p]
            out.append((r, c, n, s, seed, p, x.hit_rate, x.imbalance, x.prefill_tokens.tolist()))
    return out


def _compute(processes: int | None, executor=None) -> tuple[list[dict], float]:
    from .sweep import sweep

    jobs = _jobs()
    # the biggest jobs first, so the last ones to finish are short
    jobs.sort(key=lambda j: -len(j[3]))
    t0 = time.perf_counter()
    if executor is not None:
        parts = sweep(_run_job, jobs, executor=executor, desc="routing grid")
    else:
        parts = sweep(
            _run_job, jobs, processes=processes or os.cpu_count() or 1, desc="routing grid"
        )
    seconds = time.perf_counter() - t0
    runs: dict[tuple, list] = {}
    for part in parts:
        for r, c, n, s, seed, p, hit, imb, pre in part:
            runs.setdefault((r, c, n, s, p), []).append((seed, hit, imb, pre))
    rows = []
    for (r, c, n, s, p), vals in sorted(runs.items(), key=lambda kv: str(kv[0])):
        vals.sort()
        seeds = [v[0] for v in vals]
        hit = summarise([v[1] for v in vals], seeds)
        imb = summarise([v[2] for v in vals], seeds)
        pre = np.mean([v[3] for v in vals], axis=0)
        rows.append(
            {
                "R": r,
                "C": c,
                "N": n,
                "S": s,
                "p": p,
                "n": len(seeds),
                "h": round(hit.mean, 5),
                "hs": round(hit.std, 5),
                "i": round(imb.mean, 4),
                "is": round(imb.std, 4),
                "hl": fmt_hit(hit),
                "il": fmt_imbalance(imb),
                # mean prefill per replica over the seeds, in millions of tokens
                "pre": [round(float(x) / 1e6, 4) for x in pre],
            }
        )
    return rows, seconds


def load_cached(path: Path, key: str) -> dict | None:
    """The grid stored at ``path`` if its ``key`` matches (marked ``rebuilt=False``), else None:
    a missing, unreadable or stale file is recomputed, never reused."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    data["rebuilt"] = False
    return data


def store(path: Path, data: dict) -> dict:
    """Write ``data`` to ``path`` atomically (a temporary file, then a rename); return it marked
    ``rebuilt=True``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    tmp.replace(path)
    data["rebuilt"] = True
    return data


def routing_grid(
    path: Path | str | None = None,
    processes: int | None = None,
    rebuild: bool = False,
    executor=None,
) -> dict:
    """The explorer's grid: loaded from ``path`` (default :data:`CACHE`) when its key matches
    :func:`cache_key`, else computed on ``processes`` cores (default: all), or on ``executor``
    (any ``concurrent.futures.Executor``, see :mod:`kvlab.sweep`), and written there.

    Returns ``{"key", "grid", "defaults", "seeds", "rows", "seconds", "rebuilt"}``; ``seconds`` is
    the compute time of the stored grid, ``rebuilt`` whether this call computed it.
    """
    path = Path(path) if path is not None else CACHE
    key = cache_key()
    cached = None if rebuild else load_cached(path, key)
    if cached is not None:
        return cached
    rows, seconds = _compute(processes, executor)
    data = {
        "key": key,
        "grid": {k: list(v) for k, v in GRID.items()},
        "defaults": DEFAULTS,
        "seeds": list(LINE_SEEDS),
        "requests": REQUESTS,
        "warmup": WARMUP,
        "seconds": round(seconds, 1),
        "processes": processes or os.cpu_count() or 1,
        "rows": rows,
    }
    return store(path, data)


def lookup(data: dict, replicas: int, cache_tokens: int, conversations: int, skew: float):
    """The rows of one setting: ``{policy: row}``."""
    out = {
        row["p"]: row
        for row in data["rows"]
        if (row["R"], row["C"], row["N"], row["S"])
        == (replicas, cache_tokens, conversations, float(skew))
    }
    if not out:
        raise ValueError(
            "setting must be a grid point: replicas in {}, cache_tokens in {}, conversations in "
            "{}, skew in {}; got {}".format(
                *GRID.values(), (replicas, cache_tokens, conversations, skew)
            )
        )
    return out


#: Columns of the page's table (CSV): replicas, cache tokens, conversations, skew, policy index
#: (into routing.POLICIES), hit rate, hit-rate label, imbalance label, seeds, and the prefill per
#: replica (mean over the seeds, thousands of tokens) joined by ";".
PAGE_COLUMNS = ("R", "C", "N", "S", "p", "h", "hl", "il", "n", "pre")


def page_csv(data: dict) -> str:
    """The grid as the compact CSV table the page loads (one row per setting and policy)."""
    index = {p: i for i, p in enumerate(routing.POLICIES)}
    lines = [",".join(PAGE_COLUMNS)]
    for r in data["rows"]:
        pre = ";".join(str(round(x * 1000)) for x in r["pre"])
        lines.append(
            f"{r['R']},{r['C']},{r['N']},{r['S']:g},{index[r['p']]},{r['h']:.4f},"
            f"{r['hl']},{r['il']},{r['n']},{pre}"
        )
    return "\n".join(lines) + "\n"


def read_page_csv(text: str) -> list[dict]:
    """Parse :func:`page_csv`'s table back into rows (policy names, prefill in millions)."""
    lines = text.strip().splitlines()
    head = lines[0].split(",")
    out = []
    for line in lines[1:]:
        row = dict(zip(head, line.split(","), strict=True))
        out.append(
            {
                "R": int(row["R"]),
                "C": int(row["C"]),
                "N": int(row["N"]),
                "S": float(row["S"]),
                "p": routing.POLICIES[int(row["p"])],
                "h": float(row["h"]),
                "hl": row["hl"],
                "il": row["il"],
                "n": int(row["n"]),
                "pre": [int(x) / 1000 for x in row["pre"].split(";")],
            }
        )
    return out


def write_page_data(static: Path | str) -> Path | None:
    """Write the page's table (``explorer/routing-grid.csv``) under the site's ``_static`` folder
    from the cached grid; None when there is no cache yet (called by ``_ext/kvlab_vega.py``)."""
    if not CACHE.is_file():
        return None
    out = Path(static) / "explorer" / "routing-grid.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page_csv(json.loads(CACHE.read_text(encoding="utf-8"))), encoding="utf-8")
    return out


def routing_explorer_spec(data_url: str) -> dict:
    """The Vega-Lite spec (a dict) of the explorer, reading the grid rows from ``data_url``."""
    import altair as alt

    from .plots import POLICY_COLORS, POLICY_LABELS

    pols = list(routing.POLICIES)
    labels = [POLICY_LABELS[p] for p in pols]
    d = DEFAULTS
    p_policy = alt.param(
        name="policy",
        value=pols.index("cache_aware"),
        bind=alt.binding_select(
            options=list(range(len(pols))), labels=labels, name="Routing policy "
        ),
    )
    p_rep = alt.param(
        name="replicas",
        value=d["replicas"],
        bind=alt.binding_select(options=list(GRID["replicas"]), name="Replicas "),
    )
    p_cache = select_param(
        "cache",
        d["cache_tokens"],
        GRID["cache_tokens"],
        "Cache per replica (tokens) ",
        "{:,}".format,
    )
    p_conv = select_param(
        "conversations", d["conversations"], GRID["conversations"], "Conversations ", "{:,}".format
    )
    p_skew = alt.param(
        name="skew",
        value=d["skew"],
        bind=alt.binding_range(min=0, max=2, step=0.25, name="Popularity skew "),
    )
    params = [p_policy, p_rep, p_cache, p_conv, p_skew]
    parse = {c: "number" for c in ("R", "C", "N", "S", "p", "h", "n")}
    parse.update(hl="string", il="string", pre="string")
    data = alt.Data(url=data_url, format=alt.DataFormat(type="csv", parse=parse))
    setting = (
        "datum.R == replicas && datum.C == cache && datum.N == conversations"
        " && abs(datum.S - skew) < 1e-9"
    )
    label_list = "[" + ", ".join(f"'{lab}'" for lab in labels) + "]"
    label_expr = label_list + "[datum.p]"
    color = alt.Color(
        "p:N",
        scale=alt.Scale(domain=list(range(len(pols))), range=[POLICY_COLORS[p] for p in pols]),
        legend=None,
    )
    base = (
        alt.Chart(data)
        .transform_filter(setting)
        .transform_calculate(
            label=label_expr,
            seeds="datum.n > 1 ? 'mean over ' + datum.n + ' seeds' : 'seed 0'",
        )
    )
    x = alt.X("label:N", sort=labels, title=None, axis=alt.Axis(labelAngle=0))
    bars = base.mark_bar(strokeWidth=2).encode(
        x=x,
        y=alt.Y(
            "h:Q",
            title="token hit rate",
            scale=alt.Scale(domain=[0, 1.08]),
            axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        ),
        color=color,
        opacity=alt.condition("datum.p == policy", alt.value(1.0), alt.value(0.35)),
        stroke=alt.condition("datum.p == policy", alt.value("#111111"), alt.value(None)),
        tooltip=[alt.Tooltip("label:N", title="policy"), alt.Tooltip("hl:N", title="hit rate")],
    )
    text_other = (
        base.transform_filter("datum.p != policy")
        .mark_text(dy=-7, fontSize=11, color="#222222")
        .encode(x=x, y="h:Q", text="hl:N")
    )
    text_chosen = (
        base.transform_filter("datum.p == policy")
        .mark_text(dy=-7, fontSize=11, fontWeight="bold", color="#111111")
        .encode(x=x, y="h:Q", text="hl:N")
    )
    left = (bars + text_other + text_chosen).properties(
        width=250, height=260, title=alt.Title("Token hit rate, all four policies")
    )

    chosen = (
        base.transform_filter("datum.p == policy")
        .transform_calculate(pre_list="split(datum.pre, ';')")
        .transform_flatten(["pre_list"], as_=["pre_k"])
        .transform_window(rank="row_number()")
        .transform_calculate(replica="datum.rank - 1", pre="toNumber(datum.pre_k) / 1000")
        .transform_joinaggregate(mean_pre="mean(pre)", max_pre="max(pre)")
        .transform_calculate(top="datum.max_pre * 1.3")
    )
    pre_bars = chosen.mark_bar().encode(
        x=alt.X("replica:O", title="replica", axis=alt.Axis(labelAngle=0, labelOverlap=True)),
        y=alt.Y("pre:Q", title="prefill tokens (millions)"),
        color=color,
        tooltip=[
            alt.Tooltip("replica:O"),
            alt.Tooltip("pre:Q", title="prefill (millions of tokens)", format=".3f"),
        ],
    )
    # an invisible point a third above the tallest bar leaves room for the imbalance line
    headroom = chosen.mark_point(opacity=0).encode(
        y=alt.Y("top:Q", title="prefill tokens (millions)")
    )
    mean_rule = chosen.mark_rule(strokeDash=[6, 4], color="#111111", size=1.5).encode(
        y="mean(pre):Q"
    )
    imb_text = (
        chosen.transform_filter("datum.rank == 1")
        # two lines: on a phone one line ran over the y axis's labels
        .transform_calculate(
            msg="'imbalance (max / mean)\\n' + datum.il + ' (' + datum.seeds + ')'"
        )
        .mark_text(
            align="right",
            baseline="top",
            fontSize=12,
            fontWeight="bold",
            color="#111111",
            lineBreak="\n",
        )
        .encode(text="msg:N", x=alt.value("width"), y=alt.value(4))
    )
    right = (pre_bars + headroom + mean_rule + imb_text).properties(
        width=330,
        height=260,
        title=alt.Title(
            alt.ExprRef("'Prefill per replica, ' + " + label_list + "[policy] + ' (mean dashed)'")
        ),
    )
    return house_style(alt.hconcat(left, right).add_params(*params)).to_dict()


def select_param(name: str, value, options, label: str, fmt: Callable[[Any], str]):
    """A Vega-Lite parameter bound to a drop-down of ``options`` shown as ``fmt(option)``,
    ``label`` in front, ``value`` chosen at first."""
    import altair as alt

    return alt.param(
        name=name,
        value=value,
        bind=alt.binding_select(
            options=list(options), labels=[fmt(v) for v in options], name=label
        ),
    )


# The charts' inks in the light theme and what replaces them in the site's dark theme.
DARK_INKS = {
    "white": "transparent",
    "#111111": "#f2f2f2",
    "#222222": "#e0e0e0",
    "#e5e5e5": "#3b4048",
}


def house_style(chart):
    """The explorers' common look: white background, no frame, dark grey text, light grid."""
    return (
        chart.configure(background="white", font="sans-serif")
        .configure_view(stroke=None)
        .configure_axis(labelColor="#222222", titleColor="#222222", gridColor="#e5e5e5")
        .configure_title(color="#222222", subtitleColor="#222222", fontSize=13)
        .configure_legend(labelColor="#222222", titleColor="#222222")
    )


def embed_html(
    spec: dict,
    element_id: str,
    aria_label: str,
    fallback: str,
    bundle_url: str = "../_static/kvlab-vega.js",
) -> str:
    """A Vega-Lite chart as an HTML fragment for a book page: a labelled container (``fallback``
    shows until the chart draws), the site's one Vega bundle as a module script (a page loads it
    once however many charts it has) and the embedding call. ``window.kvlabExplorers[id]`` holds
    the Vega view once drawn, and the container gets ``data-ready="1"``.

    The page's script fits the chart to the reader's screen and theme before drawing it: charts
    side by side that do not fit the column are stacked and every chart is narrowed to the column
    (a phone at 390 px), and in the site's dark theme the inks (``DARK_INKS``) are swapped for
    light ones on a transparent background. It draws again, keeping the controls' values, when
    the theme changes or the column's width crosses a layout."""
    payload = json.dumps(spec, separators=(",", ":"))
    inks = json.dumps(DARK_INKS, separators=(",", ":"))
    return f"""<div class="kvlab-explorer" id="{element_id}" role="group" aria-label="{aria_label}">
  <p class="kvlab-explorer-fallback">{fallback}</p>
</div>
<style>
#{element_id} {{ max-width: 100%; overflow-x: auto; }}
#{element_id} .vega-bind {{ margin: 0.2em 0; }}
#{element_id} .vega-bind label {{ display: flex; flex-wrap: wrap; align-items: center; gap: 0.3em; }}
#{element_id} .vega-bind-name {{ display: inline-block; min-width: 15em; }}
#{element_id} select, #{element_id} input {{ font-size: 0.95em; max-width: 100%; }}
html[data-theme="dark"] #{element_id} select {{ color: inherit; background: transparent; }}
@media (max-width: 640px) {{ #{element_id} .vega-bind-name {{ min-width: 0; flex-basis: 100%; }} }}
</style>
<script type="module" src="{bundle_url}"></script>
<script type="module">
const el = document.getElementById("{element_id}");
const SPEC = {payload};
const DARK = {inks};
let view = null, drawn = "";
function layout() {{
  const dark = document.documentElement.dataset.theme === "dark";
  const width = Math.floor(el.clientWidth || window.innerWidth);
  const charts = SPEC.hconcat || [SPEC];
  const wide = charts.reduce((s, c) => s + (c.width || 0) + 70, 0);
  const stack = Boolean(SPEC.hconcat) && wide > width;
  const room = Math.max(180, width - 80);
  const narrow = charts.some(c => (c.width || 0) > room);
  return {{dark, stack, room, key: [dark, stack, narrow ? room : 0].join("|")}};
}}
function fitted(l, keep) {{
  let text = JSON.stringify(SPEC);
  if (l.dark) for (const [a, b] of Object.entries(DARK)) text = text.split(JSON.stringify(a)).join(JSON.stringify(b));
  const spec = JSON.parse(text);
  if (l.stack) {{ spec.vconcat = spec.hconcat; delete spec.hconcat; }}
  for (const c of spec.hconcat || spec.vconcat || [spec]) if ((c.width || 0) > l.room) c.width = l.room;
  for (const p of spec.params || []) if (p.bind && p.name in keep) p.value = keep[p.name];
  return spec;
}}
function draw(l) {{
  if (l.key === drawn) return;
  drawn = l.key;
  const keep = {{}};
  if (view) {{
    for (const p of SPEC.params || []) {{
      if (p.bind) try {{ keep[p.name] = view.signal(p.name); }} catch (e) {{ /* not drawn */ }}
    }}
    view.finalize();
  }}
  vegaEmbed(el, fitted(l, keep), {{actions: false, renderer: "svg"}}).then(result => {{
    view = result.view;
    window.kvlabExplorers = window.kvlabExplorers || {{}};
    window.kvlabExplorers["{element_id}"] = view;
    el.dataset.ready = "1";
    el.dataset.theme = l.dark ? "dark" : "light";
  }});
}}
let first = layout();
draw(first);
// again only when the theme changes, or when the column's width crosses a layout
new MutationObserver(() => {{
  const l = layout();
  if (l.dark !== first.dark) {{ first = l; draw(l); }}
}}).observe(document.documentElement, {{attributes: true, attributeFilter: ["data-theme"]}});
let timer = null;
window.addEventListener("resize", () => {{
  clearTimeout(timer);
  timer = setTimeout(() => {{ first = layout(); draw(first); }}, 200);
}});
</script>
"""


def routing_explorer_html(
    data_url: str = "../_static/explorer/routing-grid.csv",
    bundle_url: str = "../_static/kvlab-vega.js",
    element_id: str = "kvlab-routing-explorer",
) -> str:
    """The routing explorer as an HTML fragment for the book page (see :func:`embed_html`); the
    grid is fetched from ``data_url`` on the site, nothing from another host."""
    return embed_html(
        routing_explorer_spec(data_url),
        element_id,
        "Routing explorer: choose a policy and settings; the charts show precomputed results",
        "The explorer draws here on the book's website (it needs the site's bundled Vega). In "
        "Jupyter or Colab, use the live demo below.",
        bundle_url,
    )
