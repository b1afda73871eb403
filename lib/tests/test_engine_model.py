"""The engine model: vLLM v1's scheduling rules, its KV pool, the step costs and the closed loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.engine_model import (
    Engine,
    EngineCalibration,
    EngineConfig,
    KVPool,
    Request,
    batch_defaults,
    closed_loop,
    kv_blocks,
    model_spec,
    step_costs,
)

QWEN = "Qwen/Qwen3-32B"


@pytest.fixture(scope="module")
def costs():
    return step_costs(QWEN, "H100-SXM", 2, "bf16")


# --- shapes and memory --------------------------------------------------------------------------


def test_qwen_shape_from_its_config():
    m = model_spec(QWEN)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (64, 5120, 64, 8, 128)
    # Qwen3-32B has about 32.8e9 parameters (its model card)
    assert 32.0e9 < m.params < 33.5e9
    # 2 (K, V) x 64 layers x 8 heads x 128 x 2 bytes, halved over two GPUs
    assert m.kv_bytes_per_token_per_gpu(1) == 262144
    assert m.kv_bytes_per_token_per_gpu(2) == 131072
    # past 8 GPUs the 8 KV heads are replicated, not split further
    assert m.kv_heads_per_gpu(16) == 1


def test_kv_blocks_follow_memory():
    m = model_spec(QWEN)
    two = kv_blocks(m, "H100-SXM", 2)
    four = kv_blocks(m, "H100-SXM", 4)
    assert four > 2 * two  # more GPUs: the weights take a smaller share of each
    assert kv_blocks(m, "H100-SXM", 2, gpu_memory_utilization=0.95) > two
    with pytest.raises(ValueError, match="does not fit"):
        kv_blocks(model_spec("meta-llama/Llama-3.1-70B"), "H100-SXM", 1)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_blocks(m, "H100-SXM", 2, gpu_memory_utilization=1.5)


def test_batch_defaults_as_vllm_sets_them():
    assert batch_defaults("H100-SXM") == (8192, 1024)
    assert batch_defaults("H200") == (8192, 1024)
    assert batch_defaults("A100-SXM") == (2048, 256)


# --- step costs -----------------------------------------------------------------------------------


def test_step_costs_grow_with_work(costs):
    one = costs.step_s([(1024, 0)])
    assert costs.step_s([(2048, 0)]) > one
    assert costs.step_s([(1024, 0)], decode_batch=64, decode_context_tokens=64 * 2000) > one
    assert costs.step_s([], 64, 64 * 4000) > costs.step_s([], 64, 64 * 1000)
    assert costs.step_s([], 0, 0) == 0.0
    # attention of new tokens grows with the context before them
    assert costs.context_attention_s(1024, 8192) > costs.context_attention_s(1024, 0)
    # two prompts in one step share the pass: cheaper than two steps
    assert costs.step_s([(1024, 0), (1024, 0)]) < 2 * one


def test_decode_run_matches_step_by_step(costs):
    ends = costs.decode_run_s(32, 32 * 1500.0, 50)
    by_step = np.cumsum([costs.step_s([], 32, 32 * 1500 + 32 * j) for j in range(50)])
    assert np.allclose(ends, by_step, rtol=1e-9)


def test_step_costs_reject_what_is_not_tabulated():
    with pytest.raises(ValueError, match="tp must be one of"):
        step_costs(QWEN, "H100-SXM", 3)
    with pytest.raises(ValueError, match="precision"):
        step_costs(QWEN, "A100-SXM", 2, "fp8")
    with pytest.raises(ValueError, match="model"):
        step_costs("nobody/NoModel-1B")


# --- the KV pool ----------------------------------------------------------------------------------


def test_pool_evicts_least_recently_freed_deepest_first():
    removed = []
    pool = KVPool(4, on_removed=removed.extend)
    assert pool.allocate(3)
    for k in ("a", "b", "c"):
        assert pool.store(k)
    pool.release(["a", "b", "c"], 0)  # freed last first: c, b, a
    assert pool.usage == 0.0 and pool.match(["a", "b", "c"]) == 3
    assert pool.allocate(2)  # one plain block, then the first freed (c)
    assert removed == ["c"]
    assert pool.match(["a", "b", "c"]) == 2
    assert not pool.allocate(3)  # only a and b left
    pool.check()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5), st.booleans()), max_size=40))
def test_pool_counts_always_add_up(ops):
    pool = KVPool(12)
    held: list[tuple[list, int]] = []
    for prefix, n, release in ops:
        keys = [("p", prefix, i) for i in range(n)]
        hit = pool.match(keys)
        if pool.num_free - pool.hits_in_free_queue(keys[:hit]) >= n - hit:
            pool.take_hits(keys[:hit])
            assert pool.allocate(n - hit)
            mine = list(keys[:hit])
            plain = 0
            for k in keys[hit:]:
                if pool.store(k):
                    mine.append(k)
                else:
                    plain += 1
            held.append((mine, plain))
        if release and held:
            mine, plain = held.pop(0)
            pool.release(mine, plain)
        pool.check()
        # blocks in use: each cached key once (requests share it), every plain block
        in_use = len({k for m, _ in held for k in m}) + sum(p for _, p in held)
        assert in_use == pool.num_blocks - pool.num_free
        assert math.isclose(pool.usage, 1 - pool.num_free / pool.num_blocks)
    for mine, plain in held:
        pool.release(mine, plain)
    assert pool.usage == 0.0


# --- the scheduler -------------------------------------------------------------------------------


def _engine(costs, blocks=10_000, **kw):
    return Engine(costs, EngineConfig(num_blocks=blocks, **kw))


def test_several_prompts_share_one_step(costs):
    """vLLM batches waiting prompts up to the token budget: four 1,000-token prompts take one
    step, not four (a model that prefills one prompt per pass fails here)."""
    eng = _engine(costs, max_num_batched_tokens=8192)
    for i in range(4):
        eng.add(Request(i, 1000, 10))
    rec = eng.step()
    assert rec.prompt_tokens == 4000 and len(rec.first) == 4
    assert eng.steps == 1
    assert math.isclose(rec.end_s, costs.step_s([(1000, 0)] * 4))


def test_budget_chunks_a_long_prompt_and_decodes_go_first(costs):
    eng = _engine(costs, max_num_batched_tokens=2048)
    eng.add(Request("a", 100, 50))
    eng.step()  # a prefilled, first token
    eng.add(Request("b", 5000, 5))
    rec = eng.step()
    # a decodes (1 token) and b takes the rest of the budget
    assert rec.decode_batch == 1 and rec.prompt_tokens == 2047
    assert not rec.first
    rec = eng.step()
    assert rec.prompt_tokens == 2047
    rec = eng.step()
    assert rec.prompt_tokens == 5000 - 2 * 2047 and [r.rid for r in rec.first] == ["b"]


def test_max_num_seqs_caps_admission(costs):
    eng = _engine(costs, max_num_seqs=3)
    for i in range(5):
        eng.add(Request(i, 10, 5))
    eng.step()
    assert eng.num_running == 3 and eng.num_waiting == 2


def test_admission_waits_for_blocks_and_preemption_recomputes(costs):
    # 10 blocks of 16 tokens: two 64-token prompts fit (4 blocks each), their growth does not
    eng = _engine(costs, blocks=10)
    eng.add(Request("x", 64, 40))
    eng.add(Request("y", 64, 40))
    eng.add(Request("z", 64, 40))
    eng.step()
    assert eng.num_running == 2 and eng.num_waiting == 1  # z finds too few blocks
    while eng.preemptions == 0:
        eng.advance()
    # the last running request (y) was preempted and waits at the front, computing from zero
    assert eng.waiting[0].rid == "y" and eng.waiting[0].num_computed == 0
    finished = []
    while eng.has_work():
        rec = eng.advance()
        finished += [r.rid for r in rec.finished]
    assert sorted(finished) == ["x", "y", "z"]
    assert eng.pool.usage == 0.0


def test_prefix_hits_skip_cached_blocks(costs):
    eng = _engine(costs)
    shared = [("sys", i) for i in range(8)]  # 128 tokens
    eng.add(Request("a", 160, 2, keys=shared + [("a", 0), ("a", 1)]))
    while eng.has_work():
        eng.advance()
    b = Request("b", 160, 2, keys=shared + [("b", 0), ("b", 1)])
    eng.add(b)
    rec = eng.step()
    assert b.cached_tokens == 128 and rec.prompt_tokens == 32
    # the last prompt token is always computed, even when every block is cached
    c = Request("c", 160, 2, keys=shared + [("b", 0), ("b", 1)])
    eng.add(c)
    while eng.has_work():
        eng.advance()
    assert c.cached_tokens == 144


@settings(max_examples=15, deadline=None)
@given(
    clients=st.integers(1, 12),
    isl=st.integers(16, 3000),
    osl=st.integers(2, 200),
    blocks=st.integers(300, 3000),
)
def test_decode_runs_equal_stepping_one_by_one(clients, isl, osl, blocks):
    costs = step_costs(QWEN, "H100-SXM", 2, "bf16")
    cfg = EngineConfig(num_blocks=blocks, max_num_batched_tokens=2048)
    res = []
    for one in (False, True):
        eng = Engine(costs, cfg, one_by_one=one)
        for i in range(clients):
            eng.add(Request(i, isl, osl))
        reqs = list(eng.waiting)
        while eng.has_work():
            eng.advance()
        res.append([(r.first_token_s, r.finish_s, r.preemptions) for r in reqs])
    for a, b in zip(*res, strict=True):
        assert math.isclose(a[0], b[0], rel_tol=1e-9) and math.isclose(a[1], b[1], rel_tol=1e-9)
        assert a[2] == b[2]


# --- the closed loop -------------------------------------------------------------------------------


def test_closed_loop_counts_and_definitions(costs):
    cfg = EngineConfig(num_blocks=20_000)
    r = closed_loop(costs, cfg, clients=4, isl=512, osl=64, requests_per_client=3, warmup=1)
    assert r.requests == 8
    assert r.ttft_ms > 0 and r.tpot_ms > 0
    assert math.isclose(r.e2e_ms, r.ttft_ms + 63 * r.tpot_ms, rel_tol=1e-9)
    fr = closed_loop(costs, cfg, clients=4, isl=512, osl=64, requests_per_client=3,
                     frontend_s=0.05)  # fmt: skip
    assert fr.ttft_ms > r.ttft_ms + 49  # the frontend's 50 ms are in every TTFT
    assert math.isclose(fr.tpot_ms, r.tpot_ms, rel_tol=0.05)


def test_closed_loop_rejects_bad_input(costs):
    cfg = EngineConfig(num_blocks=100)
    with pytest.raises(ValueError, match="osl"):
        closed_loop(costs, cfg, clients=1, isl=10, osl=1)
    with pytest.raises(ValueError, match="start"):
        closed_loop(costs, cfg, clients=1, isl=10, osl=4, start="soon")
    with pytest.raises(ValueError, match="warmup"):
        closed_loop(costs, cfg, clients=1, isl=10, osl=4, requests_per_client=2, warmup=2)


def test_more_clients_more_throughput_longer_steps(costs):
    cfg = EngineConfig(num_blocks=kv_blocks(costs.model, "H100-SXM", 2))
    lo = closed_loop(costs, cfg, clients=4, isl=1024, osl=128)
    hi = closed_loop(costs, cfg, clients=64, isl=1024, osl=128)
    assert hi.output_tok_s > 4 * lo.output_tok_s
    assert hi.tpot_ms > lo.tpot_ms and hi.ttft_ms > lo.ttft_ms


def test_engine_calibration_gives_costs_and_pool_at_any_tp():
    cal = EngineCalibration()  # the book's 70B shape on H100 SXM, bf16
    assert cal.costs(8).tp == 8 and cal.costs(4).model.layers == 80
    assert cal.num_blocks(8) > 2 * cal.num_blocks(4)
    assert "Llama-3.1-70B" in cal.label
    with pytest.raises(ValueError, match="does not fit"):
        cal.num_blocks(1)
    with pytest.raises(ValueError, match="gpu"):
        EngineCalibration(gpu="TPU")


# --- pdsim on the engine model --------------------------------------------------------------------


def _traffic(**kw):
    from kvlab import pdsim

    base = dict(rate_rps=0.2, requests=6, prompt_tokens=3000, output_tokens=20, seed=1)
    return pdsim.Traffic(**{**base, **kw})


def test_pdsim_on_the_engine_model_alone_requests_cost_one_prefill():
    """Requests far apart: a colocated TTFT is one prefill step of the prompt; a split one is the
    same step on the prefill replica plus the KV transfer."""
    from kvlab import pdsim

    cal = EngineCalibration()
    step = cal.costs(8).step_s([(3000, 0)])
    colo = pdsim.simulate(pdsim.Colocated(2, chunk_tokens=None), _traffic(), cal)  # budget 8,192
    assert np.allclose(colo.ttft_s, step, rtol=1e-9)
    split = pdsim.simulate(pdsim.Disaggregated(1, 1), _traffic(), cal)
    assert np.allclose(split.ttft_s, step + split.transfer_s, rtol=1e-9)
    assert (split.transfer_s > 0).all() and (colo.transfer_s == 0).all()
    # a lone decode step: the same on both once the request decodes alone
    assert np.allclose(split.tpot_s, colo.tpot_s, rtol=0.05)


def test_pdsim_on_the_engine_model_batches_prompts_on_a_prefill_replica():
    """Prompts that wait together are prefilled in one step (a model that prefills one prompt
    per pass gives them different first-token times)."""
    from kvlab import pdsim

    cal = EngineCalibration()
    r = pdsim.simulate(pdsim.Disaggregated(1, 1), _traffic(rate_rps=1000.0, requests=3), cal)
    landed = r.first_token_s - r.transfer_s
    assert np.ptp(landed[1:]) < 1e-9  # the two that queued behind the first share a step


def test_pdsim_on_the_engine_model_hits_shorten_ttft():
    from kvlab import pdsim

    cal = EngineCalibration()
    cold = pdsim.simulate(pdsim.Colocated(1), _traffic(requests=5), cal)
    warm = pdsim.simulate(pdsim.Colocated(1), _traffic(requests=5, hit_rate=0.83), cal)
    assert warm.ttft_s[0] == pytest.approx(cold.ttft_s[0])  # the first finds the cache empty
    assert (warm.ttft_s[1:] < 0.5 * cold.ttft_s[1:]).all()
    bound = pdsim.capacity_bound(pdsim.Colocated(10), _traffic(), 0.04, cal)
    assert bound.rps > 0 and bound.rps == min(bound.prefill_rps, bound.decode_rps, bound.rps)


# --- the host term -------------------------------------------------------------------------------


def test_host_term_adds_per_step_and_per_request_time(costs):
    host = step_costs(QWEN, "H100-SXM", 2, "bf16", step_overhead_s=2e-3, host_s_per_seq=50e-6)
    chunks = [(512, 0), (300, 1024)]
    extra = host.step_s(chunks, 40, 40 * 900) - costs.step_s(chunks, 40, 40 * 900)
    assert extra == pytest.approx(2e-3 + 50e-6 * (2 + 40), rel=1e-9)
    ends = host.decode_run_s(32, 32 * 1500.0, 50)
    by_step = np.cumsum([host.step_s([], 32, 32 * 1500 + 32 * j) for j in range(50)])
    assert np.allclose(ends, by_step, rtol=1e-9)
    with pytest.raises(ValueError, match="host_s_per_seq"):
        step_costs(QWEN, "H100-SXM", 2, "bf16", host_s_per_seq=-1e-6)
    cal = EngineCalibration(model=QWEN, host_s_per_seq=50e-6, step_overhead_s=2e-3)
    assert cal.costs(2).host_s_per_seq == 50e-6 and "host 2.00 ms + 50 us/request" in cal.label
    with pytest.raises(ValueError, match="host_s_per_seq"):
        EngineCalibration(host_s_per_seq=-1.0)


def test_fit_host_recovers_a_known_term():
    """Brute force: rows whose 'measured' TPOT is the model's own with a known host term are fitted
    back to that term."""
    from dataclasses import replace

    from kvlab.validate import silicon

    rows = [r for r in silicon.scored_rows() if r["model_path"] == QWEN and r["osl"] == "512"
            and r["batch_size"] in ("8", "64")][:4]  # fmt: skip
    assert len(rows) == 4
    truth = replace(silicon.STEADY, frontend_s=silicon.knobs().frontend_s, step_overhead_s=2.5e-3,
                    host_s_per_seq=40e-6)  # fmt: skip
    fake = [{**r, "silicon_tpot_ms": str(silicon.predict(r, truth)["tpot_ms"])} for r in rows]
    h = silicon.fit_host(fake, "fake")
    assert h.step_s == pytest.approx(2.5e-3, rel=0.05)
    assert h.per_seq_s == pytest.approx(40e-6, rel=0.05)
    with pytest.raises(ValueError, match="selection"):
        silicon.fit_host([])
    with pytest.raises(ValueError, match="model must be one of"):
        silicon.host_for("nobody/none")


def test_predict_names_the_field_it_cannot_cover():
    from kvlab.validate import silicon

    row = dict(silicon.scored_rows()[0])
    for field, bad in (("backend", "sglang"), ("system", "b200"), ("precision", "int4"),
                       ("mode", "disagg"), ("batch_size", "0"), ("isl", "x")):  # fmt: skip
        with pytest.raises(ValueError, match=repr(field)):
            silicon.predict({**row, field: bad})
    with pytest.raises(ValueError, match="'osl'"):
        silicon.predict({k: v for k, v in row.items() if k != "osl"})


def test_wave_model_weighs_the_first_wave_by_one_request_per_client():
    """The wave prediction is the first wave and the steady state mixed 1 : (n - 1)."""
    from dataclasses import replace

    from kvlab.validate import silicon

    k = silicon.knobs()
    assert k.start == "wave" and k.requests_per_client in silicon.WAVE_RANGE
    row = next(r for r in silicon.scored_rows() if r["batch_size"] == "32")
    wave = silicon.predict(row, k)
    first = silicon.predict(row, replace(k, start="together", requests_per_client=1, warmup=0))
    steady = silicon.predict(row, replace(k, start="staggered", requests_per_client=4, warmup=1))
    n = k.requests_per_client
    for m in ("ttft_ms", "tpot_ms"):
        assert wave[m] == pytest.approx((first[m] + (n - 1) * steady[m]) / n, rel=1e-12)
    assert first["ttft_ms"] > steady["ttft_ms"]  # the wave queues
