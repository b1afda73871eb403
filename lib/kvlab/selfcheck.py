"""Answer boxes for numeric self-check questions (ipywidgets 7.7 and 8.x).

``ask(question, answer, tolerance=None, unit="")`` shows the question, a text box, a Check button
and a feedback line ("Right" or "Not quite" with a hint). ``answer`` is given in ``unit``: bytes
("B", "GB", ...), bits ("Gb", ...), seconds ("s", "ms", ...), "%" (answer as a percentage, e.g.
40), "x" (a factor) or "" (a plain number). A tuple answer, e.g. ``(6, 3)``, expects a ratio typed
as "6 : 3"; an equivalent ratio ("2 : 1") is right too.

The checking is the pure function ``check_answer(text, answer, tolerance, unit)``. It parses what
a reader types ("40", "40 %", "0.4", "2.62 GB", "1,500", "0,5", "6:3", "5/6", "~40 %", "about
40"), converts units within a family (2,620 MB is 2.62 GB; 400 Gb is 50 GB, eight bits to a byte)
and never raises on bad input: it returns a message saying what to type.

How close is close enough (``tolerance=None``, the default): a percentage is right within
``PERCENT_POINTS`` (1 percentage point) of the answer, since a relative band around 40 % would
accept 38 % and one around 83 % would accept 80 %; every other quantity is right within
``RELATIVE`` (2 %) of the answer, which accepts the book's figures rounded to two or three
significant digits. An explicit ``tolerance`` is in points for "%" and relative otherwise.

A fraction ("5/6", "1/8") is read as its value, so "5/6" answers 83.3 %. A leading "~", "≈",
"about", "approx.", "around" or "roughly" is ignored. ``RULES`` holds every table and pattern the
checker uses, as plain data; the site's copy of this checker (``_ext/kvlab_quiz``) is driven by
``rules_json()`` and tested against this module case by case.

Units are read case-sensitively where case carries meaning: ``B`` is a byte and ``b`` a bit,
``M`` is mega and ``m`` milli, so "5.24 Gb" is not 5.24 GB and "13 Ms" is not 13 ms. Where case
means nothing (``gb`` can only be giga-bits, ``kB`` and ``KB`` are both kilobytes) either case is
read.

A number with one comma and exactly three digits after it ("5,243") is ambiguous: English
thousands or a decimal comma. Both readings are tried; any other comma is read by its shape
("0,396" and "5,24" are decimal commas, "1,234,567" groups thousands, "1.234,5" is European).

Why one module: it is one checker. The parsing, the unit tables of :data:`RULES`, the tolerance
rules and the answer box are read together by the site's copy (``rules_json()``), which is tested
against this module case by case; the questions at the end are the quiz this checker marks.
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
    # rates, as a question's unit only: what a reader types after the number loses its "/s" as
    # noise (_NOISE), so "19.7 GB/s" is read as 19.7 GB and compared in bytes
    "MB/s": ("bytes", 1e6),
    "GB/s": ("bytes", 1e9),
    "Gb/s": ("bytes", 1e9 / 8),
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
# Words and signs in front of the number that mean "roughly" and do not change the value.
_APPROX = re.compile(
    r"^\s*(?:~|≈|about\b|approx(?:imately|\.)?|around\b|roughly\b|circa\b|ca\.)\s*",
    re.IGNORECASE,
)
# A fraction's denominator right after the number: "5/6" (but not "GB/s" or "/request").
_DENOMINATOR = re.compile(r"^\s*/\s*(?=[\d.,])")
# The default tolerance: within 1 percentage point for a percentage, 2 % of the answer otherwise.
PERCENT_POINTS = 1.0
RELATIVE = 0.02
# A pool is planned at most this busy (the self-check's P : D question deploys with it).
MAX_BUSY = 0.9
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


def _read_number(s: str, text: str) -> tuple[list[float], str]:
    """The readings of the number at the start of ``s``, and the text after it."""
    m = _NUMBER.match(s)
    if not m:
        raise ValueError(f"no number at the start of {str(text)[:40]!r}")
    num, rest = m.group(), s[m.end() :]
    while num[-1] in ".,":  # sentence punctuation: "2,375." or "40,"
        num, rest = num[:-1], num[-1] + rest
    return _read_digits(num), rest


def parse_readings(text: str) -> list[tuple[float, str]]:
    """Every plausible reading of a typed quantity, as (value, unit), most likely first.

    "5,243 GB" gives [(5243, "GB"), (5.243, "GB")]; "0,396" gives [(0.396, "")]. Raises
    ValueError (with a message for the reader) when nothing can be read.
    """
    s = str(text).strip()
    if not s:
        raise ValueError("empty")
    s = _APPROX.sub("", _SPACE_GROUPS.sub("", s))
    values, rest = _read_number(s, text)
    den = _DENOMINATOR.match(rest)
    if den:  # a fraction: every reading of the numerator over every reading of the denominator
        below, rest = _read_number(rest[den.end() :], text)
        if any(b == 0 for b in below):
            raise ValueError("a fraction's denominator cannot be 0")
        values = [a / b for a in values for b in below]
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


def _close(x: float, a: float, tolerance: float, absolute: bool = False) -> bool:
    """``x`` within ``tolerance`` of ``a``: in the answer's units when ``absolute``, else relative."""
    if absolute or a == 0:
        return abs(x - a) <= tolerance * (1 + 1e-12)
    return abs(x - a) <= tolerance * abs(a) * (1 + 1e-12)


def default_tolerance(unit: str) -> float:
    """The tolerance used when a question gives none: points for "%", relative otherwise."""
    return PERCENT_POINTS if _check_unit(unit) == "%" else RELATIVE


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
    text: str, answer, tolerance: float | None = None, unit: str = "", hint: str = ""
) -> Verdict:
    """Check a typed answer against ``answer`` (in ``unit``) within ``tolerance``.

    ``tolerance=None`` is ``default_tolerance(unit)``: 1 percentage point for "%", 2 % of the
    answer otherwise. A given ``tolerance`` is in percentage points when ``unit == "%"`` and
    relative otherwise. Never raises on what the reader typed; raises ValueError only for a bad
    ``answer``, ``tolerance`` or ``unit`` (the question's author's mistake).
    """
    _check_unit(unit)
    if tolerance is None:
        tolerance = default_tolerance(unit)
    tolerance = non_negative("tolerance", tolerance)
    absolute = unit == "%"
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
    if any(_close(c, answer, tolerance, absolute) for c in cands):
        return Verdict(True, f"Right: {_fmt(answer, unit)}.")
    for c in cands:
        if c == 0 or answer == 0:
            continue
        if _close(c * 8, answer, tolerance, absolute) or _close(c / 8, answer, tolerance, absolute):
            return Verdict(
                False, f"Not quite: check bits against bytes (b is a bit, B a byte).{tip}"
            )
        k = math.log10(abs(c / answer))
        if abs(k - round(k)) < 0.02 and round(k) in (-9, -6, -3, 3, 6, 9):
            return Verdict(
                False, f"Not quite: the digits look right, but check the unit prefix.{tip}"
            )
    return Verdict(False, f"Not quite.{tip}")


def ask(question: str, answer, tolerance: float | None = None, unit: str = "", hint: str = ""):
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


# ---- the rules as data, for the site's copy of this checker ---------------------------------


def _pattern(rx: re.Pattern[str]) -> dict[str, str]:
    return {"source": rx.pattern, "flags": "i" if rx.flags & re.IGNORECASE else ""}


RULES: dict = {
    "units": {u: list(v) for u, v in UNITS.items()},
    "aliases": dict(_ALIASES),
    "scale": dict(_SCALE),
    "noise": _pattern(_NOISE),
    "approx": _pattern(_APPROX),
    "denominator": _pattern(_DENOMINATOR),
    "number": _pattern(_NUMBER),
    "space_groups": _pattern(_SPACE_GROUPS),
    "ratio": _pattern(_RATIO),
    "percent_points": PERCENT_POINTS,
    "relative": RELATIVE,
    "case_help": _CASE_HELP,
}


class Question(NamedTuple):
    """One numeric self-check question: what to ask, the answer, and where the book derives it."""

    id: str
    prompt: str
    answer: float | tuple[int, int]
    unit: str
    tolerance: float | None
    hint: str
    reason: str  # one line: how the answer comes about
    derived_in: str  # the page (a docname) that derives it
    # the glued keys whose text the book gives as this answer (in the self-check page's worked
    # answer and on the cards): the box must accept each of them (tests/test_selfcheck_cards.py)
    stated_as: tuple[str, ...] = ()


def questions() -> list[Question]:
    """The quiz's questions, every answer computed by ``kvlab.calc`` from the book's assumptions."""
    from kvlab import assumptions, calc, hardware, models, units

    p8, pools_in, m = assumptions.P8, assumptions.P22_POOLS, models.LLAMA_70B
    s, h, u = p8.system_tokens, p8.history_tokens, p8.new_tokens
    hit_random = calc.hit_fraction(calc.cached_tokens_random(s, h, p8.replicas), s, h, u)
    hit_aware = calc.hit_fraction(calc.cached_tokens_cache_aware(s, h), s, h, u)
    # the bound with nested prefix hits, for a history of 2 to 3 earlier turns (the worked prompt)
    nested_turns = (math.floor(p8.earlier_turns), math.ceil(p8.earlier_turns))
    nested = {
        k: calc.hit_fraction(calc.cached_tokens_random_nested(s, h, p8.replicas, k), s, h, u)
        for k in nested_turns
    }
    per_token = calc.kv_bytes_per_token(m.layers, m.kv_heads, m.head_dim, 2)
    tokens_16k = assumptions.P22_TRANSFER.self_check_tokens
    kv_16k = calc.kv_bytes(tokens_16k, per_token)
    nics = assumptions.P22_TRANSFER.nics
    t_16k = calc.transfer_seconds(kv_16k, hardware.NIC_NDR_BYTES_PER_S, links=nics)
    mha = calc.kv_bytes_per_token(m.layers, m.q_heads, m.head_dim, 2) / per_token
    # the pools deployed: each replica planned at most MAX_BUSY busy (the arithmetic's 6 : 3 runs
    # prefill at 100 %, where a queue never drains), as the Problem 22 worked answer deploys them
    demand = pools_in.rate_rps * pools_in.prompt_tokens
    batch = calc.max_decode_batch(pools_in.tpot_s)
    concurrency = calc.decode_concurrency(
        pools_in.rate_rps, pools_in.output_tokens, pools_in.tpot_s
    )
    pools = (
        calc.replicas_with_headroom(demand, max_busy=MAX_BUSY),
        calc.replicas_with_headroom(concurrency, batch, max_busy=MAX_BUSY),
    )
    left = calc.hbm_for_kv(8, hardware.H100_SXM.hbm_bytes, m.params, 2, 0.9)
    mem_batch = calc.max_batch_memory(left, 32_000, 900, per_token)
    stream = calc.kv_stream_bandwidth(pools_in.rate_rps, pools_in.prompt_tokens, per_token)
    cached_r = calc.cached_tokens_random(s, h, p8.replicas)
    total = s + h + u
    return [
        Question(
            "hit_random",
            "Random routing, by the one-in-N bound: percentage of prompt tokens cached?",
            100 * hit_random,
            "%",
            None,
            "the system prompt always hits; the history is on the chosen replica 1 time in 8.",
            f"{units.fmt_int(cached_r)} of {units.fmt_int(total)} prompt tokens: the system "
            f"prompt, plus the history one time in {p8.replicas}. A floor, not a prediction: "
            "prefix hits nest, so a history of "
            f"{' to '.join(str(k) for k in nested_turns)} earlier turns lifts random routing to "
            f"{' to '.join(units.fmt_pct(v) for v in nested.values())}, and long chats further, "
            "while caches have room.",
            "notebooks/p08-04-worked-answer",
            ("p08_hit_random",),
        ),
        Question(
            "hit_aware",
            "Cache-aware routing: percentage of prompt tokens cached?",
            100 * hit_aware,
            "%",
            None,
            "everything but the new tokens is cached.",
            f"{units.fmt_int(s + h)} of {units.fmt_int(total)} prompt tokens: all but the "
            "new message, while the history is still cached (in the worked scenario most "
            "histories are evicted before the next turn).",
            "notebooks/p08-04-worked-answer",
            ("p08_hit_aware",),
        ),
        Question(
            "kv_16k",
            "fp16 KV cache of a 16,000-token prompt, in GB?",
            kv_16k / 1e9,
            "GB",
            None,
            "2 (K and V) x layers x KV heads x head dim x 2 bytes, per token.",
            f"{units.fmt_int(tokens_16k)} tokens x {units.fmt_kib(per_token)} per token "
            f"(2 x 80 layers x 8 KV heads x 128 x 2 bytes = {units.fmt_int(per_token)} bytes: "
            f"{units.fmt_kib(per_token)} in binary units, as the cards say, or "
            f"{units.fmt_bytes(per_token)} in decimal ones).",
            "notebooks/p22-02-worked-answer",
            ("sc_16k_fp16",),
        ),
        Question(
            "t_16k",
            "Line-rate transfer time over 8 NICs of 50 GB/s, in ms?",
            t_16k * 1e3,
            "ms",
            None,
            "bytes / (8 x 50 GB/s).",
            f"{units.fmt_bytes(kv_16k)} split over {nics} NICs of 50 GB/s each, at line rate: "
            "each message's fixed cost comes on top (the self-check page's answer counts it).",
            "notebooks/p22-02-worked-answer",
            ("sc_16k_t",),
        ),
        Question(
            "mha_factor",
            "KV growth factor with multi-head attention?",
            mha,
            "x",
            None,
            "compare the number of KV heads.",
            f"{m.q_heads} KV heads instead of {m.kv_heads}: the KV per token grows by that ratio.",
            "notebooks/p22-02-worked-answer",
            ("p22_claim_mistake_gqa",),
        ),
        Question(
            "pools",
            f"Prefill : decode replicas you deploy, each at most {units.fmt_pct(MAX_BUSY)} busy "
            "(type e.g. 3 : 4)?",
            (int(pools[0]), int(pools[1])),
            "",
            0.0,
            f"prefill demand / 10,000 and decode's Little's law concurrency / the largest batch "
            f"under 40 ms, each divided by {units.fmt_pct(MAX_BUSY)} and rounded up.",
            "Prefill tokens per second over one replica's rate; decode: Little's law "
            "concurrency over the largest batch that meets the TPOT target (the book's round "
            f"numbers). The arithmetic alone gives "
            f"{_fmt_ratio(calc.pool_sizes(pools_in.rate_rps, pools_in.prompt_tokens, pools_in.output_tokens, pools_in.tpot_s))}"
            f", with prefill 100 % busy; planned at most {units.fmt_pct(MAX_BUSY)} busy, you "
            f"deploy {_fmt_ratio(pools)}.",
            "notebooks/p22-02-worked-answer",
            ("p22_pd_deploy",),
        ),
        Question(
            "mem_batch",
            "Requests whose KV fits on one decode replica?",
            float(mem_batch),
            "",
            None,
            "(HBM x 0.9 - weights) / (KV per token x tokens per request), rounded down.",
            f"{units.fmt_bytes(left)} left for KV over {units.fmt_bytes(32_900 * per_token)} "
            "per request, rounded down.",
            "solutions/p22-02-decode-memory",
            ("ex_mem_batch",),
        ),
        Question(
            "stream",
            "Sustained KV stream, prefill to decode, in GB/s?",
            stream / 1e9,
            "GB/s",
            None,
            "requests/s x prompt tokens x bytes per token.",
            f"{pools_in.rate_rps:g} requests/s x {units.fmt_int(pools_in.prompt_tokens)} tokens x "
            f"{units.fmt_kib(per_token)} per token.",
            "solutions/p22-03-network-load",
            ("ex_net_stream", "sc_stream_bits"),
        ),
    ]


def rules_json(indent: int | None = None) -> str:
    """The checker's rules and the quiz's questions as JSON, for the site's script."""
    import json

    qs = [
        {
            "id": q.id,
            "prompt": q.prompt,
            "answer": list(q.answer) if isinstance(q.answer, tuple) else q.answer,
            "unit": q.unit,
            "tolerance": default_tolerance(q.unit) if q.tolerance is None else q.tolerance,
            "hint": q.hint,
            "reason": q.reason,
            "shown": (
                _fmt_ratio(q.answer) if isinstance(q.answer, tuple) else _fmt(q.answer, q.unit)
            ),
        }
        for q in questions()
    ]
    return json.dumps({"rules": RULES, "questions": qs}, indent=indent, ensure_ascii=False)
