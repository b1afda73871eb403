"""The prefill-time curve Lab 1 fits to its cold requests: ``t(P) = a + b P + c P²`` seconds for a
prompt of ``P`` tokens, with ``a, b, c >= 0``.

Each coefficient stands for a cost that cannot be negative: ``a`` the fixed work of a request (a
step's launch, the scheduler, the first token's sampling), ``b`` the per-token work (the weights'
matrix products), ``c`` attention over the prompt so far. A free quadratic through a handful of
timings on a busy machine can still come out with a negative ``a`` or ``c`` (short prompts slowed
more than long ones), and then it predicts a negative time for a short uncached tail. So the fit is
a non-negative least-squares one. With three coefficients it is found exactly without an
optimiser: the constrained optimum is the ordinary least-squares solution on the set of
coefficients it leaves non-zero, so solving every subset and keeping the best non-negative
solution finds it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrefillFit:
    """``t(P) = a_s + b_s_per_token * P + c_s_per_token2 * P**2`` seconds, every coefficient >= 0."""

    a_s: float
    b_s_per_token: float
    c_s_per_token2: float
    residual_max_s: float  # the largest |measured - fitted| over the points fitted

    def time_s(self, prompt_tokens):
        """Predicted prefill time (s) of an uncached prompt of ``prompt_tokens`` tokens."""
        p = np.asarray(prompt_tokens, dtype=float)
        return self.a_s + self.b_s_per_token * p + self.c_s_per_token2 * p**2

    def hit_time_s(self, prompt_tokens: float, cached_tokens: float) -> float:
        """Predicted prefill time (s) of a prompt whose first ``cached_tokens`` are cached: the
        fixed part, the uncached tokens' work, and their attention over the whole prompt
        (``c (P² - h²)``: the quadratic's share of the tokens after the cached ones)."""
        p, h = float(prompt_tokens), float(cached_tokens)
        if not 0 <= h <= p:
            raise ValueError(
                f"cached_tokens must be between 0 and prompt_tokens ({p:g}), got {h:g}"
            )
        return self.a_s + self.b_s_per_token * (p - h) + self.c_s_per_token2 * (p**2 - h**2)


def fit_prefill(lengths, seconds) -> PrefillFit:
    """The non-negative least-squares fit of ``seconds`` (prefill times, s) against ``lengths``
    (prompt tokens, > 0), see the module docstring. Needs at least two points."""
    x = np.asarray(lengths, dtype=float).ravel()
    y = np.asarray(seconds, dtype=float).ravel()
    if x.size != y.size:
        raise ValueError(f"lengths and seconds must have the same size, got {x.size} and {y.size}")
    if x.size < 2:
        raise ValueError(f"lengths must hold at least 2 points, got {x.size}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("lengths must be finite prompt lengths > 0 tokens")
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise ValueError("seconds must be finite times >= 0 s")
    scale = np.array([1.0, x.max(), x.max() ** 2])  # columns of comparable size
    design = np.stack([np.ones_like(x), x, x**2], axis=1) / scale
    best, best_ss = np.zeros(3), float(np.sum(y**2))  # all zero: the empty subset
    for k in (1, 2, 3):
        for cols in itertools.combinations(range(3), k):
            sol, *_ = np.linalg.lstsq(design[:, cols], y, rcond=None)
            if np.any(sol < 0):
                continue
            coef = np.zeros(3)
            coef[list(cols)] = sol
            ss = float(np.sum((y - design @ coef) ** 2))
            if ss < best_ss:
                best, best_ss = coef, ss
    a, b, c = (best / scale).tolist()
    resid = y - (a + b * x + c * x**2)
    return PrefillFit(a, b, c, float(np.abs(resid).max()))
