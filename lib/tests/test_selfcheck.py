"""The self-check answer boxes: parsing, tolerance, units, bad input, and the widget itself."""

import pytest

from kvlab.selfcheck import ask, check_answer, parse_quantity


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
        ("328 mb", 328.0, "MB"),
    ],
)
def test_parse_quantity(text, value, unit):
    got, got_unit = parse_quantity(text)
    assert got == pytest.approx(value)
    assert got_unit == unit


@pytest.mark.parametrize("text", ["", "   ", "abc", "GB", "forty", "40 parsecs", "--"])
def test_parse_quantity_rejects(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["40", "40 %", "0.4", "39.9%", "41"])
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
    assert not check_answer("2 : 1", (6, 3)).ok
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
