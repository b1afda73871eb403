"""Sphinx extension: write a glued figure in a page as {num}`key` instead of a notebook path.

Every worked figure is glued exactly once, by one notebook, under a key unique in the whole book
(``tests/test_repo.py`` checks that). A prose page therefore needs only the key::

    Random routing caches {num}`p08_hit_random` of the prompt.

Before MyST parses a page, this extension rewrites each ``{num}`key``` into myst-nb's cross-page
form ``{glue:text}`../notebooks/<nb>.ipynb::key:``` (an optional format spec is kept:
``{num}`key:.1f```). Which notebook glues a key is read from the notebooks' stored outputs
(myst-nb's ``scrapbook`` metadata; notebooks are committed executed). An unknown key is a
warning, so the strict build (``-W``) fails on it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

#: ``{num}`key``` or ``{num}`key:format```.
NUM_ROLE = re.compile(r"\{num\}`([A-Za-z0-9_]+)(:[^`]*)?`")
NOTEBOOK_FOLDERS = ("notebooks", "solutions")


def glued_keys(nb: dict) -> set[str]:
    """The names a notebook glues (myst-nb stores them in outputs with 'scrapbook' metadata)."""
    keys = set()
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            meta = (out.get("metadata") or {}).get("scrapbook")
            if meta and meta.get("name"):
                keys.add(meta["name"])
    return keys


def key_index(root: Path) -> tuple[dict[str, Path], dict[str, list[Path]]]:
    """Map every glued key to the notebook that glues it; also return keys glued twice."""
    owner: dict[str, Path] = {}
    twice: dict[str, list[Path]] = {}
    for folder in NOTEBOOK_FOLDERS:
        for nb_path in sorted((root / folder).rglob("*.ipynb")):
            if ".ipynb_checkpoints" in nb_path.parts:
                continue
            nb = json.loads(nb_path.read_text(encoding="utf-8"))
            for key in glued_keys(nb):
                if key in owner and owner[key] != nb_path:
                    twice.setdefault(key, [owner[key]]).append(nb_path)
                owner.setdefault(key, nb_path)
    return owner, twice


def rewrite(text: str, page: Path, owner: dict[str, Path]) -> tuple[str, list[str]]:
    """Replace each {num}`key` in ``text`` (the source of ``page``); return the new text and the
    keys no notebook glues."""
    unknown: list[str] = []

    def sub(m: re.Match) -> str:
        key, fmt = m.group(1), m.group(2) or ":"
        nb = owner.get(key)
        if nb is None:
            unknown.append(key)
            return m.group(0)
        target = os.path.relpath(nb, page.parent).replace(os.sep, "/")
        return f"{{glue:text}}`{target}::{key}{fmt}`"

    return NUM_ROLE.sub(sub, text), unknown


def _on_builder_inited(app) -> None:
    owner, twice = key_index(Path(app.srcdir))
    for key, paths in twice.items():
        logger.warning(f"glue key {key!r} is glued by several notebooks: {paths}")
    app.env.kvlab_glue_owner = owner  # type: ignore[attr-defined]


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if "{num}`" not in source[0]:
        return
    owner = getattr(app.env, "kvlab_glue_owner", None)
    if owner is None:
        owner, _ = key_index(Path(app.srcdir))
    page = Path(app.env.doc2path(docname))
    source[0], unknown = rewrite(source[0], page, owner)
    for key in unknown:
        logger.warning(f"{{num}}`{key}`: no notebook glues this key", location=docname)


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    app.connect("source-read", _on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
