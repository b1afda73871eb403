"""Problem 8's router conclusions (``p08-07-queues-and-latency``) as sentences with their tests, so
that each is checked the same way on every cost model: the book's, the measured one and the engine
model (:func:`check`).

Each :class:`Conclusion` reads the results of :func:`kvlab.queueing.compare` for one case
(``"roomy"``: the chapter's rate with a 400,000-token cache, or the engine's own pool; ``"tight"``:
a small cache, with the guards' exact views as ``"guard_live/exact"`` and
``"guard_cumulative/exact"``; ``"high"``: twice the rate), a mapping ``{rule: {metric: Spread}}``.
Each test is the chapter's own hidden check: some also ask the gap to be larger than the spread
over seeds (:meth:`kvlab.seeds.Spread.differs_from`), others compare means with a margin, so a
change of verdict between two models can be within the spread (say so where it is). Times are
TTFT p95 in seconds, hit rates shares of prompt tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..seeds import Spread, summarise

Results = Mapping[str, Mapping[str, Spread]]


def _h(r: Results, k: str) -> Spread:
    return r[k]["hit_rate"]


def _p(r: Results, k: str) -> Spread:
    return r[k]["ttft_p95_s"]


@dataclass(frozen=True)
class Conclusion:
    """One sentence of the chapter and the test that decides it on one case's results."""

    key: str
    case: str
    text: str
    test: Callable[[Results], bool]


CONCLUSIONS: tuple[Conclusion, ...] = (
    Conclusion("sticky_keeps_hits", "roomy",
               "sticky hashing keeps more hits than the live-load guard (by over 5 points)",
               lambda r: _h(r, "sticky").mean > _h(r, "guard_live").mean + 0.05
               and _h(r, "sticky").differs_from(_h(r, "guard_live"))),
    Conclusion("live_guard_tail", "roomy",
               "the live-load guard's TTFT p95 is over twice sticky's",
               lambda r: _p(r, "guard_live").mean > 2 * _p(r, "sticky").mean
               and _p(r, "guard_live").differs_from(_p(r, "sticky"))),
    Conclusion("cumulative_is_sticky", "roomy",
               "the cumulative-load guard behaves as sticky (hits within 1 point, tail within 10 ms)",
               lambda r: abs(_h(r, "guard_cumulative").mean - _h(r, "sticky").mean) < 0.01
               and abs(_p(r, "guard_cumulative").mean - _p(r, "sticky").mean) < 0.01),
    Conclusion("dynamo_spreads", "roomy",
               "Dynamo's cost keeps fewer hits than the bounded ring, which keeps fewer than sticky",
               lambda r: _h(r, "dynamo").mean < _h(r, "bounded_ring").mean < _h(r, "sticky").mean),
    Conclusion("dynamo_tail", "roomy",
               "Dynamo's TTFT p95 is over three times sticky's",
               lambda r: _p(r, "dynamo").mean > 3 * _p(r, "sticky").mean),
    Conclusion("random_worst", "roomy",
               "random routing keeps the fewest hits and has a longer tail than Dynamo's",
               lambda r: _h(r, "random").mean < _h(r, "dynamo").mean
               and _p(r, "random").mean > _p(r, "dynamo").mean),
    Conclusion("tight_live_shortest", "tight",
               "with a small cache the live-load guard has the shortest tail of the stale-view rules",
               lambda r: all(_p(r, "guard_live").mean <= _p(r, k).mean for k in r
                             if "/" not in k)),
    Conclusion("tight_exact_helps", "tight",
               "with a small cache an exact view of the caches shortens both guards' tails",
               lambda r: _p(r, "guard_live/exact").mean < _p(r, "guard_live").mean
               and _p(r, "guard_cumulative/exact").mean < _p(r, "guard_cumulative").mean),
    Conclusion("tight_sticky_long", "tight",
               "with a small cache sticky's tail is longer than both guards' and Dynamo's",
               lambda r: all(_p(r, "sticky").mean > _p(r, k).mean
                             for k in ("guard_cumulative", "guard_live", "dynamo"))),
    Conclusion("high_live_guard_tail", "high",
               "at twice the rate the live-load guard's tail is still over twice sticky's",
               lambda r: _p(r, "guard_live").mean > 2 * _p(r, "sticky").mean),
)  # fmt: skip


def check(results: Mapping[str, Results]) -> dict[str, bool | None]:
    """{conclusion key: holds?} on ``results`` ({case: compare() output}); None where the case or
    a rule it reads is missing."""
    out: dict[str, bool | None] = {}
    for c in CONCLUSIONS:
        r = results.get(c.case)
        try:
            out[c.key] = None if r is None else bool(c.test(r))
        except KeyError:
            out[c.key] = None
    return out


def from_record(cases: Mapping[str, Mapping]) -> dict[str, dict[str, dict[str, Spread]]]:
    """``tools/p08_engine_routers.py``'s ``cases`` ({case: {"rules": {rule: {metric: [per seed]}}}})
    in :func:`kvlab.queueing.compare`'s form ({case: {rule: {metric: Spread}}})."""
    return {
        case: {
            rule: {m: summarise(v) for m, v in metrics.items()}
            for rule, metrics in doc["rules"].items()
        }
        for case, doc in cases.items()
    }
