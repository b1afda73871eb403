"""The timed router simulator (kvlab.queueing) on kvlab.costs' measured calibration: prefill with
its fixed part and attention, decode steps that grow with the batch's context, and the measured
calibration's documented fit quality."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import costs, queueing

MEASURED = costs.cost_model("measured")


def _one(prompt=3_000, output=50, **kw):
    w = queueing.IndependentRequests(
        requests=1, prompt_tokens=prompt, sigma=0.0, output_tokens=output, seed=0
    )
    return queueing.simulate(w, "round_robin", 1, 1.0, cost=MEASURED, **kw), int(w.prompt_tokens[0])


def test_single_request_follows_the_cost_model():
    r, p = _one(3_000, 50)
    assert r.ttft_s[0] == pytest.approx(costs.prefill_cost_s(MEASURED, p), rel=1e-9)
    steps = [costs.decode_cost_s(MEASURED, 1, p + 1 + j) for j in range(49)]
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(sum(steps), rel=1e-9)
    assert r.busy_s[0] == pytest.approx(r.ttft_s[0] + sum(steps), rel=1e-9)


def test_chunked_prefill_pays_the_fixed_part_per_step_and_attention_over_chunks_done():
    r, p = _one(3_000, 1, chunk_tokens=512)
    chunks = [512] * (p // 512) + ([p % 512] if p % 512 else [])
    done, want = 0, 0.0
    for u in chunks:  # each chunk a step of its own (nothing decodes): t_p0 + marginal cost
        want += costs.prefill_cost_s(MEASURED, u, cached=done)
        done += u
    assert r.ttft_s[0] == pytest.approx(want, rel=1e-9)
    whole, _ = _one(3_000, 1)
    assert r.ttft_s[0] > whole.ttft_s[0]  # the fixed part paid once per chunk


def test_a_decode_run_cut_by_an_arrival_ends_at_the_first_step_boundary():
    # request 0 decodes alone; request 1 arrives mid-run and starts at the next step boundary
    p0, p1 = 3_000, 1_000
    w = queueing.IndependentRequests(requests=2, prompt_tokens=1, sigma=0.0, output_tokens=400)
    w.prompt_tokens = np.array([p0, p1], dtype=np.int64)
    t_pre = costs.prefill_cost_s(MEASURED, p0)
    arrive = t_pre + 1.2345
    r = queueing.simulate(w, "round_robin", 1, arrival_s=[0.0, arrive], cost=MEASURED)
    t, j = t_pre, 0
    while t < arrive:  # step by step
        t += costs.decode_cost_s(MEASURED, 1, p0 + 1 + j)
        j += 1
    assert r.start_s[1] == pytest.approx(t, rel=1e-9)
    assert r.first_token_s[1] == pytest.approx(t + costs.prefill_cost_s(MEASURED, p1), rel=1e-9)


@given(prompt=st.integers(500, 20_000), extra=st.integers(2_000, 12_000))
@settings(max_examples=15, deadline=None)
def test_tpot_grows_with_context_under_measured_costs_only(prompt, extra):
    tpot = {}
    for cal in ("book", "measured"):
        for p in (prompt, prompt + extra):
            w = queueing.IndependentRequests(
                requests=40, prompt_tokens=p, sigma=0.0, output_tokens=100, seed=1
            )
            # all at once: every prompt is prefilled first, then the 40 decode as one batch
            r = queueing.simulate(w, "round_robin", 1, arrival_s=np.zeros(40), cost=cal)
            tpot[cal, p] = float(r.tpot_s[-1])  # the last prefilled: decoding only after it
    assert tpot["measured", prompt + extra] > tpot["measured", prompt]
    # the book's step ignores context: the same batch decodes at the same pace
    assert tpot["book", prompt + extra] == pytest.approx(tpot["book", prompt], rel=1e-9)


def test_closed_loop_chats_run_on_the_measured_calibration():
    w = queueing.ChatSessions(requests=600, seed=2)
    res = {c: queueing.simulate(w, "dynamo", 4, 5.0, cost=c, seed=2) for c in ("book", "measured")}
    for r in res.values():
        assert np.all(np.isfinite(r.ttft_s)) and np.all(r.ttft_s > 0)
        assert np.all(r.busy_s >= r.prefill_busy_s) and np.all(r.utilisation <= 1 + 1e-9)
    # measured prefill is about 2.3x faster than the book's 0.1 ms per token
    assert res["measured"].percentile("ttft", 50) < res["book"].percentile("ttft", 50)


# --- the measured calibration keeps its documented fit quality -------------------------------------


def test_stored_residuals_match_the_model_and_the_documented_summary():
    """data/costs/measured.json documents its residuals (the reference page prints them): the
    model as coded must reproduce every stored model value, and the stored summary."""
    d = costs.measured_data()
    for phase in ("prefill", "decode"):
        errs = []
        for p in d["points"][phase]:
            kw = dict(gpu=p["gpu"], tp=p["tp"], calibration="measured")
            if phase == "prefill":
                model = costs.prefill_s(p["tokens"], cached=p["cached"], **kw)
            else:
                model = costs.decode_step_s(p["batch"], p["context"], **kw)
            assert model == pytest.approx(p["model_seconds"], rel=1e-6)
            errs.append(abs(model / p["seconds"] - 1))
        summary = d["summary"][phase]
        assert float(np.median(errs)) == pytest.approx(summary["median_abs_rel_error"], rel=1e-6)
        assert max(errs) == pytest.approx(summary["max_abs_rel_error"], rel=1e-6)


@pytest.mark.parametrize("gpu_tp", costs.covered())
def test_every_fitted_gpu_and_tp_is_within_the_documented_bounds(gpu_tp):
    """Median within 10 %, worst within 25 % per GPU and TP, not just over the pooled points."""
    gpu, tp = gpu_tp
    for phase in ("prefill", "decode"):
        pts = [p for p in costs.measured_data()["points"][phase] if (p["gpu"], p["tp"]) == gpu_tp]
        assert pts, (gpu, tp, phase)
        errs = [abs(p["model_seconds"] / p["seconds"] - 1) for p in pts]
        assert float(np.median(errs)) <= 0.10 and max(errs) <= 0.25, (gpu, tp, phase)


def test_on_other_gpu_scales_only_the_hbm_bound_share():
    from kvlab import hardware

    ratio = hardware.H100_SXM.hbm_bytes_per_s / hardware.A100_80GB.hbm_bytes_per_s
    whole = costs.on_other_gpu(costs.BOOK, hardware.A100_80GB.hbm_bytes_per_s, hbm_share=1.0)
    assert whole.decode_base_s == pytest.approx(costs.BOOK.decode_base_s * ratio)
    assert whole.decode_per_request_s == pytest.approx(costs.BOOK.decode_per_request_s * ratio)
    none = costs.on_other_gpu(MEASURED, hardware.A100_80GB.hbm_bytes_per_s, hbm_share=0.0)
    assert none.decode_base_s == pytest.approx(MEASURED.decode_base_s)
    assert none.decode_per_context_token_s == pytest.approx(
        MEASURED.decode_per_context_token_s * ratio
    )
    half = costs.on_other_gpu(MEASURED, hardware.A100_80GB.hbm_bytes_per_s, hbm_share=0.5)
    assert half.decode_base_s == pytest.approx(MEASURED.decode_base_s * (0.5 + 0.5 * ratio))
    with pytest.raises(ValueError, match="hbm_share"):
        costs.on_other_gpu(MEASURED, 1e12, hbm_share=1.5)
