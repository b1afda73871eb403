"""What the lighter pages left out still works (issue 24, "lighter pages"; ``_ext/kvlab_site.py``).

- Fontawesome cut down: every icon a page or the theme's script names is still drawn, by a rule in
  the theme's stylesheet and a glyph in the font that the stylesheet now points at; so is every
  icon the stylesheets draw themselves (admonitions, downloads, the "on this page" chevron).
- MathJax from its loader: pages with formulas load ``startup.js`` and the listed components, never
  the combined file with the menu; pages without formulas load no MathJax at all.
- Assets dropped from pages that do not use them (sphinx-design, the copy button, Thebe): the
  rule that drops them, on a page that needs each and on one that does not.

Whether the pages still render (icons, formulas, no console error) is checked in the browser by
``test_site.py`` and ``test_reader.py``; these are the static checks that say which part broke.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "_ext"))

import kvlab_site  # noqa: E402


def _theme_css_original() -> str:
    import pydata_sphinx_theme

    path = (
        Path(pydata_sphinx_theme.__file__).parent
        / "theme/pydata_sphinx_theme/static/styles/pydata-sphinx-theme.css"
    )
    return path.read_text(encoding="utf-8")


def _icon_rules(css: str) -> dict[str, set[int]]:
    """icon name -> the characters its rule draws (``.fa-bars:before{content:"\\f0c9"}``)."""
    rules: dict[str, set[int]] = {}
    for m in kvlab_site.ICON_RULE.finditer(css):
        chars = {int(h, 16) for h in kvlab_site.CSS_ESCAPE.findall(m.group(2))}
        for sel in m.group(1).split(","):
            if sel:
                rules[sel.split(":")[0][1:]] = chars
    return rules


def _font_cmaps(site: Path, css: str) -> dict[str, set[int]]:
    """font file named by an @font-face of ``css`` -> the characters it has glyphs for."""
    from fontTools.ttLib import TTFont

    styles = site / "_static" / "styles"
    out = {}
    for url in re.findall(r"@font-face\{[^}]*?src:url\(([^)]+)\)", css):
        path = (styles / url).resolve()
        assert path.is_file(), f"@font-face points at {url}, which is not in the site"
        out[path.name] = set(TTFont(str(path)).getBestCmap() or {})
    return out


def test_every_icon_in_use_is_drawn(site):
    css_path = site / kvlab_site.THEME_CSS
    css = css_path.read_text(encoding="utf-8")
    original = _icon_rules(_theme_css_original())
    built = _icon_rules(css)
    used = kvlab_site.icons_in_use(site) & set(original)  # names with a glyph (not fa-solid, fa-lg)
    assert used, "no page names a Fontawesome icon: the check would pass on nothing"
    assert len(built) < len(original) / 10, "the theme's stylesheet still has every icon's rule"
    cmaps = _font_cmaps(site, css)
    solid = next((c for name, c in cmaps.items() if name.startswith("fa-solid")), None)
    assert solid is not None, f"no solid Fontawesome font in {sorted(cmaps)}"
    problems = []
    for name in sorted(used):
        if name not in built:
            problems.append(f"{name}: its rule was dropped from the theme's stylesheet")
        elif not built[name] <= solid:
            problems.append(f"{name}: {sorted(map(hex, built[name] - solid))} not in the font")
    # icons the stylesheets draw without a class: theme variables (--pst-icon-*) and rules such
    # as sphinx-book-theme's "on this page" chevron, all in the Private Use Area
    for sheet in [css, *(f.read_text(encoding="utf-8") for f in (site / "_static").rglob("*.css"))]:
        for h in kvlab_site.CSS_ESCAPE.findall(sheet):
            if 0xE000 <= int(h, 16) <= 0xF8FF and not any(int(h, 16) in c for c in cmaps.values()):
                problems.append(f"\\{h}: drawn by a stylesheet, in no Fontawesome font")
    assert not problems, "\n".join(sorted(set(problems)))


def test_fonts_are_cut_down(site):
    css = (site / kvlab_site.THEME_CSS).read_text(encoding="utf-8")
    styles = site / "_static" / "styles"
    for url in re.findall(r"@font-face\{[^}]*?src:url\(([^)]+)\)", css):
        size = (styles / url).resolve().stat().st_size
        assert size < 20_000, f"{url}: {size:,} bytes (the whole font is 100-200 kB)"


def _head(site: Path, rel: str) -> str:
    return (site / rel).read_text(encoding="utf-8").partition("<body")[0]


def test_mathjax_from_its_loader_without_the_menu(site):
    pages = [p for p in site.rglob("*.html") if "_static" not in p.parts]
    with_maths = 0
    for page in pages:
        rel = str(page.relative_to(site))
        head = _head(site, rel)
        body = page.read_text(encoding="utf-8").partition("<body")[2]
        has_maths = re.search(r'class="[^"]*\bmath\b', body) is not None
        loads = re.findall(r'src="[^"]*_static/(mathjax/[^"?]+)', head)
        if has_maths:
            with_maths += 1
            assert loads == [kvlab_site.MATHJAX_START], f"{rel}: MathJax loaded as {loads}"
            config = re.search(r"window\.MathJax = (\{.*?\})</script>", head)
            assert config, f"{rel}: no MathJax configuration"
            for component in kvlab_site.MATHJAX_COMPONENTS:
                assert f'"{component}"' in config.group(1), f"{rel}: {component} not loaded"
            assert "ui/menu" not in config.group(1)
        else:
            assert not loads, f"{rel} has no formula but loads {loads}"
    assert with_maths >= 3, f"only {with_maths} pages with formulas"


def _page(head_assets: str, body: str) -> str:
    return f"<html><head>{head_assets}</head><body>{body}</body></html>"


HEAD = (
    '<link rel="stylesheet" type="text/css" href="../_static/sphinx-design.min.css?v=1" />\n'
    '<link rel="stylesheet" type="text/css" href="../_static/copybutton.css?v=2" />\n'
    '<link rel="stylesheet" type="text/css" href="../_static/sphinx-thebe.css?v=3" />\n'
    '<script src="../_static/clipboard.min.js?v=4"></script>\n'
    '<script src="../_static/copybutton.js?v=5"></script>\n'
    '<script>const THEBE_JS_URL = "https://unpkg.example/thebe.js"; const x = 1</script>\n'
    '<script async="async" src="../_static/sphinx-thebe.js?v=6"></script>\n'
    '<script src="../_static/design-tabs.js?v=7"></script>\n'
    '<script src="../_static/togglebutton.js?v=8"></script>\n'
)


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        ("<p>prose</p>", []),
        ('<div class="sd-card">x</div>', ["sphinx-design.min.css", "design-tabs.js"]),
        (
            '<div class="highlight-python notranslate"><div class="highlight"><pre>x</pre>',
            ["copybutton.css", "clipboard.min.js", "copybutton.js"],
        ),
        (
            '<button onclick="initThebeSBT()">Live Code</button>',
            ["sphinx-thebe.css", "sphinx-thebe.js", "THEBE_JS_URL"],
        ),
    ],
)
def test_unused_assets_dropped(tmp_path, body, kept):
    (tmp_path / "book").mkdir()
    page = tmp_path / "book" / "p.html"
    page.write_text(_page(HEAD, body), encoding="utf-8")
    kvlab_site.drop_unused_assets(tmp_path)
    text = page.read_text(encoding="utf-8")
    head, _, rest = text.partition("<body")
    assert body in rest, "the page's body changed"
    assert "togglebutton.js" in head, "an asset that is not on the list was dropped"
    names = ["sphinx-design.min.css", "design-tabs.js", "copybutton.css", "clipboard.min.js"]
    names += ["copybutton.js", "sphinx-thebe.css", "sphinx-thebe.js", "THEBE_JS_URL"]
    for name in names:
        assert (name in head) == (name in kept), f"{name}: kept={name in head}"
    assert head.count("<") == head.count(">"), f"a tag was cut in half: {head}"
