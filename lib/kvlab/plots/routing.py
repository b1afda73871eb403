"""Figures of the routing demo: scenarios, hit rate against cache size, imbalance against skew,
and the live demo's two panels (hit rate per policy; prefill per replica).

The scenario and sweep figures take either single runs (FleetResult) or figures over seeds
(``kvlab.seeds.Spread``, as ``fleet.over_seeds`` and ``fleet.sweep_over_seeds`` return them); over
seeds they draw the mean, with the range of the seeds as error bars (bars) or a band (lines)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import POLICY_COLORS, POLICY_LABELS

__all__ = ["demo_panels", "hit_rate_vs_cache", "imbalance_vs_skew", "scenarios"]


def _pct_axis(ax):
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v * 100:.0f} %"))


def demo_panels(results: dict, chosen: str, fig=None):
    """Left: token hit rate of every policy, ``chosen`` highlighted. Right: prefill tokens per
    replica under ``chosen``, the mean dashed, imbalance (max / mean) written on it."""
    if fig is None:
        fig = plt.figure(figsize=(9.0, 3.4))
    fig.clear()
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.4]})
    names = list(results)
    rates = [results[p].hit_rate for p in names]
    bars = ax1.bar(
        [POLICY_LABELS[p] for p in names],
        rates,
        color=[POLICY_COLORS[p] for p in names],
        edgecolor=["black" if p == chosen else "none" for p in names],
        linewidth=2,
    )
    for b, p, v in zip(bars, names, rates, strict=True):
        b.set_alpha(1.0 if p == chosen else 0.35)
        ax1.text(
            b.get_x() + b.get_width() / 2,
            v + 0.02,
            f"{v * 100:.0f} %",
            ha="center",
            fontsize=9,
            fontweight="bold" if p == chosen else "normal",
        )
    _pct_axis(ax1)
    ax1.set_ylabel("token hit rate")
    ax1.tick_params(axis="x", labelrotation=20)
    r = results[chosen]
    pre = np.asarray(r.prefill_tokens, dtype=float)
    x = np.arange(len(pre))
    ax2.bar(x, pre / 1e6, color=POLICY_COLORS[chosen])
    mean = pre.mean() / 1e6
    ax2.axhline(mean, color="black", linestyle="--", linewidth=1.2, label="mean")
    ax2.text(
        0.98,
        0.95,
        f"imbalance (max / mean) {r.imbalance:.2f}x",
        transform=ax2.transAxes,
        ha="right",
        va="top",
        fontsize=10,
        bbox=dict(boxstyle="round", facecolor="white", edgecolor="#999999"),
    )
    ax2.set_xlabel("replica")
    ax2.set_ylabel("prefill tokens (millions)")
    ax2.set_xticks(x if len(x) <= 16 else x[::4])
    ax2.set_ylim(0, max(pre.max() / 1e6 * 1.25, 1e-9))
    ax2.set_title(f"{POLICY_LABELS[chosen]}: prefill per replica", fontsize=10)
    ax2.legend(loc="upper left")
    return fig


def _figure(entry, metric: str):
    """(mean, lo, hi) of ``metric`` from a FleetResult or a {metric: Spread} mapping."""
    if isinstance(entry, dict):
        sp = entry[metric]
        return sp.mean, sp.lo, sp.hi
    v = float(getattr(entry, metric))
    return v, v, v


def scenarios(by_scenario: dict):
    """Grouped bars: hit rate per policy in each scenario, each bar labelled with its hit rate and
    imbalance. ``{scenario label: {policy: FleetResult or {"hit_rate": Spread, "imbalance":
    Spread}}}``; over seeds a bar is the mean and its error bar the seeds' range."""
    fig, ax = plt.subplots(figsize=(8.0, 3.6))
    labels = list(by_scenario)
    policies = list(next(iter(by_scenario.values())))
    width = 0.8 / len(policies)
    for j, p in enumerate(policies):
        xs = np.arange(len(labels)) + (j - (len(policies) - 1) / 2) * width
        figs = [_figure(by_scenario[s][p], "hit_rate") for s in labels]
        vals = np.array([f[0] for f in figs])
        err = np.array([[f[0] - f[1] for f in figs], [f[2] - f[0] for f in figs]])
        spread = bool(err.any())
        ax.bar(
            xs,
            vals,
            width,
            color=POLICY_COLORS[p],
            label=POLICY_LABELS[p],
            yerr=err if spread else None,
            error_kw=dict(ecolor="black", elinewidth=0.8, capsize=2),
        )
        for xx, s, v, hi in zip(xs, labels, vals, err[1], strict=True):
            imb = _figure(by_scenario[s][p], "imbalance")[0]
            ax.text(xx, v + hi + 0.015, f"{v * 100:.0f}%\n{imb:.2f}x", ha="center", fontsize=7)
    ax.set_xticks(np.arange(len(labels)), labels)
    _pct_axis(ax)
    ax.set_ylim(0, 1.18)
    ax.set_ylabel("token hit rate (label: imbalance)")
    ax.legend(ncols=4, loc="upper center", bbox_to_anchor=(0.5, 1.12), fontsize=8)
    return fig


def _series(res, metric: str):
    """(means, los, his) of ``metric`` along a sweep: a list of FleetResult, or a {metric:
    [Spread]} mapping from ``fleet.sweep_over_seeds``."""
    if isinstance(res, dict):
        sps = res[metric]
        return (
            np.array([sp.mean for sp in sps]),
            np.array([sp.lo for sp in sps]),
            np.array([sp.hi for sp in sps]),
        )
    v = np.array([float(getattr(r, metric)) for r in res])
    return v, v, v


def _sweep_lines(x, sweep: dict, metric: str, default, label_y: float):
    """One line of ``metric`` per policy against ``x`` (the mean over seeds, the seeds' range as a
    band), with the default value marked."""
    fig, ax = plt.subplots()
    for p, res in sweep.items():
        mean, lo, hi = _series(res, metric)
        ax.plot(x, mean, marker="o", ms=3, color=POLICY_COLORS[p], label=POLICY_LABELS[p])
        if (hi > lo).any():
            ax.fill_between(x, lo, hi, color=POLICY_COLORS[p], alpha=0.22, linewidth=0)
    if default is not None:
        ax.axvline(default, color="#888888", linestyle=":", linewidth=1)
        ax.text(default, label_y, " default", color="#555555", fontsize=8)
    return fig, ax


def hit_rate_vs_cache(
    cache_tokens, sweep: dict, default: float | None = 400_000, title: str | None = None
):
    """Hit rate per policy against cache tokens per replica (log axis), default marked."""
    fig, ax = _sweep_lines(cache_tokens, sweep, "hit_rate", default, 0.02)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    _pct_axis(ax)
    ax.set_xlabel("cache per replica (tokens)")
    ax.set_ylabel("token hit rate")
    if title:
        ax.set_title(title)
    ax.legend()
    return fig


def imbalance_vs_skew(skews, sweep: dict, default: float | None = 1.0):
    """Load imbalance (max / mean prefill) per policy against Zipf skew, default marked."""
    fig, ax = _sweep_lines(skews, sweep, "imbalance", default, 1.0)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xlabel("popularity skew (Zipf exponent)")
    ax.set_ylabel("imbalance (max / mean prefill)")
    ax.legend()
    return fig
