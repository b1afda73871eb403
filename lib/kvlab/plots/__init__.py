"""One figure style for the whole book, readable on light and dark pages.

Call :func:`use_style` once per notebook. Domain plots live in submodules: ``plots.routing``,
``plots.latency``, ``plots.labs``. Figures use a white background with dark text so they stay
legible when the site is switched to dark mode.
"""

from __future__ import annotations

import matplotlib as mpl

#: One colour per routing policy, the same in every figure.
POLICY_COLORS = {
    "random": "#9a9a9a",
    "round_robin": "#5d6d7e",
    "sticky": "#e67e22",
    "cache_aware": "#1f77b4",
}
POLICY_LABELS = {
    "random": "Random",
    "round_robin": "Round-robin",
    "sticky": "Sticky hash",
    "cache_aware": "Cache-aware",
}
#: Colours for other recurring series.
COLORS = {
    "model": "#2c3e50",
    "measured": "#c0392b",
    "prefill": "#8e44ad",
    "decode": "#16a085",
    "transfer": "#d35400",
    "colocated": "#7f8c8d",
    "disaggregated": "#2980b9",
}


def use_style() -> None:
    """Apply the book's matplotlib style (white figure, dark text, light grid, readable sizes)."""
    mpl.rcParams.update(
        {
            "figure.figsize": (7.0, 3.6),
            "figure.dpi": 100,
            "savefig.dpi": 144,
            "figure.facecolor": "white",
            "axes.facecolor": "white",
            "savefig.facecolor": "white",
            "axes.edgecolor": "#333333",
            "axes.labelcolor": "#222222",
            "text.color": "#222222",
            "xtick.color": "#333333",
            "ytick.color": "#333333",
            "axes.grid": True,
            "grid.color": "#dddddd",
            "grid.linewidth": 0.8,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 10,
            "axes.titlesize": 11,
            "legend.frameon": False,
            "figure.constrained_layout.use": True,
        }
    )
