"""The site as a reader uses it (issue 24): phones, the dark theme, buttons, paths, weight.

- At 390 px (a phone) and in the dark theme, no page is wider than the screen and every control
  of both explorers is on screen; the explorers draw in the dark theme's inks. Screenshots go to
  ``_build/screenshots/`` (``*-390.png``, ``*-dark.png``).
- Buttons: while ``kvlab_publish`` is false in ``_config.yml`` no page has a launch or repository
  button; every notebook page has a download button whose ``.ipynb`` is on the site.
- No page prints an absolute path of the machine that built it.
- First-visit weight of each page type (prose, notebook, explorer), with an empty cache, reported
  in ``_build/screenshots/page-weights.json`` and held under the issue's limits.
- A solution's title opens it; the execution table says its status in words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import on_fresh_page, set_up_page
from test_site import list_pages

ROOT = Path(__file__).resolve().parents[2]
PHONE = {"width": 390, "height": 844}
EXPLORERS = {
    "notebooks/p08-05-routing-demo.html": "kvlab-routing-explorer",
    "notebooks/p22-05-explorer.html": "kvlab-p22-explorer",
}
# Pages checked at 390 px and in the dark theme: the home page, a card with wide tables, a
# notebook with figures, the self-check page with its boxes, both explorers.
LAYOUT_PAGES = [
    "book/intro.html",
    "book/p08-card.html",
    "book/p22-card.html",
    "notebooks/p08-01-why-prefixes-share.html",
    "book/self-check.html",
    # long inline code and long URLs (issue 36)
    "notebooks/labs/lab1-vllm-prefix-caching.html",
    "notebooks/labs/lab3-disaggregated-prefill.html",
    "book/references.html",
    *EXPLORERS,
]
# First-visit weight limits (bytes, as served: uncompressed) by page type, and the page measured for
# each: the heaviest of its type when these limits were set (issue 24: a prose page at most 1.5 MB,
# an explorer at most 2.5 MB; notebook pages, with their figures, are held to 2 MB).
WEIGHT_PAGES = {
    "prose": ("book/intro.html", 1_500_000),
    "prose (glossary)": ("book/glossary.html", 1_500_000),
    "prose with formulas": ("book/p08-deeper.html", 1_500_000),
    # the cards write their few symbols as text and load no MathJax (issue 36: at most 1 MB)
    "card (Problem 8)": ("book/p08-card.html", 1_000_000),
    "card (Problem 22)": ("book/p22-card.html", 1_000_000),
    "prose with formulas and the quiz": ("book/self-check.html", 1_500_000),
    "notebook": ("notebooks/p08-01-why-prefixes-share.html", 2_000_000),
    "notebook (figures and formulas)": ("notebooks/p08-07-queues-and-latency.html", 2_000_000),
    "explorer (8 seeds)": ("notebooks/p08-05-routing-demo.html", 2_500_000),
    "explorer (Problem 22)": ("notebooks/p22-05-explorer.html", 2_500_000),
}
# absolute folders of a machine, or a virtual environment inside one; the repository-relative name
# of the engine environment (".venv-engine/", as Lab 1's set-up says) is not a machine path
MACHINE_PATH = re.compile(r"(?<![\w.])(/work/|/root/|/home/|/tmp/)|/\.venv(?:-engine)?/")
# Lab pages whose paths are being removed on other branches.
PATHS_ELSEWHERE: dict[str, str] = {}  # page -> branch fixing its paths (none left)

# Everything wider than the screen: the document's own width, and elements whose box sticks out
# of the viewport without a scrolling container around them.
OVERFLOW_JS = """() => {
  const vw = document.documentElement.clientWidth;
  const out = [];
  if (document.documentElement.scrollWidth > vw + 1) {
    out.push('document ' + document.documentElement.scrollWidth + ' px wide');
  }
  const scrolls = el => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const s = getComputedStyle(p);
      if ((s.overflowX === 'auto' || s.overflowX === 'scroll') && p.scrollWidth > p.clientWidth - 1) return true;
    }
    return false;
  };
  for (const el of document.querySelectorAll('.bd-article *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || getComputedStyle(el).visibility === 'hidden') continue;
    if (el.closest('mjx-assistive-mml')) continue;  // MathJax's copy for screen readers, clipped
    if ((r.right > vw + 1 || r.left < -1) && !scrolls(el)) {
      out.push(el.tagName.toLowerCase() + '.' + String(el.className).slice(0, 40) + ' ' +
               Math.round(r.left) + '..' + Math.round(r.right));
      if (out.length > 8) break;
    }
  }
  return out;
}"""

# The explorer's controls and charts: every control inside the screen, every chart inside it.
CONTROLS_JS = """(id) => {
  const vw = document.documentElement.clientWidth;
  const root = document.getElementById(id);
  const bad = [];
  for (const el of root.querySelectorAll('select, input, svg')) {
    const r = el.getBoundingClientRect();
    if (r.right > vw + 1 || r.left < -1) bad.push(el.tagName + ' ' + (el.name || '') + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
  }
  return bad;
}"""

# The colour of the explorer's axis titles (lightness 0-255) and its background.
INKS_JS = """(id) => {
  const root = document.getElementById(id);
  const t = root.querySelector('svg .role-axis-title text, svg text');
  const rgb = getComputedStyle(t).fill.match(/\\d+/g).map(Number);
  const bg = root.querySelector('svg > rect.background, svg .background');
  // the first ancestor with a background colour: what the chart is drawn on
  let under = 'none';
  for (let p = root; p; p = p.parentElement) {
    const c = getComputedStyle(p).backgroundColor;
    if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') { under = c; break; }
  }
  const lum = under === 'none' ? 255 : under.match(/\\d+/g).slice(0, 3).map(Number).reduce((a, b) => a + b) / 3;
  return {ink: (rgb[0] + rgb[1] + rgb[2]) / 3, theme: root.dataset.theme,
          background: bg ? getComputedStyle(bg).fill : 'none', under: lum};
}"""


def _page(browser, server, viewport=None, dark=False):
    return _set_up(browser.new_page(), server, viewport, dark)


_set_up = set_up_page


def _goto(page, url, rel):
    page.goto(url, wait_until="load", timeout=60_000)
    if rel in EXPLORERS:
        page.wait_for_selector(f"#{EXPLORERS[rel]}[data-ready='1'] svg", timeout=60_000)
        page.wait_for_timeout(300)


def _shot(page, site, name):
    out = site.parent / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        try:
            page.screenshot(path=str(out / name), full_page=False)
            return out / name
        except Exception as exc:
            if attempt == 2 or type(exc).__name__ == "TargetClosedError":
                raise
            page.wait_for_timeout(1000)
    return None


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("rel", LAYOUT_PAGES)
def test_nothing_overflows_a_phone(site, server, browser, rel, dark):
    if not (site / rel).is_file():
        pytest.fail(f"{rel} is not in the site")

    def visit(page):
        _set_up(page, server, PHONE, dark)
        _goto(page, server.base + rel, rel)
        problems = page.evaluate(OVERFLOW_JS)
        if rel in EXPLORERS:
            problems += page.evaluate(CONTROLS_JS, EXPLORERS[rel])
            el = page.locator(f"#{EXPLORERS[rel]}")
            el.scroll_into_view_if_needed()
        name = rel.rsplit("/", 1)[-1].removesuffix(".html")
        _shot(page, site, f"{name}-390{'-dark' if dark else ''}.png")
        return problems

    problems = on_fresh_page(browser, visit)
    assert not problems, f"{rel} at 390 px ({'dark' if dark else 'light'}): " + "; ".join(problems)


@pytest.mark.parametrize("rel", list(EXPLORERS))
def test_explorers_follow_the_dark_theme(site, server, browser, rel):
    results = {}
    for dark in (False, True):
        page = _page(browser, server, {"width": 1280, "height": 900}, dark)
        try:
            _goto(page, server.base + rel, rel)
            results[dark] = page.evaluate(INKS_JS, EXPLORERS[rel])
            page.locator(f"#{EXPLORERS[rel]}").scroll_into_view_if_needed()
            if dark:
                _shot(page, site, rel.rsplit("/", 1)[-1].removesuffix(".html") + "-dark.png")
        finally:
            page.close()
    assert results[False]["theme"] == "light" and results[True]["theme"] == "dark", results
    assert results[False]["ink"] < 100, f"light theme: text should be dark, {results[False]}"
    assert results[True]["ink"] > 160, f"dark theme: text should be light, {results[True]}"
    assert results[True]["under"] < 80, f"dark theme: drawn on a light panel, {results[True]}"
    assert "255, 255, 255" not in results[True]["background"], results[True]


def test_explorer_redraws_when_the_theme_changes(site, server, browser):
    rel = "notebooks/p08-05-routing-demo.html"
    page = _page(browser, server, {"width": 1280, "height": 900}, dark=False)
    try:
        _goto(page, server.base + rel, rel)
        page.evaluate(
            "() => { const v = window.kvlabExplorers['kvlab-routing-explorer'];"
            " v.signal('replicas', 4); return v.runAsync().then(() => true); }"
        )
        page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; }")
        page.wait_for_function(
            "() => document.getElementById('kvlab-routing-explorer').dataset.theme === 'dark'",
            timeout=20_000,
        )
        page.wait_for_timeout(500)
        replicas = page.evaluate(
            "() => window.kvlabExplorers['kvlab-routing-explorer'].signal('replicas')"
        )
    finally:
        page.close()
    assert replicas == 4, "the redraw for the new theme lost the reader's settings"


def _publish() -> bool:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    return bool(((cfg.get("sphinx") or {}).get("config") or {}).get("kvlab_publish", False))


def _notebook_pages(site: Path) -> list[str]:
    return [p for p in list_pages(site) if (ROOT / p).with_suffix(".ipynb").is_file()]


def test_buttons_are_honest(site):
    pages = _notebook_pages(site)
    assert len(pages) >= 10, pages
    problems = []
    # the buttons' markup (sphinx-book-theme), not sphinx-thebe's inline configuration
    launch = re.compile(
        r'href="https://colab\.research\.google\.com|btn-launch|launch-buttons|'
        r'repository-button|href="https://mybinder'
    )
    for rel in pages:
        html = (site / rel).read_text(encoding="utf-8")
        hrefs = re.findall(r'<a href="([^"]+\.ipynb)"[^>]*btn-download-source-button', html)
        if not hrefs:
            problems.append(f"{rel}: no .ipynb download button")
        for href in hrefs:
            target = (site / rel).parent / href
            if not target.resolve().is_file():
                problems.append(f"{rel}: download {href} is not on the site")
        if not _publish() and launch.search(html):
            problems.append(f"{rel}: a launch or repository button while kvlab_publish is false")
    assert not problems, "\n".join(problems)


def _path_params():
    from conftest import site_dir

    folder = site_dir()
    pages = list_pages(folder) if (folder / "index.html").is_file() else ["index.html"]
    out = []
    for p in pages:
        branch = PATHS_ELSEWHERE.get(p)
        marks = (
            [
                pytest.mark.xfail(
                    reason=f"fixed on branch {branch!r} (issue 24 item 3)", strict=False
                )
            ]
            if branch
            else []
        )
        out.append(pytest.param(p, marks=marks, id=p))
    return out


@pytest.mark.parametrize("rel", _path_params())
def test_no_machine_paths(site, rel):
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((site / rel).read_text(encoding="utf-8"), "html.parser")
    for tag in soup(["script", "style"]):
        tag.decompose()
    text = soup.get_text("\n")
    hits = sorted({line.strip()[:160] for line in text.splitlines() if MACHINE_PATH.search(line)})
    assert not hits, f"{rel} prints paths of the build machine:\n" + "\n".join(hits[:10])


def test_machine_path_pattern_can_fail():
    assert MACHINE_PATH.search("python: /work/main/.venv-engine/bin/python")
    assert MACHINE_PATH.search("cache in /root/.cache/x")
    assert not MACHINE_PATH.search("tokens/s per replica and 50 GB/s")


# Waits until MathJax (where the page has it) has typeset and every font the page uses is in.
SETTLED_JS = """async () => {
  const wait = ms => new Promise(ok => setTimeout(ok, ms));
  if (document.querySelector('script[src*="mathjax"]')) {
    for (let i = 0; i < 200 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++) {
      await wait(100);
    }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      await Promise.race([MathJax.startup.promise, wait(20000)]);
    }
  }
  await Promise.race([document.fonts.ready, wait(20000)]);
}"""


def first_visit_bytes(browser, server, rel: str) -> tuple[int, int]:
    """(bytes, requests) of a first visit to ``rel``: cache off, everything the page loads."""

    def visit(page):
        sizes: dict[str, int] = {}
        page.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort()
        )
        cdp = page.context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        cdp.on(
            "Network.loadingFinished",
            lambda e: sizes.__setitem__(e["requestId"], int(e["encodedDataLength"])),
        )
        page.goto(server.base + rel, wait_until="networkidle", timeout=60_000)
        # what the page loads once it has drawn: MathJax's fonts come after its typesetting
        page.evaluate(SETTLED_JS)
        page.wait_for_load_state("networkidle", timeout=60_000)
        page.wait_for_timeout(500)
        return sum(sizes.values()), len(sizes)

    return on_fresh_page(browser, visit)


def test_first_visit_weight(site, server, browser):
    report, problems = {}, []
    for kind, (rel, limit) in WEIGHT_PAGES.items():
        if not (site / rel).is_file():
            problems.append(f"{rel} is not in the site")
            continue
        size, n = first_visit_bytes(browser, server, rel)
        report[kind] = {"page": rel, "bytes": size, "requests": n, "limit": limit}
        if size > limit:
            problems.append(f"{kind} ({rel}): {size:,} bytes > {limit:,}")
    out = site.parent / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    (out / "page-weights.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps(report, indent=1))
    assert not problems, "\n".join(problems)


def test_solution_title_opens_the_solution(site, server, browser):
    rel = "notebooks/p08-01-why-prefixes-share.html"
    page = _page(browser, server)
    try:
        page.goto(server.base + rel, wait_until="load")
        box = page.locator(".solution.dropdown").first
        box.locator(".toggle-button").wait_for(state="attached", timeout=10_000)
        body = box.locator(":scope > section").first
        assert not body.is_visible()
        url = page.url
        box.locator(".admonition-title a").first.click()
        body.wait_for(state="visible", timeout=5_000)
        assert page.url == url, f"the title navigated to {page.url}"
    finally:
        page.close()


def test_execution_status_in_words(site):
    html = (site / "book" / "execution-status.html").read_text(encoding="utf-8")
    assert "✅" not in html and "❌" not in html


# The explorer pages and the quiz print nothing wider than the text column (about 88 characters
# of monospace at the site's desktop width); other pages are reported, not held to it here.
NARROW_PAGES = [*EXPLORERS, "notebooks/self-check-quiz.html"]
MAX_OUTPUT_CHARS = 88


def long_output_lines(html: str) -> list[str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    lines = []
    for pre in soup.select(".cell_output pre, .output pre"):
        lines += [line for line in pre.get_text().splitlines() if len(line) > MAX_OUTPUT_CHARS]
    return lines


@pytest.mark.parametrize("rel", NARROW_PAGES)
def test_printed_lines_fit_the_column(site, rel):
    long = long_output_lines((site / rel).read_text(encoding="utf-8"))
    assert not long, (
        f"{rel}: {len(long)} printed lines over {MAX_OUTPUT_CHARS} characters: {long[:3]}"
    )


def test_long_line_check_can_fail():
    html = '<div class="cell_output"><pre>' + "x" * 120 + "\nshort</pre></div>"
    assert long_output_lines(html) == ["x" * 120]


SEARCH_JS = """() => Array.from(document.querySelectorAll('.search-button-field, .search-button'))
  .filter(e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
                 return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; })
  .map(e => e.className)"""


@pytest.mark.parametrize("width", [1280, 390])
def test_one_search_box(site, server, browser, width):
    page = _page(browser, server, {"width": width, "height": 900})
    try:
        page.goto(server.base + "book/p08-card.html", wait_until="load")
        shown = page.evaluate(SEARCH_JS)
    finally:
        page.close()
    assert len(shown) == 1, f"{width} px: {len(shown)} search boxes or buttons: {shown}"


# The top bar at desktop width: hidden, or showing something (not an empty band over the page).
EMPTY_BAR_JS = """() => {
  const bar = document.querySelector('.bd-header');
  if (!bar || bar.getBoundingClientRect().height === 0) return null;
  const shown = Array.from(bar.querySelectorAll('a, button, input, img, svg, i, span'))
    .filter(e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
                   return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; });
  return shown.length ? null : Math.round(bar.getBoundingClientRect().height);
}"""


def test_no_empty_top_bar_on_desktop(site, server, browser):
    def visit(page):
        _set_up(page, server, {"width": 1280, "height": 900})
        page.goto(server.base + "book/p08-card.html", wait_until="load")
        return page.evaluate(EMPTY_BAR_JS)

    empty = on_fresh_page(browser, visit)
    assert empty is None, f"an empty top bar {empty} px high sits over every page"


# Every table wider than its column at 390 px, and whether a visible line right above it says that
# it scrolls (kvlab-site.js); at 1,280 px, the tables that fit and still carry such a line.
TABLE_CUES_JS = """() => Array.from(document.querySelectorAll(
    '.bd-article .pst-scrollable-table-container, .bd-article .table-wrapper')).map(box => {
  const cue = box.previousElementSibling;
  const shown = !!cue && cue.classList.contains('kvlab-scroll-cue') &&
    cue.getBoundingClientRect().height > 0 && getComputedStyle(cue).visibility !== 'hidden';
  return {wide: box.scrollWidth > box.clientWidth + 1, cue: shown,
          head: (box.querySelector('th, td') || box).textContent.trim().slice(0, 30)};
})"""


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize(
    "rel", ["book/p08-deeper.html", "book/library-map.html", "book/p22-card.html"]
)
def test_wide_tables_say_they_scroll(site, server, browser, width, rel):

    def visit(page):
        _set_up(page, server, {"width": width, "height": 900})
        page.goto(server.base + rel, wait_until="load")
        page.wait_for_timeout(300)
        return page.evaluate(TABLE_CUES_JS)

    tables = on_fresh_page(browser, visit)
    assert tables, f"{rel} has no tables"
    if width == 390 and rel != "book/p22-card.html":
        assert any(t["wide"] for t in tables), f"{rel}: no table is wider than a phone"
    silent = [t["head"] for t in tables if t["wide"] and not t["cue"]]
    needless = [t["head"] for t in tables if t["cue"] and not t["wide"]]
    assert not silent, f"{rel} at {width} px: tables that scroll without saying so: {silent}"
    assert not needless, f"{rel} at {width} px: a scroll cue over a table that fits: {needless}"


@pytest.mark.parametrize("rel", ["book/p08-card.html", "book/p22-card.html", "book/intro.html"])
def test_pages_without_maths_load_no_mathjax(site, rel):
    """MathJax (about 0.75 MB) only where a page has a formula: the cards and the home page have none."""
    html = (site / rel).read_text(encoding="utf-8")
    head = html.split("<body", 1)[0]
    assert "mathjax" not in head.lower(), f"{rel} loads MathJax"
    assert 'class="math' not in html, f"{rel} has a formula (write its symbols as text)"


# The explorer's visible SVG labels that touch or overlap another (less than 1 px apart both ways),
# and those cut by the chart's edge.
LABEL_CLASH_JS = """(id) => {
  const root = document.getElementById(id);
  const texts = Array.from(root.querySelectorAll('svg text')).filter(t => {
    const r = t.getBoundingClientRect(); const s = getComputedStyle(t);
    return r.width > 0 && r.height > 0 && t.textContent.trim() && s.visibility !== 'hidden' &&
      parseFloat(s.opacity || 1) > 0 && parseFloat(t.getAttribute('opacity') || 1) > 0;
  }).map(t => ({t: t.textContent.trim(), r: t.getBoundingClientRect()}));
  const clash = [];
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const a = texts[i].r, b = texts[j].r;
    const ox = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const oy = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (ox > -1 && oy > 1) clash.push(texts[i].t + ' | ' + texts[j].t);
  }
  const box = root.querySelector('svg').getBoundingClientRect();
  const cut = texts.filter(x => x.r.left < box.left - 1 || x.r.right > box.right + 1).map(x => x.t);
  return {n: texts.length, clash, cut};
}"""


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("rel", list(EXPLORERS))
def test_explorer_labels_do_not_collide_on_a_phone(site, server, browser, rel, dark):
    def visit(page):
        _set_up(page, server, PHONE, dark)
        _goto(page, server.base + rel, rel)
        return page.evaluate(LABEL_CLASH_JS, EXPLORERS[rel])

    got = on_fresh_page(browser, visit)
    assert got["n"] >= 10, f"{rel}: only {got['n']} labels drawn"
    assert not got["clash"], f"{rel} at 390 px: labels run into each other: {got['clash'][:6]}"
    assert not got["cut"], f"{rel} at 390 px: labels cut by the chart's edge: {got['cut'][:6]}"
