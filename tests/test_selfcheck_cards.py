"""The self-check agrees with the cards: it quotes a figure the cards state through the cards' own
key (never a second copy glued elsewhere), every answer that compares or recommends does it with a
card's claim (all true), the sentences the reviews found contradicting the cards are gone, and the
quiz's computed answers are the cards' glued figures."""

from __future__ import annotations

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
    "sc_mem_per_request", "sc_stream_bits",
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
    assert "{} : {}".format(*q["pools"].answer) == GLUED["p22_pd"]
    assert "floor" in q["hit_random"].reason and "evicted" in q["hit_aware"].reason
