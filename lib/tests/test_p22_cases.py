"""Problem 22's other cases on both calibrations (p22-06, section 6): the pieces the page relies on.

- the lever with prefill's fixed part (``split_colocated_ratio_p0``) is the lever when the fixed
  part is zero and shrinks as it grows;
- bandwidth scaling checked on the one GPU pair of the fitted database (H100 SXM -> H200): scaling
  the whole decode step fits H200's points worse than scaling part of it;
- the simulator's layer-wise transfer charges each request the derivation's exposed time;
- a batch cap (the decode-memory limit) well below Little's-law concurrency breaks TPOT in the
  simulator, and one above it does not (concurrency is counted at the target's step, 40 ms, so a
  cap just below it can still pass: the capped steps are shorter).
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab import calc, costs, disagg, pdsim


@given(
    k=st.floats(1e-6, 1e-3),
    out=st.integers(2, 2_000),
    t_pre=st.floats(0.01, 2.0),
    a=st.floats(0.001, 0.03),
)
def test_lever_with_fixed_part_is_the_lever_at_zero_and_falls_with_it(k, out, t_pre, a):
    args = dict(k=k, O=out, t_pre=t_pre, a=a, T=0.04)
    plain = calc.evaluate("split_colocated_ratio", **args)
    assert calc.evaluate("split_colocated_ratio_p0", t_p0=0.0, **args) == pytest.approx(plain)
    lower = calc.evaluate("split_colocated_ratio_p0", t_p0=0.5 * t_pre, **args)
    assert lower < plain


def _h200_median_error(share: float, tp: int = 8) -> float:
    data = costs.measured_data()
    fit = data["fits"]["H100-SXM"][str(tp)]
    c = costs.on_other_gpu(
        costs.cost_model("measured", gpu="H100-SXM", tp=tp),
        costs.GPUS["H200"].hbm_bytes_per_s,
        hbm_share=share,
    )
    errors = [
        abs(costs.decode_cost_s(c, p["batch"], p["context"]) / p["seconds"] - 1)
        for p in data["points"]["decode"]
        if p["gpu"] == "H200"
        and p["tp"] == tp
        and fit["decode_batch_range"][0] <= p["batch"] <= fit["decode_batch_range"][1]
    ]
    assert len(errors) >= 10
    return float(np.median(errors))


def test_scaling_the_whole_step_misses_h200_more_than_scaling_part_of_it():
    whole = _h200_median_error(1.0)
    part = min(_h200_median_error(s) for s in np.linspace(0, 0.9, 10))
    assert part < whole
    assert whole > 0.05  # the book's A100 rule (s = 1) is off by more than the fit's own error


def test_layerwise_transfer_in_the_simulator_is_the_derivations_exposed_time():
    cost = costs.cost_model("measured")
    t_m = 500 * 10e-6  # 500 messages a layer at 10 us each
    system = pdsim.Disaggregated(2, 1, layerwise=True, per_message_s=t_m)
    traffic = pdsim.Traffic(rate_rps=1.0, requests=20, prompt_tokens=8_000, output_tokens=4)
    r = pdsim.simulate(system, traffic, cost)
    pre = costs.prefill_cost_s(cost, 8_000)
    x = disagg.kv_transfer(system.model, 8_000, link=system.link).seconds
    expected = disagg.exposed_transfer_seconds(pre, x, system.model.layers, t_m)
    assert r.transfer_s == pytest.approx(np.full(20, expected), rel=1e-9)
    assert expected > 0.01  # the per-message cost makes part of it visible


def test_a_batch_cap_below_concurrency_breaks_tpot_and_one_above_does_not():
    cost = costs.cost_model("measured")
    long = pdsim.Traffic(rate_rps=4.0, prompt_tokens=32_000, output_tokens=900)
    window = pdsim.Window(60.0, 120.0, 40.0)
    conc = calc.decode_concurrency(4.0, 900, 0.040)  # 144 requests decoding at once
    tight = pdsim.Disaggregated(7, 2, max_batch=40)  # 80 slots
    roomy = pdsim.Disaggregated(7, 4, max_batch=40)  # 160 slots
    assert 2 * 40 < conc < 4 * 40
    p90 = {
        name: pdsim.steady_run(s, dataclasses.replace(long, seed=1), window, cost).percentile(
            "tpot", 90
        )
        for name, s in (("tight", tight), ("roomy", roomy))
    }
    assert p90["tight"] > 0.040 >= p90["roomy"]
