"""The per-request times of one simulation (:class:`SimResult`) and what they add up to."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validate import check_choice, check_number, fraction, positive
from ..latency import RequestTimes


@dataclass
class SimResult(RequestTimes):
    """Per-request times (arrays indexed by request) and a few system-level figures."""

    label: str
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    transfer_s: np.ndarray
    mean_in_system: float  # time-average of requests in the system up to the last arrival,
    #                       counted by the event loop as requests come and go
    end_s: float  # time the last request finished
    replica_busy_s: np.ndarray  # per replica
    window_s: tuple[float, float] | None = None  # steady-state window (see :func:`steady_run`)

    def _window(self, warmup: float) -> np.ndarray:
        """The counted requests: those arriving inside ``window_s`` when it is set (``warmup`` is
        then ignored), else all but the first ``warmup`` share."""
        fraction("warmup", warmup)
        if self.window_s is not None:
            t0, t1 = self.window_s
            return (self.arrival_s >= t0) & (self.arrival_s < t1)
        n = len(self.arrival_s)
        return np.arange(n) >= int(n * warmup)

    def percentile(self, metric: str, q: float, warmup: float = 0.1) -> float:
        """``q``-th percentile of 'ttft', 'tpot' or 'latency' (seconds), after ``warmup``."""
        check_choice("metric", metric, ("ttft", "tpot", "latency"))
        check_number("q", q, lo=0, hi=100)
        values = getattr(self, f"{metric}_s")[self._window(warmup)]
        return float(np.percentile(values, q))

    def attainment(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> float:
        """Share of requests meeting both targets."""
        positive("ttft_slo_s", ttft_slo_s)
        positive("tpot_slo_s", tpot_slo_s)
        w = self._window(warmup)
        ok = (self.ttft_s <= ttft_slo_s) & (self.tpot_s <= tpot_slo_s)
        return float(ok[w].mean())

    def goodput_rps(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> float:
        """Requests per second that meet both targets (over the counted arrivals' time span)."""
        w = self._window(warmup)
        if self.window_s is not None:
            span = self.window_s[1] - self.window_s[0]
        else:
            arr = self.arrival_s[w]
            span = arr[-1] - arr[0] if len(arr) > 1 else 1.0
        ok = (self.ttft_s <= ttft_slo_s) & (self.tpot_s <= tpot_slo_s)
        return float(ok[w].sum() / span)

    def summary(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> dict:
        out: dict[str, str | float] = {"system": self.label}
        for m in ("ttft", "tpot"):
            for q in (50, 95, 99):
                out[f"{m}_p{q}_s"] = self.percentile(m, q, warmup)
        out["attainment"] = self.attainment(ttft_slo_s, tpot_slo_s, warmup)
        out["goodput_rps"] = self.goodput_rps(ttft_slo_s, tpot_slo_s, warmup)
        return out
