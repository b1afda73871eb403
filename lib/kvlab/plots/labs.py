"""Figures of the real-hardware labs: copy times against prompt length with the cost-model line,
TTFT per request, and the share of prefill a KV transfer adds."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..units import fmt_pct
from . import COLORS

KIND_COLORS = {
    "host": "#2c3e50",
    "h2d_pinned": "#1f77b4",
    "h2d_pageable": "#7fb3d5",
    "d2h_pinned": "#d35400",
    "d2h_pageable": "#f0b27a",
    "d2d": "#8e44ad",
    "p2p": "#16a085",
    "gloo": "#c0392b",
    "nccl": "#27ae60",
}


def copy_times(results, model_lines=None, title=None, ax=None):
    """Median copy time against prompt length, one series per kind (log-log).

    ``results``: :class:`kvlab.measure.transfer.copies.CopyResult` (or dicts with kind, tokens, seconds).
    ``model_lines``: ``{label: (tokens, seconds)}`` drawn dashed (the cost model).
    """
    from ..measure.transfer.copies import KIND_LABELS

    if ax is None:
        _, ax = plt.subplots()
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    for kind in dict.fromkeys(r["kind"] for r in rows):
        pts = sorted((r["tokens"], r["seconds"]) for r in rows if r["kind"] == kind)
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            "o-",
            color=KIND_COLORS.get(kind),
            label=f"measured: {KIND_LABELS.get(kind, kind)}",
        )
    for i, (label, (xs, ys)) in enumerate((model_lines or {}).items()):
        ax.plot(xs, ys, "--", color=COLORS["model"], alpha=1.0 - 0.25 * i, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("time to copy one request's KV (s)")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def ttft_per_request(runs: dict, title=None, ax=None):
    """TTFT of each request, one series per experiment: ``{label: [seconds, ...]}``."""
    if ax is None:
        _, ax = plt.subplots()
    colors = [COLORS["measured"], COLORS["colocated"], COLORS["prefill"]]
    for (label, ttft), c in zip(runs.items(), colors, strict=False):
        ax.plot(range(1, len(ttft) + 1), [t * 1e3 for t in ttft], "o-", ms=3, color=c, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("request number")
    ax.set_ylabel("TTFT (ms)")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def transfer_share(
    tokens, prefill_s, transfers: dict, prefill_model=None, threshold: float = 0.1, title=None
):
    """Left: prefill time and transfer times against prompt length. Right: transfer time as a
    share of prefill, with the ``threshold`` line. ``transfers``: ``{label: seconds list}``."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    a.plot(tokens, prefill_s, "o-", color=COLORS["prefill"], label="prefill (measured)")
    if prefill_model is not None:
        a.plot(tokens, prefill_model, "--", color=COLORS["model"], label="prefill (cost model)")
    for label, secs in transfers.items():
        a.plot(tokens, secs, "s-", ms=4, label=label)
        b.plot(
            tokens, [s / p for s, p in zip(secs, prefill_s, strict=True)], "s-", ms=4, label=label
        )
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt length (tokens)")
    a.set_yscale("log")
    a.set_ylabel("seconds")
    a.legend(fontsize=8)
    b.axhline(threshold, color=COLORS["model"], ls=":", label=f"{fmt_pct(threshold)} of prefill")
    b.set_yscale("log")
    b.set_ylabel("transfer / prefill")
    b.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
