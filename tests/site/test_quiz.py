"""The self-check page's answer boxes, in Chromium (issue 24, item 1).

The page's grader (``_static/kvlab-quiz.js``) is a port of ``kvlab.selfcheck.check_answer``
driven by the rules that Python exports at build time. Every case of the Python checker's tables
(``lib/tests/test_selfcheck.py``: TABLE and RATIOS) goes through the page's grader and must get the
Python checker's verdict. Then a reader's path: type into a box, press Enter, read the verdict,
the answer, its reason and the link to the page that derives it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = "book/self-check.html"


def _cases():
    spec = importlib.util.spec_from_file_location(
        "selfcheck_cases", ROOT / "lib" / "tests" / "test_selfcheck.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TABLE, mod.RATIOS


@pytest.fixture(scope="module")
def quiz_page(site, server, browser):
    if not (site / PAGE).is_file():
        pytest.fail(f"{PAGE} is not in the site")
    page = browser.new_page()
    page.route(
        "**/*", lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort()
    )
    page.goto(server.base + PAGE, wait_until="load")
    page.wait_for_function("() => window.kvlabQuiz !== undefined", timeout=20_000)
    yield page
    page.close()


def test_page_grader_agrees_with_python_on_every_case(quiz_page):
    from kvlab.selfcheck import check_answer

    table, ratios = _cases()
    cases = [(typed, answer, unit, None) for typed, answer, unit, _ in table]
    cases += [(typed, list(answer), "", 0) for typed, answer, _ in ratios]
    got = quiz_page.evaluate(
        "cases => cases.map(([t, a, u, tol]) => window.kvlabQuiz.checkAnswer(t, a, u, tol).ok)",
        cases,
    )
    wrong = []
    for (typed, answer, unit, tol), js_ok in zip(cases, got, strict=True):
        py_answer = tuple(answer) if isinstance(answer, list) else answer
        py_ok = check_answer(typed, py_answer, tolerance=tol, unit=unit).ok
        if js_ok is not py_ok:
            wrong.append(f"{typed!r} for {answer!r} {unit!r}: page {js_ok}, Python {py_ok}")
    assert len(cases) >= 60
    assert not wrong, "the page's grader disagrees with kvlab.selfcheck:\n" + "\n".join(wrong)


def test_page_grader_never_throws_on_odd_input(quiz_page):
    odd = [
        "",
        "  ",
        "abc",
        "%%%",
        "1e999",
        "1/0",
        "--",
        "5 /",
        "~",
        "about",
        "1,23,4",
        "40 parsecs",
    ]
    got = quiz_page.evaluate(
        """odd => odd.map(t => { try { return window.kvlabQuiz.checkAnswer(t, 40, '%', null).ok; }
                               catch (e) { return 'threw ' + e; } })""",
        odd,
    )
    assert got == [False] * len(odd), dict(zip(odd, got, strict=True))


def test_every_question_has_a_box(quiz_page):
    from kvlab.selfcheck import questions

    ids = quiz_page.evaluate(
        "() => Array.from(document.querySelectorAll('.kvlab-quiz input')).map(i => i.id)"
    )
    assert sorted(ids) == sorted(f"kvlab-quiz-{q.id}" for q in questions())


def test_a_reader_types_an_answer(site, quiz_page, server):
    box = quiz_page.locator(".kvlab-quiz-q-hit_random")
    derivation = box.locator(".kvlab-quiz-derivation")
    assert not derivation.is_visible(), "the answer shows before any attempt"
    box.locator("input").fill("80")
    box.locator("input").press("Enter")
    feedback = box.locator(".kvlab-quiz-feedback")
    assert feedback.inner_text().startswith("Not quite"), feedback.inner_text()
    assert derivation.is_visible()
    text = derivation.inner_text()
    assert text.startswith("Answer: ") and "%" in text and "prompt tokens" in text, text
    href = derivation.locator("a").first.get_attribute("href")
    target = (site / "book" / href.split("#")[0]).resolve()
    assert target.is_file() and target.name == "p08-04-worked-answer.html", href
    box.locator("input").fill("about 40 %")
    box.locator("button").click()
    assert feedback.inner_text().startswith("Right"), feedback.inner_text()
    ratio = quiz_page.locator(".kvlab-quiz-q-pools")
    ratio.locator("input").fill("6 : 3")
    ratio.locator("input").press("Enter")
    assert ratio.locator(".kvlab-quiz-feedback").inner_text().startswith("Not quite")
    ratio.locator("input").fill("7 : 3")
    ratio.locator("input").press("Enter")
    assert ratio.locator(".kvlab-quiz-feedback").inner_text().startswith("Right")


def test_the_books_own_answers_are_right_on_the_page(quiz_page):
    """Each answer the self-check's worked answers and the cards state (the glued figures named in
    ``stated_as``), typed into its box on the page, is marked right (issue 36: Q7 refused 7 : 3)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_selfcheck_cards import stated_texts

    from kvlab.selfcheck import questions

    refused = []
    for q in questions():
        box = quiz_page.locator(f".kvlab-quiz-q-{q.id}")
        for key, shown in stated_texts(q):
            box.locator("input").fill(shown)
            box.locator("input").press("Enter")
            said = box.locator(".kvlab-quiz-feedback").inner_text()
            if not said.startswith("Right"):
                refused.append(f"{q.id}: {shown!r} ({key}) -> {said}")
        placeholder = box.locator("input").get_attribute("placeholder") or ""
        if q.unit and not placeholder.endswith(q.unit):
            refused.append(f"{q.id}: the box asks {placeholder!r}, the answer is in {q.unit}")
    assert not refused, "; ".join(refused)
