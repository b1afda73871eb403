"""``serving.deadline.time_limit``: work in this process stopped at its limit, its clean-up run,
limits nested, and a limit that cannot be kept refused rather than ignored."""

from __future__ import annotations

import threading
import time

import pytest

from kvlab.measure.serving.deadline import TimeLimit, time_limit


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_work_past_its_limit_is_stopped_and_cleans_up():
    cleaned = []
    t0 = time.monotonic()
    with pytest.raises(TimeLimit, match=r"the job ran past its time limit of 0.2 s"):
        with time_limit(0.2, "the job"):
            try:
                _busy(5)
            finally:
                cleaned.append(True)
    assert time.monotonic() - t0 < 2 and cleaned == [True]


def test_work_within_its_limit_is_left_alone():
    with time_limit(2, "quick"):
        _busy(0.05)
    _busy(2.2)  # no alarm left behind


def test_limits_nest():
    with pytest.raises(TimeLimit, match="inner"):
        with time_limit(3, "outer"):
            with time_limit(0.1, "inner"):
                _busy(5)
    with pytest.raises(TimeLimit, match="outer"):
        with time_limit(0.2, "outer"):
            with time_limit(5, "inner"):
                _busy(5)
    with pytest.raises(TimeLimit, match="outer"):  # the outer limit goes on after the inner one
        with time_limit(0.4, "outer"):
            with time_limit(5, "inner"):
                _busy(0.1)
            _busy(5)


def test_a_limit_that_cannot_be_kept_is_refused():
    with pytest.raises(ValueError, match=r"limit_s must be in \(0, inf\)"):
        with time_limit(0):
            pass
    errors = []

    def other():
        try:
            with time_limit(1, "in a thread"):
                pass
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors and "main thread" in errors[0]
    with time_limit(None):
        pass
