"""Problem 8's spoken answer ("How to say it in the interview") is short, sayable and checked:
every line of its quoted answers is one {claim}`key` role, the claims hold in the notebooks'
stored outputs, and the full answer, read with its claims filled in, has at most 250 words and
6 numbers."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "book" / "p08-card.md"
sys.path.insert(0, str(ROOT / "_ext"))
from claims import CLAIM_ROLE, HOLDS_SUFFIX  # noqa: E402
from glue_keys import key_index  # noqa: E402

MAX_WORDS = 250
MAX_NUMBERS = 6
#: A number as said aloud: digits, with thousands separators or a decimal point ("12.6", "8,000").
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    rest = text[start + len(heading) :]
    nxt = re.search(r"^## ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


def quotes(text: str) -> list[list[str]]:
    """The blockquotes of ``text``, each as its non-empty lines without the '>' marker."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith(">"):
            body = line[1:].strip()
            if body:
                current.append(body)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def glued_text(nb_path: Path, key: str) -> str | None:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for out in cell.get("outputs", []) or []:
            meta = (out.get("metadata") or {}).get("scrapbook") or {}
            if meta.get("name") == key:
                prefix = meta.get("mime_prefix", "")
                raw = out["data"][prefix + "text/plain"]
                raw = "".join(raw) if isinstance(raw, list) else raw
                value = ast.literal_eval(raw)
                return value if isinstance(value, str) else str(value)
    return None


SPOKEN = quotes(section(CARD.read_text(encoding="utf-8"), "## How to say it in the interview"))
OWNER, _ = key_index(ROOT)


def sentence(key: str) -> str:
    assert key in OWNER, f"no notebook decides claim {key!r}"
    text = glued_text(OWNER[key], key)
    assert text is not None, key
    return text


def test_the_section_has_a_full_and_a_60_second_answer():
    assert len(SPOKEN) >= 2, "expected the spoken answer and its 60-second version as blockquotes"
    assert len(SPOKEN[1]) < len(SPOKEN[0])


def test_every_line_of_the_spoken_answers_is_one_claim():
    for block in SPOKEN:
        for line in block:
            assert CLAIM_ROLE.fullmatch(line), f"not a single {{claim}} role: {line!r}"


def test_every_claim_of_the_spoken_answers_holds():
    for block in SPOKEN:
        for line in block:
            key = CLAIM_ROLE.fullmatch(line).group(1)  # type: ignore[union-attr]
            sentence(key)
            assert glued_text(OWNER[key], key + HOLDS_SUFFIX) == "true", (
                f"claim {key!r} is not true"
            )


def counts(block: list[str]) -> tuple[int, int]:
    text = " ".join(sentence(CLAIM_ROLE.fullmatch(line).group(1)) for line in block)  # type: ignore[union-attr]
    return len(text.split()), len(NUMBER.findall(text))


def test_spoken_answer_is_at_most_250_words_and_6_numbers():
    words, numbers = counts(SPOKEN[0])
    assert words <= MAX_WORDS, f"the spoken answer has {words} words (at most {MAX_WORDS})"
    assert numbers <= MAX_NUMBERS, (
        f"the spoken answer has {numbers} numbers (at most {MAX_NUMBERS})"
    )


def test_the_counter_can_fail():
    assert len(NUMBER.findall("12.6 % of 8,000 chats in 5 minutes, 156x")) == 4
    assert quotes("a\n> one\n> two\n\n> three\n") == [["one", "two"], ["three"]]


def test_every_claim_the_card_uses_holds_in_the_stored_outputs():
    keys = CLAIM_ROLE.findall(CARD.read_text(encoding="utf-8"))
    assert len(keys) >= 10
    for key in keys:
        sentence(key)
        assert glued_text(OWNER[key], key + HOLDS_SUFFIX) == "true", f"claim {key!r} is not true"
