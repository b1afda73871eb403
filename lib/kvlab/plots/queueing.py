"""Figures of the queueing chapter: TTFT per policy, TTFT against arrival rate, a metric over
time (replica added mid-run, overload building up)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import POLICY_COLORS, POLICY_LABELS

__all__ = ["over_time", "ttft_by_policy", "ttft_vs_rate"]


def ttft_by_policy(results: dict, ax=None):
    """Paired bars of TTFT p50 and p95 per policy ({policy: QueueResult}), log scale."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 3.4))
    names = list(results)
    x = np.arange(len(names))
    for j, (q, alpha) in enumerate(((50, 1.0), (95, 0.45))):
        vals = [results[p].percentile("ttft", q) for p in names]
        bars = ax.bar(
            x + (j - 0.5) * 0.38,
            vals,
            width=0.36,
            alpha=alpha,
            color=[POLICY_COLORS.get(p, "#555555") for p in names],
            label=f"p{q}",
        )
        for b, v in zip(bars, vals, strict=True):
            ax.text(b.get_x() + b.get_width() / 2, v * 1.15, f"{v:.2g} s", ha="center", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(x, [POLICY_LABELS.get(p, p) for p in names])
    ax.set_ylabel("time to first token (s)")
    ax.legend(title="percentile", loc="upper right")
    return ax.figure


def ttft_vs_rate(
    sweep: dict,
    rates,
    q: float = 95.0,
    mark_rps: float | None = None,
    saturation: dict | None = None,
    ax=None,
):
    """TTFT ``q``-th percentile against arrival rate per policy ({policy: [QueueResult]}); a
    dashed line at ``mark_rps``; dotted verticals at each policy's ``saturation`` rate."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 3.6))
    for p, rs in sweep.items():
        ax.plot(
            rates,
            [r.percentile("ttft", q) for r in rs],
            marker="o",
            color=POLICY_COLORS.get(p),
            label=POLICY_LABELS.get(p, p),
        )
        if saturation and p in saturation and saturation[p] <= max(rates):
            ax.axvline(saturation[p], color=POLICY_COLORS.get(p), linestyle=":", linewidth=1.2)
    if mark_rps is not None:
        ax.axvline(mark_rps, color="black", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel(f"TTFT p{q:g} (s)")
    ax.legend(loc="upper left")
    return ax.figure


def over_time(series: dict, ylabel: str, event_s: float | None = None, pct: bool = False, ax=None):
    """Lines of ``{label: (t_s, values)}`` against time, a vertical at ``event_s``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 3.2))
    for label, (t, v) in series.items():
        ax.plot(t, v, marker=".", label=label)
    if event_s is not None:
        ax.axvline(event_s, color="black", linestyle="--", linewidth=1)
    if pct:
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v * 100:.0f} %"))
    ax.set_xlabel("time (s)")
    ax.set_ylabel(ylabel)
    ax.legend()
    return ax.figure
