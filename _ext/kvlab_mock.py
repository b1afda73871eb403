"""Sphinx extension: a mock interview per card, practised in the browser (issue 35, item 4).

A page places one with the ``mock-interview`` directive; its argument is the interview's data file,
relative to the page::

    ```{mock-interview} mock/p08.yml
    ```

The data file (``book/mock/*.yml``) names the card and its follow-ups page and lists the parts:
first the card's own question, then follow-ups, each with a short model answer and the points it
must hit. The card's question is read from the card itself (its first italic blockquote), and each
follow-up's question is the heading of its section on the follow-ups page, which the model answer
links to; a heading that is not on that page fails the build.

Without JavaScript the page reads as a list: the question, then every part with its model answer
and points folded in a ``<details>``. ``_ext/static/mock/kvlab-mock.js`` turns it into the
interview: a timer, the notes box kept in the browser, the follow-ups revealed one at a time, a
checkbox per point and the score per part and overall. Only pages with an interview load it;
nothing comes from another host.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static" / "mock"
SCRIPT = "kvlab-mock.js"
STYLE = "kvlab-mock.css"
MIN_POINTS = 3
# The card's question: the first blockquote whose first line is in italics ("> *Design ...").
QUESTION_START = re.compile(r"^>\s*\*\S")

logger = logging.getLogger(__name__)


class mock_html(nodes.Element, nodes.General):  # noqa: N801 (docutils names nodes in lower case)
    """An HTML element written as it is: ``tag`` and ``attrs`` (a value True is a bare attribute)."""


class mock_link(nodes.Inline, nodes.TextElement):  # noqa: N801
    """A link to a section of another page, found by its heading (``doc``, ``heading``; no
    heading: the top of the page), resolved once every page has been read."""


def _el(tag: str, *children: nodes.Node, **attrs) -> mock_html:
    node = mock_html(tag=tag, attrs={k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()})
    node.extend(children)
    return node


def _visit_html(self, node: mock_html) -> None:
    attrs = "".join(
        f" {k}" if v is True else f' {k}="{html.escape(str(v), quote=True)}"'
        for k, v in node["attrs"].items()
    )
    self.body.append(f"<{node['tag']}{attrs}>")


def _depart_html(self, node: mock_html) -> None:
    self.body.append(f"</{node['tag']}>")


def card_question(card_md: str) -> list[str]:
    """The lines of the card's question: its first blockquote that opens in italics."""
    lines = card_md.splitlines()
    for i, line in enumerate(lines):
        if QUESTION_START.match(line):
            end = i
            while end < len(lines) and lines[end].startswith(">"):
                end += 1
            return lines[i:end]
    return []


def load(path: Path) -> dict:
    """Read an interview's data file and check its shape; raise ValueError naming what is wrong."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    where = path.name
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping with card, followups and parts")
    for key in ("id", "card", "followups", "parts"):
        if key not in data:
            raise ValueError(f"{where}: missing {key!r}")
    parts = data["parts"]
    if not parts or parts[0].get("question") != "card":
        raise ValueError(f"{where}: the first part must be the card's question (question: card)")
    for n, part in enumerate(parts):
        if n and not part.get("heading"):
            raise ValueError(f"{where}: part {n} has no heading (its follow-up's question)")
        if not str(part.get("answer") or "").strip():
            raise ValueError(f"{where}: part {n} has no answer")
        points = part.get("points") or []
        if not all(isinstance(p, str) for p in points):
            raise ValueError(f"{where}: part {n} has a point that is not one line of text")
        if len(points) < MIN_POINTS or not all(p.strip() for p in points):
            raise ValueError(f"{where}: part {n} needs at least {MIN_POINTS} non-empty points")
    return data


class MockInterview(SphinxDirective):
    required_arguments = 1
    has_content = False

    def _parse(self, text: str, source: str) -> list[nodes.Node]:
        holder = nodes.Element()
        self.state.nested_parse(StringList(text.splitlines(), source=source), 0, holder)
        return holder.children

    def run(self):
        rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        path = Path(path)
        self.env.note_dependency(rel)
        try:
            data = load(path)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise self.error(f"mock-interview: {exc}") from exc
        here = Path(self.env.doc2path(self.env.docname)).parent
        card_path = here / f"{data['card']}.md"
        question = card_question(card_path.read_text(encoding="utf-8"))
        if not question:
            raise self.error(f"mock-interview: no italic blockquote (the question) in {card_path}")
        self.env.note_dependency(str(card_path))
        docdir = str(Path(self.env.docname).parent)
        card_doc = str(Path(docdir, data["card"]).as_posix())
        followups_doc = str(Path(docdir, data["followups"]).as_posix())
        mid = f"kvlab-mock-{data['id']}"
        parts = data["parts"]
        root = _el("div", class_="kvlab-mock", id=mid, data_parts=str(len(parts)))

        ask = _el("div", class_="kvlab-mock-question")
        ask += _el("p", nodes.Text("The question"), class_="kvlab-mock-label")
        ask.extend(self._parse("\n".join(question), str(card_path)))
        root += ask
        root += nodes.raw(
            "",
            f'<div class="kvlab-mock-tools" hidden>'
            f'<button type="button" class="kvlab-mock-timer">'
            f"Start the timer</button>"
            f'<span class="kvlab-mock-clock" role="timer" aria-label="Time spent">0:00</span>'
            f"</div>"
            f'<div class="kvlab-mock-notes"><label for="{mid}-notes">Your notes</label>'
            f'<textarea id="{mid}-notes" rows="5" spellcheck="true"></textarea></div>',
            format="html",
        )
        follow_ups = len(parts) - 1
        for n, part in enumerate(parts):
            if n == 0:
                label, doc, heading = "Your answer to the question", card_doc, None
                link_text = "the interview card"
            else:
                label = f"Follow-up {n} of {follow_ups}"
                doc, heading = followups_doc, str(part["heading"]).strip()
                link_text = "this follow-up on its page"
            box = _el("section", class_="kvlab-mock-part", id=f"{mid}-part-{n}", data_part=str(n))
            box += _el("p", nodes.Text(label), class_="kvlab-mock-label")
            if heading:
                # a paragraph, so that its quotes are typeset as the page's heading's are
                ask = nodes.paragraph("", heading)
                box += _el("div", ask, class_="kvlab-mock-ask", tabindex="-1")
            fold = _el("details", class_="kvlab-mock-reveal")
            fold += _el("summary", nodes.Text("Model answer and the points to cover"))
            fold.extend(self._parse(str(part["answer"]), str(path)))
            more = nodes.paragraph("", "More: ", classes=["kvlab-mock-more"])
            more += mock_link("", link_text, doc=doc, heading=heading, fromdoc=self.env.docname)
            fold += more
            fold += _el("p", nodes.Text("Did your answer cover these points?"))
            points = _el("ul", class_="kvlab-mock-points")
            for point in part["points"]:
                inline, messages = self.parse_inline(str(point).strip())
                points += _el("li", nodes.inline("", "", *inline), *messages)
            fold += points
            box += fold
            root += box
        root += nodes.raw(
            "",
            '<div class="kvlab-mock-controls" hidden>'
            '<button type="button" class="kvlab-mock-next">Next follow-up</button></div>'
            '<p class="kvlab-mock-score" role="status" aria-live="polite"></p>',
            format="html",
        )
        self.env.metadata[self.env.docname]["kvlab_mock"] = True
        return [root]


QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def plain(text: str) -> str:
    """``text`` with straight quotes and single spaces (a title's quotes are typeset)."""
    return " ".join(text.translate(QUOTES).split())


def find_section(doctree: nodes.document, heading: str) -> nodes.section | None:
    """The section of a page whose title reads ``heading``."""
    want = plain(heading)
    for sec in doctree.findall(nodes.section):
        title = sec.next_node(nodes.title)
        if title is not None and plain(title.astext()) == want:
            return sec
    return None


class ResolveMockLinks(SphinxPostTransform):
    """Turn each ``mock_link`` into a link to its page and, given a heading, to that section."""

    default_priority = 5

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(mock_link)):
            target = node["doc"]
            text = node.astext()
            if target not in self.env.all_docs:
                logger.warning(f"mock-interview: no page {target!r}", location=node)
                node.replace_self(nodes.Text(text))
                continue
            uri = self.app.builder.get_relative_uri(node["fromdoc"], target)
            if node["heading"]:
                sec = find_section(self.env.get_doctree(target), node["heading"])
                if sec is None or not sec["ids"]:
                    logger.warning(
                        f"mock-interview: no heading {node['heading']!r} on {target!r}",
                        location=node,
                    )
                    node.replace_self(nodes.Text(text))
                    continue
                uri += "#" + sec["ids"][0]
            node.replace_self(nodes.reference("", text, internal=True, refuri=uri))


def _config_inited(app, config):
    config.html_static_path = [*config.html_static_path, str(STATIC)]


def _page(app, pagename, templatename, context, doctree):
    if app.env.metadata.get(pagename, {}).get("kvlab_mock"):
        app.add_css_file(STYLE)
        app.add_js_file(SCRIPT, loading_method="defer")


def setup(app):
    app.add_node(mock_html, html=(_visit_html, _depart_html))
    app.add_node(mock_link)
    app.add_directive("mock-interview", MockInterview)
    app.add_post_transform(ResolveMockLinks)
    app.connect("config-inited", _config_inited)
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
