"""The mock interviews' data (issue 35, item 4; ``book/mock/*.yml``, ``_ext/kvlab_mock.py``).

Checked without building: every part has a model answer and at least three points; the first part
is the card's own question, which the card states, and its points cover what the card's question
asks; every follow-up is a heading of the follow-ups page, and every heading of that page is a
follow-up of the mock, so each model answer links to a section that exists; no figure is typed
into the data (the card and the follow-ups page give them); each mock has a page that uses it, in
``_toc.yml`` right after its follow-ups page.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(ROOT / "_ext"))

import kvlab_mock  # noqa: E402

MOCKS = sorted((BOOK / "mock").glob("*.yml"))
# What the answer to each card's own question must cover: words its points must contain (any
# one of each group, case ignored).
CARD_TOPICS = {
    "p08": [
        ("causal",),
        ("hash",),
        ("parent",),
        ("adapter",),
        ("salt",),
        ("lru",),
        ("reference count",),
        ("cache-aware",),
        ("sticky", "consistent hashing"),
        ("working set", "working-set"),
        ("tier",),
    ],
    "p22": [
        ("compute-bound",),
        ("bandwidth-bound", "memory-bound"),
        ("interfere",),
        ("per phase", "per-phase"),
        ("tp",),
        ("nixl",),
        ("rdma",),
        ("layer by layer", "layer-wise"),
        ("bytes per token",),
        ("per-message",),
        ("short prompts",),
        ("small fleet",),
        ("prefix hit",),
        ("measured",),
    ],
}
# A figure: a digit that does not end a name (fp8, DeepSeek-V3 and A100 are names).
FIGURE = re.compile(r"(?<![A-Za-z\d])\d")
SUBSECTION = re.compile(r"^### (.+?)\s*$", re.MULTILINE)


def followup_headings(page: Path) -> list[str]:
    return SUBSECTION.findall(page.read_text(encoding="utf-8"))


def test_there_is_a_mock_per_card():
    assert [p.stem for p in MOCKS] == ["p08", "p22"]


@pytest.mark.parametrize("path", MOCKS, ids=lambda p: p.stem)
def test_every_part_has_an_answer_and_points(path):
    data = kvlab_mock.load(path)
    assert data["id"] == path.stem
    for n, part in enumerate(data["parts"]):
        assert len(part["answer"].split()) >= 30, f"part {n}: the model answer is too short"
        assert len(part["points"]) >= 3, f"part {n}"
        assert len(set(part["points"])) == len(part["points"]), f"part {n}: a point twice"


@pytest.mark.parametrize("path", MOCKS, ids=lambda p: p.stem)
def test_the_first_part_is_the_cards_question(path):
    data = kvlab_mock.load(path)
    card = BOOK / f"{data['card']}.md"
    question = kvlab_mock.card_question(card.read_text(encoding="utf-8"))
    assert question and "?" in " ".join(question), f"no question found in {card.name}"
    said = " ".join(data["parts"][0]["points"]).lower()
    missing = [words for words in CARD_TOPICS[path.stem] if not any(w in said for w in words)]
    assert not missing, f"the card question's points leave out {missing}"


@pytest.mark.parametrize("path", MOCKS, ids=lambda p: p.stem)
def test_every_follow_up_links_to_its_section(path):
    data = kvlab_mock.load(path)
    page = BOOK / f"{data['followups']}.md"
    headings = followup_headings(page)
    asked = [part["heading"] for part in data["parts"][1:]]
    assert len(asked) == len(set(asked)), "a follow-up asked twice"
    not_there = [h for h in asked if h not in headings]
    assert not not_there, f"not a heading of {page.name}: {not_there}"
    left_out = [h for h in headings if h not in asked]
    assert not left_out, f"follow-ups of {page.name} the mock leaves out: {left_out}"
    assert asked == [h for h in headings if h in asked], "the follow-ups are out of page order"


@pytest.mark.parametrize("path", MOCKS, ids=lambda p: p.stem)
def test_no_figures_typed_into_the_data(path):
    data = kvlab_mock.load(path)
    found = []
    for n, part in enumerate(data["parts"]):
        for text in [part["answer"], *part["points"]]:
            for m in FIGURE.finditer(text):
                found.append(f"part {n}: {text[max(0, m.start() - 20) : m.end() + 20]!r}")
    assert not found, "figures belong on the card and the follow-ups page:\n" + "\n".join(found)


@pytest.mark.parametrize("path", MOCKS, ids=lambda p: p.stem)
def test_each_mock_has_a_page_after_its_follow_ups(path):
    data = kvlab_mock.load(path)
    page = BOOK / f"{path.stem}-mock.md"
    assert f"```{{mock-interview}} mock/{path.name}" in page.read_text(encoding="utf-8")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [
        entry.get("file")
        for part in toc["parts"]
        for chapter in part["chapters"]
        for entry in [chapter, *chapter.get("sections", [])]
    ]
    i = files.index(f"book/{data['followups']}")
    assert files[i + 1] == f"book/{path.stem}-mock", files[i : i + 2]


def test_the_checks_can_fail(tmp_path):
    """A follow-up without enough points, a part without an answer and a first part that is not
    the card's question are refused; a card without an italic blockquote has no question."""
    good = yaml.safe_load(MOCKS[0].read_text(encoding="utf-8"))

    def refused(change) -> str:
        data = yaml.safe_load(yaml.safe_dump(good))
        change(data)
        bad = tmp_path / "bad.yml"
        bad.write_text(yaml.safe_dump(data), encoding="utf-8")
        with pytest.raises(ValueError) as err:
            kvlab_mock.load(bad)
        return str(err.value)

    assert "points" in refused(lambda d: d["parts"][2].update(points=["one", "two"]))
    assert "no answer" in refused(lambda d: d["parts"][1].update(answer=" "))
    assert "card's question" in refused(lambda d: d["parts"].pop(0))
    assert "heading" in refused(lambda d: d["parts"][3].pop("heading"))
    assert "one line of text" in refused(lambda d: d["parts"][1]["points"].append({"P ": "D"}))
    assert kvlab_mock.card_question("# Title\n\n> A note, not in italics.\n") == []
    assert FIGURE.search("about 40 %") and not FIGURE.search("fp8 KV on an A100")
