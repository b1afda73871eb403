"""Sphinx extension: small fixes to the site as a reader meets it.

- The theme's default mode is "auto" (pydata-sphinx-theme otherwise logs "Got invalid theme mode"
  on a visitor's first page, before any mode is stored).
- The execution-status table says "ok" or "failed" in words; myst-nb's emoji render as an empty
  box where no emoji font is installed.
- Fontawesome's 1.5 MB script is not loaded: it only turns the theme's icon tags into inline SVG,
  and the theme's stylesheet already draws the same icons from Fontawesome's web fonts (a few
  hundred kB, fetched only when an icon shows). The script's tag is removed from every page.
- MathJax (1.2 MB) only on pages that have a formula of their own: Sphinx also loads it on every
  page whose table of contents includes one (the home page includes them all).
- Sphinx's search index (about 180 kB with its scripts) only on the search page: the theme loads it
  everywhere for search-as-you-type, which is off.
- A solution dropdown opens when its title is clicked (sphinx-exercise makes the title a link to
  the exercise, which jumped away instead): ``_ext/static/kvlab-site.js``.
- One search box: the header's search button is hidden where the sidebar's search field shows.
- Wide tables and long output lines scroll inside the text column instead of widening the page.
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
CSS = "kvlab-site.css"
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
    config.html_static_path = [*config.html_static_path, str(HERE / "static" / "site")]


def _builder_inited(app):
    app.add_css_file(CSS)
    app.add_js_file(JS, loading_method="defer")


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


def _finished(app, exc):
    if exc is None and app.builder.format == "html":
        opts = app.config.html_theme_options or {}
        drop_fontawesome(Path(app.outdir), bool(opts.get("search_as_you_type", False)))


def setup(app):
    app.add_post_transform(StatusInWords)
    app.connect("config-inited", _config_inited)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _mathjax_only_where_used, priority=600)
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
