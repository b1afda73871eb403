"""Formatting of every number the book prints.

Decimal units for bytes and rates (1 GB = 10**9 B, 1 MB = 10**6 B, 1 TB/s = 10**12 B/s), binary
KiB (1 KiB = 1024 B) only where the book says KiB. Numbers are rounded to significant figures, not
to decimal places, so 655 MB and 2.62 GB carry the same precision.
"""

from __future__ import annotations

import math

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
KiB = 2**10
MiB = 2**20
GiB = 2**30

_DECIMAL = {"B": 1, "KB": KB, "MB": MB, "GB": GB, "TB": TB, "KiB": KiB, "MiB": MiB, "GiB": GiB}


def sig(x: float, digits: int = 3) -> str:
    """``x`` rounded to ``digits`` significant figures, keeping trailing zeros (0.10, 2.60)."""
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    exponent = math.floor(math.log10(abs(x)))
    rounded = round(x, digits - 1 - exponent)
    # rounding can carry into the next decade (999.6 -> 1000): recompute the exponent
    if rounded != 0:
        exponent = math.floor(math.log10(abs(rounded)))
    decimals = max(digits - 1 - exponent, 0)
    return f"{rounded:,.{decimals}f}"


def fmt_bytes(n_bytes: float, unit: str | None = None, digits: int = 3) -> str:
    """Bytes in a decimal unit (auto-chosen unless ``unit`` is given): 655 MB, 2.62 GB."""
    if unit is None:
        unit = "B"
        for u in ("KB", "MB", "GB", "TB"):
            # compare after rounding, so 999.6 MB prints as 1.00 GB, not 1,000 MB
            if abs(float(sig(n_bytes / _DECIMAL[u], digits).replace(",", ""))) >= 1:
                unit = u
    if unit not in _DECIMAL:
        raise ValueError(f"unit must be one of {sorted(_DECIMAL)}, got {unit!r}")
    return f"{sig(n_bytes / _DECIMAL[unit], digits)} {unit}"


def fmt_kib(n_bytes: float) -> str:
    """Bytes in binary KiB, as an integer when exact: 320 KiB."""
    v = n_bytes / KiB
    return f"{v:,.0f} KiB" if float(v).is_integer() else f"{v:,.1f} KiB"


def fmt_int(x: float) -> str:
    """An integer with thousands separators: 72,500."""
    return f"{round(x):,d}"


def fmt_rate_bytes(bytes_per_s: float, unit: str = "GB", digits: int = 3) -> str:
    """A bandwidth in decimal units per second, without trailing zeros: 450 GB/s, 50 GB/s."""
    value, unit_text = fmt_bytes(bytes_per_s, unit, digits).split(" ")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return f"{value} {unit_text}/s"


def fmt_seconds(seconds: float, digits: int = 2, unit: str | None = None) -> str:
    """A duration with a readable unit: 0.73 ms, 52 ms, 0.36 s, 19 s."""
    if unit is None:
        unit = "s" if abs(seconds) >= 0.1 else ("ms" if abs(seconds) >= 1e-4 else "us")
    scale = {"s": 1, "ms": 1e-3, "us": 1e-6}
    if unit not in scale:
        raise ValueError(f"unit must be one of ['ms', 's', 'us'], got {unit!r}")
    value = seconds / scale[unit]
    text = sig(value, digits) if abs(value) < 10**digits else fmt_int(value)
    return f"{text} {'µs' if unit == 'us' else unit}"


def fmt_pct(fraction: float, decimals: int = 0) -> str:
    """A fraction as a percentage with a thin space, as the book prints it: 40 %."""
    return f"{fraction * 100:.{decimals}f} %"


def fmt_tokens(n: float) -> str:
    """A token count: 3,000 tokens; millions as 3.2 million tokens."""
    if abs(n) >= 1_000_000:
        return f"{sig(n / 1e6, 2)} million tokens"
    return f"{fmt_int(n)} tokens"
