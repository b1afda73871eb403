"""kvlab.costs: one cost model, the book's calibration and the one fitted to aiconfigurator."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import assumptions, calc, costs, pdsim, pool_sizing, queueing

GPU_TP = [(g, t) for g in costs.GPUS for t in costs.TPS]


# --- the book's calibration ------------------------------------------------------------------------


def test_book_reproduces_assumptions_exactly():
    c = assumptions.COST
    for tokens in (1, 512, 3_000, 8_000, 100_000):
        assert costs.prefill_s(tokens, calibration="book") == tokens * c.prefill_s_per_token
        # the cached tokens cost nothing in the book's model
        assert costs.prefill_s(tokens, cached=5_000, calibration="book") == tokens * 1e-4
    for batch in (1, 32, 100, 256):
        for ctx in (0, 3_000, 32_000):
            step = costs.decode_step_s(batch, ctx, calibration="book")
            assert step == calc.decode_step_seconds(batch, c.decode_base_s, c.decode_per_request_s)
            assert step == c.decode_base_s + c.decode_per_request_s * batch
    # the figures of the issue: 300 ms / 800 ms prefill, 20.2 / 26.4 / 40 / 71.2 ms steps
    assert costs.prefill_s(3_000, calibration="book") == pytest.approx(0.300)
    assert costs.prefill_s(8_000, calibration="book") == pytest.approx(0.800)
    steps = [costs.decode_step_s(b, 3_000, calibration="book") for b in (1, 32, 100, 256)]
    assert steps == pytest.approx([0.0202, 0.0264, 0.040, 0.0712])


def test_book_is_the_simulators_default():
    assert costs.BOOK.prefill_s_per_token == assumptions.COST.prefill_s_per_token
    assert costs.BOOK.decode_base_s == assumptions.COST.decode_base_s
    assert costs.BOOK.decode_per_request_s == assumptions.COST.decode_per_request_s
    assert costs.BOOK.calibration == "book"
    import inspect

    assert inspect.signature(pdsim.simulate).parameters["cost"].default is costs.BOOK
    assert inspect.signature(queueing.simulate).parameters["cost"].default is costs.BOOK


def test_book_mfu_and_mixed_step():
    # 2 x 70e9 FLOPs per token every 0.1 ms on 8 x 989 TFLOP/s
    assert costs.book_mfu() == pytest.approx(2 * 70e9 / 1e-4 / (8 * 989e12))
    # the book's chunked step: the decode step plus tau per chunk token
    assert costs.mixed_step_s(512, 100, 3_000, calibration="book") == pytest.approx(
        0.020 + 0.0002 * 100 + 512 * 1e-4
    )


def test_book_lever_is_the_headline_ratio():
    r = costs.lever_ratio(costs.BOOK, 3_000, 300, 0.040)
    k, o, p, a, t = 0.0002, 300, 0.3, 0.020, 0.040
    assert r == pytest.approx((k * (o - 1) + p) / ((1 - a / t) * p + k * (o - 1)))
    assert 1.6 < r < 1.8


# --- the measured calibration ----------------------------------------------------------------------


def _points(phase):
    return costs.measured_data()["points"][phase]


def test_measured_file_says_where_it_came_from():
    d = costs.measured_data()
    for key in ("aiconfigurator", "backend", "backend_version", "date", "command", "model"):
        assert d[key], key
    assert d["backend"] == "trtllm"
    assert "70B" in d["model"]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_measured_reproduces_database_points(phase):
    """Within 10 % (median) and 25 % (worst) of every point the fit was made on."""
    errs = []
    for p in _points(phase):
        kw = dict(gpu=p["gpu"], tp=p["tp"], calibration="measured")
        if phase == "prefill":
            model = costs.prefill_s(p["tokens"], cached=p["cached"], **kw)
        else:
            model = costs.decode_step_s(p["batch"], p["context"], **kw)
        errs.append(abs(model / p["seconds"] - 1))
    assert len(errs) > 50
    assert float(np.median(errs)) <= 0.10
    assert max(errs) <= 0.25


def test_measured_matches_the_issue_figures():
    # H100 SXM, TP 8 (aiconfigurator cli estimate): 131 ms and 328 ms prefill,
    # 10.0 / 13.9 / 19.9 / 31.2 ms decode steps at 3,000-token contexts
    assert costs.prefill_s(3_000) == pytest.approx(0.131, rel=0.1)
    assert costs.prefill_s(8_000) == pytest.approx(0.328, rel=0.1)
    for b, ms in ((1, 10.0), (32, 13.9), (100, 19.9), (256, 31.2)):
        assert costs.decode_step_s(b, 3_000) == pytest.approx(ms / 1e3, rel=0.1)


def test_measured_uncovered_pair_says_so():
    with pytest.raises(ValueError, match="do not fit"):
        costs.cost_model("measured", gpu="H100-SXM", tp=1)
    assert ("H100-SXM", 1) not in costs.covered()
    assert ("H200", 8) in costs.covered()


@given(
    gpu_tp=st.sampled_from([gt for gt in GPU_TP if gt != ("H100-SXM", 1)]),
    batch=st.integers(1, 256),
    ctx=st.floats(0, 32_000),
    extra=st.floats(1, 16_000),
    more=st.integers(1, 64),
)
@settings(max_examples=200, deadline=None)
def test_decode_step_grows_with_context_and_batch(gpu_tp, batch, ctx, extra, more):
    gpu, tp = gpu_tp
    step = costs.decode_step_s(batch, ctx, gpu=gpu, tp=tp)
    assert costs.decode_step_s(batch, ctx + extra, gpu=gpu, tp=tp) > step
    assert costs.decode_step_s(batch + more, ctx, gpu=gpu, tp=tp) > step


def test_measured_kv_read_is_near_hbm_bandwidth():
    """The fitted per-context-token term is the KV read at a plausible share of HBM bandwidth."""
    for gpu, tp in costs.covered():
        eta = costs.kv_read_efficiency(costs.cost_model("measured", gpu=gpu, tp=tp))
        assert 0.3 < eta < 1.5, (gpu, tp, eta)
    assert math.isnan(costs.kv_read_efficiency(costs.BOOK))


def test_prefill_costs_attention_over_cached_context():
    for gpu, tp in costs.covered():
        kw = dict(gpu=gpu, tp=tp)
        assert costs.prefill_s(1_000, cached=31_000, **kw) >= costs.prefill_s(1_000, **kw)
        assert costs.prefill_s(2_000, **kw) > costs.prefill_s(1_000, **kw)
        mfu = [
            costs.prefill_mfu(costs.cost_model("measured", **kw), n) for n in (256, 1_024, 8_192)
        ]
        # the fixed part fades with more tokens; at long prompts attention takes its share
        assert mfu[0] < mfu[1] < 1 and mfu[2] < 1


def test_mixed_step_pays_the_fixed_part_once():
    c = costs.cost_model("measured")
    mixed = costs.mixed_step_s(512, 64, 3_000)
    apart = costs.decode_step_s(64, 3_000) + costs.prefill_s(512)
    assert mixed == pytest.approx(apart - c.prefill_fixed_s)
    assert costs.mixed_step_s(0, 64, 3_000) == pytest.approx(costs.decode_step_s(64, 3_000))


def test_transfer():
    assert costs.transfer_s(8e9, 50e9, links=8) == pytest.approx(0.02)
    assert costs.transfer_s(8e9, 50e9, links=8, messages=80, per_message_s=1e-4, setup_s=0.01) == (
        pytest.approx(0.02 + 0.008 + 0.01)
    )


def test_linearised():
    c = costs.cost_model("measured")
    lin = costs.linearised(c, 3_000, 3_150)
    assert lin.prefill_s_per_token * 3_000 == pytest.approx(costs.prefill_s(3_000))
    assert costs.decode_cost_s(lin, 64, 0) == pytest.approx(costs.decode_step_s(64, 3_150))
    assert costs.linearised(costs.BOOK, 3_000, 3_000) is costs.BOOK


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpu": "A100"}, "gpu must be one of"),
        ({"tp": 3}, "tp must be one of"),
        ({"tp": True}, "tp must be one of"),
        ({"calibration": "guess"}, "calibration must be one of"),
        ({"calibration": "book", "tp": 4}, "book calibration"),
        ({"calibration": "book", "gpu": "H200"}, "book calibration"),
    ],
)
def test_bad_choices(kwargs, match):
    with pytest.raises(ValueError, match=match):
        costs.prefill_s(1_000, **kwargs)
    with pytest.raises(ValueError, match=match):
        costs.decode_step_s(8, 1_000, **kwargs)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: costs.prefill_s(0), "tokens"),
        (lambda: costs.prefill_s(math.nan), "tokens"),
        (lambda: costs.prefill_s(100, cached=-1), "cached"),
        (lambda: costs.decode_step_s(0, 100), "batch"),
        (lambda: costs.decode_step_s(4, -5), "context_tokens"),
        (lambda: costs.decode_step_s("8", 100), "batch"),
        (lambda: costs.transfer_s(1e6, 0), "bandwidth_bytes_per_s"),
        (lambda: costs.transfer_s(1e6, 1e9, links=0), "links"),
        (lambda: costs.lever_ratio(costs.BOOK, 3_000, 300, 0.01), "tpot_s"),
        (lambda: costs.as_costs(3), "cost must be"),
        (lambda: costs.as_costs("guess"), "calibration must be one of"),
    ],
)
def test_bad_numbers(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_queueing_takes_nonlinear_costs():
    w = queueing.IndependentRequests(requests=20, prompt_tokens=2_000, seed=3)
    full = queueing.simulate(w, "round_robin", 1, 1.0, cost=costs.cost_model("measured"))
    assert np.all(np.isfinite(full.ttft_s))  # context terms simulated (test_queueing_costs.py)
    lin = costs.linearised(costs.cost_model("measured"), 2_000, 2_000)
    res = queueing.simulate(w, "round_robin", 1, 1.0, cost=lin)
    assert np.all(np.isfinite(res.ttft_s))


# --- the simulators on kvlab.costs ------------------------------------------------------------------


def _one(system, prompt=3_000, output=50, cost=costs.BOOK):
    t = pdsim.Traffic(rate_rps=1.0, requests=1, prompt_tokens=prompt, output_tokens=output)
    return pdsim.simulate(system, t, cost)


def test_pdsim_single_request_times_follow_the_measured_model():
    c = costs.cost_model("measured")
    p, o = 3_000, 50
    r = _one(pdsim.Colocated(1, chunk_tokens=None), p, o, c)
    assert r.ttft_s[0] == pytest.approx(costs.prefill_s(p))
    # decode steps of batch 1 whose context grows by one token a step, from p + 1
    steps = sum(costs.decode_step_s(1, p + 1 + i) for i in range(o - 1))
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(steps)
    # chunked alone: every chunk pays the fixed part, the attention pairs add up to P^2 / 2
    r = _one(pdsim.Colocated(1, chunk_tokens=512), p, o, c)
    chunks = math.ceil(p / 512)
    expect = (
        chunks * c.prefill_fixed_s + p * c.prefill_s_per_token + c.prefill_s_per_pair * p * p / 2
    )
    assert r.ttft_s[0] == pytest.approx(expect)


def test_pdsim_first_step_adds_one_decode_step_to_ttft():
    for cost in (costs.BOOK, costs.cost_model("measured")):
        landed = _one(pdsim.Disaggregated(1, 1), cost=cost)
        first = _one(pdsim.Disaggregated(1, 1, first_step=True), cost=cost)
        step = costs.decode_cost_s(cost, 1, 3_000)
        assert first.ttft_s[0] - landed.ttft_s[0] == pytest.approx(step, rel=1e-6)
        assert first.tpot_s[0] == pytest.approx(landed.tpot_s[0], rel=0.01)


def test_pdsim_per_phase_tp():
    m = costs.cost_model("measured")
    s = pdsim.Disaggregated(6, 3, prefill_tp=2, decode_tp=4)
    assert (s.gpus, s.gpu_split, s.total) == (24, (12, 12), 9)
    assert s.label == "disaggregated 6:3 (TP 2/4)"
    assert pdsim.Disaggregated(6, 3).label == "disaggregated 6:3"
    assert pdsim.Colocated(4, tp=2).gpus == 8
    with pytest.raises(ValueError, match="book calibration"):
        _one(s)
    r = _one(s, cost=m)
    assert r.ttft_s[0] > costs.prefill_s(3_000, tp=2)  # prefill at TP 2, plus the transfer
    assert r.ttft_s[0] == pytest.approx(costs.prefill_s(3_000, tp=2) + r.transfer_s[0])
    steps = sum(costs.decode_step_s(1, 3_001 + i, tp=4) for i in range(49))
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(steps)
    b = pdsim.capacity_bound(s, pdsim.Traffic(), 0.040, m)
    assert b.prefill_rps == pytest.approx(6 / costs.prefill_s(3_000, tp=2))
    with pytest.raises(ValueError, match="prefill_tp"):
        pdsim.Disaggregated(6, 3, prefill_tp=0)


def test_pdsim_goodput_table_reports_gpus():
    t = pdsim.Traffic(rate_rps=5.0, requests=200)
    m = costs.cost_model("measured")
    systems = [pdsim.Colocated(2), pdsim.Disaggregated(1, 1, prefill_tp=4, decode_tp=8)]
    table = pdsim.goodput_table(systems, t, 1.0, 0.040, seeds=[0], rtol=0.2, cost=m,
                                window=pdsim.Window(5.0, 20.0, 5.0))  # fmt: skip
    assert list(table.gpus) == [16, 12]
    assert list(table.prefill_gpus) == [0, 4] and list(table.decode_gpus) == [0, 8]


def test_pdsim_book_runs_equal_stepping_with_context_terms_off():
    """Runs of identical steps stay on for the book's costs and give the step-by-step times."""
    t = pdsim.Traffic(rate_rps=12.0, requests=300, output_dist="lognormal", seed=4)
    a = pdsim.simulate(pdsim.Disaggregated(5, 3), t)
    old = pdsim.Replica.runs
    try:
        pdsim.Replica.runs = False
        b = pdsim.simulate(pdsim.Disaggregated(5, 3), t)
    finally:
        pdsim.Replica.runs = old
    assert np.allclose(a.finish_s, b.finish_s, rtol=1e-9, atol=1e-9)


def test_pdsim_measured_runs_equal_stepping():
    """Runs of decode steps that grow by one token's KV read each give the step-by-step times."""
    m = costs.cost_model("measured")
    t = pdsim.Traffic(rate_rps=12.0, requests=300, output_dist="lognormal", seed=4)
    for system in (pdsim.Disaggregated(5, 3, first_step=True), pdsim.Colocated(4)):
        a = pdsim.simulate(system, t, m)
        old = pdsim.Replica.runs
        try:
            pdsim.Replica.runs = False
            b = pdsim.simulate(system, t, m)
        finally:
            pdsim.Replica.runs = old
        assert np.allclose(a.finish_s, b.finish_s, rtol=1e-9, atol=1e-9)
        assert np.allclose(a.first_token_s, b.first_token_s, rtol=1e-9, atol=1e-9)


def test_simulators_take_a_calibration_name():
    t = pdsim.Traffic(rate_rps=5.0, requests=100)
    by_name = pdsim.simulate(pdsim.Disaggregated(2, 1, prefill_tp=4), t, "measured")
    by_object = pdsim.simulate(
        pdsim.Disaggregated(2, 1, prefill_tp=4), t, costs.cost_model("measured")
    )
    assert np.array_equal(by_name.finish_s, by_object.finish_s)
    book = pdsim.simulate(pdsim.Colocated(2), t, "book")
    assert np.array_equal(book.finish_s, pdsim.simulate(pdsim.Colocated(2), t).finish_s)
    assert costs.as_costs("book") is costs.BOOK
    w = queueing.IndependentRequests(requests=20, prompt_tokens=2_000, seed=3)
    a = queueing.simulate(w, "round_robin", 1, 1.0, cost="book")
    assert np.array_equal(a.finish_s, queueing.simulate(w, "round_robin", 1, 1.0).finish_s)


def test_mixed_step_as_one_pass_beats_two_passes_added():
    """aiconfigurator's mixed steps (not fitted): the one-pass rule is within 10 % (median) and
    closer than adding the two passes up."""
    mixed = costs.measured_data()["mixed_check"]
    one, two = [], []
    for m in mixed:
        kw = dict(gpu=m["gpu"], tp=m["tp"])
        model = costs.mixed_step_s(m["chunk"], m["batch"], m["context"], **kw)
        apart = costs.decode_step_s(m["batch"], m["context"], **kw) + costs.prefill_s(
            m["chunk"], **kw
        )
        one.append(abs(model / m["seconds"] - 1))
        two.append(abs(apart / m["seconds"] - 1))
    assert len(mixed) > 30
    assert np.median(one) <= 0.10
    assert np.median(one) < np.median(two)


def test_deployed_pools_one_rule_for_both_pools_and_any_decode_gpu():
    from kvlab import hardware

    book = pool_sizing.deployed_pools(costs.BOOK, 20, 3_000, 300, 0.040)
    assert (book.prefill, book.decode, book.batch) == (7, 3, 100)  # the card's 7 : 3
    assert book.prefill_work == pytest.approx(6.0) and book.decode_work == pytest.approx(2.4)
    # float noise does not lose a request: (60 - 20) / 0.2 is 200, not 199
    assert pool_sizing.deployed_pools(costs.BOOK, 20, 3_000, 300, 0.060).batch == 200
    # decode on another GPU keeps prefill where it was and sizes decode by the same headroom
    a100 = costs.on_other_gpu(costs.BOOK, hardware.A100_80GB.hbm_bytes_per_s, hbm_share=1.0)
    mixed = pool_sizing.deployed_pools(costs.BOOK, 20, 3_000, 300, 0.040, decode_cost=a100)
    assert (mixed.prefill, mixed.batch, mixed.decode) == (7, 21, 13)  # ceil(240 / (0.9 x 21))
    measured = costs.cost_model("measured", gpu="H100-SXM", tp=8)
    m = pool_sizing.deployed_pools(measured, 20, 3_000, 300, 0.040)
    assert m.batch == 256 and (m.prefill, m.decode) == (3, 2)  # capped; 240 > 0.9 x 256
    with pytest.raises(ValueError, match="tpot_s"):
        pool_sizing.deployed_pools(costs.BOOK, 20, 3_000, 300, 0.020)
    with pytest.raises(ValueError, match="hit_rate"):
        pool_sizing.deployed_pools(costs.BOOK, 20, 3_000, 300, 0.040, hit_rate=1.5)
