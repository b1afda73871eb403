"""Text contrast in the dark theme (issue 36, item 2): WCAG AA on the lab pages and the cards.

Every visible element of the article that holds text of its own is measured: its computed colour
against its effective background (the background colours of it and its ancestors, composited from
the first opaque one down, over the page's own background). WCAG 2's AA level asks 4.5 : 1 for
body text and 3 : 1 for large text (24 px, or 18.66 px bold). The labs' "Measured while this page
was built" box was the case that failed: its text was drawn in its background's colour.

The cards' diagrams are pictures (SVG in an ``<img>``), so their text has no computed style: they
are checked on the rendered pixels instead. In the dark theme a diagram must not be a light panel
(its most common colour, its background, is dark), and its label text, found in the SVG and drawn
through the same colour transform the page applies, stands out from what it is drawn on.
"""

from __future__ import annotations

import re

import pytest
from conftest import on_fresh_page

PAGES = [
    "notebooks/labs/lab1-vllm-prefix-caching.html",
    "notebooks/labs/lab2-kv-transfer.html",
    "notebooks/labs/lab3-disaggregated-prefill.html",
    "book/p08-card.html",
    "book/p22-card.html",
]
DIAGRAM_PAGES = {"book/p08-card.html": "p08-diagram", "book/p22-card.html": "p22-diagram"}
AA = 4.5
AA_LARGE = 3.0

CONTRAST_JS = """() => {
  const parse = c => { const m = c.match(/[\\d.]+/g); if (!m) return [0, 0, 0, 0];
    const v = m.map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = (top, under) => { const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]); };
  const lum = c => { const f = x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const pageBg = parse(getComputedStyle(document.body).backgroundColor);
  const background = el => {
    const layers = [];
    for (let p = el; p && p.nodeType === 1; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (s.backgroundImage && s.backgroundImage !== 'none' && !s.backgroundImage.startsWith('url(')) return null;
      const c = parse(s.backgroundColor);
      if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let bg = pageBg[3] >= 1 ? pageBg : [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg;
  };
  const out = [];
  let checked = 0;
  for (const el of document.querySelectorAll('.bd-article *')) {
    if (el.closest('svg, mjx-container, mjx-assistive-mml, .visually-hidden, .sr-only')) continue;
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    if (r.width < 2 || r.height < 2 || s.visibility === 'hidden' || parseFloat(s.opacity) === 0) continue;
    const bg = background(el);
    if (!bg) continue;
    const fg = over(parse(s.color), bg);
    const size = parseFloat(s.fontSize), bold = parseInt(s.fontWeight) >= 700;
    const need = (size >= 24 || (size >= 18.66 && bold)) ? 3.0 : 4.5;
    const got = ratio(fg, bg);
    checked++;
    if (got < need - 0.005) {
      const text = Array.from(el.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join(' ').trim();
      out.push({tag: el.tagName.toLowerCase(), cls: String(el.className).slice(0, 50), text: text.slice(0, 50),
                ratio: Math.round(got * 100) / 100, need, color: s.color,
                background: 'rgb(' + bg.slice(0, 3).map(Math.round).join(', ') + ')'});
    }
  }
  return {checked, failures: out};
}"""


def _dark_page(page, server, width=1280):
    page.set_viewport_size({"width": width, "height": 900})
    page.add_init_script(
        "localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');"
    )
    page.route(
        "**/*", lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort()
    )


def _open_dropdowns(page):
    """Open every dropdown (answers, solutions, folded code) so their text is measured too."""
    page.evaluate(
        """() => { document.querySelectorAll('details').forEach(d => { d.open = true; });
        document.querySelectorAll('.dropdown .toggle-button, button.toggle-button').forEach(b => {
          try { b.click(); } catch (e) {} }); }"""
    )
    page.wait_for_timeout(400)


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("rel", PAGES)
def test_dark_text_contrast(site, server, browser, rel, width):
    if not (site / rel).is_file():
        pytest.fail(f"{rel} is not in the site")

    def visit(page):
        _dark_page(page, server, width)
        page.goto(server.base + rel, wait_until="load")
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        _open_dropdowns(page)
        return page.evaluate(CONTRAST_JS)

    result = on_fresh_page(browser, visit)
    assert result["checked"] > 20, f"{rel}: only {result['checked']} text elements measured"
    bad = result["failures"]
    assert not bad, (
        f"{rel} (dark, {width} px): {len(bad)} text elements under WCAG AA: "
        + "; ".join(
            f"{b['tag']}.{b['cls']} {b['text']!r} {b['ratio']}:1 < {b['need']} ({b['color']} on {b['background']})"
            for b in bad[:8]
        )
    )


def test_contrast_check_can_fail(site, server, browser):
    """The measure sees grey on grey: a paragraph made unreadable on purpose is reported."""

    def visit(page):
        _dark_page(page, server)
        page.goto(server.base + "book/p08-card.html", wait_until="load")
        page.evaluate(
            """() => { const p = document.querySelector('.bd-article p');
            p.style.color = '#444'; p.style.backgroundColor = '#333'; }"""
        )
        return page.evaluate(CONTRAST_JS)

    result = on_fresh_page(browser, visit)
    assert any(b["color"] == "rgb(68, 68, 68)" for b in result["failures"])


# The rendered diagram in the dark theme: its most common colour (the background) and its
# relative luminance, from a screenshot of the image.
def _luminance(rgb) -> float:
    def f(x):
        x /= 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    r, g, b = rgb[:3]
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b)


def _ratio(a, b) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("rel", list(DIAGRAM_PAGES))
def test_diagram_follows_the_dark_theme(site, server, browser, rel):
    import io
    from collections import Counter

    from PIL import Image

    name = DIAGRAM_PAGES[rel]

    def visit(page):
        _dark_page(page, server)
        page.goto(server.base + rel, wait_until="load")
        img = page.locator(f"img[src*='{name}']").first
        img.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        shot = img.screenshot()
        body = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        return shot, body

    shot, body = on_fresh_page(browser, visit)
    pixels = Image.open(io.BytesIO(shot)).convert("RGB")
    flat = getattr(pixels, "get_flattened_data", None) or pixels.getdata
    counts = Counter(flat())
    panel, _ = counts.most_common(1)[0]
    page_bg = tuple(int(v) for v in body[body.index("(") + 1 : body.index(")")].split(",")[:3])
    assert _ratio(panel, page_bg) < 1.5, (
        f"{rel}: in the dark theme the diagram sits on {panel}, a panel that stands out from the "
        f"page's {page_bg} (contrast {_ratio(panel, page_bg):.2f}:1; a dark diagram is under 1.5)"
    )
    # its text: the colours that are neither the panel nor close to it make up the labels and
    # lines; the darkest-to-panel-most-distant common colour must reach AA against the panel
    inks = [c for c, n in counts.most_common(40) if n > 30 and _ratio(c, panel) >= 1.2]
    best = max((_ratio(c, panel) for c in inks), default=1.0)
    assert best >= AA, f"{rel}: the diagram's strongest ink reaches only {best:.2f}:1 on its panel"


@pytest.mark.parametrize("rel", list(DIAGRAM_PAGES))
def test_diagram_opens_full_size_on_a_click(site, server, browser, rel):
    """A tap on a card's diagram opens its SVG on its own, at its full size (issue 36)."""
    name = DIAGRAM_PAGES[rel]

    def visit(page):
        _dark_page(page, server, 390)
        page.goto(server.base + rel, wait_until="load")
        img = page.locator(f"img[src*='{name}']").first
        shown = img.bounding_box()["width"]
        with page.expect_navigation(timeout=10_000):
            img.click()
        opened = page.evaluate(
            """() => { const s = document.querySelector('svg');
            return {url: location.href, width: s ? s.getBoundingClientRect().width : 0}; }"""
        )
        return shown, opened

    shown, opened = on_fresh_page(browser, visit)
    assert opened["url"].endswith(f"{name}.svg"), f"{rel}: a click on the diagram led to {opened}"
    assert opened["width"] > 1.5 * shown, (
        f"{rel}: the opened diagram is {opened['width']:.0f} px wide, the page showed {shown:.0f}"
    )


SVG_FONT = re.compile(r"font-size:\s*([\d.]+)px")
VIEWBOX = re.compile(r'viewBox="0 0 ([\d.]+) ')


def smallest_label_units(svg: str) -> float:
    """The smallest font size in an SVG's own units (matplotlib writes them in points)."""
    return min(float(x) for x in SVG_FONT.findall(svg))


@pytest.mark.parametrize("rel", list(DIAGRAM_PAGES))
def test_diagram_labels_are_readable_on_a_desktop(site, server, browser, rel):
    """At 1,280 px every label of a card's diagram is drawn at 12 px or more (issue 36)."""
    name = DIAGRAM_PAGES[rel]

    def visit(page):
        page.set_viewport_size({"width": 1280, "height": 900})
        page.route(
            "**/*",
            lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort(),
        )
        page.goto(server.base + rel, wait_until="load")
        img = page.locator(f"img[src*='{name}']").first
        return img.get_attribute("src"), img.bounding_box()["width"]

    src, shown = on_fresh_page(browser, visit)
    svg = (site / rel).parent.joinpath(src.split("?")[0]).resolve().read_text(encoding="utf-8")
    scale = shown / float(VIEWBOX.search(svg).group(1))
    px = smallest_label_units(svg) * scale
    assert px >= 12 - 0.05, f"{rel}: the diagram's smallest label is drawn at {px:.1f} px"


def test_label_size_check_can_fail():
    assert smallest_label_units('<text style="font-size: 7.5px">a</text>') == 7.5
