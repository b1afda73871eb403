"""Figures of the queueing chapter: TTFT per policy, routers side by side over seeds, TTFT against
arrival rate, a metric over time (replica added mid-run, overload building up)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import POLICY_COLORS, POLICY_LABELS

__all__ = ["over_time", "routers_over_seeds", "ttft_by_policy", "ttft_vs_rate"]


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


#: one colour per router of :data:`kvlab.queueing.ROUTERS`
ROUTER_COLORS = {
    "random": POLICY_COLORS["random"],
    "sticky": POLICY_COLORS["sticky"],
    "bounded_ring": "#c0392b",
    "guard_cumulative": "#7fb3e0",
    "guard_live": POLICY_COLORS["cache_aware"],
    "sglang": "#27ae60",
    "dynamo": "#8e44ad",
}


def routers_over_seeds(results: dict, labels: dict, title: str | None = None, axes=None):
    """Three panels (token hit rate, TTFT p95, prefill imbalance) of ``{name: {metric: Spread}}``
    (:func:`kvlab.queueing.compare`): a bar at each mean, a dot per seed."""
    if axes is None:
        fig, axes = plt.subplots(1, 3, figsize=(9.6, 0.42 * len(results) + 1.3), sharey=True)
    names = list(results)
    y = np.arange(len(names))[::-1]
    panels = (
        ("hit_rate", "token hit rate (%)", 100.0, "%"),
        ("ttft_p95_s", "TTFT p95 (s)", 1.0, ""),
        ("imbalance", "prefill imbalance (max / mean)", 1.0, ""),
    )
    for ax, (m, xlabel, scale, _) in zip(axes, panels, strict=True):
        for yi, n in zip(y, names, strict=True):
            sp = results[n][m]
            base = n.split("/")[0]
            color = ROUTER_COLORS.get(base, "#555555")
            ax.barh(yi, sp.mean * scale, color=color, alpha=0.55 if "/" in n else 0.85, height=0.7)
            ax.plot(np.asarray(sp.values) * scale, np.full(sp.n, yi), "k.", markersize=3)
        ax.set_xlabel(xlabel)
    axes[0].set_yticks(y, [labels.get(n, n) for n in names])
    axes[0].set_xlim(0, 100)
    if title:
        axes[1].set_title(title, fontsize=10)
    return axes[0].figure
