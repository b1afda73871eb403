"""Sphinx extension: small fixes to the site as a reader meets it.

- The theme's default mode is "auto" (pydata-sphinx-theme otherwise logs "Got invalid theme mode"
  on a visitor's first page, before any mode is stored).
- The execution-status table says "ok" or "failed" in words; myst-nb's emoji render as an empty
  box where no emoji font is installed.
- Fontawesome's 1.5 MB script is not loaded: it only turns the theme's icon tags into inline SVG,
  and the theme's stylesheet already draws the same icons from Fontawesome's web fonts (a few
  hundred kB, fetched only when an icon shows). The script's tag is removed from every page.
- Fontawesome's stylesheet rules and fonts cut to the icons the site shows (``subset_fontawesome``:
  about 240 kB less on every page).
- MathJax only on pages that have a formula of their own (Sphinx also loads it on every page whose
  table of contents includes one), and there from its loader with the components a formula needs:
  without the 426 kB context menu (about 0.75 MB instead of the combined file's 1.16 MB).
- sphinx-design's stylesheet, the copy button and Thebe only on the pages that use them
  (``drop_unused_assets``).
- Sphinx's search index (about 180 kB with its scripts) only on the search page: the theme loads it
  everywhere for search-as-you-type, which is off.
- A solution dropdown opens when its title is clicked (sphinx-exercise makes the title a link to
  the exercise, which jumped away instead): ``_ext/static/kvlab-site.js``.
- One search box: the header's search button is hidden where the sidebar's search field shows.
- Wide tables and long output lines scroll inside the text column instead of widening the page.
- Figure (and table, code-block; not exercise) numbers restart on every page (``_numbers_per_page``): Sphinx
  numbers them across the whole book unless the table of contents is numbered, so a card's only
  diagram was "Fig. 10".
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

HERE = Path(__file__).resolve().parent
STATUS_WORDS = {"✅": "ok", "❌": "failed"}
FONTAWESOME_TAG = re.compile(
    r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>'
)
# Sphinx's search scripts and the whole search index (about 180 kB), which pydata-sphinx-theme
# puts on every page for search-as-you-type; that option is off here, so only search.html uses them.
SEARCH_TAGS = re.compile(
    r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>'
)
# MathJax's start-up script (the loader) and the components it loads: TeX input with the AMS macros
# (other TeX packages load themselves when a formula uses them), CommonHTML output with its TeX
# fonts, and the hidden MathML copy that screen readers read. Left out: the context menu.
MATHJAX_START = "mathjax/startup.js"
MATHJAX_COMPONENTS = ("input/tex", "output/chtml", "a11y/assistive-mml")
CSS = "kvlab-site.css"
# what is numbered per page (_numbers_per_page)
PER_PAGE_TYPES = ("figure", "table", "code-block")
JS = "kvlab-site.js"


class StatusInWords(SphinxPostTransform):
    """Replace the execution table's emoji by words (after myst-nb builds the table)."""

    default_priority = 9

    def run(self, **kwargs) -> None:
        for text in list(self.document.findall(nodes.Text)):
            word = STATUS_WORDS.get(text.astext().strip())
            if word and isinstance(text.parent, nodes.paragraph):
                text.parent.replace(text, nodes.Text(word))


def _config_inited(app, config):
    # pydata-sphinx-theme reads the default mode from the page context, not the theme options
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}
    # MathJax from its loader and the components a formula needs, without the 426 kB menu
    # (sphinx-mathjax-offline points every page at the combined tex-chtml.js, which has it)
    config.mathjax_path = MATHJAX_START
    mj = dict(config.mathjax3_config or {})
    mj["loader"] = {**mj.get("loader", {}), "load": list(MATHJAX_COMPONENTS)}
    config.mathjax3_config = mj
    config.html_static_path = [*config.html_static_path, str(HERE / "static" / "site")]


def _builder_inited(app):
    app.add_css_file(CSS)
    app.add_js_file(JS, loading_method="defer")


def _numbers_per_page(app, env):
    """Renumber each page's figures, tables and code blocks from 1, in their order on the page
    (runs after Sphinx's own numbering, an ``env-get-updated`` handler); return the pages whose
    numbers changed, so they are written again."""
    changed = []
    for docname, by_type in env.toc_fignumbers.items():
        for figtype, numbers in by_type.items():
            if figtype not in PER_PAGE_TYPES:
                continue  # exercises keep their book-wide numbers (solutions cite them)
            counters: dict[tuple, int] = {}
            renumbered = {}
            for fig_id in sorted(numbers, key=lambda i: numbers[i]):
                prefix = tuple(numbers[fig_id][:-1])  # a section number, where the toc has one
                counters[prefix] = counters.get(prefix, 0) + 1
                renumbered[fig_id] = (*prefix, counters[prefix])
            if renumbered != numbers:
                by_type[figtype] = renumbered
                changed.append(docname)
    return sorted(set(changed))


def _mathjax_only_where_used(app, pagename, templatename, context, doctree):
    """Drop MathJax from a page without formulas of its own (runs after sphinx.ext.mathjax)."""
    if app.env.get_domain("math").data["has_equations"].get(pagename, False):
        return

    def is_mathjax(js) -> bool:
        name = str(getattr(js, "filename", js) or "")
        body = str((getattr(js, "attributes", {}) or {}).get("body", ""))
        return "mathjax" in name.lower() or body.startswith("window.MathJax")

    context["script_files"] = [js for js in context.get("script_files", []) if not is_mathjax(js)]


def drop_fontawesome(outdir: Path, search_as_you_type: bool = False) -> int:
    """Remove the fontawesome script's tag from every page, and the search scripts from every page
    but search.html (unless search-as-you-type is on); return how many pages changed."""
    count = 0
    for page in outdir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new, n = FONTAWESOME_TAG.subn("", text)
        if page.name != "search.html" and not search_as_you_type:
            new, m = SEARCH_TAGS.subn("", new)
            n += m
        if n:
            page.write_text(new, encoding="utf-8")
            count += 1
    for name in ("fontawesome.js", "fontawesome.js.map", "fontawesome.js.LICENSE.txt"):
        (outdir / "_static" / "scripts" / name).unlink(missing_ok=True)
    return count


def _tags(*names: str) -> re.Pattern:
    """The <script> and <link> tags in a page's head that load one of ``names`` from _static."""
    files = "|".join(re.escape(n) for n in names)
    return re.compile(
        rf'\s*<(?:script[^>]*src|link[^>]*href)="[^"]*_static/(?:{files})(?:\?[^"]*)?"[^>]*>'
        r"(?:</script>)?"
    )


# Stylesheets and scripts that every page gets but only some use: each is dropped from a page whose
# body lacks what it works on. (name, tags, what the page's body must contain to keep them)
PAGE_ASSETS = [
    # sphinx-design's cards, grids and tabs (no page uses them today)
    (
        "sphinx-design",
        _tags("sphinx-design.min.css", "design-tabs.js"),
        re.compile(r'class="[^"]*\bsd-'),
    ),
    # the copy button of highlighted code blocks
    (
        "copy button",
        _tags("copybutton.css", "copybutton.js", "clipboard.min.js"),
        re.compile(r'class="highlight\b'),
    ),
    # Thebe's live code, started only by the launch menu's "Live Code" button
    (
        "thebe",
        re.compile(
            _tags("sphinx-thebe.css", "sphinx-thebe.js").pattern
            + r"|\s*<script>const THEBE_JS_URL = [^<]*</script>"
        ),
        re.compile(r"initThebe"),
    ),
]


def drop_unused_assets(outdir: Path) -> dict[str, int]:
    """Remove PAGE_ASSETS' tags from the pages that do not use them; return, for each, on how many
    pages it was dropped."""
    dropped = {name: 0 for name, _, _ in PAGE_ASSETS}
    for page in outdir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        head, sep, body = text.partition("<body")
        if not sep:
            continue
        new_head = head
        for name, tags, needed in PAGE_ASSETS:
            if not needed.search(body):
                new_head, n = tags.subn("", new_head)
                dropped[name] += bool(n)
        if new_head != head:
            page.write_text(new_head + sep + body, encoding="utf-8")
    return dropped


# An icon's rule in the theme's stylesheet: ``.fa-bars:before{content:"\f0c9"}``, aliases joined
# by commas.
ICON_RULE = re.compile(
    r'(?<=[}\n])((?:\.fa-[a-z0-9-]+:{1,2}(?:before|after),?)+)\{content:("(?:[^"\\]|\\.)*")\}'
)
ICON_NAME = re.compile(r"(?<![\w-])fa-[a-z0-9]+(?:-[a-z0-9]+)*")
CSS_ESCAPE = re.compile(r"\\([0-9a-fA-F]{1,6}) ?")
FONT_FACE_SRC = re.compile(
    r"src:url\((\.\./vendor/fontawesome/webfonts/(fa-[a-z]+-[0-9]+))\.woff2\) format\(\"woff2\"\)"
    r",url\(\1\.ttf\) format\(\"truetype\"\)"
)
THEME_CSS = Path("_static") / "styles" / "pydata-sphinx-theme.css"
WEBFONTS = Path("_static") / "vendor" / "fontawesome" / "webfonts"


def icons_in_use(outdir: Path) -> set[str]:
    """Every ``fa-*`` class named by a page or by a script of the site (the theme's scripts add a
    few icons of their own, such as the search dialog's close button)."""
    names: set[str] = set()
    files = [*outdir.rglob("*.html")]
    files += [f for f in (outdir / "_static").rglob("*.js") if "mathjax" not in f.parts]
    for f in files:
        names.update(ICON_NAME.findall(f.read_text(encoding="utf-8", errors="replace")))
    return names


def subset_fontawesome(outdir: Path) -> dict[str, int] | None:
    """Keep only the icons the site shows: drop the theme stylesheet's rules for icons no page or
    script names, and cut Fontawesome's fonts down to the characters some stylesheet still asks
    for (the kept rules, the theme's icon variables such as the admonition and download icons).
    The fonts are written as WOFF next to the originals and the stylesheet points at them.
    Returns the bytes before and after, or None when the theme's stylesheet is not there."""
    from fontTools import subset

    css_path = outdir / THEME_CSS
    if not css_path.is_file():
        return None
    used = icons_in_use(outdir)
    css = css_path.read_text(encoding="utf-8")
    before = {"css": len(css.encode())}

    def keep(m: re.Match) -> str:
        names = {sel.split(":")[0][1:] for sel in m.group(1).split(",") if sel}
        return m.group(0) if names & used else ""

    css = ICON_RULE.sub(keep, css)
    # every character a stylesheet of the site still draws (in any font: extra glyphs are harmless)
    chars: set[int] = set()
    for sheet in [
        css,
        *(
            f.read_text(encoding="utf-8")
            for f in (outdir / "_static").rglob("*.css")
            if f != css_path and "mathjax" not in f.parts
        ),
    ]:
        chars.update(int(h, 16) for h in CSS_ESCAPE.findall(sheet))
    webfonts = outdir / WEBFONTS
    before["fonts"] = after_fonts = 0
    for m in set(FONT_FACE_SRC.findall(css)):
        # read from the TrueType copy (decoding WOFF2 needs Brotli, which is not installed)
        original = webfonts / f"{m[1]}.ttf"
        if not original.is_file():
            continue
        before["fonts"] += (webfonts / f"{m[1]}.woff2").stat().st_size
        options = subset.Options()
        options.flavor = "woff"
        options.layout_features = ["*"]
        options.name_IDs = ["*"]
        font = subset.load_font(str(original), options)
        sub = subset.Subsetter(options)
        sub.populate(unicodes=chars)
        sub.subset(font)
        target = webfonts / f"{m[1]}-used.woff"
        subset.save_font(font, str(target), options)
        after_fonts += target.stat().st_size
    css = FONT_FACE_SRC.sub(r'src:url(\1-used.woff) format("woff")', css)
    css_path.write_text(css, encoding="utf-8")
    return {
        "css_before": before["css"],
        "css_after": len(css.encode()),
        "fonts_before": before["fonts"],
        "fonts_after": after_fonts,
    }


def _finished(app, exc):
    if exc is None and app.builder.format == "html":
        opts = app.config.html_theme_options or {}
        drop_fontawesome(Path(app.outdir), bool(opts.get("search_as_you_type", False)))
        drop_unused_assets(Path(app.outdir))
        subset_fontawesome(Path(app.outdir))


def setup(app):
    app.add_post_transform(StatusInWords)
    app.connect("config-inited", _config_inited)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _mathjax_only_where_used, priority=600)
    app.connect("env-get-updated", _numbers_per_page, priority=900)
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
