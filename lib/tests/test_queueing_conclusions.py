"""kvlab.queueing.conclusions: each of Problem 8's router conclusions decided by hand-made results."""

from __future__ import annotations

from kvlab.queueing.conclusions import CONCLUSIONS, check, from_record
from kvlab.seeds import summarise


def _rules(spec):
    """{rule: {metric: Spread}} from {rule: (hit, p95)} with a small spread over 4 seeds."""
    return {k: {"hit_rate": summarise([h - 0.002, h, h + 0.002, h]),
                "ttft_p95_s": summarise([p * 0.99, p, p * 1.01, p]),
                "imbalance": summarise([1.0] * 4)} for k, (h, p) in spec.items()}  # fmt: skip


BOOKLIKE = {
    "roomy": _rules({"sticky": (0.90, 0.10), "guard_live": (0.80, 0.30),
                     "guard_cumulative": (0.899, 0.102), "bounded_ring": (0.85, 0.2),
                     "dynamo": (0.70, 0.40), "random": (0.30, 0.90), "sglang": (0.9, 0.1)}),
    "tight": _rules({"sticky": (0.5, 1.0), "guard_live": (0.45, 0.5), "guard_cumulative": (0.5, 0.8),
                     "guard_live/exact": (0.45, 0.45), "guard_cumulative/exact": (0.5, 0.7),
                     "dynamo": (0.4, 0.6), "random": (0.2, 0.9)}),
    "high": _rules({"sticky": (0.9, 0.2), "guard_live": (0.8, 0.5)}),
}  # fmt: skip


def test_every_conclusion_holds_on_book_like_results():
    assert check(BOOKLIKE) == {c.key: True for c in CONCLUSIONS}


def test_each_conclusion_can_fail():
    flipped = {
        "roomy": _rules({"sticky": (0.80, 0.30), "guard_live": (0.90, 0.10),
                         "guard_cumulative": (0.85, 0.2), "bounded_ring": (0.6, 0.2),
                         "dynamo": (0.70, 0.12), "random": (0.75, 0.1), "sglang": (0.9, 0.1)}),
        "tight": _rules({"sticky": (0.5, 0.4), "guard_live": (0.45, 0.5), "guard_cumulative": (0.5, 0.8),
                         "guard_live/exact": (0.45, 0.55), "guard_cumulative/exact": (0.5, 0.9),
                         "dynamo": (0.4, 0.3), "random": (0.2, 0.9)}),
        "high": _rules({"sticky": (0.9, 0.4), "guard_live": (0.8, 0.5)}),
    }  # fmt: skip
    assert check(flipped) == {c.key: False for c in CONCLUSIONS}


def test_a_missing_case_or_rule_is_none():
    got = check({"roomy": BOOKLIKE["roomy"]})
    assert all(got[c.key] is None for c in CONCLUSIONS if c.case != "roomy")
    no_dynamo = {k: v for k, v in BOOKLIKE["roomy"].items() if k != "dynamo"}
    assert check({"roomy": no_dynamo})["dynamo_tail"] is None


def test_from_record_makes_spreads():
    rec = {"roomy": {"rules": {"sticky": {"hit_rate": [0.8, 0.9], "ttft_p95_s": [0.1, 0.3]}}}}
    s = from_record(rec)["roomy"]["sticky"]
    assert abs(s["hit_rate"].mean - 0.85) < 1e-12 and s["ttft_p95_s"].values == (0.1, 0.3)
