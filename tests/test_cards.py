"""The interview cards are made of checked claims and stay short.

For both cards: at least 20 distinct claims, each true in the deciding notebook's stored outputs;
every line of the spoken answers is one claim (so no recommendation is said without one); the
spoken answer has at most 250 words and 6 numbers; the takeaway box at most 120 words; the core
card about 1,500 words; the diagram it shows is glued, with alt text, by its own notebook; its
stated reading time is the one its word count gives. And the mechanism bites: moving one constant
of the book's cost model (the decode step's fixed cost, to the measured calibration's) turns a
card claim false.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import CLAIM_ROLE, HOLDS_SUFFIX  # noqa: E402
from glue_keys import key_index  # noqa: E402
from test_p08_spoken_answer import NUMBER, glued_text, quotes, section  # noqa: E402

from kvlab import claims as kvclaims  # noqa: E402

CARDS = {
    "p08": (ROOT / "book" / "p08-card.md", ROOT / "notebooks" / "p08-04-worked-answer.ipynb"),
    "p22": (ROOT / "book" / "p22-card.md", ROOT / "notebooks" / "p22-02-worked-answer.ipynb"),
}
MIN_CLAIMS = 20
MAX_SPOKEN_WORDS, MAX_SPOKEN_NUMBERS = 250, 6
MAX_TAKEAWAY_WORDS = 120
#: "At most about 1,500 words": the core card with every claim and number filled in.
MAX_CORE_WORDS = {"p22": 1_550, "p08": 1_550}
OWNER, _ = key_index(ROOT)
GLUED = kvclaims.stored_glue(ROOT)
SPOKEN_HEADING = "## How to say it in the interview"


def card_text(name: str) -> str:
    return CARDS[name][0].read_text(encoding="utf-8")


def card_claims(name: str) -> list[str]:
    return sorted(set(CLAIM_ROLE.findall(card_text(name))))


def holds(key: str) -> bool:
    assert key in OWNER, f"no notebook decides claim {key!r}"
    return glued_text(OWNER[key], key + HOLDS_SUFFIX) == "true"


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_card_has_at_least_20_claims_all_true(name):
    keys = card_claims(name)
    assert len(keys) >= MIN_CLAIMS, f"{name} card has {len(keys)} claims (at least {MIN_CLAIMS})"
    false = [k for k in keys if not holds(k)]
    assert not false, f"claims the {name} card uses that are not true: {false}"


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_every_line_of_the_spoken_answers_is_a_claim(name):
    blocks = quotes(section(card_text(name), SPOKEN_HEADING))
    assert len(blocks) >= 2 and len(blocks[1]) < len(blocks[0]), "answer and 60-second version"
    bare = [line for block in blocks for line in block if not CLAIM_ROLE.fullmatch(line)]
    assert not bare, f"spoken lines without a claim role: {bare}"


def spoken_counts(name: str) -> tuple[int, int]:
    block = quotes(section(card_text(name), SPOKEN_HEADING))[0]
    text = " ".join(GLUED[CLAIM_ROLE.fullmatch(line).group(1)] for line in block)  # type: ignore[union-attr]
    return len(text.split()), len(NUMBER.findall(text))


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_spoken_answer_is_short_and_sayable(name):
    words, numbers = spoken_counts(name)
    assert words <= MAX_SPOKEN_WORDS, f"{name}: {words} words (at most {MAX_SPOKEN_WORDS})"
    assert numbers <= MAX_SPOKEN_NUMBERS, (
        f"{name}: {numbers} numbers (at most {MAX_SPOKEN_NUMBERS})"
    )


def test_a_spoken_line_without_a_claim_is_caught():
    text = "## How to say it in the interview\n\n> {claim}`a`\n> I'd use sticky routing.\n\n> {claim}`a`\n"
    blocks = quotes(section(text, SPOKEN_HEADING))
    assert [line for b in blocks for line in b if not CLAIM_ROLE.fullmatch(line)] == [
        "I'd use sticky routing."
    ]


def takeaway(text: str) -> str:
    m = re.search(r"```\{admonition\} Takeaway\n(?::[a-z-]+:[^\n]*\n)*(.*?)```", text, re.S)
    assert m, "the card opens with a Takeaway admonition"
    return m.group(1)


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_takeaway_box_first_and_short(name):
    text = card_text(name)
    assert text.index("{admonition} Takeaway") < text.index("\n## ")
    n = kvclaims.words(kvclaims.page_text(takeaway(text), GLUED))
    assert n <= MAX_TAKEAWAY_WORDS, f"{name} takeaway has {n} words (at most {MAX_TAKEAWAY_WORDS})"


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_core_card_is_about_1500_words(name):
    n = kvclaims.words(kvclaims.page_text(card_text(name), GLUED))
    assert n <= MAX_CORE_WORDS[name], f"{name} card has {n} words (at most {MAX_CORE_WORDS[name]})"


DIAGRAMS = {"p08": "p08_routing", "p22": "p22_disaggregation"}


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_diagram_is_drawn_by_the_cards_notebook_with_alt_text(name):
    text = card_text(name)
    m = re.search(r"```\{figure\} (images/\S+\.svg)\n(?::[a-z]+:[^\n]*\n)*", text)
    assert m, f"the {name} card shows no diagram from book/images/"
    alt = re.search(r"^:alt: (.+)$", m.group(0), re.M)
    assert alt and len(alt.group(1).split()) >= 15, "the card's diagram needs alt text"
    assert text.index(m.group(1)) < text.index("\n## "), "the diagram belongs at the top"
    svg = ROOT / "book" / m.group(1)
    assert svg.is_file(), f"{svg} is missing: execute {CARDS[name][1].name}"
    nb = json.loads(CARDS[name][1].read_text(encoding="utf-8"))
    cells = [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code"
        and f"diagrams.{DIAGRAMS[name]}()" in "".join(c["source"])
        and f"../book/{m.group(1)}" in "".join(c["source"])
    ]
    assert len(cells) == 1, f"{CARDS[name][1].name} does not draw and save {m.group(1)}"
    shown = cells[0]["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
    assert len(shown.split()) >= 15, "the notebook's figure needs alt text too"


@pytest.mark.parametrize("name", ["p08", "p22"])
def test_committed_diagram_is_what_the_code_draws(name):
    import matplotlib

    matplotlib.use("Agg")
    from kvlab.plots import diagrams, use_style

    svg = ROOT / "book" / "images" / f"{name}-diagram.svg"
    stored = svg.read_bytes()
    if f"Matplotlib v{matplotlib.__version__}".encode() not in stored:
        pytest.skip("the committed SVG was drawn by another matplotlib version")
    use_style()
    assert diagrams.svg_bytes(getattr(diagrams, DIAGRAMS[name])()) == stored, (
        f"{svg.name} is stale: re-execute {CARDS[name][1].name}"
    )


def test_diagram_arguments_are_checked(tmp_path):
    from kvlab.plots import diagrams

    with pytest.raises(ValueError):
        diagrams.p08_routing(replicas=1)
    with pytest.raises(ValueError):
        diagrams.save_svg(diagrams.p22_disaggregation(), tmp_path / "x.png")
    fig = diagrams.p22_disaggregation()
    assert diagrams.save_svg(fig, tmp_path / "d.svg") is True
    assert diagrams.save_svg(fig, tmp_path / "d.svg") is False


FIRST_READ = ["book/start-here.md", "book/p08-card.md", "book/p22-card.md",
              "notebooks/p08-04-worked-answer.ipynb", "notebooks/p22-02-worked-answer.ipynb",
              "book/self-check.md"]  # fmt: skip
READING = {
    "p08": ("p08_card_reading", ["book/p08-card.md"]),
    "p08_deeper": ("p08_deeper_reading", ["book/p08-deeper.md"]),
    "p22": ("p22_card_reading", ["book/p22-card.md"]),
    "p22_deeper": ("p22_deeper_reading", ["book/p22-deeper.md"]),
    "first_read": ("book_first_read", FIRST_READ),
}


@pytest.mark.parametrize("name", sorted(READING))
def test_reading_times_are_the_word_counts(name):
    key, pages = READING[name]
    _, minutes = kvclaims.reading_time(ROOT, pages)
    assert GLUED[key] == f"about {minutes} minutes", (
        f"{key} says {GLUED[key]!r} but the pages' word count gives {minutes} minutes: re-execute "
        f"{OWNER[key].name}"
    )


def test_home_page_states_the_computed_reading_times():
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    for key in ("book_first_read", "book_deep_read", "p08_card_reading", "p22_card_reading"):
        assert f"{{num}}`{key}`" in intro, key
    assert "about an hour" not in intro and "a weekend" not in intro


def test_reading_time_helpers():
    assert kvclaims.reading_minutes(0) == 1 and kvclaims.reading_minutes(1_000) == 5
    with pytest.raises(ValueError):
        kvclaims.reading_minutes(-1)
    text = "A {claim}`k` and {num}`n`; {term}`GQA <GQA>` {cite}`x`.\n```{admonition} T\n:class: tip\n```"
    assert kvclaims.page_text(text, {"k": "one two three", "n": "4 GB"}).split() == [
        "A", "one", "two", "three", "and", "4", "GB;", "GQA", ".",
    ]  # fmt: skip
    assert kvclaims.words("a - b 3") == 3


# -- the mechanism bites ---------------------------------------------------------------------------


def test_moving_one_constant_turns_a_p22_card_claim_false():
    from kvlab import costs

    measured = costs.cost_model("measured", gpu="H100-SXM", tp=8)
    used = set(card_claims("p22"))
    now = {c.key: c for c in kvclaims.p22_card_claims(costs.BOOK, measured)}
    assert all(now[k].holds for k in now if k in used)
    moved = dataclasses.replace(costs.BOOK, decode_base_s=measured.decode_base_s)
    after = {c.key: c for c in kvclaims.p22_card_claims(moved, measured)}
    flipped = sorted(k for k in used & set(after) if now[k].holds and not after[k].holds)
    assert flipped, "no card claim depends on the decode step's fixed cost"
    assert "p22_claim_calibrations_disagree" in flipped


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_diagram_labels_fit_and_do_not_collide(name):
    """Every label of a card's diagram is at least MIN_FONT_PT, inside the figure, and clear of
    every other label (issue 36: labels were 8-11 px at 1,280 px)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.text import Text

    from kvlab.plots import diagrams, use_style

    use_style()
    fig = getattr(diagrams, DIAGRAMS[name])()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    small = [t.get_text() for t in texts if t.get_fontsize() < diagrams.MIN_FONT_PT]
    assert not small, f"{name}: labels under {diagrams.MIN_FONT_PT} pt: {small}"
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    outside = [
        s
        for s, b in boxes
        if not fig.bbox.contains(b.x0, b.y0) or not fig.bbox.contains(b.x1, b.y1)
    ]
    assert not outside, f"{name}: labels cut by the figure's edge: {outside}"
    clash = [(a, c) for i, (a, b) in enumerate(boxes) for c, d in boxes[i + 1 :] if b.overlaps(d)]
    assert not clash, f"{name}: labels drawn over each other: {clash}"


# -- Problem 8 answers its question in the interview's order (issue 35) ----------------------------

P08_PARTS = {
    "key": ("p08_claim_key",),
    "evict": ("p08_claim_evict",),
    "route": ("p08_claim_route_tight", "p08_claim_tier_routing", "p08_claim_roomy_sticky_both"),
}


def test_p08_both_spoken_answers_name_the_key_the_eviction_and_the_routing():
    blocks = quotes(section(card_text("p08"), SPOKEN_HEADING))[:2]
    for block in blocks:
        keys = {CLAIM_ROLE.fullmatch(line).group(1) for line in block}  # type: ignore[union-attr]
        missing = [part for part, options in P08_PARTS.items() if not keys & set(options)]
        assert not missing, f"a spoken answer of the p08 card leaves out: {missing}"


def test_p08_general_answer_first_and_without_the_scenarios_numbers():
    text = card_text("p08")
    assert text.index("## The general answer") < text.index("## The worked scenario")
    general = section(text, "## The general answer")
    assert "{num}`" not in general, "the general answer quotes the scenario's figures"
    for key in CLAIM_ROLE.findall(general):
        said = GLUED[key]
        assert "%" not in said and not re.search(r"\d,\d{3}", said), (key, said)
    for part in ("**Why prefixes share.**", "**Key.**", "**Evict.**", "**Route.**"):
        assert part in general, part


def test_p08_worked_scenario_states_its_assumptions_and_their_sensitivity():
    worked = section(card_text("p08"), "## The worked scenario")
    for key in ("p08_claim_pool", "p08_claim_working_set", "p08_claim_verdict_depends"):
        assert f"{{claim}}`{key}`" in worked, key
    table = [line for line in worked.splitlines() if line.startswith("| ") and "{num}" in line]
    assert len(table) >= 3, "a sensitivity table of glued figures"
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        assert all(re.fullmatch(r"\{num\}`p08_sens_[a-z0-9_]+`", c) for c in cells), line
    for key in re.findall(r"\{num\}`(p08_sens_[a-z0-9_]+)`", worked):
        assert OWNER[key].name == "p08-04-worked-answer.ipynb", key


def test_moving_the_return_time_turns_the_p08_verdict_false():
    from kvlab.assumptions import P8

    used = set(card_claims("p08"))
    now = {c.key: c for c in kvclaims.p08_card_claims()}
    assert all(now[k].holds for k in now if k in used)
    quick = {c.key: c for c in kvclaims.p08_card_claims(dataclasses.replace(P8, return_s=60))}
    flipped = sorted(k for k in used & set(quick) if now[k].holds and not quick[k].holds)
    assert "p08_claim_working_set" in flipped


# -- Problem 22: the answer issue 35 asked for -----------------------------------------------------


def p22_spoken_text() -> str:
    block = quotes(section(card_text("p22"), SPOKEN_HEADING))[0]
    return " ".join(GLUED[CLAIM_ROLE.fullmatch(line).group(1)] for line in block)  # type: ignore[union-attr]


def test_p22_general_answer_comes_before_the_scenario():
    text = card_text("p22")
    general, worked = text.index("## The general answer"), text.index("## The worked scenario")
    assert general < worked
    for part in (
        "**Why split.**",
        "**How the KV cache moves.**",
        "**What it costs.**",
        "**When not to.**",
    ):
        assert general < text.index(part) < worked, part
    # the general answer states no figure of the scenario
    body = text[general:worked]
    assert not re.search(r"\{(num|claim)\}`", body), "the general answer glues a scenario figure"


def test_p22_spoken_answer_names_the_layout_per_phase_and_the_shared_layout():
    spoken = p22_spoken_text()
    assert "TP 2" in spoken and "TP 4" in spoken, "the spoken answer names each pool's TP"
    assert "one parallelism layout must serve both phases" in spoken
    assert "goodput" in spoken and "not throughput" in spoken


def test_p22_layout_gains_are_the_measured_runs():
    """The card's 1.11x and 1.58x (p22-02) are the figures p22-06 computes on the same seeds."""
    spoken = GLUED["p22_claim_layout_per_phase"]
    assert GLUED["p22m_gain_measured"] in spoken and GLUED["p22m_tp_gain"] in spoken


def test_p22_goodput_is_credited_to_distserve_alone():
    for page in ("p22-card.md", "p22-deeper.md", "p22-followups.md"):
        text = (ROOT / "book" / page).read_text(encoding="utf-8")
        for para in re.split(r"\n\s*\n", text):
            for sentence in re.split(r"(?<=[.;])\s", para):
                if "goodput" in sentence.lower() and "patel2024splitwise" in sentence:
                    raise AssertionError(f"{page}: goodput cited to Splitwise: {sentence!r}")


def test_p22_throughput_is_separated_from_goodput_with_vllms_docs():
    text = card_text("p22")
    assert "{cite}`vllm_disagg`" in text and "throughput" in text
    assert kvclaims.words(GLUED["p22_claim_goodput_not_throughput"]) > 0
    assert holds("p22_claim_goodput_not_throughput") and holds("p22_claim_throughput_figures")


def test_p22_line_rate_times_come_with_their_messages():
    """Wherever the card or the deeper page gives the NIC-per-GPU line-rate time, the message count
    and the time with messages are given too."""
    for page in ("p22-card.md", "p22-deeper.md"):
        text = (ROOT / "book" / page).read_text(encoding="utf-8")
        if "p22_t_nic_each" in text or "p22_claim_mistake_free" in text:
            assert "p22_t_msgs" in text or "p22_claim_messages" in text, page
    assert GLUED["p22_t_msgs"] in GLUED["p22_claim_mistake_free"]


def test_p22_multi_turn_reuse_names_the_decode_side():
    for page in ("p22-card.md", "p22-deeper.md"):
        text = (ROOT / "book" / page).read_text(encoding="utf-8")
        assert re.search(r"last answer.{0,80}decode side", text, re.S), page


def test_p22_pools_are_sized_by_one_rule():
    """The card's measured P : D and the A100 line's all-H100 plan come from
    pool_sizing.deployed_pools."""
    from kvlab import costs, pool_sizing
    from kvlab.assumptions import P22_POOLS as p

    measured = costs.cost_model("measured", gpu="H100-SXM", tp=8)
    plan = pool_sizing.deployed_pools(
        measured, p.rate_rps, p.prompt_tokens, p.output_tokens, p.tpot_s
    )
    assert f"{plan.prefill} : {plan.decode} measured" in GLUED["p22_claim_mistake_fixed"]
    per_k = 1000 * (plan.prefill + plan.decode) * 8 * 4.0 / 3600 / p.rate_rps
    assert GLUED["p22_meas_meas_a100_h100_per_k"] == f"{per_k:.2f}"


def test_p22_aiconfigurator_ran_every_case_the_card_states():
    doc = json.loads((ROOT / "data" / "costs" / "aic_cases.json").read_text(encoding="utf-8"))
    cases = doc["cases"]
    for name in (
        "hits_72",
        "short_80",
        "shift_80",
        "worked_16",
        "worked_24",
        "worked_32",
        "worked_40",
    ):
        assert name in cases, name
        assert cases[name]["command"].startswith("aiconfigurator cli default"), name
        assert {"agg", "disagg"} <= set(cases[name]["best_configs"]), name
    text = card_text("p22")
    for row in ("worked", "hits", "small", "short"):
        assert f"p22_sens_{row}_aic" in text and GLUED[f"p22_sens_{row}_aic"] != "—", row


def test_p22_gpu_count_is_simulated_not_divided():
    nb = json.loads(
        (ROOT / "notebooks" / "p22-06-measured-costs.ipynb").read_text(encoding="utf-8")
    )
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "def gpus_for(" not in src and "pdsim.attainment(" in src
    assert "p22m_claim_gpus20" in card_text("p22") and holds("p22m_claim_gpus20")


def test_p22_short_prompts_say_which_calibration_decides():
    sc = (ROOT / "book" / "self-check.md").read_text(encoding="utf-8")
    assert "Short prompts alone are not a" not in sc
    assert "{claim}`p22_claim_short_prompts`" in sc and holds("p22_claim_short_prompts")
    assert "measured costs decide" in GLUED["p22_claim_short_prompts"]
