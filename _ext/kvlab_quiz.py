"""Sphinx extension: answer boxes on the static self-check page, graded in the browser.

A page places a box with the ``quiz-box`` directive; its argument is a question id of
``kvlab.selfcheck.questions()`` and its content (shown after the first attempt) says where the
book derives the answer::

    ```{quiz-box} hit_random
    Derived in {doc}`the worked answer <../notebooks/p08-04-worked-answer>`.
    ```

At the end of the build ``_static/kvlab-quiz.js`` is written: the checker's rules and the
questions, exported from Python (``kvlab.selfcheck.rules_json()``), followed by the hand-written
grader ``_ext/static/kvlab-quiz.js``, a port of ``kvlab.selfcheck.check_answer``. Only pages with
a box load it. Nothing comes from another host.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

HERE = Path(__file__).resolve().parent
SCRIPT = "kvlab-quiz.js"
STYLE = """
.kvlab-quiz { border-left: 3px solid var(--pst-color-primary, #0a7d91); padding: 0.4rem 0.8rem;
  margin: 0.8rem 0; }
.kvlab-quiz-form { display: flex; flex-wrap: wrap; gap: 0.4rem; align-items: center; }
.kvlab-quiz-form label { flex-basis: 100%; font-weight: 600; }
.kvlab-quiz-form input { flex: 1 1 10rem; min-width: 0; max-width: 18rem; padding: 0.2rem 0.4rem;
  color: var(--pst-color-text-base, inherit); background: var(--pst-color-surface, transparent);
  border: 1px solid var(--pst-color-border, #888); border-radius: 4px; }
.kvlab-quiz-form button { padding: 0.2rem 0.8rem; border-radius: 4px;
  border: 1px solid var(--pst-color-primary, #0a7d91); background: transparent;
  color: var(--pst-color-primary, #0a7d91); cursor: pointer; }
.kvlab-quiz-feedback { margin: 0.3rem 0; min-height: 1.2em; }
.kvlab-quiz-right { color: var(--pst-color-success, #1a7f37); }
.kvlab-quiz-wrong { color: var(--pst-color-warning, #b35900); }
"""


class QuizBox(SphinxDirective):
    required_arguments = 1
    has_content = True

    def run(self):
        from kvlab.selfcheck import questions

        qid = self.arguments[0]
        known = [q.id for q in questions()]
        if qid not in known:
            raise self.error(f"quiz-box: unknown question id {qid!r}; known: {known}")
        box = nodes.container(classes=["kvlab-quiz", f"kvlab-quiz-q-{qid}"])
        derivation = nodes.container(classes=["kvlab-quiz-derivation"])
        self.state.nested_parse(self.content, self.content_offset, derivation)
        box += derivation
        self.env.metadata[self.env.docname]["kvlab_quiz"] = True
        return [box]


def _page(app, pagename, templatename, context, doctree):
    if app.env.metadata.get(pagename, {}).get("kvlab_quiz"):
        app.add_js_file(SCRIPT, loading_method="defer")
        context.setdefault("metatags", "")
        context["metatags"] += f"\n<style>{STYLE}</style>"


def write_script(static: Path) -> Path:
    """Write the rules, the questions and the grader into ``static/kvlab-quiz.js``."""
    from kvlab.selfcheck import rules_json

    static.mkdir(parents=True, exist_ok=True)
    out = static / SCRIPT
    grader = (HERE / "static" / SCRIPT).read_text(encoding="utf-8")
    out.write_text(f"window.KVLAB_QUIZ = {rules_json()};\n{grader}", encoding="utf-8")
    return out


def _finished(app, exc):
    if exc is None and app.builder.format == "html":
        write_script(Path(app.outdir) / "_static")


def setup(app):
    app.add_directive("quiz-box", QuizBox)
    app.connect("html-page-context", _page)
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
