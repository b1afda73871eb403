"""Answer boxes for numeric self-check questions (ipywidgets 7.7 and 8.x).

``ask(question, answer, tolerance=0.05, unit="")`` shows the question, a text box, a Check button
and a feedback line ("Right" or "Not quite" with a hint). ``answer`` is given in ``unit``: bytes
("B", "GB", ...), bits ("Gb", ...), seconds ("s", "ms", ...), "%" (answer as a percentage, e.g.
40), "x" (a factor) or "" (a plain number). A tuple answer, e.g. ``(6, 3)``, expects a ratio typed
as "6 : 3"; an equivalent ratio ("2 : 1") is right too.

The checking is the pure function ``check_answer(text, answer, tolerance, unit)``. It parses what
a reader types ("40", "40 %", "0.4", "2.62 GB", "2,375", "0,396", "6:3"), converts units within a
family (2,620 MB is 2.62 GB; 400 Gb is 50 GB, eight bits to a byte) and never raises on bad
input: it returns a message saying what to type.

Units are read case-sensitively where case carries meaning: ``B`` is a byte and ``b`` a bit,
``M`` is mega and ``m`` milli, so "5.24 Gb" is not 5.24 GB and "13 Ms" is not 13 ms. Where case
means nothing (``gb`` can only be giga-bits, ``kB`` and ``KB`` are both kilobytes) either case is
read.

A number with one comma and exactly three digits after it ("5,243") is ambiguous: English
thousands or a decimal comma. Both readings are tried; any other comma is read by its shape
("0,396" and "5,24" are decimal commas, "1,234,567" groups thousands, "1.234,5" is European).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from kvlab._validate import check_number, non_negative

# Unit -> (family, factor to the family's base unit). Case-sensitive.
UNITS: dict[str, tuple[str, float]] = {
    "B": ("bytes", 1.0),
    "kB": ("bytes", 1e3),
    "KB": ("bytes", 1e3),
    "MB": ("bytes", 1e6),
    "GB": ("bytes", 1e9),
    "TB": ("bytes", 1e12),
    "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3),
    "TiB": ("bytes", 1024.0**4),
    "b": ("bytes", 1 / 8),
    "kb": ("bytes", 1e3 / 8),
    "Kb": ("bytes", 1e3 / 8),
    "Mb": ("bytes", 1e6 / 8),
    "Gb": ("bytes", 1e9 / 8),
    "Tb": ("bytes", 1e12 / 8),
    "s": ("seconds", 1.0),
    "ms": ("seconds", 1e-3),
    "µs": ("seconds", 1e-6),
    "us": ("seconds", 1e-6),
    "ns": ("seconds", 1e-9),
    "min": ("seconds", 60.0),
    "h": ("seconds", 3600.0),
    "%": ("percent", 1.0),
    "x": ("factor", 1.0),
    "×": ("factor", 1.0),
    "": ("number", 1.0),
}
# Spellings that carry no case ambiguity, mapped to the unit in UNITS.
_ALIASES: dict[str, str] = {
    "byte": "B",
    "bytes": "B",
    "bit": "b",
    "bits": "b",
    "gB": "GB",
    "tB": "TB",
    "gb": "Gb",
    "tb": "Tb",
    "kbit": "kb",
    "Kbit": "kb",
    "Mbit": "Mb",
    "Gbit": "Gb",
    "gbit": "Gb",
    "Tbit": "Tb",
    "kib": "KiB",
    "kiB": "KiB",
    "KIB": "KiB",
    "MIB": "MiB",
    "gib": "GiB",
    "giB": "GiB",
    "GIB": "GiB",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "msec": "ms",
    "millisecond": "ms",
    "milliseconds": "ms",
    "μs": "µs",  # Greek mu and the micro sign look alike
    "usec": "µs",
    "microseconds": "µs",
    "X": "x",
    "percent": "%",
    "pct": "%",
}
# Multipliers for a plain count ("3.2 million", "72.5 k").
_SCALE: dict[str, float] = {
    "k": 1e3,
    "K": 1e3,
    "thousand": 1e3,
    "M": 1e6,
    "million": 1e6,
    "bn": 1e9,
    "billion": 1e9,
}
# Words a reader may add after the unit that do not change the value.
_NOISE = re.compile(
    r"\b(tokens?|requests?|replicas?|conversations?|users?|GPUs?|servers?|per|of|the|about|"
    r"approx\.?|each|concurrent|running)\b|/\s*s\b|/\s*request\b|/\s*GPU\b"
)
# A number as typed: digits with separators, an optional exponent.
_NUMBER = re.compile(r"[-+]?(?:\d[\d.,]*|[.,]\d+)(?:[eE][-+]?\d+)?")
_SPACE_GROUPS = re.compile(r"(?<=\d)[\u00a0\u202f_ '](?=\d{3}(?!\d))")
_RATIO = re.compile(r"^\s*([^:/]+?)\s*[:/]\s*([^:/]+?)\s*$")
_CASE_HELP = (
    "units are case-sensitive here: B is a byte and b a bit, M is mega and m milli "
    "(type e.g. GB, Gb, MB, ms)"
)


class Verdict(NamedTuple):
    """The result of checking one answer: ``ok`` and a message for the reader."""

    ok: bool
    message: str


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r} is not supported; allowed: {sorted(UNITS)}")
    return unit


def _read_digits(num: str) -> list[float]:
    """The values a digit string with ``,`` and ``.`` separators may mean, most likely first."""
    mantissa, exponent = re.split(r"[eE]", num, maxsplit=1) if re.search("[eE]", num) else (num, "")
    m = re.fullmatch(r"([-+]?)([\d.,]*)", mantissa)
    if not m:
        raise ValueError(f"cannot read {num!r}")
    sign, body = m.groups()
    scale = float("1e" + exponent) if exponent else 1.0
    commas, dots = body.count(","), body.count(".")

    def value(text: str) -> float:
        if not re.fullmatch(r"\d*\.?\d*", text) or text in ("", "."):
            raise ValueError(f"cannot read {num!r}")
        return float(sign + text) * scale

    def grouped(text: str, sep: str) -> str:
        head, *groups = text.split(sep)
        if not head or len(head) > 3 or any(len(g) != 3 for g in groups):
            raise ValueError(f"{num!r}: digit groups must have three digits")
        return "".join([head, *groups])

    if commas and dots:  # the later separator is the decimal point
        if body.rfind(",") > body.rfind("."):
            whole, frac = body.rsplit(",", 1)
            return [value(grouped(whole, ".") + "." + frac)]
        whole, frac = body.rsplit(".", 1)
        return [value(grouped(whole, ",") + "." + frac)]
    if commas > 1:
        return [value(grouped(body, ","))]
    if dots > 1:
        return [value(grouped(body, "."))]
    if commas == 1:
        whole, frac = body.split(",")
        if len(frac) == 3 and whole not in ("", "0") and len(whole) <= 3:
            return [value(whole + frac), value(whole + "." + frac)]  # ambiguous
        return [value(whole + "." + frac)]
    return [value(body)]


def _read_unit(rest: str) -> tuple[str, float]:
    """(unit, multiplier) for the text after the number; raises ValueError with advice."""
    rest = _NOISE.sub(" ", rest)
    rest = " ".join(rest.split()).strip(" .")
    unit = rest.replace(" ", "")
    if unit in UNITS:
        return unit, 1.0
    if unit in _ALIASES:
        return _ALIASES[unit], 1.0
    if rest in _SCALE:
        return "", _SCALE[rest]
    if rest == "m":
        raise ValueError("m means milli; type M or million for a million")
    if unit.lower() in {k.lower() for k in UNITS if k} | {k.lower() for k in _ALIASES}:
        raise ValueError(_CASE_HELP)
    raise ValueError(f"unknown unit {rest!r}")


def parse_readings(text: str) -> list[tuple[float, str]]:
    """Every plausible reading of a typed quantity, as (value, unit), most likely first.

    "5,243 GB" gives [(5243, "GB"), (5.243, "GB")]; "0,396" gives [(0.396, "")]. Raises
    ValueError (with a message for the reader) when nothing can be read.
    """
    s = str(text).strip()
    if not s:
        raise ValueError("empty")
    s = _SPACE_GROUPS.sub("", s)
    m = _NUMBER.match(s)
    if not m:
        raise ValueError(f"no number at the start of {str(text)[:40]!r}")
    num, rest = m.group(), s[m.end() :]
    while num[-1] in ".,":  # sentence punctuation: "2,375." or "40,"
        num, rest = num[:-1], num[-1] + rest
    values = _read_digits(num)
    unit, mult = _read_unit(rest.lstrip(".,"))
    out = []
    for v in values:
        v *= mult
        if not math.isfinite(v):
            raise ValueError("not a finite number")
        out.append((v, unit))
    return out


def parse_quantity(text: str) -> tuple[float, str]:
    """Parse "2.62 GB", "2,375", "40 %", "1e3 ms" into (value, unit): the most likely reading."""
    return parse_readings(text)[0]


def _candidates(value: float, unit: str, want_unit: str) -> list[float] | str:
    """Values (in ``want_unit``) the reader may have meant, or an error message."""
    fam, factor = UNITS[unit]
    want_fam, want_factor = UNITS[want_unit]
    if unit == "":  # a bare number is read in the question's unit
        out = [value]
        if want_unit == "%":
            out.append(value * 100)  # 0.4 for 40 %
        return out
    if want_fam == "number" and fam == "factor":
        return [value]
    if fam != want_fam:
        return f"that unit ({unit}) is not a {want_fam.rstrip('s')} unit; answer in {want_unit}"
    return [value * factor / want_factor]


def _close(x: float, a: float, tolerance: float) -> bool:
    if a == 0:
        return abs(x) <= tolerance
    return abs(x - a) <= tolerance * abs(a)


def _fmt(a: float, unit: str) -> str:
    if float(a).is_integer() and abs(a) < 1e15:
        text = f"{int(a):,}"
    elif abs(a) >= 100:
        text = f"{a:,.0f}"
    else:
        text = f"{a:.3g}"
    if unit == "%":
        return f"{text} %"
    if unit in ("x", "×"):
        return f"{text}x"
    return f"{text} {unit}".strip()


def _fmt_ratio(parts) -> str:
    return " : ".join(f"{p:g}" for p in parts)


def _check_ratio(text, parts, tolerance: float, tip: str) -> Verdict:
    if text is None or not str(text).strip():
        return Verdict(False, "Type an answer first, like 2 : 1.")
    m = _RATIO.match(str(text))
    if not m:
        return Verdict(False, f"Type a ratio, like 2 : 1.{tip}")
    got = []
    for piece in m.groups():
        try:
            readings = parse_readings(piece)
        except ValueError:
            return Verdict(False, f"Could not read {piece!r} as a number; type a ratio like 2 : 1.")
        got.append([v for v, u in readings if u == ""] or [readings[0][0]])
    for a in got[0]:
        for b in got[1]:
            if all(_close(g, p, tolerance) for g, p in zip((a, b), parts, strict=True)):
                return Verdict(True, f"Right: {_fmt_ratio(parts)}.")
            if b > 0 and parts[1] > 0 and a > 0 and _close(a / b, parts[0] / parts[1], tolerance):
                return Verdict(
                    True, f"Right: {_fmt_ratio((a, b))} is the same ratio as {_fmt_ratio(parts)}."
                )
    return Verdict(False, f"Not quite.{tip}")


def check_answer(
    text: str, answer, tolerance: float = 0.05, unit: str = "", hint: str = ""
) -> Verdict:
    """Check a typed answer against ``answer`` (in ``unit``), within a relative ``tolerance``.

    Never raises on what the reader typed; raises ValueError only for a bad ``answer``,
    ``tolerance`` or ``unit`` (the question's author's mistake).
    """
    tolerance = non_negative("tolerance", tolerance)
    _check_unit(unit)
    tip = f" Hint: {hint}" if hint else ""
    if isinstance(answer, tuple | list):
        if len(answer) != 2:
            raise ValueError(f"answer must be a number or a pair (a, b), got {answer!r}")
        parts = [check_number(f"answer[{i}]", a, lo=0) for i, a in enumerate(answer)]
        return _check_ratio(text, parts, tolerance, tip)
    answer = check_number("answer", answer)
    if text is None or not str(text).strip():
        return Verdict(False, f"Type an answer first (a number, in {unit or 'any unit'}).")
    try:
        readings = parse_readings(text)
    except ValueError as err:
        example = "40 %" if unit == "%" else f"2.5 {unit}".strip()
        return Verdict(False, f"Could not read {str(text)[:40]!r}: {err}; type e.g. {example}.")
    cands: list[float] = []
    problem = ""
    for value, got_unit in readings:
        found = _candidates(value, got_unit, unit)
        if isinstance(found, str):
            problem = found
        else:
            cands.extend(found)
    if not cands:
        return Verdict(False, f"Not quite: {problem}.")
    if any(_close(c, answer, tolerance) for c in cands):
        return Verdict(True, f"Right: {_fmt(answer, unit)}.")
    for c in cands:
        if c == 0 or answer == 0:
            continue
        if _close(c * 8, answer, tolerance) or _close(c / 8, answer, tolerance):
            return Verdict(
                False, f"Not quite: check bits against bytes (b is a bit, B a byte).{tip}"
            )
        k = math.log10(abs(c / answer))
        if abs(k - round(k)) < 0.02 and round(k) in (-9, -6, -3, 3, 6, 9):
            return Verdict(
                False, f"Not quite: the digits look right, but check the unit prefix.{tip}"
            )
    return Verdict(False, f"Not quite.{tip}")


def ask(question: str, answer, tolerance: float = 0.05, unit: str = "", hint: str = ""):
    """An answer box: the question, a text input, a Check button and a feedback line."""
    import ipywidgets as W

    check_answer("", answer, tolerance, unit)  # validate the question's own arguments now
    label = W.HTML(value=f"<p>{question}</p>")
    box = W.Text(value="", placeholder=f"your answer{' in ' + unit if unit else ''}")
    button = W.Button(description="Check")
    feedback = W.HTML(value="")

    def on_check(_=None):
        verdict = check_answer(box.value, answer, tolerance, unit, hint)
        colour = "#1a7f37" if verdict.ok else "#b35900"
        feedback.value = f'<span style="color:{colour}">{verdict.message}</span>'

    button.on_click(on_check)
    widget = W.VBox([label, W.HBox([box, button]), feedback])
    widget.check = on_check  # for tests and scripted use
    widget.text = box
    widget.feedback = feedback
    return widget
