"""The formulas and calculators added for the interview exercises (issue 16), against independent
arithmetic, plus their input checks."""

import pytest
import sympy as sp

from kvlab import calc, formulas, hardware

BETA = 327_680  # fp16 KV bytes per token of the 70B shape


def test_hbm_for_kv_and_memory_batch():
    left = calc.hbm_for_kv(8, 80e9, 70e9, 2, 0.9)
    assert left == pytest.approx(0.9 * 640e9 - 140e9)
    assert calc.max_batch_memory(left, 32_000, 900, BETA) == int(left // (32_900 * BETA)) == 40
    assert calc.max_batch_memory(left, 3_000, 300, BETA) == 403
    with pytest.raises(ValueError, match="nothing is left"):
        calc.hbm_for_kv(1, 80e9, 70e9)
    with pytest.raises(ValueError, match="hbm_share"):
        calc.hbm_for_kv(8, 80e9, 70e9, hbm_share=1.5)
    with pytest.raises(ValueError, match="prompt_tokens"):
        calc.max_batch_memory(left, -1, 10, BETA)


def test_decode_replicas_take_the_smaller_batch():
    assert calc.decode_replicas_with_memory(4, 900, 0.040, 40) == (4, 40)  # 144 / 40 -> 4
    assert calc.decode_replicas_with_memory(4, 900, 0.040, 10**6) == (2, 100)  # TPOT binds
    with pytest.raises(ValueError, match="memory_batch"):
        calc.decode_replicas_with_memory(4, 900, 0.040, 0)


def test_stream_and_incast():
    assert calc.kv_stream_bandwidth(20, 3_000, BETA) == pytest.approx(20 * 3_000 * BETA)
    one = calc.transfer_seconds(3_000 * BETA, 50e9, links=8)
    assert calc.incast_seconds(6, 3_000 * BETA, 50e9, links=8) == pytest.approx(6 * one)
    with pytest.raises(ValueError, match="senders"):
        calc.incast_seconds(0, 1e9, 50e9)


def test_headroom_rounds_up_past_full_load():
    assert calc.replicas_with_headroom(60_000) == 7  # 6.0 replicas of work -> 7 at <= 90 % busy
    assert calc.replicas_with_headroom(10_000) == 2  # 5/6 hits: exactly one replica of work
    assert calc.replicas_with_headroom(60_000, max_busy=1.0) == 6
    with pytest.raises(ValueError, match="max_busy"):
        calc.replicas_with_headroom(60_000, max_busy=0)


def test_cost_and_other_gpu():
    assert calc.cost_per_request(20, 7, 3, 4.0, 4.0) == pytest.approx(10 * 8 * 4 / 72_000)
    h100, a100 = hardware.H100_SXM.hbm_bytes_per_s, hardware.A100_80GB.hbm_bytes_per_s
    n = calc.max_decode_batch_other_gpu(0.040, a100, h100)
    r = h100 / a100
    assert (0.020 + 0.0002 * n) * r <= 0.040 < (0.020 + 0.0002 * (n + 1)) * r
    assert calc.max_decode_batch_other_gpu(0.040, h100, h100) == calc.max_decode_batch(0.040)
    assert calc.max_decode_batch_other_gpu(0.021, a100, h100) == 0  # cannot meet it at all
    with pytest.raises(ValueError, match="decode_replicas"):
        calc.cost_per_request(20, 7, 0, 4.0, 4.0)


def test_tier_and_restart():
    assert calc.live_conversations(20, 300) == pytest.approx(6_000)
    assert calc.tier_capacity_bytes(20, 300, 3_000, BETA) == pytest.approx(6_000 * 3_000 * BETA)
    lost = calc.restart_lost_tokens(20, 300, 3_000, 8)
    assert lost == pytest.approx(6_000 * 3_000 * 7 / 8)
    # one round of a forgetful router costs exactly what random routing costs over that round
    aware = calc.prefill_load(20, 2_000, 3_000, 1_000, calc.cached_tokens_cache_aware(2_000, 3_000))
    rand = calc.prefill_load(20, 2_000, 3_000, 1_000, calc.cached_tokens_random(2_000, 3_000, 8))
    assert aware + lost / 300 == pytest.approx(rand)
    with pytest.raises(ValueError, match="replicas"):
        calc.restart_lost_tokens(20, 300, 3_000, 0)


def test_derived_formulas_are_solutions():
    f = formulas.formula("max_decode_batch_other_gpu")
    step = formulas.formula("decode_step_other_gpu").rhs
    n_b = next(s for s in step.free_symbols if s.name == "n_b")
    T = next(s for s in f.rhs.free_symbols if s.name == "T")
    assert sp.simplify(step.subs(n_b, f.rhs) - T) == 0
    # with equal bandwidths it is the book's largest-batch formula
    same = f.rhs.subs({s: 1 for s in f.rhs.free_symbols if s.name in ("W_new", "W_ref")})
    assert sp.simplify(same - formulas.formula("max_decode_batch").rhs) == 0
