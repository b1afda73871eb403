"""Input checks shared by every public function: a bad value raises a ValueError that names the
parameter, the value received and the allowed range."""

from __future__ import annotations

import math
from numbers import Integral, Real


def _describe(lo, hi, lo_open, hi_open) -> str:
    left = "(" if (lo_open or lo is None) else "["
    right = ")" if (hi_open or hi is None) else "]"
    lo_s = "-inf" if lo is None else f"{lo:g}"
    hi_s = "inf" if hi is None else f"{hi:g}"
    return f"{left}{lo_s}, {hi_s}{right}"


def check_number(
    name: str,
    value,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """Return ``value`` as a float if it is a finite real number inside the range, else raise."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(
            f"{name} must be a number in {_describe(lo, hi, lo_open, hi_open)}, got {value!r}"
        )
    v = float(value)
    bad = not math.isfinite(v)
    if lo is not None:
        bad = bad or (v <= lo if lo_open else v < lo)
    if hi is not None:
        bad = bad or (v >= hi if hi_open else v > hi)
    if bad:
        raise ValueError(f"{name} must be in {_describe(lo, hi, lo_open, hi_open)}, got {value!r}")
    return v


def check_int(name: str, value, *, lo: int | None = None, hi: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer inside [lo, hi], else raise."""
    ok_type = isinstance(value, Integral) and not isinstance(value, bool)
    if not ok_type and isinstance(value, Real) and float(value).is_integer():
        ok_type = True
    if not ok_type:
        raise ValueError(
            f"{name} must be an integer in {_describe(lo, hi, False, False)}, got {value!r}"
        )
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(
            f"{name} must be an integer in {_describe(lo, hi, False, False)}, got {value!r}"
        )
    return v


def positive(name: str, value) -> float:
    """A finite number > 0."""
    return check_number(name, value, lo=0, lo_open=True)


def non_negative(name: str, value) -> float:
    """A finite number >= 0."""
    return check_number(name, value, lo=0)


def fraction(name: str, value) -> float:
    """A number in [0, 1]."""
    return check_number(name, value, lo=0, hi=1)


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value
