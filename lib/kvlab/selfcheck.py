"""Answer boxes for numeric self-check questions (ipywidgets 7.7 and 8.x).

``ask(question, answer, tolerance=0.05, unit="")`` shows the question, a text box, a Check button
and a feedback line ("Right" or "Not quite" with a hint). ``answer`` is given in ``unit``: bytes
("B", "GB", ...), seconds ("s", "ms", ...), "%" (answer as a percentage, e.g. 40), "x" (a factor)
or "" (a plain number). A tuple answer, e.g. ``(6, 3)``, expects a ratio typed as "6 : 3".

The checking is the pure function ``check_answer(text, answer, tolerance, unit)``: it parses what
a reader types ("40", "40 %", "0.4", "2.62 GB", "2,375", "6:3"), converts units within a family
(2,620 MB is 2.62 GB) and never raises on bad input: it returns a message saying what to type.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from kvlab._validate import check_number, non_negative

# Unit -> (family, factor to the family's base unit).
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
    "s": ("seconds", 1.0),
    "ms": ("seconds", 1e-3),
    "µs": ("seconds", 1e-6),
    "us": ("seconds", 1e-6),
    "%": ("percent", 1.0),
    "x": ("factor", 1.0),
    "×": ("factor", 1.0),
    "": ("number", 1.0),
}
# Words a reader may add after the unit that do not change the value.
_NOISE = re.compile(r"\b(tokens?|requests?|replicas?|per|/s|of|the|about|approx\.?)\b", re.I)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d)[,\u00a0\u202f_ ](?=\d{3}(?!\d))")
_RATIO = re.compile(r"^\s*([^:/]+?)\s*[:/]\s*([^:/]+?)\s*$")


class Verdict(NamedTuple):
    """The result of checking one answer: ``ok`` and a message for the reader."""

    ok: bool
    message: str


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r} is not supported; allowed: {sorted(UNITS)}")
    return unit


def parse_quantity(text: str) -> tuple[float, str]:
    """Parse "2.62 GB", "2,375", "40 %", "1e3 ms" into (value, unit). Raises ValueError."""
    s = str(text).strip()
    if not s:
        raise ValueError("empty")
    s = _THOUSANDS.sub("", s)
    if re.fullmatch(r"[-+]?\d+,\d+\s*\S*", s):  # one decimal comma: "0,4"
        s = s.replace(",", ".", 1)
    m = _NUMBER.match(s)
    if not m:
        raise ValueError(f"no number at the start of {text!r}")
    value = float(m.group())
    rest = _NOISE.sub(" ", s[m.end() :]).strip().rstrip(".")
    rest = " ".join(rest.split())
    if rest.lower() in ("k", "thousand"):
        return value * 1e3, ""
    if rest.lower() in ("m", "million"):
        return value * 1e6, ""
    unit = rest.replace(" ", "")
    if unit not in UNITS:
        lower = {k.lower(): k for k in UNITS}
        if unit.lower() in lower:
            unit = lower[unit.lower()]
        else:
            raise ValueError(f"unknown unit {rest!r}")
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value, unit


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
    text = f"{a:,.3g}" if abs(a) < 1e6 else f"{a:.3g}"
    return (
        f"{text} {unit}".strip()
        if unit not in ("%", "x")
        else f"{text}{' %' if unit == '%' else 'x'}"
    )


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
        parts = [check_number(f"answer[{i}]", a) for i, a in enumerate(answer)]
        m = _RATIO.match(str(text or ""))
        if not str(text or "").strip():
            return Verdict(False, "Type an answer first, like 2 : 1.")
        if not m or len(parts) != 2:
            return Verdict(False, f"Type a ratio, like 2 : 1.{tip}")
        got = []
        for piece in m.groups():
            try:
                got.append(parse_quantity(piece)[0])
            except ValueError:
                return Verdict(
                    False, f"Could not read {piece!r} as a number; type a ratio like 2 : 1."
                )
        if all(_close(g, a, tolerance) for g, a in zip(got, parts, strict=True)):
            return Verdict(True, "Right.")
        return Verdict(False, f"Not quite.{tip}")
    answer = check_number("answer", answer)
    if text is None or not str(text).strip():
        return Verdict(False, f"Type an answer first (a number, in {unit or 'any unit'}).")
    try:
        value, got_unit = parse_quantity(text)
    except ValueError:
        example = "40 %" if unit == "%" else f"2.5 {unit}".strip()
        return Verdict(
            False, f"Could not read {str(text)[:40]!r} as a number; type e.g. {example}."
        )
    cands = _candidates(value, got_unit, unit)
    if isinstance(cands, str):
        return Verdict(False, f"Not quite: {cands}.")
    if any(_close(c, answer, tolerance) for c in cands):
        return Verdict(True, f"Right: {_fmt(answer, unit)}.")
    for c in cands:
        if c == 0 or answer == 0:
            continue
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
