"""The per-request times of one timed run (:class:`QueueResult`) and their summaries."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validate import check_choice, check_number, positive
from ..latency import RequestTimes


@dataclass
class QueueResult(RequestTimes):
    """Per-request times (s) and tokens in arrival order, per-replica busy time. Statistics count
    requests from index ``warmup`` (arrival order) up to ``count_until``."""

    policy: str
    replicas: int
    warmup: int
    arrival_s: np.ndarray
    start_s: np.ndarray  # prefill start
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hit_tokens: np.ndarray
    replica: np.ndarray
    busy_s: np.ndarray  # per replica: time spent in steps (prefill or decode)
    prefill_busy_s: np.ndarray  # per replica: the prefill part of it
    online_s: np.ndarray  # per replica: when it joined (0 or add_replica_at_s)
    mean_in_system: float  # time average of requests in the system, first arrival to last finish
    end_s: float
    added_at_s: float | None = None
    failed_at_s: float | None = None
    retried: int = 0  # requests in the failed replica, sent again
    #: per request: was it in the failed replica, sent again (None: no failure)
    resent: np.ndarray | None = None
    keys_moved: float | None = None  # share of keys seen before the addition whose owner changed
    params: dict = field(default_factory=dict)
    #: closed loop: each request's previous turn (index in these arrays), -1 for none
    predecessor: np.ndarray | None = None
    #: statistics stop before this index (closed loop: the requests that arrive after the last
    #: session has started, while the load drains away); None: count to the end
    count_until: int | None = None

    # -- per-request metrics -----------------------------------------------------------------------

    @property
    def wait_s(self) -> np.ndarray:
        """Queueing delay before prefill starts."""
        return self.start_s - self.arrival_s

    # -- summaries ---------------------------------------------------------------------------------
    @property
    def counted(self) -> slice:
        return slice(self.warmup, self.count_until)

    @property
    def imbalance(self) -> float:
        """Max over mean of the prefill tokens each replica computed for the counted requests
        (the routing demo's metric, here per counted request)."""
        c = self.counted
        work = np.bincount(
            self.replica[c],
            weights=(self.prompt_tokens - self.hit_tokens)[c],
            minlength=self.replicas,
        )
        return float(work.max() / work.mean()) if work.mean() > 0 else 1.0

    @property
    def hit_rate(self) -> float:
        c = self.counted
        return float(self.hit_tokens[c].sum() / self.prompt_tokens[c].sum())

    @property
    def utilisation(self) -> np.ndarray:
        """Busy share of each replica from when it joined to the last finish."""
        return self.busy_s / np.maximum(self.end_s - self.online_s, 1e-12)

    @property
    def prefill_utilisation(self) -> np.ndarray:
        return self.prefill_busy_s / np.maximum(self.end_s - self.online_s, 1e-12)

    def percentile(self, metric: str, q: float) -> float:
        """``q``-th percentile (s) of 'ttft', 'tpot', 'wait' or 'latency' over counted requests."""
        check_choice("metric", metric, ("ttft", "tpot", "wait", "latency"))
        q = check_number("q", q, lo=0, hi=100)
        return float(np.percentile(getattr(self, f"{metric}_s")[self.counted], q))

    def summary(self) -> dict:
        """Hit rate, TTFT and TPOT p50/p95/p99 (s), mean and max replica utilisation."""
        out = {"policy": self.policy, "hit_rate": self.hit_rate}
        for m in ("ttft", "tpot"):
            for q in (50, 95, 99):
                out[f"{m}_p{q}_s"] = self.percentile(m, q)
        u = self.utilisation
        out["util_mean"], out["util_max"] = float(u.mean()), float(u.max())
        return out

    def over_time(self, metric: str, window_s: float, q: float = 50.0):
        """(window centres, values) over windows of ``window_s`` by arrival time, all requests:
        metric 'hit_rate' (token hit rate) or 'ttft'/'tpot'/'wait' (``q``-th percentile)."""
        check_choice("metric", metric, ("hit_rate", "ttft", "tpot", "wait"))
        window_s = positive("window_s", window_s)
        b = np.floor((self.arrival_s - self.arrival_s[0]) / window_s).astype(np.int64)
        nb = int(b.max()) + 1
        centres = self.arrival_s[0] + (np.arange(nb) + 0.5) * window_s
        if metric == "hit_rate":
            h = np.bincount(b, weights=self.hit_tokens, minlength=nb)
            p = np.bincount(b, weights=self.prompt_tokens, minlength=nb)
            with np.errstate(invalid="ignore"):
                return centres, h / p
        vals = getattr(self, f"{metric}_s")
        order = np.argsort(b, kind="stable")
        splits = np.searchsorted(b[order], np.arange(1, nb))
        out = np.array(
            [np.percentile(g, q) if len(g) else np.nan for g in np.split(vals[order], splits)]
        )
        return centres, out

    def __repr__(self) -> str:
        return (
            f"QueueResult(policy={self.policy!r}, hit_rate={self.hit_rate:.3f}, "
            f"ttft_p50={self.percentile('ttft', 50):.3f}s, "
            f"ttft_p95={self.percentile('ttft', 95):.3f}s)"
        )
