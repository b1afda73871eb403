"""The self-check agrees with the cards: it quotes a figure the cards state through the cards' own
key (never a second copy glued elsewhere), every answer that compares or recommends does it with a
card's claim (all true), the sentences the reviews found contradicting the cards are gone, and the
quiz's computed answers are the cards' glued figures."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
from claims import CLAIM_ROLE, HOLDS_SUFFIX  # noqa: E402
from glue_keys import NUM_ROLE  # noqa: E402

from kvlab import claims, selfcheck, units  # noqa: E402

SELF_CHECK = ROOT / "book" / "self-check.md"
CARD_PAGES = ["p08-card.md", "p22-card.md", "p08-deeper.md", "p22-deeper.md"]
#: Figures only the self-check's own questions have (a 16,000-token prompt, a 32,000-token
#: document, the network stream): no card states them, so they may be glued for it.
SELF_CHECK_ONLY = {
    "sc_16k_tokens", "sc_16k_fp16", "sc_16k_fp8", "sc_16k_t", "sc_mem_left",
    "sc_mem_per_request", "sc_stream_bits", "sc_16k_msgs", "sc_16k_t_msgs",
}  # fmt: skip
#: Self-check figures whose printed value equals a card figure's by arithmetic or chance, not
#: because they are the same quantity.
SAME_VALUE_OTHER_QUANTITY = {
    "sc_16k_fp8": "16,000 tokens at fp8 hold as many bytes as 8,000 at fp16",
    "sc_16k_t": "the 16,000-token transfer equals a re-sharded decode GPU's receive time by chance",
}
#: What the reviews (issue 23) found the self-check teaching against the cards.
CONTRADICTIONS = [
    "fix it with a\nload guard",
    "fix it with a load guard",
    "5,000 of the 6,000",
    "5/6",
    "exactly {num}`sc_pd_hit_work`",
]
GLUED = claims.stored_glue(ROOT)


def text() -> str:
    return SELF_CHECK.read_text(encoding="utf-8")


def card_keys() -> set[str]:
    keys: set[str] = set()
    for page in CARD_PAGES:
        src = (ROOT / "book" / page).read_text(encoding="utf-8")
        keys |= set(NUM_ROLE_KEYS.findall(src))
    return keys


NUM_ROLE_KEYS = re.compile(r"\{num\}`([A-Za-z0-9_]+)`")


def test_num_role_pattern_matches_the_extensions():
    assert NUM_ROLE.search("{num}`p22_pd`") and NUM_ROLE_KEYS.findall("{num}`p22_pd`") == ["p22_pd"]


def test_every_figure_the_self_check_quotes_is_a_cards_key_or_its_own():
    stray = sorted(set(NUM_ROLE_KEYS.findall(text())) - card_keys() - SELF_CHECK_ONLY)
    assert not stray, (
        f"the self-check quotes figures no card states, through keys of its own: {stray}; quote "
        "the card's key, or list a figure only the self-check has in SELF_CHECK_ONLY"
    )


def test_self_check_only_figures_are_not_card_figures():
    values = {GLUED[k] for k in card_keys() if k in GLUED}
    doubled = sorted(
        k
        for k in SELF_CHECK_ONLY - set(SAME_VALUE_OTHER_QUANTITY)
        if k in GLUED and GLUED[k] in values
    )
    assert not doubled, f"these self-check keys repeat a card's figure under another key: {doubled}"


def test_self_check_claims_hold_and_are_card_claims():
    keys = set(CLAIM_ROLE.findall(text()))
    assert len(keys) >= 6, "the answers that compare or recommend should be claims"
    on_cards = set()
    for page in CARD_PAGES:
        on_cards |= set(CLAIM_ROLE.findall((ROOT / "book" / page).read_text(encoding="utf-8")))
    assert keys <= on_cards, f"self-check claims no card makes: {sorted(keys - on_cards)}"
    false = sorted(k for k in keys if GLUED.get(k + HOLDS_SUFFIX) != "true")
    assert not false, f"self-check claims that do not hold: {false}"


def test_the_contradictions_are_gone():
    found = [c for c in CONTRADICTIONS if c in text()]
    assert not found, f"the self-check still says: {found}"


def test_quiz_answers_are_the_cards_figures():
    q = {x.id: x for x in selfcheck.questions()}
    assert units.fmt_pct(q["hit_random"].answer / 100) == GLUED["p08_hit_random"]
    assert units.fmt_pct(q["hit_aware"].answer / 100) == GLUED["p08_hit_aware"]
    assert "{} : {}".format(*q["pools"].answer) == GLUED["p22_pd_deploy"]
    assert "floor" in q["hit_random"].reason and "evicted" in q["hit_aware"].reason


# ---- the answer boxes accept the answers the book states (issue 36) -----------------------------

#: A number with its unit in a claim's sentence ("moves 8x more").
QUANTITY = re.compile(r"\d[\d.,]*\s*(?:x|×|%|[kMGT]?i?B(?:/s)?|[kMGT]b/s|ms|s)\b|\d[\d.,]*x")


def stated_texts(q) -> list[tuple[str, str]]:
    """(key, text) for each way the book states ``q``'s answer: a glued figure's text, or, for a
    claim, each quantity in its sentence."""
    out = []
    for key in q.stated_as:
        value = GLUED.get(key)
        assert value is not None, f"{q.id}: {key} is glued by no notebook"
        if key.startswith(("p08_claim_", "p22_claim_")):
            # the sentence's quantities in the question's family of units ("8x" for a factor,
            # not the "70B" of the model's name)
            family = selfcheck.UNITS[q.unit][0]
            for m in QUANTITY.finditer(value):
                try:
                    unit = selfcheck.parse_quantity(m.group().strip())[1]
                except ValueError:
                    continue
                if selfcheck.UNITS[unit][0] == family:
                    out.append((key, m.group().strip()))
        else:
            out.append((key, value))
    return out


def question_sections() -> dict[str, str]:
    """The self-check page's text for each question id: the numbered section holding its box."""
    sections = re.split(r"(?m)^## ", text())
    out = {}
    for sec in sections:
        for qid in re.findall(r"```\{quiz-box\} (\w+)", sec):
            out[qid] = sec
    return out


def test_every_question_says_where_the_book_states_its_answer():
    missing = [q.id for q in selfcheck.questions() if not q.stated_as]
    assert not missing, (
        f"questions with no stated_as (the glued keys that state the answer): {missing}"
    )


def test_every_answer_the_book_states_is_accepted():
    """What a question's own worked answer (and the card it quotes) gives is right in its box."""
    refused = []
    for q in selfcheck.questions():
        texts = stated_texts(q)
        assert texts, f"{q.id}: no quantity found in {q.stated_as}"
        for key, shown in texts:
            v = selfcheck.check_answer(shown, q.answer, q.tolerance, q.unit)
            if not v.ok:
                refused.append(f"{q.id}: {shown!r} ({key}) -> {v.message}")
    assert not refused, "the boxes refuse the book's own answers: " + "; ".join(refused)


def test_stated_answers_are_in_the_questions_own_worked_answer():
    sections = question_sections()
    absent = []
    for q in selfcheck.questions():
        sec = sections.get(q.id, "")
        answer = sec.split("```{admonition} Answer", 1)[-1] if sec else ""
        for key in q.stated_as:
            if f"`{key}`" not in answer:
                absent.append(f"{q.id}: {key}")
    assert not absent, f"keys named in stated_as but not in the question's worked answer: {absent}"


def test_the_deployed_pools_are_the_cards():
    q = {x.id: x for x in selfcheck.questions()}["pools"]
    assert "p22_pd_deploy" in card_keys()
    assert "{} : {}".format(*q.answer) == GLUED["p22_pd_deploy"]
    assert "busy" in q.prompt


def test_a_rate_is_asked_and_shown_in_a_rate_unit():
    data = json.loads(selfcheck.rules_json())
    shown = {q["id"]: q["shown"] for q in data["questions"]}
    q = {x.id: x for x in selfcheck.questions()}["stream"]
    assert q.unit == "GB/s" and shown["stream"].endswith("GB/s"), shown["stream"]
    assert selfcheck.check_answer("19.7 GB/s", q.answer, unit=q.unit).ok
    assert selfcheck.check_answer("157 Gb/s", q.answer, unit=q.unit).ok
    assert not selfcheck.check_answer("19.7 Gb/s", q.answer, unit=q.unit).ok


def test_the_acceptance_check_can_fail():
    # the old quiz asked for the arithmetic's pools and refused the deployed 7 : 3
    assert not selfcheck.check_answer(GLUED["p22_pd_deploy"], (6, 3), 0.0, "").ok
    fake = selfcheck.Question("x", "?", 10.0, "GB", None, "", "", "", ("sc_16k_fp16",))
    assert not selfcheck.check_answer(stated_texts(fake)[0][1], fake.answer, None, fake.unit).ok
