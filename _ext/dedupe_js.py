"""Sphinx extension: drop duplicate <script> entries from each page.

sphinx-thebe adds its inline THEBE_JS_URL script twice (once with filename None, once with ''),
which redeclares a constant and raises a JavaScript error on every page. Scripts with the same
source and attributes are written once.
"""


def _dedupe(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for js in context.get("script_files", []):
        attrs = getattr(js, "attributes", {}) or {}
        key = (getattr(js, "filename", js) or "", tuple(sorted(attrs.items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
