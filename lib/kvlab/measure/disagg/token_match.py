"""Lab 3's equality check: a split run against the colocated run, token by token, with a stated
tolerance on log-probabilities (:func:`compare_greedy`).

Why not plain equality: the decode engine of a split gets the prompt's KV from the prefill engine
and computes only the last prompt position again, with the kernel vLLM uses for one new token;
the colocated run computed that position inside its prefill, with another kernel. In fp32 both are
right, but they add the same products in another order and can differ in the last bits. On a GPU
it is worse: Triton's fp32 ``tl.dot`` runs as TF32 (10 mantissa bits) by default on compute
capability 8.0 and later, unless ``TRITON_F32_DEFAULT=ieee`` (which the GPU engines set,
:func:`kvlab.measure.disagg.engine_config.engine_env`). When two candidates for the next token are
nearly tied, such a difference can swap them, and greedy decoding then continues from another
token: the texts part ways although the KV was right.

So a differing token is accepted only as a near tie, judged from both runs' own log-probabilities
of their top candidates: at the first position where the tokens differ, each run must have the
other run's token among its top candidates, the two candidates within ``tol`` of each other in
both runs, and each candidate's log-probability equal across the runs within ``tol``. Anything
else is rejected: a differing token without a near tie, a matching token whose log-probability
moved by more than ``tol``, a run that stops earlier. After an accepted tie nothing more is
compared: the two runs now continue from different tokens. A wrong KV (another prompt's) moves the
distribution itself, far beyond fp32 rounding, and fails.

:data:`LOGPROB_TOL` states the tolerance per device: on the CPU the two kernels agree to about
5e-7 (the recorded run), and 1e-5 is kept; on a GPU, 1e-2 nats, two candidates whose probabilities
are within 1 % of each other: far above what reordering fp32 sums moves (the GPU engines run IEEE
fp32, so TF32 is not in play; no GPU run has measured the gap yet); the lab's control, another
prompt's KV, is held to this same comparison and must fail it.

Rules: pure functions of plain lists (the values :class:`kvlab.measure.disagg.split_results.Run`
holds); the same code judges the CPU runs and the GPU runs; nothing here starts a process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..._validate import check_choice, check_number

#: The tolerance, in nats (natural-log units), per device where the split runs (see above).
LOGPROB_TOL = {"cpu": 1e-5, "cuda": 1e-2}


def tolerance_for(device: str) -> float:
    """:data:`LOGPROB_TOL` of ``device`` (``"cpu"`` or ``"cuda"``)."""
    check_choice("device", device, tuple(LOGPROB_TOL))
    return LOGPROB_TOL[device]


@dataclass
class Verdict:
    """One prompt's comparison of two greedy runs."""

    ok: bool  # accepted: equal, or equal up to a near tie
    exact: bool  # every token equal (and the same length)
    compared: int  # positions compared (up to and including a tie)
    tie_at: int | None  # the position of the accepted near tie, None without one
    max_gap: float  # the largest log-probability difference seen where tokens matched
    tie_gap: float | None  # the largest gap between the two tied candidates (both runs)
    reason: str  # what was accepted or why it was rejected

    def as_dict(self) -> dict:
        return asdict(self)


def _reject(compared: int, max_gap: float, reason: str, tie_gap: float | None = None) -> Verdict:
    return Verdict(False, False, compared, None, max_gap, tie_gap, reason)


def _top_dict(top, position: int, label: str) -> dict[int, float]:
    """The top candidates at ``position`` as {token: log-probability}; [] when not recorded."""
    if top is None or position >= len(top) or not top[position]:
        return {}
    out = {}
    for pair in top[position]:
        if len(pair) != 2:
            raise ValueError(
                f"{label}: each top candidate must be a (token, log-probability) pair, got {pair!r}"
            )
        out[int(pair[0])] = float(pair[1])
    return out


def compare_greedy(
    a_tokens: list[int],
    a_logprobs: list[float],
    b_tokens: list[int],
    b_logprobs: list[float],
    tol: float,
    a_top: list | None = None,
    b_top: list | None = None,
) -> Verdict:
    """Compare run A (the split) with run B (the colocated reference) for one prompt.

    ``*_tokens``: the greedy token ids; ``*_logprobs``: each chosen token's log-probability;
    ``*_top``: per position, the run's top candidates as (token, log-probability) pairs (at least
    two; vLLM's ``logprobs=2``); ``tol``: the tolerance in nats, in (0, 1]. Accepted: every
    position equal with log-probabilities within ``tol``, or equal so up to one position where the
    tokens differ by a near tie (see the module's text). Rejected otherwise, with the reason."""
    tol = check_number("tol", tol, lo=0, hi=1, lo_open=True)
    for name, toks, lps in (("a", a_tokens, a_logprobs), ("b", b_tokens, b_logprobs)):
        if len(toks) != len(lps):
            raise ValueError(
                f"{name}_logprobs must hold one value per token of {name}_tokens "
                f"({len(toks)}), got {len(lps)}"
            )
    max_gap = 0.0
    n = min(len(a_tokens), len(b_tokens))
    for i in range(n):
        ta, tb = int(a_tokens[i]), int(b_tokens[i])
        if ta == tb:
            gap = abs(float(a_logprobs[i]) - float(b_logprobs[i]))
            max_gap = max(max_gap, gap)
            if gap > tol:
                return _reject(
                    i + 1,
                    max_gap,
                    f"position {i}: same token {ta}, log-probabilities {gap:.3g} apart "
                    f"(tolerance {tol:g})",
                )
            continue
        top_a, top_b = _top_dict(a_top, i, "a_top"), _top_dict(b_top, i, "b_top")
        if not top_a or not top_b:
            return _reject(
                i + 1,
                max_gap,
                f"position {i}: tokens {ta} and {tb} differ and the top candidates were not "
                "recorded, so a near tie cannot be shown",
            )
        if tb not in top_a or ta not in top_b:
            return _reject(
                i + 1,
                max_gap,
                f"position {i}: tokens {ta} and {tb} differ and a run does not have the other's "
                "token among its top candidates (no near tie)",
            )
        gap_a = top_a[ta] - top_a[tb]  # >= 0: A chose ta
        gap_b = top_b[tb] - top_b[ta]
        moved = max(abs(top_a[ta] - top_b[ta]), abs(top_a[tb] - top_b[tb]))
        tie_gap = max(abs(gap_a), abs(gap_b))
        if tie_gap > tol or moved > tol:
            return _reject(
                i + 1,
                max_gap,
                f"position {i}: tokens {ta} and {tb} differ, gaps between them {gap_a:.3g} and "
                f"{gap_b:.3g}, log-probabilities moved by {moved:.3g} across the runs "
                f"(tolerance {tol:g}): not a near tie",
                tie_gap,
            )
        max_gap = max(max_gap, moved)
        return Verdict(
            ok=True,
            exact=False,
            compared=i + 1,
            tie_at=i,
            max_gap=max_gap,
            tie_gap=tie_gap,
            reason=f"equal up to position {i}, where tokens {ta} and {tb} are tied within "
            f"{tie_gap:.2g} (tolerance {tol:g}); not compared beyond it",
        )
    if len(a_tokens) != len(b_tokens):
        return _reject(
            n,
            max_gap,
            f"equal for {n} tokens, then one run stops ({len(a_tokens)} against "
            f"{len(b_tokens)} tokens)",
        )
    return Verdict(
        ok=True,
        exact=True,
        compared=n,
        tie_at=None,
        max_gap=max_gap,
        tie_gap=None,
        reason=f"all {n} tokens equal, log-probabilities within {max_gap:.2g} (tolerance {tol:g})",
    )
