"""The compiled pdsim loop (kvlab.pdsim.kernel) against the kept event-by-event simulator
(kvlab.pdsim.reference): random traffic, systems and calibrations must give the same request
stream: every request finishes in both or neither, times equal to 1e-9 s, the same busy time
per replica and the same mean number in the system."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import costs, pdsim

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
TOL = 1e-9


def assert_same_stream(a: pdsim.SimResult, b: pdsim.SimResult) -> None:
    assert a.label == b.label
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "transfer_s"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("first_token_s", "finish_s"):
        x, y = getattr(a, name), getattr(b, name)
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=name)
        np.testing.assert_allclose(x, y, rtol=0, atol=TOL, err_msg=name)
    np.testing.assert_allclose(a.replica_busy_s, b.replica_busy_s, rtol=0, atol=TOL)
    assert abs(a.mean_in_system - b.mean_in_system) <= TOL
    assert abs(a.end_s - b.end_s) <= TOL


traffics = st.builds(
    pdsim.Traffic,
    rate_rps=st.sampled_from([0.5, 3.0, 8.0, 15.0, 40.0]),
    requests=st.integers(1, 120),
    prompt_tokens=st.sampled_from([1, 7, 300, 3_000]),
    output_tokens=st.sampled_from([1, 2, 5, 60]),
    prompt_dist=st.sampled_from(pdsim.DISTRIBUTIONS),
    output_dist=st.sampled_from(pdsim.DISTRIBUTIONS),
    sigma=st.sampled_from([0.3, 1.0]),
    hit_rate=st.sampled_from([0.0, 0.5, 0.9]),
    seed=st.integers(0, 50),
)
colocated = st.builds(
    pdsim.Colocated,
    replicas=st.integers(1, 5),
    chunk_tokens=st.one_of(st.none(), st.sampled_from([1, 16, 512])),
    max_batch=st.sampled_from([1, 3, 256]),
    overlap=st.sampled_from([0.0, 0.5, 1.0]),
    tp=st.sampled_from([4, 8]),
)
disaggregated = st.builds(
    pdsim.Disaggregated,
    prefill=st.integers(1, 4),
    decode=st.integers(1, 4),
    max_batch=st.sampled_from([1, 3, 256]),
    layerwise=st.booleans(),
    setup_s=st.sampled_from([0.0, 0.002]),
    tp=st.sampled_from([4, 8]),
    first_step=st.booleans(),
    per_message_s=st.sampled_from([0.0, 1e-5]),
)
calibrations = st.sampled_from(["book", "measured"])


def _cost(name: str, system) -> costs.Costs | str:
    # the book's calibration exists at TP 8 only
    tps = {system.tp} if isinstance(system, pdsim.Colocated) else {system.p_tp, system.d_tp}
    return "measured" if name == "measured" or tps != {8} else "book"


@SETTINGS
@given(system=st.one_of(colocated, disaggregated), traffic=traffics, name=calibrations)
def test_kernel_matches_reference(system, traffic, name):
    cost = _cost(name, system)
    fast = pdsim.simulate(system, traffic, cost)
    ref = pdsim.simulate(system, traffic, cost, _reference=True)
    assert_same_stream(fast, ref)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(system=st.one_of(colocated, disaggregated), traffic=traffics, name=calibrations)
def test_kernel_matches_reference_stepping_one_by_one(system, traffic, name):
    """``Replica.runs = False`` (every decode step its own event) in both."""
    cost = _cost(name, system)
    old = pdsim.Replica.runs
    try:
        pdsim.Replica.runs = False
        fast = pdsim.simulate(system, traffic, cost)
        ref = pdsim.simulate(system, traffic, cost, _reference=True)
    finally:
        pdsim.Replica.runs = old
    assert_same_stream(fast, ref)


@pytest.mark.parametrize(
    "system",
    [pdsim.Colocated(10), pdsim.Disaggregated(6, 4), pdsim.Disaggregated(3, 7, first_step=True)],
)
@pytest.mark.parametrize("cost", ["book", "measured"])
def test_kernel_matches_reference_on_a_steady_trial(system, cost):
    """The explorer's kind of run: thousands of requests near saturation, bit for bit."""
    t = pdsim.Traffic(rate_rps=20.0, requests=3_000, hit_rate=0.5, seed=4)
    a = pdsim.simulate(system, t, cost)
    b = pdsim.simulate(system, t, cost, _reference=True)
    np.testing.assert_array_equal(a.first_token_s, b.first_token_s)
    np.testing.assert_array_equal(a.finish_s, b.finish_s)
    assert a.mean_in_system == b.mean_in_system


def test_a_broken_kernel_is_caught():
    """The comparison can fail: one request's finish moved by 2e-9 s is reported."""
    t = pdsim.Traffic(rate_rps=5.0, requests=50, seed=1)
    a = pdsim.simulate(pdsim.Colocated(2), t)
    b = pdsim.simulate(pdsim.Colocated(2), t, _reference=True)
    a.finish_s[7] += 2e-9
    with pytest.raises(AssertionError):
        assert_same_stream(a, b)
