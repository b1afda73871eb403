"""The quiz's questions, the rules exported for the site, and no answer given away.

Issue 21: the quiz's heading read "the 40 % question" and its instructions used an answer (2,375)
as a formatting example. Here every heading of the self-check page and the quiz notebook, and
every instruction above the first question, is scanned for a figure that the quiz would accept
as one of its answers, or that the self-check page sets in bold as an answer.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvlab.selfcheck import (
    PERCENT_POINTS,
    RELATIVE,
    RULES,
    check_answer,
    parse_quantity,
    questions,
    rules_json,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "book" / "self-check.md"
QUIZ = ROOT / "notebooks" / "self-check-quiz.ipynb"
# A figure as it may appear in prose: a ratio, a fraction, or a number with an optional unit.
FIGURE = re.compile(
    r"\d+\s*:\s*\d+|\d[\d,.]*\s*/\s*\d[\d,.]*|\d(?:[\d,.]|\s(?=\d{3}\b))*\s?(?:%|[kMGT]i?[Bb]\b|ms\b|s\b|x\b|×)?"
)
NUM = re.compile(r"\{num\}`([A-Za-z0-9_]+)`")
ANSWER_BODY = re.compile(r"```\{admonition\} Answer\n:class: dropdown\n(.*?)```", re.S)


def figures(text: str) -> list[str]:
    """Every figure in ``text`` (a heading's question number "5. " and "Problem 8" are names)."""
    text = re.sub(r"^#+\s*\d+\.\s", "", text, flags=re.M)
    text = re.sub(r"Problem \d+", "", text)  # the problems' names
    text = re.sub(r"\{[a-z]+\}`[^`]*`", "", text)  # roles: their targets are not figures
    return [f.strip().rstrip(".,") for f in FIGURE.findall(text)]


def headings_and_instructions() -> dict[str, str]:
    """Where an answer must not appear: headings, and the text above the first question."""
    page = PAGE.read_text(encoding="utf-8")
    out = {"self-check.md: intro": page.split("\n## ", 1)[0]}
    out["self-check.md: headings"] = "\n".join(
        line for line in page.splitlines() if line.startswith("#")
    )
    nb = json.loads(QUIZ.read_text(encoding="utf-8"))
    md = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    out["quiz: intro"] = md[0]
    out["quiz: headings"] = "\n".join(
        line for cell in md for line in cell.splitlines() if line.startswith("#")
    )
    return out


def glued_values() -> dict[str, str]:
    """Every glued text value of the book's notebooks, by key."""
    values = {}
    for nb_path in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]:
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                meta = (out.get("metadata") or {}).get("scrapbook") or {}
                prefix = meta.get("mime_prefix", "")
                text = (out.get("data") or {}).get(prefix + "text/plain")
                if meta.get("name") and text:
                    plain = "".join(text) if isinstance(text, list) else text
                    try:
                        values[meta["name"]] = str(ast.literal_eval(plain))
                    except (ValueError, SyntaxError):
                        values[meta["name"]] = plain
    return values


def answers() -> list[tuple[str, object, str]]:
    """(name, answer, unit): the quiz's answers, and every figure the self-check page's answers
    quote that its questions do not state (2,375 cached tokens, for example)."""
    out: list[tuple[str, object, str]] = [(q.id, q.answer, q.unit) for q in questions()]
    glued = glued_values()
    page = PAGE.read_text(encoding="utf-8")
    bodies = ANSWER_BODY.findall(page)
    asked = ANSWER_BODY.sub("", page)
    keys = {k for body in bodies for k in NUM.findall(body)}
    for key in sorted(keys):
        text = glued[key]
        if text in asked or f"{{num}}`{key}`" in asked:
            continue  # stated in a question: a given, not an answer
        ratio = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
        if ratio:
            out.append((key, (int(ratio[1]), int(ratio[2])), ""))
            continue
        try:
            value, unit = parse_quantity(text)
        except ValueError:
            continue  # not a figure a reader would type (a phrase, a range)
        out.append((key, value, unit))
    return out


def giveaways(texts: dict[str, str]) -> list[str]:
    found = []
    for where, text in texts.items():
        for fig in figures(text):
            for name, answer, unit in answers():
                if check_answer(fig, answer, unit=unit).ok:
                    found.append(f"{where}: {fig!r} is the answer to {name}")
    return found


def test_no_answer_in_a_heading_or_an_instruction():
    assert giveaways(headings_and_instructions()) == []


def test_the_scan_can_fail():
    # the old heading and the old formatting example are caught
    assert giveaways({"old heading": "## Problem 8: the 40 % question"})
    assert giveaways({"old example": "thousands as `2,375` or `2 375`"})
    assert giveaways({"ratio": "ratios as `2 : 1`"})
    assert not giveaways({"fine": "## 8. Memory on the decode side, 16,000 tokens"})


def test_every_question_accepts_its_own_shown_answer():
    data = json.loads(rules_json())
    by_id = {q["id"]: q for q in data["questions"]}
    for q in questions():
        shown = by_id[q.id]["shown"]
        assert check_answer(shown, q.answer, tolerance=q.tolerance, unit=q.unit).ok, q.id
        assert q.reason and q.derived_in and q.prompt.endswith("?")
    assert len(by_id) == len(questions())


def test_rules_are_plain_data_and_match_the_checker():
    data = json.loads(rules_json())
    assert data["rules"]["percent_points"] == PERCENT_POINTS == 1.0
    assert data["rules"]["relative"] == RELATIVE == 0.02
    for key in ("noise", "approx", "denominator", "number", "space_groups", "ratio"):
        re.compile(RULES[key]["source"])
    assert data["rules"]["units"]["Gb"] == ["bytes", 1e9 / 8]


@pytest.mark.parametrize("qid", [q.id for q in questions()])
def test_derivation_pages_exist(qid):
    q = {x.id: x for x in questions()}[qid]
    assert (ROOT / f"{q.derived_in}.ipynb").is_file() or (ROOT / f"{q.derived_in}.md").is_file()
