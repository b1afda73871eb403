"""Sphinx extension: a sentence a page asserts, written as {claim}`key`, checked like a number.

A notebook decides a claim with ``kvlab.claims.claim(key, holds, text)``: it glues the sentence
under ``key`` and its verdict (``"true"``/``"false"``) under ``key + "__holds"``. A prose page
writes ``{claim}`key```; before MyST parses the page this extension rewrites it into myst-nb's
cross-page ``{glue:text}`` form (the notebook is found as for ``{num}``, ``_ext/glue_keys.py``)
followed by a small superscript link, "check", to the cell of the notebook that decides it.

The link's anchor: when a notebook is read, every code cell whose printed output has the line
``claim KEY: holds`` (or ``FALSE``), as :func:`kvlab.claims.claim` prints it, gets the id
``claim-KEY`` (:func:`anchor_id`); after references are resolved, each "check" link to that notebook
gets ``#claim-KEY`` appended. A claim whose cell prints nothing (a removed cell) links to the top
of its notebook, as before.

After every document is read (``env-check-consistency``), the extension reads each deciding
notebook's glue values as this build wrote them (myst-nb's ``<output_folder>/<doc>.glue.json``,
written when the build executes the notebook) and emits a warning, so the strict build (``-W``)
fails, for every claim a page uses whose verdict is false or missing.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from glue_keys import key_index  # a sibling local extension (_ext/ is on sys.path)
from sphinx import addnodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: ``{claim}`key```.
CLAIM_ROLE = re.compile(r"\{claim\}`([A-Za-z0-9_]+)`")
#: The line kvlab.claims.claim prints for a verdict.
VERDICT_LINE = re.compile(r"^claim ([A-Za-z0-9_]+): (?:holds|FALSE)\s*$", re.M)
HOLDS_SUFFIX = "__holds"  # as kvlab.claims.HOLDS_SUFFIX (the book's build does not import kvlab)
MARK_TEXT = "check"


def rewrite(
    text: str, page: Path, owner: dict[str, Path], srcdir: Path
) -> tuple[str, list[tuple[str, str]], list[str]]:
    """Replace each {claim}`key` in ``text`` (the source of ``page``).

    Returns the new text, the (key, deciding notebook's docname) pairs used, and the keys no
    notebook glues.
    """
    used: list[tuple[str, str]] = []
    unknown: list[str] = []

    def sub(m: re.Match) -> str:
        key = m.group(1)
        nb = owner.get(key)
        if nb is None:
            unknown.append(key)
            return m.group(0)
        target = os.path.relpath(nb, page.parent).replace(os.sep, "/")
        docname = Path(os.path.relpath(nb, srcdir)).with_suffix("").as_posix()
        used.append((key, docname))
        return f"{{glue:text}}`{target}::{key}:`{{claimmark}}`{key} <{docname}>`"

    return CLAIM_ROLE.sub(sub, text), used, unknown


def anchor_id(key: str) -> str:
    """The HTML id of the cell that decides claim ``key``."""
    return nodes.make_id(f"claim-{key}")


def decided_here(text: str) -> list[str]:
    """The claim keys whose verdict line ``text`` (a cell's printed output) holds."""
    return VERDICT_LINE.findall(text)


def plain_text(output: Any) -> str | None:
    """The text/plain value of one glued output (myst-nb stores the repr; strings come quoted)."""
    if not isinstance(output, dict):
        return None
    data = output.get("data") or {}
    text = data.get("text/plain")
    if isinstance(text, list):
        text = "".join(text)
    if not isinstance(text, str):
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else str(value)


def read_glue(folder: Path, docname: str) -> dict[str, Any] | None:
    """The glue values the build wrote for ``docname``, or None when it wrote none."""
    path = folder.joinpath(*docname.split("/")[:-1]) / f"{docname.split('/')[-1]}.glue.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def verdict_problems(uses: dict[str, list[tuple[str, str]]], folder: Path) -> list[tuple[str, str]]:
    """For every claim a page uses, a (page, message) pair when its verdict is not true.

    ``uses`` maps a page's docname to the (key, deciding notebook's docname) pairs it uses;
    ``folder`` is where the build wrote the notebooks' glue values.
    """
    problems: list[tuple[str, str]] = []
    cache: dict[str, dict[str, Any] | None] = {}
    for page in sorted(uses):
        for key, nb_doc in uses[page]:
            if nb_doc not in cache:
                cache[nb_doc] = read_glue(folder, nb_doc)
            glued = cache[nb_doc]
            if glued is None:
                problems.append(
                    (
                        page,
                        f"claim {key!r}: no glue values from {nb_doc} in this build (was it executed?)",
                    )
                )
                continue
            if key not in glued:
                problems.append((page, f"claim {key!r}: {nb_doc} no longer glues its sentence"))
                continue
            verdict = plain_text(glued.get(key + HOLDS_SUFFIX))
            if verdict is None:
                problems.append((page, f"claim {key!r}: {nb_doc} glues no verdict for it"))
            elif verdict.strip().lower() != "true":
                problems.append(
                    (
                        page,
                        f"claim {key!r} is false in {nb_doc}: {plain_text(glued[key])!r}; change the sentence",
                    )
                )
    return problems


def glue_folder(app: Any) -> Path:
    """Where myst-nb writes executed notebooks and their glue values."""
    cfg = getattr(app.env, "mystnb_config", None)
    folder = getattr(cfg, "output_folder", None)
    return Path(folder) if folder else Path(app.outdir).parent / "jupyter_execute"


def claimmark_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{claimmark}`key <docname>```: a superscript "check" link to the deciding notebook."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_]+)\s*<([^>]+)>\s*", text)
    if not m:
        msg = inliner.reporter.error(f"claimmark needs 'key <docname>', got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    key, docname = m.groups()
    ref = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget="/" + docname, refexplicit=True, refwarn=True
    )
    ref += nodes.inline(MARK_TEXT, MARK_TEXT, classes=["kvlab-claim-mark"])
    sup = nodes.superscript("", "", ref, classes=["kvlab-claim"])
    sup["kvlab_claim"] = (key, docname)  # read after resolution to add the cell's anchor
    title = f"claim {key}: decided in {docname}"
    ref["reftitle"] = title
    return [sup], []


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if "{claim}`" not in source[0]:
        return
    owner = getattr(app.env, "kvlab_glue_owner", None)
    if owner is None:
        owner, _ = key_index(Path(app.srcdir))
    page = Path(app.env.doc2path(docname))
    source[0], used, unknown = rewrite(source[0], page, owner, Path(app.srcdir))
    if not hasattr(app.env, "kvlab_claims"):
        app.env.kvlab_claims = {}
    app.env.kvlab_claims[docname] = used
    for key in unknown:
        logger.warning(f"{{claim}}`{key}`: no notebook decides this claim", location=docname)


def _on_purge(app, env, docname: str) -> None:
    getattr(env, "kvlab_claims", {}).pop(docname, None)


def _on_merge(app, env, docnames, other) -> None:
    if not hasattr(env, "kvlab_claims"):
        env.kvlab_claims = {}
    env.kvlab_claims.update(
        {d: u for d, u in getattr(other, "kvlab_claims", {}).items() if d in docnames}
    )


def _on_check(app, env) -> None:
    for page, message in verdict_problems(getattr(env, "kvlab_claims", {}), glue_folder(app)):
        logger.warning(message, location=page)


def _cell_of(node: nodes.Node) -> nodes.Element | None:
    """The notebook cell (myst-nb's container of class "cell") that holds ``node``."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, nodes.container) and "cell" in parent.get("classes", []):
            return parent
        parent = parent.parent
    return None


def _on_doctree_read(app, doctree) -> None:
    """Give each cell that prints a claim's verdict the id ``claim-KEY``, and remember it."""
    docname = app.env.docname
    anchors = getattr(app.env, "kvlab_claim_anchors", None)
    if anchors is None:
        anchors = app.env.kvlab_claim_anchors = {}
    for block in list(doctree.findall(nodes.literal_block)):
        keys = decided_here(block.astext())
        cell = _cell_of(block) if keys else None
        if cell is None:
            continue
        for key in keys:
            ident = anchor_id(key)
            if ident not in cell["ids"]:
                cell["ids"].append(ident)
            anchors.setdefault(docname, set()).add(key)


def _on_doctree_resolved(app, doctree, docname: str) -> None:
    """Point each resolved "check" link at its claim's cell, where that cell has an anchor."""
    anchors = getattr(app.env, "kvlab_claim_anchors", {})
    for sup in doctree.findall(nodes.superscript):
        if "kvlab_claim" not in sup.attributes:
            continue
        key, target = sup["kvlab_claim"]
        for ref in sup.findall(nodes.reference):
            if "#" not in ref.get("refuri", "#") and key in anchors.get(target, ()):
                ref["refuri"] += "#" + anchor_id(key)


def _on_purge_anchors(app, env, docname: str) -> None:
    getattr(env, "kvlab_claim_anchors", {}).pop(docname, None)


def _on_merge_anchors(app, env, docnames, other) -> None:
    if not hasattr(env, "kvlab_claim_anchors"):
        env.kvlab_claim_anchors = {}
    env.kvlab_claim_anchors.update(
        {d: a for d, a in getattr(other, "kvlab_claim_anchors", {}).items() if d in docnames}
    )


def setup(app):
    app.setup_extension("glue_keys")
    app.add_role("claimmark", claimmark_role)
    app.connect("source-read", _on_source_read)
    app.connect("env-purge-doc", _on_purge)
    app.connect("env-merge-info", _on_merge)
    app.connect("env-check-consistency", _on_check)
    app.connect("doctree-read", _on_doctree_read)
    app.connect("doctree-resolved", _on_doctree_resolved)
    app.connect("env-purge-doc", _on_purge_anchors)
    app.connect("env-merge-info", _on_merge_anchors)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
