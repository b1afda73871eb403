"""The routing explorer on the built site, in Chromium with every request off 127.0.0.1 blocked.

Each control is moved (by Playwright and from the keyboard) and the values the charts show are
checked against the grid that kvlab.explorer computed with kvlab.fleet (the table the page loads;
``lib/tests/test_explorer.py`` checks that grid against the simulator itself). At the defaults the
shown figures must equal the ones glued into the text. Also: every control has a label, the page
weighs under 5 MB, and screenshots in the light and the dark theme (drawn in that theme's inks) go
to ``_build/screenshots/``
(with the measured redraw times in ``explorer-timing.json``).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

PAGE = "notebooks/p08-05-routing-demo.html"
NOTEBOOK = "notebooks/p08-05-routing-demo.ipynb"
ROOT_ID = "kvlab-routing-explorer"
POLICIES = ("random", "round_robin", "sticky", "cache_aware")
MAX_PAGE_BYTES = 5_000_000

# What the explorer shows, read from its SVG: hit-rate labels (" %" with a space: the axis ticks
# have none), the imbalance line, the right chart's title and the number of bars drawn.
SHOWN_JS = """(id) => {
  const root = document.getElementById(id);
  // a label of several lines is drawn as tspans: read it as one line, the lines joined by a space
  const texts = Array.from(root.querySelectorAll('svg text')).map(t => {
    const lines = t.querySelectorAll('tspan');
    return lines.length ? Array.from(lines).map(l => l.textContent).join(' ') : t.textContent;
  });
  return {
    hits: texts.filter(t => / %$/.test(t)),
    imbalance: texts.filter(t => t.startsWith('imbalance')),
    titles: texts.filter(t => t.startsWith('Prefill per replica')),
    bars: root.querySelectorAll('svg .mark-rect path').length,
  };
}"""

# Change a control as a user would (set the value, fire 'input' and 'change') and time how long
# until the imbalance line or the hit labels change: the redraw time in milliseconds.
TIMED_CHANGE_JS = """async ([id, name, value]) => {
  const root = document.getElementById(id);
  const el = root.querySelector(`[name="${name}"]`);
  const snap = () => Array.from(root.querySelectorAll('svg text')).map(t => t.textContent).join('|');
  const before = snap();
  const t0 = performance.now();
  el.value = String(value);
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  while (snap() === before && performance.now() - t0 < 5000) {
    await new Promise(ok => requestAnimationFrame(ok));
  }
  return performance.now() - t0;
}"""


def expected(grid: dict, values: dict) -> dict:
    """What the explorer must show for ``values`` (policy, replicas, cache, conversations, skew),
    looked up in the grid."""
    rows = {
        r["p"]: r
        for r in grid["rows"]
        if (r["R"], r["C"], r["N"], r["S"])
        == (values["replicas"], values["cache"], values["conversations"], float(values["skew"]))
    }
    assert set(rows) == set(POLICIES), f"no grid point for {values}"
    chosen = rows[values["policy"]]
    seeds = f"mean over {chosen['n']} seeds" if chosen["n"] > 1 else "seed 0"
    return {
        "hits": Counter(rows[p]["hl"] for p in POLICIES),
        "imbalance": f"imbalance (max / mean) {chosen['il']} ({seeds})",
        "bars": 4 + values["replicas"],
    }


def check_shown(page, grid, values) -> list[str]:
    want = expected(grid, values)
    got = page.evaluate(SHOWN_JS, ROOT_ID)
    problems = []
    if Counter(got["hits"]) != want["hits"]:
        problems.append(f"{values}: hit labels {got['hits']} != {sorted(want['hits'].elements())}")
    if got["imbalance"] != [want["imbalance"]]:
        problems.append(f"{values}: imbalance {got['imbalance']} != {want['imbalance']!r}")
    if got["bars"] != want["bars"]:
        problems.append(f"{values}: {got['bars']} bars drawn, expected {want['bars']}")
    return problems


def current_values(page) -> dict:
    vals = page.evaluate(
        """(id) => Object.fromEntries(Array.from(document.getElementById(id)
             .querySelectorAll('select, input')).map(e => [e.name, e.value]))""",
        ROOT_ID,
    )
    return {
        "policy": POLICIES[int(vals["policy"])],
        "replicas": int(vals["replicas"]),
        "cache": int(vals["cache"]),
        "conversations": int(vals["conversations"]),
        "skew": float(vals["skew"]),
    }


@pytest.fixture(scope="module")
def grid(site):
    from kvlab.explorer import read_page_csv

    path = site / "_static" / "explorer" / "routing-grid.csv"
    if not path.is_file():
        pytest.fail(f"{path} is missing: the build did not write the explorer's table")
    return {"rows": read_page_csv(path.read_text(encoding="utf-8"))}


@pytest.fixture
def explorer_page(site, server, browser):
    if not (site / PAGE).is_file():
        pytest.fail(f"{PAGE} is not in the site")
    blocked: list[str] = []
    errors: list[str] = []
    sizes: dict[str, int] = {}
    page = browser.new_page()

    def route(r):
        if r.request.url.startswith(server.base):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    def on_response(r):
        if r.url.startswith(server.base):
            try:
                sizes[r.url] = len(r.body())
            except Exception:  # a redirect or an aborted body has none
                sizes.setdefault(r.url, 0)

    page.route("**/*", route)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", on_response)
    page.goto(server.base + PAGE, wait_until="load", timeout=30_000)
    page.wait_for_selector(f"#{ROOT_ID}[data-ready='1']", state="attached", timeout=30_000)
    page.wait_for_function(
        "(id) => document.getElementById(id).querySelectorAll('svg text').length > 10",
        arg=ROOT_ID,
        timeout=15_000,
    )
    page.blocked, page.errors, page.sizes = blocked, errors, sizes
    yield page
    page.close()


def test_defaults_equal_the_glued_figures(explorer_page, grid, site):
    from test_site import glue_values

    page = explorer_page
    values = current_values(page)
    assert values == {
        "policy": "cache_aware",
        "replicas": 8,
        "cache": 400_000,
        "conversations": 500,
        "skew": 1.0,
    }
    assert not check_shown(page, grid, values)
    glued = glue_values(site.parent.parent / NOTEBOOK)
    shown = page.evaluate(SHOWN_JS, ROOT_ID)
    want_hits = Counter(glued[f"p08_demo_{p}_real"] for p in POLICIES)
    assert Counter(shown["hits"]) == want_hits, (shown["hits"], want_hits)
    ca = glued["p08_demo_cache_aware_imbalance_real"]
    assert shown["imbalance"] == [f"imbalance (max / mean) {ca} (mean over 8 seeds)"]
    page.select_option(f"#{ROOT_ID} select[name=policy]", str(POLICIES.index("sticky")))
    page.wait_for_timeout(100)
    shown = page.evaluate(SHOWN_JS, ROOT_ID)
    sticky = glued["p08_demo_sticky_imbalance_real"]
    assert shown["imbalance"] == [f"imbalance (max / mean) {sticky} (mean over 8 seeds)"]
    assert not page.errors and not page.blocked, (page.errors, page.blocked)


def test_every_control_changes_the_charts(explorer_page, grid, site):
    page = explorer_page
    pol = {p: str(i) for i, p in enumerate(POLICIES)}
    steps = [
        ("policy", pol["sticky"]),
        ("replicas", "4"),
        ("replicas", "32"),
        ("cache", "50000"),
        ("conversations", "100"),
        ("skew", "0.25"),
        ("policy", pol["random"]),
        ("replicas", "1"),
        ("cache", "1000000"),
        ("conversations", "5000"),
        ("skew", "2"),
        ("policy", pol["round_robin"]),
    ]
    problems, timings, before = [], [], page.evaluate(SHOWN_JS, ROOT_ID)
    for name, value in steps:
        ms = page.evaluate(TIMED_CHANGE_JS, [ROOT_ID, name, value])
        page.wait_for_timeout(50)
        values = current_values(page)
        shown_value = POLICIES.index(values[name]) if name == "policy" else values[name]
        assert float(shown_value) == float(value), (name, value, values)
        problems += check_shown(page, grid, values)
        now = page.evaluate(SHOWN_JS, ROOT_ID)
        if now == before:
            problems.append(f"moving {name} to {value} changed nothing on the charts")
        before = now
        timings.append({"control": name, "value": value, "redraw_ms": round(ms, 1)})
    out = site.parent / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    (out / "explorer-timing.json").write_text(json.dumps(timings, indent=1) + "\n")
    print("redraw times (ms):", [t["redraw_ms"] for t in timings])
    assert not problems, "\n".join(problems)
    assert not page.errors and not page.blocked, (page.errors, page.blocked)


def test_controls_are_labelled_and_keyboard_usable(explorer_page, grid):
    page = explorer_page
    labels = page.evaluate(
        """(id) => Array.from(document.getElementById(id).querySelectorAll('select, input'))
             .map(e => [e.name, e.labels && e.labels.length ? e.labels[0].textContent.trim() : ''])""",
        ROOT_ID,
    )
    assert len(labels) == 5, labels
    for name, text in labels:
        assert re.search(r"[A-Za-z]{4,}", text), f"control {name!r} has no label ({text!r})"
    # keyboard only: Tab-focus the policy and skew controls and use the arrow keys
    start = current_values(page)
    page.focus(f"#{ROOT_ID} select[name=policy]")
    page.keyboard.press("ArrowUp")
    page.wait_for_timeout(150)
    moved = current_values(page)
    assert moved["policy"] != start["policy"], "the arrow key did not change the policy"
    assert not check_shown(page, grid, moved)
    page.focus(f"#{ROOT_ID} input[name=skew]")
    page.keyboard.press("ArrowLeft")
    page.wait_for_timeout(150)
    moved2 = current_values(page)
    assert moved2["skew"] == start["skew"] - 0.25
    assert not check_shown(page, grid, moved2)


def test_page_weight_and_no_outside_request(explorer_page):
    page = explorer_page
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.wait_for_timeout(500)
    total = sum(page.sizes.values())
    print(f"{len(page.sizes)} files, {total / 1e6:.2f} MB")
    assert total < MAX_PAGE_BYTES, sorted(page.sizes.items(), key=lambda kv: -kv[1])[:8]
    assert any(u.endswith("_static/kvlab-vega.js") for u in page.sizes)
    assert any(u.endswith("_static/explorer/routing-grid.csv") for u in page.sizes)
    assert not page.blocked, page.blocked


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_explorer_screenshots(explorer_page, site, theme):
    page = explorer_page
    page.evaluate(
        """(theme) => { document.documentElement.dataset.theme = theme;
                        document.documentElement.dataset.mode = theme;
                        localStorage.setItem('theme', theme); localStorage.setItem('mode', theme); }""",
        theme,
    )
    # the explorer draws itself again in the theme's inks (lib/kvlab/explorer.py, embed_html)
    page.wait_for_function(
        "([id, theme]) => document.getElementById(id).dataset.theme === theme",
        arg=[ROOT_ID, theme],
        timeout=20_000,
    )
    page.wait_for_timeout(300)
    out = site.parent / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"routing-explorer-{theme}.png"
    box = page.locator(f"#{ROOT_ID}")
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(path))
    assert path.stat().st_size > 5_000
    # white with dark text in the light theme; the page's own dark background in the dark theme
    bg = page.evaluate(
        "(id) => getComputedStyle(document.querySelector(`#${id} svg`)).backgroundColor", ROOT_ID
    )
    assert bg == ("rgb(255, 255, 255)" if theme == "light" else "rgba(0, 0, 0, 0)"), bg


# --- the Problem 22 explorer ---------------------------------------------------------------------

P22_PAGE = "notebooks/p22-05-explorer.html"
P22_ID = "kvlab-p22-explorer"


def _p22_shown(page) -> dict:
    return page.evaluate(
        """(id) => { const t = Array.from(document.getElementById(id).querySelectorAll('svg text'))
                       .map(e => e.textContent);
                     return {pct: t.filter(s => /^\\d+ %$/.test(s)).map(s => parseInt(s)),
                             best: t.filter(s => /^(best split \\d|no split)/.test(s))}; }""",
        P22_ID,
    )


def test_p22_explorer(site, server, browser):
    if not (site / P22_PAGE).is_file():
        pytest.skip(f"{P22_PAGE} is not in the site (the page is not in _toc.yml)")
    rows = json.loads((site / "_static/explorer/p22-grid.json").read_text())["rows"]
    blocked: list[str] = []
    page = browser.new_page()
    page.route(
        "**/*",
        lambda r: (
            r.continue_()
            if r.request.url.startswith(server.base)
            else (blocked.append(r.request.url), r.abort())
        ),
    )
    try:
        page.goto(server.base + P22_PAGE, wait_until="load", timeout=30_000)
        page.wait_for_selector(f"#{P22_ID}[data-ready='1']", state="attached", timeout=30_000)
        page.wait_for_timeout(300)
        labels = page.evaluate(
            """(id) => Array.from(document.getElementById(id).querySelectorAll('select'))
                 .map(e => e.labels.length ? e.labels[0].textContent.trim() : '')""",
            P22_ID,
        )
        assert len(labels) == 4 and all(len(t) > 6 for t in labels), labels
        steps = [("rate", "10"), ("prompt", "8000"), ("output", "1000"), ("hit", "0.5")]
        problems = []
        for name, value in steps + [("rate", "20"), ("prompt", "1000"), ("output", "100")]:
            page.select_option(f"#{P22_ID} select[name={name}]", value)
            page.wait_for_timeout(150)
            v = page.evaluate(
                """(id) => Object.fromEntries(Array.from(document.getElementById(id)
                     .querySelectorAll('select')).map(e => [e.name, Number(e.value)]))""",
                P22_ID,
            )
            want = [
                r
                for r in rows
                if (r["r"], r["P"], r["O"], r["H"])
                == (v["rate"], v["prompt"], v["output"], v["hit"])
            ]
            shown = _p22_shown(page)
            if sorted(shown["pct"]) != pytest.approx(sorted(r["a"] * 100 for r in want), abs=0.51):
                problems.append(f"{v}: bars {shown['pct']} != {[r['a'] for r in want]}")
            msg = next(r["bl"] for r in want if r["mid"])
            if shown["best"] != [msg]:
                problems.append(f"{v}: {shown['best']} != {msg!r}")
        assert not problems, "\n".join(problems)
        assert not blocked, blocked
        out = site.parent / "screenshots"
        out.mkdir(parents=True, exist_ok=True)
        for theme in ("light", "dark"):
            page.evaluate(
                "(t) => { document.documentElement.dataset.theme = t; "
                "document.documentElement.dataset.mode = t; }",
                theme,
            )
            page.wait_for_timeout(150)
            page.locator(f"#{P22_ID}").screenshot(path=str(out / f"p22-explorer-{theme}.png"))
    finally:
        page.close()
