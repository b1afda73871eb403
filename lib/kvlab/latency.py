"""Per-request latency metrics shared by the time-based simulators (:mod:`kvlab.queueing`,
:mod:`kvlab.pdsim`): TTFT, TPOT and end-to-end latency from per-request timestamps (seconds)."""

from __future__ import annotations

import numpy as np


class RequestTimes:
    """Mixin for a result with ``arrival_s``, ``first_token_s``, ``finish_s`` and ``output_tokens``
    arrays (one entry per request)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token: arrival to the first output token."""
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Mean time per output token after the first (0 for one-token outputs)."""
        steps = np.maximum(self.output_tokens - 1, 1)
        return np.where(self.output_tokens > 1, (self.finish_s - self.first_token_s) / steps, 0.0)

    @property
    def latency_s(self) -> np.ndarray:
        """Arrival to the last output token."""
        return self.finish_s - self.arrival_s
