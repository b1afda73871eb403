"""Lab 1's non-negative prefill fit (kvlab.measure.prefix.prefill_fit)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.measure.prefix.prefill_fit import fit_prefill


def test_recovers_a_noise_free_curve():
    x = np.array([256, 512, 1024, 2048, 3072])
    y = 0.02 + 1e-4 * x + 3e-9 * x**2
    f = fit_prefill(x, y)
    assert f.a_s == pytest.approx(0.02, rel=1e-6)
    assert f.b_s_per_token == pytest.approx(1e-4, rel=1e-6)
    assert f.c_s_per_token2 == pytest.approx(3e-9, rel=1e-6)
    assert f.residual_max_s < 1e-9
    assert f.hit_time_s(3072, 3040) == pytest.approx(
        0.02 + 1e-4 * 32 + 3e-9 * (3072**2 - 3040**2), rel=1e-9
    )


def test_a_free_fit_would_go_negative_this_one_does_not():
    """Timings as one loaded run of Lab 1 gave (short prompts fast against a line through the long
    ones): the free quadratic's intercept and curvature come out negative and it predicts a
    negative time for a 32-token tail; the constrained fit keeps every coefficient at or above
    zero and a positive prediction."""
    x = np.array([256, 512, 1024, 2048, 3072], dtype=float)
    y = np.array([0.005, 0.030, 0.090, 0.215, 0.330])
    c2, b, a = np.polyfit(x, y, 2)
    assert a < 0 and c2 < 0 and a + b * 32 + c2 * (3072**2 - 3040**2) < 0
    f = fit_prefill(x, y)
    assert min(f.a_s, f.b_s_per_token, f.c_s_per_token2) >= 0
    assert f.hit_time_s(3072, 3040) > 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(16, 4096), min_size=2, max_size=8),
    st.lists(st.floats(0.0, 2.0), min_size=8, max_size=8),
    st.integers(0, 2**31 - 1),
)
def test_no_non_negative_curve_fits_better(lengths, ys, seed):
    """Brute force: no non-negative (a, b, c) from a random cloud around the fit, nor any of the
    subsets' own solutions, has a smaller sum of squares than the fit."""
    x = np.array(lengths, dtype=float)
    y = np.array(ys[: len(lengths)])
    f = fit_prefill(x, y)
    coef = np.array([f.a_s, f.b_s_per_token, f.c_s_per_token2])
    assert np.all(coef >= 0)

    def ss(c):
        return float(np.sum((y - (c[0] + c[1] * x + c[2] * x**2)) ** 2))

    best = ss(coef)
    rng = np.random.default_rng(seed)
    scale = np.maximum(np.abs(coef), [1e-3, 1e-6, 1e-10])
    for _ in range(300):
        trial = np.maximum(coef + rng.normal(0, 1, 3) * scale, 0)
        assert ss(trial) >= best * (1 - 1e-9) - 1e-15


@pytest.mark.parametrize(
    "lengths, seconds, match",
    [
        ([100], [0.1], "at least 2 points"),
        ([100, 200], [0.1], "same size"),
        ([0, 200], [0.1, 0.2], "lengths must be"),
        ([100, 200], [-0.1, 0.2], "seconds must be"),
    ],
)
def test_bad_input_names_the_parameter(lengths, seconds, match):
    with pytest.raises(ValueError, match=match):
        fit_prefill(lengths, seconds)


def test_hit_time_rejects_more_cached_than_prompt():
    f = fit_prefill([100, 200, 300], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="cached_tokens"):
        f.hit_time_s(100, 200)
