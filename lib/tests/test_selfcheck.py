"""The self-check answer boxes: parsing, tolerance, units, bad input, and the widget itself."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab.selfcheck import UNITS, ask, check_answer, parse_quantity, parse_readings


@pytest.mark.parametrize(
    "text, value, unit",
    [
        ("40", 40.0, ""),
        ("40 %", 40.0, "%"),
        ("40%", 40.0, "%"),
        ("0.4", 0.4, ""),
        (".4", 0.4, ""),
        ("0,4", 0.4, ""),
        ("2.62 GB", 2.62, "GB"),
        ("2.62GB", 2.62, "GB"),
        ("2,375", 2375.0, ""),
        ("2,375 tokens", 2375.0, ""),
        ("72,500 tokens/s", 72500.0, ""),
        ("1,234,567", 1234567.0, ""),
        ("72 500", 72500.0, ""),
        ("6.6 ms", 6.6, "ms"),
        ("82 µs", 82.0, "µs"),
        ("8x", 8.0, "x"),
        ("8 ×", 8.0, "×"),
        ("3.2 million", 3.2e6, ""),
        ("1e3", 1000.0, ""),
        ("328 MB", 328.0, "MB"),
        ("5.24 Gb", 5.24, "Gb"),
        ("400 Gb/s", 400.0, "Gb"),
        ("50 GB/s", 50.0, "GB"),
        ("5.24 gb", 5.24, "Gb"),
        ("0,396", 0.396, ""),
        ("5,24 GB", 5.24, "GB"),
        ("1.234,5", 1234.5, ""),
        ("2.375", 2.375, ""),
        ("13 msec", 13.0, "ms"),
        ("82 μs", 82.0, "µs"),
        ("240 concurrent requests", 240.0, ""),
        ("1e-3 s", 1e-3, "s"),
    ],
)
def test_parse_quantity(text, value, unit):
    got, got_unit = parse_quantity(text)
    assert got == pytest.approx(value)
    assert got_unit == unit


@pytest.mark.parametrize(
    "text",
    ["", "   ", "abc", "GB", "forty", "40 parsecs", "--", "13 Ms", "328 mb", "5 mB", "1,23,4"],
)
def test_parse_quantity_rejects(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["40", "40 %", "0.4", "39.9%", "41", "39", "2/5", "~40 %"])
def test_percent_answers(text):
    assert check_answer(text, 40, unit="%").ok


@pytest.mark.parametrize("text", ["83", "50 %", "0.83", "4"])
def test_percent_wrong(text):
    v = check_answer(text, 40, unit="%", hint="random routing finds the history 1 time in 8")
    assert not v.ok
    assert v.message.startswith("Not quite")
    assert "1 time in 8" in v.message


def test_bytes_across_prefixes():
    assert check_answer("2.62 GB", 2.62, unit="GB").ok
    assert check_answer("2,621 MB", 2.62, unit="GB").ok
    assert check_answer("2.62", 2.62, unit="GB").ok
    assert check_answer("2621440000 B", 2.62, unit="GB").ok
    v = check_answer("2.62 MB", 2.62, unit="GB")
    assert not v.ok and "prefix" in v.message


def test_time_and_factor_and_count():
    assert check_answer("13 ms", 13.1, unit="ms").ok
    assert check_answer("0.013 s", 13.1, unit="ms").ok
    assert check_answer("8x", 8, unit="x").ok
    assert check_answer("8", 8, unit="x").ok
    assert check_answer("2,375", 2375).ok
    assert not check_answer("2,000", 2375).ok


def test_default_tolerance_is_points_for_percentages_and_relative_otherwise():
    # 1 percentage point either side of a percentage, whatever its size
    assert check_answer("40.9 %", 39.9, unit="%").ok
    assert not check_answer("41 %", 39.9, unit="%").ok
    assert check_answer("1.9 %", 1.0, unit="%").ok  # 90 % off, yet within a point
    assert not check_answer("80", 100 * 5 / 6, unit="%").ok  # 3.3 points off
    # 2 % of the answer elsewhere
    assert check_answer("102", 100).ok
    assert not check_answer("102.5", 100).ok
    assert check_answer("12.9 ms", 13.107, unit="ms").ok
    assert not check_answer("12.8 ms", 13.107, unit="ms").ok
    # an explicit tolerance is in points for a percentage
    assert check_answer("43 %", 40, unit="%", tolerance=3).ok
    assert not check_answer("43.5 %", 40, unit="%", tolerance=3).ok


@pytest.mark.parametrize(
    "typed, value",
    [("5/6", 5 / 6), ("1/8", 0.125), ("3 / 4", 0.75), ("1,500/3", 500.0), ("0,5/2", 0.25)],
)
def test_fractions_are_read_as_their_value(typed, value):
    assert any(v == pytest.approx(value) for v, _ in parse_readings(typed))


@pytest.mark.parametrize("typed", ["1/0", "5/", "5/x", "/6"])
def test_bad_fractions_give_a_message(typed):
    v = check_answer(typed, 40, unit="%")
    assert not v.ok and "Could not read" in v.message


@pytest.mark.parametrize(
    "typed", ["~40", "~ 40 %", "≈40%", "about 40%", "About 40 %", "approx. 40", "roughly 40 %"]
)
def test_approximately_is_ignored(typed):
    assert parse_quantity(typed)[0] == pytest.approx(40)
    assert check_answer(typed, 39.6, unit="%").ok


def test_units_after_a_fraction_and_rates_are_not_fractions():
    assert parse_quantity("50 GB/s") == (50.0, "GB")  # "/s" is a rate, not a denominator
    assert check_answer("1/2 GB", 0.5, unit="GB").ok


def test_tolerance_is_relative():
    assert check_answer("104", 100, tolerance=0.05).ok
    assert not check_answer("106", 100, tolerance=0.05).ok
    assert check_answer("100", 100, tolerance=0).ok
    assert check_answer("0", 0).ok


def test_wrong_unit_family_is_explained():
    v = check_answer("13 GB", 13, unit="ms")
    assert not v.ok and "ms" in v.message


def test_ratio_answers():
    assert check_answer("6 : 3", (6, 3)).ok
    assert check_answer("6:3", (6, 3)).ok
    assert check_answer("6/3", (6, 3)).ok
    assert check_answer("2 : 1", (6, 3)).ok  # the chapter's "2 : 1 ratio"
    assert "same ratio" in check_answer("2 : 1", (6, 3)).message
    assert not check_answer("3 : 6", (6, 3)).ok
    assert not check_answer("1 : 2", (2, 3)).ok
    assert not check_answer("6", (6, 3)).ok
    assert not check_answer("a : b", (6, 3)).ok


@pytest.mark.parametrize("text", ["", "  ", None, "garbage", "40 parsecs", "%%%", "1e999"])
def test_bad_input_gives_a_message_never_an_exception(text):
    for answer, unit in ((40, "%"), (2.62, "GB"), ((6, 3), "")):
        v = check_answer(text, answer, unit=unit)
        assert v.ok is False
        assert isinstance(v.message, str) and len(v.message) > 10


def test_bad_question_arguments_raise_valueerror():
    with pytest.raises(ValueError, match="unit"):
        check_answer("1", 1, unit="furlongs")
    with pytest.raises(ValueError, match="tolerance"):
        check_answer("1", 1, tolerance=-1)
    with pytest.raises(ValueError, match="answer"):
        check_answer("1", "one")


def test_widget_checks_and_reports():
    pytest.importorskip("ipywidgets")
    w = ask("What fraction is cached?", 40, unit="%", hint="count the system prompt")
    w.text.value = "40 %"
    w.check()
    assert "Right" in w.feedback.value
    w.text.value = "12"
    w.check()
    assert "Not quite" in w.feedback.value and "system prompt" in w.feedback.value
    w.text.value = "nonsense"
    w.check()
    assert "Could not read" in w.feedback.value
    with pytest.raises(ValueError):
        ask("bad", 1, unit="furlongs")


# Every case the reviews found (issues 16 and 21), and the book's own answers: (typed, answer,
# unit, ok), checked at the default tolerance. tests/site/test_quiz.py runs this same table
# through the site's copy of the checker in Chromium and expects the same verdicts.
TABLE = [
    # bits are not bytes, mega is not milli
    ("5.24 Gb", 5.24, "GB", False),
    ("5.24 gb", 5.24, "GB", False),
    ("41.9 Gb", 5.24, "GB", True),
    ("13 Ms", 13.1, "ms", False),
    ("13 MS", 13.1, "ms", False),
    ("13 ms", 13.1, "ms", True),
    ("13 msec", 13.1, "ms", True),
    ("400 Gb/s", 50, "GB", True),
    ("400 GB/s", 50, "GB", False),
    ("50 GB/s", 50, "GB", True),
    ("5.24 GB", 5.24, "GB", True),
    ("5,240 MB", 5.24, "GB", True),
    ("5.24 MB", 5.24, "GB", False),
    ("2.62 GB", 5.24, "GB", False),
    # decimal commas
    ("0,396", 0.396, "", True),
    ("0,396", 396, "", False),
    ("5,243 GB", 5.243, "GB", True),
    ("5,24 GB", 5.24, "GB", True),
    ("5,24 GB", 524, "GB", False),
    ("2,375", 2375, "", True),
    ("2,375 tokens", 2375, "", True),
    ("2 375", 2375, "", True),
    ("72,500 tokens/s", 72500, "", True),
    ("40,0 %", 40, "%", True),
    # percentages
    ("40 %", 40, "%", True),
    ("0.4", 40, "%", True),
    ("0,4", 40, "%", True),
    ("83 %", 40, "%", False),
    ("83 %", 100 * 5 / 6, "%", True),
    # the tolerance the quiz page promises: 2 % of a figure ...
    ("13 ms", 13.107, "ms", True),
    ("12.9 ms", 13.107, "ms", True),
    ("12.7 ms", 13.107, "ms", False),
    ("13.8 ms", 13.107, "ms", False),
    ("5.2 GB", 5.243, "GB", True),
    ("5 GB", 5.243, "GB", False),
    # ... and 1 percentage point of a percentage (issue 21: 80 passed for 83.3 % at 5 %)
    ("80", 100 * 5 / 6, "%", False),
    ("82.5 %", 100 * 5 / 6, "%", True),
    ("84 %", 100 * 5 / 6, "%", True),
    ("37.7 %", 39.583, "%", False),
    ("41.5 %", 39.583, "%", False),
    ("39 %", 39.583, "%", True),
    ("40.5 %", 39.583, "%", True),
    ("0.39", 39.583, "%", True),
    # fractions, "~" and "about"
    ("5/6", 100 * 5 / 6, "%", True),
    ("5/6", 5 / 6, "", True),
    ("1/8", 39.583, "%", False),
    ("19/48", 39.583, "%", True),
    ("~40 %", 39.583, "%", True),
    ("about 40%", 39.583, "%", True),
    ("About 40 %", 39.583, "%", True),
    ("≈ 13 ms", 13.107, "ms", True),
    ("roughly 5.2 GB", 5.243, "GB", True),
    ("approx. 20 GB/s", 19.66, "GB", True),
    ("1/0", 40, "%", False),
    # factors and counts
    ("8x", 8, "x", True),
    ("8 ×", 8, "x", True),
    ("64", 8, "x", False),
    ("240 concurrent requests", 240, "", True),
    ("100", 240, "", False),
]


@pytest.mark.parametrize("typed, answer, unit, ok", TABLE)
def test_table_of_answers(typed, answer, unit, ok):
    v = check_answer(typed, answer, unit=unit)
    assert v.ok is ok, v.message


RATIOS = [
    ("6 : 3", (6, 3), True),
    ("2 : 1", (6, 3), True),
    ("2:1", (6, 3), True),
    ("4 : 2", (6, 3), True),
    ("3 : 6", (6, 3), False),
    ("1 : 2", (2, 3), False),
    ("2 : 3", (2, 3), True),
    ("4 : 6", (2, 3), True),
    ("2 : 2", (3, 2), False),
    ("3 : 2", (3, 2), True),
    ("0 : 3", (6, 3), False),
    ("6", (6, 3), False),
]


@pytest.mark.parametrize("typed, answer, ok", RATIOS)
def test_table_of_ratios(typed, answer, ok):
    assert check_answer(typed, answer, tolerance=0).ok is ok


def test_bits_hint_and_case_message():
    v = check_answer("5.24 Gb", 5.24, unit="GB")
    assert "bit" in v.message
    v = check_answer("13 Ms", 13.1, unit="ms")
    assert not v.ok and "case-sensitive" in v.message


# ---- properties of the parser -------------------------------------------------------------
_values = st.floats(min_value=1e-3, max_value=1e9, allow_nan=False, allow_infinity=False)
_units = st.sampled_from(sorted(UNITS))
_fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fast
@given(value=_values, unit=_units, space=st.sampled_from(["", " "]))
def test_property_value_and_unit_round_trip(value, unit, space):
    text = f"{value!r}{space if unit else ''}{unit}"
    got, got_unit = parse_quantity(text)
    assert got == pytest.approx(value, rel=1e-12)
    # a rate's "/s" is noise to the parser (19.7 GB/s reads as 19.7 GB, compared in bytes)
    assert got_unit == unit.removesuffix("/s")


@_fast
@given(n=st.integers(min_value=1000, max_value=10**12))
def test_property_thousands_groups(n):
    assert parse_quantity(f"{n:,}")[0] == n
    assert parse_quantity(f"{n:,}".replace(",", "\u00a0"))[0] == n
    assert check_answer(f"{n:,}", n).ok


@_fast
@given(whole=st.integers(min_value=0, max_value=999), frac=st.integers(min_value=0, max_value=999))
def test_property_decimal_comma(whole, frac):
    for digits in (1, 2, 3):
        f = frac % 10**digits
        typed = f"{whole},{f:0{digits}d}"
        value = float(f"{whole}.{f:0{digits}d}")
        assert any(v == pytest.approx(value) for v, _ in parse_readings(typed))
        assert check_answer(typed, value, tolerance=1e-9).ok


@_fast
@given(value=st.floats(min_value=1e-2, max_value=1e4), family=st.sampled_from(["bytes", "seconds"]))
def test_property_units_convert_within_a_family(value, family):
    units = [u for u, (fam, _) in UNITS.items() if fam == family]
    want = units[0]
    for typed_unit in units:
        typed_value = value * UNITS[want][1] / UNITS[typed_unit][1]
        assert check_answer(f"{typed_value!r} {typed_unit}", value, unit=want).ok


@_fast
@given(value=st.floats(min_value=1e-2, max_value=1e4), prefix=st.sampled_from(["k", "M", "G", "T"]))
def test_property_bits_are_never_bytes(value, prefix):
    byte_unit = "kB" if prefix == "k" else prefix + "B"
    bit_unit = "kb" if prefix == "k" else prefix + "b"
    assert not check_answer(f"{value!r} {bit_unit}", value, unit=byte_unit).ok
    assert check_answer(f"{8 * value!r} {bit_unit}", value, unit=byte_unit).ok


@_fast
@given(
    a=st.integers(min_value=1, max_value=40),
    b=st.integers(min_value=1, max_value=40),
    k=st.integers(min_value=1, max_value=5),
)
def test_property_equivalent_ratios(a, b, k):
    assert check_answer(f"{k * a} : {k * b}", (a, b), tolerance=0).ok
    if a != b:
        assert not check_answer(f"{b} : {a}", (a, b), tolerance=0).ok


@_fast
@given(text=st.text(max_size=30), unit=_units)
def test_property_never_raises_on_reader_input(text, unit):
    for answer in (40.0, (6, 3)):
        v = check_answer(text, answer, unit=unit if not isinstance(answer, tuple) else "")
        assert isinstance(v.ok, bool) and v.message


@_fast
@given(value=st.floats(min_value=0.0, max_value=100.0), delta=st.floats(min_value=-3, max_value=3))
def test_property_percent_tolerance_is_in_points(value, delta):
    ok = check_answer(f"{value + delta!r} %", value, unit="%").ok
    if abs(delta) < 0.99:
        assert ok
    elif abs(delta) > 1.01:
        assert not ok


@_fast
@given(value=_values, rel=st.floats(min_value=0.0, max_value=0.2))
def test_property_tolerance_is_relative(value, rel):
    typed = value * (1 + rel)
    ok = check_answer(f"{typed!r}", value, tolerance=0.05).ok
    if rel < 0.049:
        assert ok
    elif rel > 0.051:
        assert not ok
    assert math.isfinite(typed)
