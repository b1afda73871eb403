"""The two cards' diagrams, drawn by code: boxes, arrows and labels, no data.

:func:`p08_routing` draws Problem 8's fleet (a router, replicas, their block caches, one request
that hits and one that misses); :func:`p22_disaggregation` draws Problem 22's (a prefill pool, the
KV transfer, a decode pool, and where TTFT and TPOT are spent). Both return a matplotlib Figure
with the book's colours (:data:`kvlab.plots.COLORS`) on a white background, legible in dark mode.
Text passed in (the figures' labels) is drawn as given, so a notebook can put glued figures in it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from . import COLORS, POLICY_COLORS

__all__ = ["p08_routing", "p22_disaggregation", "save_svg", "svg_bytes"]

INK = "#2c3e50"
#: The smallest label, in points. A card shows its diagram 9 inches (648 pt) wide in a column about
#: 670 px wide at a 1,280 px window, so a point is drawn about 1.04 px there: 12 pt keeps every label
#: at 12 px or more (tests/site/test_dark_contrast.py measures it).
MIN_FONT_PT = 12.0
HIT = "#27ae60"
MISS = "#c0392b"


def _box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    text: str,
    color: str,
    fill: float = 0.15,
    size: float = 9.5,
    weight: str = "normal",
) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            linewidth=1.4,
            edgecolor=color,
            facecolor=color,
            alpha=1.0,
            zorder=2,
        )
    )
    # a light fill over the coloured one keeps the text dark on a tinted box
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            linewidth=0,
            facecolor="white",
            alpha=1 - fill,
            zorder=3,
        )
    )
    ax.text(
        x + w / 2,
        y + h / 2,
        text,
        ha="center",
        va="center",
        fontsize=size,
        color=INK,
        weight=weight,
        zorder=4,
    )


def _arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    color: str = INK,
    style: str = "-|>",
    lw: float = 1.6,
    ls: str = "-",
    rad: float = 0.0,
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=14,
            linewidth=lw,
            color=color,
            linestyle=ls,
            connectionstyle=f"arc3,rad={rad}",
            zorder=5,
        )
    )


def _canvas(width: float, height: float, xmax: float, ymax: float) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=(width, height))
    # a fixed layout: the style's constrained layout would move the axes at every save
    fig.set_layout_engine("none")
    ax.set_position((0.01, 0.01, 0.98, 0.98))
    fig.patch.set_facecolor("white")
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, ymax)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def p08_routing(
    hit_label: str = "hit: prefill only the new turn",
    miss_label: str = "miss: prefill the whole history",
    replicas: int = 3,
) -> Figure:
    """Problem 8: a router in front of ``replicas`` replicas, each with its block cache. Turn 2 of
    chat A goes back to the replica that holds A's blocks (a hit); chat B's turn lands on a replica
    that never saw B (a miss) and recomputes its history."""
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 2 <= replicas <= 4:
        raise ValueError(f"replicas must be an int from 2 to 4, got {replicas!r}")
    fig, ax = _canvas(9.0, 4.6, 12.0, 6.2)
    blue, orange = POLICY_COLORS["cache_aware"], POLICY_COLORS["sticky"]
    _box(ax, 0.2, 2.6, 2.2, 1.0, "requests\nchat A, turn 2\nchat B, turn 2", INK, 0.06, 12)
    _box(ax, 3.2, 2.6, 1.9, 1.0, "router", blue, 0.25, 13.5, "bold")
    _arrow(ax, (2.45, 3.1), (3.15, 3.1))
    ys = [4.7, 2.6, 0.5][:replicas] if replicas <= 3 else [5.0, 3.5, 2.0, 0.5]
    sys_c, a_c, b_c = "#7f8c8d", orange, "#8e44ad"
    for i, y in enumerate(ys):
        _box(ax, 6.0, y, 1.7, 1.0, f"replica {i}", INK, 0.06, 12)
        # the block cache: the system prompt everywhere, chat A's blocks on replica 0 only
        ax.text(8.0, y + 1.08, "block cache", fontsize=12, color=INK, zorder=4)
        blocks = [sys_c, sys_c] + ([a_c, a_c, a_c] if i == 0 else [])
        for j, c in enumerate(blocks):
            ax.add_patch(
                FancyBboxPatch(
                    (8.0 + j * 0.62, y + 0.25),
                    0.5,
                    0.5,
                    boxstyle="round,pad=0.01,rounding_size=0.05",
                    facecolor=c,
                    edgecolor="white",
                    zorder=3,
                )
            )
        for j in range(len(blocks), 6):
            ax.add_patch(
                FancyBboxPatch(
                    (8.0 + j * 0.62, y + 0.25),
                    0.5,
                    0.5,
                    boxstyle="round,pad=0.01,rounding_size=0.05",
                    facecolor="white",
                    edgecolor="#bdc3c7",
                    zorder=3,
                )
            )
    _arrow(ax, (5.15, 3.35), (5.95, ys[0] + 0.5), HIT, lw=2.2)
    ax.text(0.2, 5.55, "chat A: " + hit_label, fontsize=12, color=HIT, weight="bold")
    _arrow(ax, (5.15, 2.85), (5.95, ys[-1] + 0.5), MISS, lw=2.2, ls="--")
    ax.text(0.2, 0.15, "chat B: " + miss_label, fontsize=12, color=MISS, weight="bold")
    # legend for the blocks
    for k, (c, t) in enumerate(
        (
            (sys_c, "system prompt"),
            (a_c, "chat A's history"),
            (b_c, "chat B's history: cached nowhere"),
        )
    ):
        ax.add_patch(
            FancyBboxPatch(
                (0.25, 1.7 - k * 0.45),
                0.3,
                0.3,
                facecolor=c,
                boxstyle="round,pad=0.01",
                edgecolor="white",
                zorder=3,
            )
        )
        ax.text(0.7, 1.85 - k * 0.45, t, fontsize=12, va="center", color=INK)
    return fig


def p22_disaggregation(
    ttft_label: str = "TTFT: queue + prefill\n+ KV transfer",
    tpot_label: str = "TPOT: one decode\nstep per token",
    transfer_label: str = "KV cache\nover NVLink\nor RDMA",
) -> Figure:
    """Problem 22: a router, a prefill pool, the KV transfer, a decode pool; brackets show that
    TTFT is spent in the prefill pool and the transfer, TPOT in the decode pool's steps."""
    fig, ax = _canvas(9.0, 3.65, 12.4, 5.03)
    pre, dec, xfer = COLORS["prefill"], COLORS["decode"], COLORS["transfer"]
    _box(ax, 0.2, 2.3, 1.7, 1.0, "request", INK, 0.06, 12)
    _box(ax, 2.4, 2.3, 1.5, 1.0, "router", COLORS["disaggregated"], 0.25, 13, "bold")
    _arrow(ax, (1.95, 2.8), (2.35, 2.8))
    # prefill pool
    ax.add_patch(
        FancyBboxPatch(
            (4.4, 1.2),
            2.4,
            3.2,
            boxstyle="round,pad=0.05",
            facecolor="none",
            edgecolor=pre,
            linewidth=1.4,
            linestyle="--",
            zorder=1,
        )
    )
    ax.text(
        5.6, 4.6, "prefill pool (P replicas)", ha="center", fontsize=12, color=pre, weight="bold"
    )
    for k in range(3):
        _box(ax, 4.65, 3.4 - k * 1.0, 1.9, 0.75, "prefill\nreplica", pre, 0.18, 12)
    # decode pool
    ax.add_patch(
        FancyBboxPatch(
            (8.9, 1.2),
            3.0,
            3.2,
            boxstyle="round,pad=0.05",
            facecolor="none",
            edgecolor=dec,
            linewidth=1.4,
            linestyle="--",
            zorder=1,
        )
    )
    ax.text(
        10.4, 4.6, "decode pool (D replicas)", ha="center", fontsize=12, color=dec, weight="bold"
    )
    for k in range(2):
        _box(ax, 9.1, 3.1 - k * 1.3, 2.6, 0.95, "decode replica\n(paged KV, batch)", dec, 0.18, 12)
    _arrow(ax, (3.95, 2.8), (4.6, 3.05))
    _arrow(ax, (6.6, 3.75), (9.1, 3.55), xfer, lw=2.6)
    ax.text(
        7.85,
        3.4,
        transfer_label,
        ha="center",
        va="top",
        fontsize=12,
        color=xfer,
        weight="bold",
        wrap=True,
    )
    _arrow(ax, (11.75, 2.45), (12.05, 2.45))
    ax.text(12.08, 2.45, "tokens", fontsize=12, va="center", color=INK, rotation=90)
    # where the time goes
    ax.annotate(
        "",
        xy=(4.4, 0.85),
        xytext=(8.85, 0.85),
        arrowprops={"arrowstyle": "<->", "color": pre, "lw": 1.6},
    )
    ax.text(6.6, 0.7, ttft_label, ha="center", va="top", fontsize=12, color=pre, weight="bold")
    ax.annotate(
        "",
        xy=(8.95, 0.85),
        xytext=(11.9, 0.85),
        arrowprops={"arrowstyle": "<->", "color": dec, "lw": 1.6},
    )
    ax.text(10.4, 0.7, tpot_label, ha="center", va="top", fontsize=12, color=dec, weight="bold")
    return fig


def svg_bytes(fig: Figure) -> bytes:
    """``fig`` as SVG, the same bytes on every run with the same matplotlib (fixed ids, no date)."""
    import io

    import matplotlib as mpl

    buf = io.BytesIO()
    with mpl.rc_context({"svg.hashsalt": "kvlab-diagrams", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def save_svg(fig: Figure, path: str | Path) -> bool:
    """Write ``fig`` to ``path`` as SVG (:func:`svg_bytes`) unless the file already holds those
    bytes; return whether it wrote. A prose page shows the file with a ``{figure}`` directive: a
    glued figure cannot be pasted into another page with its alt text by myst-nb 1.4."""
    target = Path(path)
    if target.suffix != ".svg":
        raise ValueError(f"path must end in .svg, got {str(path)!r}")
    data = svg_bytes(fig)
    if target.is_file() and target.read_bytes() == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return True
