"""The traffic of the colocated-vs-disaggregated simulator: Poisson arrivals, seeded lengths."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validate import check_choice, check_int, check_number, positive

DISTRIBUTIONS = ("fixed", "lognormal")


@dataclass(frozen=True)
class Traffic:
    """Poisson arrivals with prompt and output lengths drawn from a seeded generator.

    ``lognormal`` lengths keep the given mean, with shape ``sigma`` (of the underlying normal).
    ``hit_rate`` is the share of every prompt found in a prefix cache: it is not prefilled, but
    its KV is still shipped to a decode replica.
    """

    rate_rps: float = 20.0
    requests: int = 2_000
    prompt_tokens: float = 3_000
    output_tokens: float = 300
    prompt_dist: str = "fixed"
    output_dist: str = "fixed"
    sigma: float = 0.6
    hit_rate: float = 0.0
    seed: int = 0

    def __post_init__(self):
        positive("rate_rps", self.rate_rps)
        check_int("requests", self.requests, lo=1)
        check_number("prompt_tokens", self.prompt_tokens, lo=1)
        check_number("output_tokens", self.output_tokens, lo=1)
        check_choice("prompt_dist", self.prompt_dist, DISTRIBUTIONS)
        check_choice("output_dist", self.output_dist, DISTRIBUTIONS)
        positive("sigma", self.sigma)
        check_number("hit_rate", self.hit_rate, lo=0, hi=1, hi_open=True)
        check_int("seed", self.seed, lo=0)

    def sample(self) -> dict[str, np.ndarray]:
        """Arrival times (s), prompt, uncached and output tokens, one entry per request."""
        rng = np.random.default_rng(self.seed)
        n = self.requests
        arrival = np.cumsum(rng.exponential(1 / self.rate_rps, n))

        def lengths(mean, dist):
            if dist == "fixed":
                return np.full(n, max(1, round(mean)), dtype=np.int64)
            mu = math.log(mean) - self.sigma**2 / 2
            return np.maximum(1, np.rint(rng.lognormal(mu, self.sigma, n))).astype(np.int64)

        prompt = lengths(self.prompt_tokens, self.prompt_dist)
        output = lengths(self.output_tokens, self.output_dist)
        uncached = np.maximum(1, np.ceil(prompt * (1 - self.hit_rate) - 1e-9)).astype(np.int64)
        return {"arrival_s": arrival, "prompt": prompt, "uncached": uncached, "output": output}
