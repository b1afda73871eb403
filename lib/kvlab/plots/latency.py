"""Figures for Problem 22 (and latency figures in general): a roofline, transfer vs prefill time,
layer-by-layer overlap, latency distributions and the P:D sweep.

Each function draws on a given axes (or makes a new figure) and returns the figure; call
:func:`kvlab.plots.use_style` first.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import COLORS

LINK_COLORS = {
    "nvlink": "#27ae60",
    "pcie": "#8e44ad",
    "nic_per_gpu": "#2980b9",
    "one_nic": "#d35400",
}
LINK_LABELS = {
    "nvlink": "NVLink (450 GB/s per GPU)",
    "pcie": "PCIe Gen5 (64 GB/s per GPU)",
    "nic_per_gpu": "one 50 GB/s NIC per GPU",
    "one_nic": "one 50 GB/s NIC for all",
}


def _axes(ax, figsize=None):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def roofline(gpu, points: dict[str, tuple[float, str]], ax=None):
    """Log-log roofline of ``gpu`` (attainable TFLOP/s vs FLOP/byte) with labelled points.

    ``points`` maps a label to (intensity FLOP/byte, colour key in COLORS or a colour).
    """
    fig, ax = _axes(ax)
    x = np.logspace(-0.3, 4.3, 200)
    y = np.minimum(gpu.dense_fp16_flops, x * gpu.hbm_bytes_per_s) / 1e12
    ax.plot(x, y, color=COLORS["model"], lw=2, label=f"{gpu.name} roofline")
    ridge = gpu.ridge_flops_per_byte
    ax.axvline(ridge, color="#999999", ls=":", lw=1)
    ax.text(
        ridge * 1.15,
        gpu.dense_fp16_flops / 1e12 / 40,
        f"ridge\n{ridge:.0f} FLOP/byte",
        color="#555555",
        fontsize=9,
    )
    for label, (intensity, color) in points.items():
        attained = min(gpu.dense_fp16_flops, intensity * gpu.hbm_bytes_per_s) / 1e12
        ax.plot([intensity], [attained], "o", color=COLORS.get(color, color), ms=7)
        ax.annotate(
            label,
            (intensity, attained),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=9,
            color=COLORS.get(color, color),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte from HBM)")
    ax.set_ylabel("attainable TFLOP/s per GPU")
    ax.legend(loc="upper left")
    return fig


def transfer_vs_prefill(
    tokens, transfers: dict[str, np.ndarray], prefill: dict[str, np.ndarray], ax=None
):
    """Transfer time per link and prefill time, against prompt length (log-log)."""
    fig, ax = _axes(ax)
    for link, seconds in transfers.items():
        ax.plot(tokens, seconds, color=LINK_COLORS.get(link), label=LINK_LABELS.get(link, link))
    styles = ["-", "--"]
    for i, (label, seconds) in enumerate(prefill.items()):
        ax.plot(tokens, seconds, color=COLORS["prefill"], ls=styles[i % 2], lw=2.2, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def overlap_timeline(layers: int, prefill_s: float, transfer_s: float, ax=None, title=None):
    """Gantt chart: layer compute on one row, each layer's send on the next (all times in ms)."""
    fig, ax = _axes(ax)
    c, x = prefill_s / layers, transfer_s / layers
    link_free = 0.0
    for i in range(1, layers + 1):
        ax.broken_barh(
            [((i - 1) * c * 1e3, c * 1e3)],
            (1.1, 0.8),
            color=COLORS["prefill"],
            edgecolor="white",
            lw=0.3,
        )
        start = max(i * c, link_free)
        link_free = start + x
        ax.broken_barh(
            [(start * 1e3, x * 1e3)],
            (0.1, 0.8),
            color=COLORS["transfer"],
            edgecolor="white",
            lw=0.3,
        )
    ax.axvline(prefill_s * 1e3, color="#333333", ls=":", lw=1)
    ax.set_yticks([0.5, 1.5], ["send KV", "compute"])
    ax.set_xlabel("ms since prefill started")
    ax.grid(axis="y", visible=False)
    if title:
        ax.set_title(title)
    return fig


def ecdf(values, ax, label=None, color=None, scale=1.0, **kwargs):
    """Empirical CDF of ``values`` (times ``scale``) on ``ax``."""
    v = np.sort(np.asarray(values)) * scale
    ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label, color=color, **kwargs)
    return ax


def split_sweep(
    labels, rates, colocated: dict[str, float], ax=None, highlight=None, errors=None, bounds=None
):
    """Bars: goodput (max rate at the SLO target) per P:D split, with ``errors`` (one standard
    deviation over seeds) as error bars and ``bounds`` (the capacity bound of each split) as
    ticks; lines: colocated references."""
    fig, ax = _axes(ax)
    colors = [COLORS["disaggregated"] if lab != highlight else "#1a5276" for lab in labels]
    ax.bar(labels, rates, color=colors, yerr=errors, capsize=3 if errors is not None else 0)
    if bounds is not None:
        ax.scatter(
            labels, bounds, marker="_", s=260, color="#333333", zorder=3, label="capacity bound"
        )
    styles = ["--", ":", "-."]
    for i, (name, rate) in enumerate(colocated.items()):
        ax.axhline(rate, color=COLORS["colocated"], ls=styles[i % 3], lw=1.8, label=name)
    top = max([*rates, *colocated.values(), *(bounds if bounds is not None else [])])
    ax.set_ylim(0, top * 1.3)
    ax.set_xlabel("prefill : decode replicas")
    ax.set_ylabel("goodput (requests/s at 90 % SLO)")
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    return fig


def window_convergence(curves: dict[str, tuple], ax=None):
    """Attainment against the counted window's length (in request lifetimes): ``curves`` maps a
    label to (lifetimes, means, standard deviations over seeds)."""
    fig, ax = _axes(ax, (5.5, 3.4))
    for label, (x, mean, std) in curves.items():
        ax.errorbar(
            x,
            np.asarray(mean) * 100,
            yerr=np.asarray(std) * 100,
            marker="o",
            capsize=3,
            label=label,
        )
    ax.set_xscale("log")
    ticks = sorted({float(v) for _, (x, _, _) in curves.items() for v in x})
    ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
    ax.minorticks_off()
    ax.set_ylim(top=105)
    ax.set_xlabel("counted window (request lifetimes, after the warm-up)")
    ax.set_ylabel("requests meeting both targets (%)")
    ax.legend(fontsize=8)
    return fig
