"""kvlab.seeds: one way to run over seeds and summarise."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab import seeds


def test_scalar_mean_std_range():
    s = seeds.over_seeds(lambda k: float(k * k), seeds=range(4))
    vals = [0.0, 1.0, 4.0, 9.0]
    assert s.values == tuple(vals) and s.seeds == (0, 1, 2, 3)
    assert s.mean == pytest.approx(np.mean(vals))
    assert s.std == pytest.approx(np.std(vals, ddof=1))
    assert (s.lo, s.hi, s.n) == (0.0, 9.0, 4)
    assert s.sem == pytest.approx(s.std / 2)


def test_dict_and_fields():
    d = seeds.over_seeds(lambda k: {"a": k, "b": -k}, seeds=(1, 2, 3))
    assert d["a"].mean == 2 and d["b"].mean == -2
    from types import SimpleNamespace

    f = seeds.over_seeds(lambda k: SimpleNamespace(x=k, y=1), seeds=(0, 2), fields=["x", "y"])
    assert f["x"].mean == 1 and f["y"].std == 0


def test_single_seed_has_zero_spread_and_formatting():
    s = seeds.over_seeds(lambda k: 0.5, seeds=[7])
    assert s.std == 0 and s.fmt(".0%") == "50% ± 0%" and s.fmt_range(".1f") == "0.5-0.5"


def test_bad_input_names_parameter():
    with pytest.raises(ValueError, match="seed"):
        seeds.over_seeds(lambda k: 0.0, seeds=[-1])
    with pytest.raises(ValueError, match="seeds"):
        seeds.over_seeds(lambda k: 0.0, seeds=[])
    with pytest.raises(ValueError, match="values"):
        seeds.summarise([])


def test_differs_from_needs_a_gap_beyond_the_spread():
    a = seeds.summarise([1.0, 1.1, 0.9, 1.0])
    b = seeds.summarise([1.05, 1.15, 0.95, 1.05])
    c = seeds.summarise([2.0, 2.1, 1.9, 2.0])
    assert not a.differs_from(b) and a.differs_from(c)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20))
def test_summary_bounds(vals):
    s = seeds.summarise(vals)
    assert s.lo <= s.mean + 1e-6 * (1 + abs(s.mean)) and s.mean <= s.hi + 1e-6 * (1 + abs(s.mean))
    assert s.std >= 0 and not math.isnan(s.std)
