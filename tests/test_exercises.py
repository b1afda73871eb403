"""Every exercise is labelled by difficulty, ordered easy to hard within its page, says what to
produce, and has a dropdown solution (issue 16)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ("Warm-up", "Interview", "Deep dive")
EXERCISE = re.compile(r"```\{exercise\}([^\n]*)\n:label: (\S+)\n(.*?)\n```", re.S)


def pages() -> dict[str, str]:
    out = {}
    for md in sorted((ROOT / "book").glob("*.md")):
        out[md.relative_to(ROOT).as_posix()] = md.read_text()
    for nb in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        out[nb.relative_to(ROOT).as_posix()] = text
    return {k: v for k, v in out.items() if "{exercise}" in v}


PAGES = pages()


def exercises(text: str) -> list[tuple[str, str, str]]:
    return [(t.strip(), label, body) for t, label, body in EXERCISE.findall(text)]


def test_there_are_exercises_and_the_regex_sees_them_all():
    total = sum(v.count("{exercise}") for v in PAGES.values())
    found = sum(len(exercises(v)) for v in PAGES.values())
    assert total >= 45 and found == total


@pytest.mark.parametrize("page", sorted(PAGES))
def test_labelled_ordered_and_say_what_to_produce(page):
    text = PAGES[page]
    ranks = []
    for title, label, body in exercises(text):
        level = next((lv for lv in LEVELS if title.startswith(lv + ":")), None)
        assert level, f"{page}: {label} has no difficulty label ({title!r})"
        ranks.append(LEVELS.index(level))
        assert "**Produce:**" in body, f"{page}: {label} does not say what to produce"
        assert re.search(r"\{solution\} " + re.escape(label) + r"\n:class: dropdown", text), label
    assert ranks == sorted(ranks), f"{page}: exercises not ordered easy to hard: {ranks}"


def test_at_least_five_interview_exercises_have_their_own_solution_notebook():
    new = [
        "p22-02-decode-memory",
        "p22-03-network-load",
        "p22-04-cost-mixed-hardware",
        "p08-04-cpu-tier",
        "p08-07-operations",
        "p22-03-cache-in-pd",
    ]
    for name in new:
        assert (ROOT / "solutions" / f"{name}.ipynb").exists(), name
        assert any(f"solutions/{name}.ipynb" in t for t in PAGES.values()), name
