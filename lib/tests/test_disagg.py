"""Tests of kvlab.disagg: transfer sizes and times, layer-by-layer overlap, re-sharding, pools,
roofline."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import disagg, hardware, models, units
from kvlab.models import LLAMA_70B


def test_book_transfer_numbers():
    t = disagg.kv_transfer(LLAMA_70B, 8_000)
    assert units.fmt_bytes(t.bytes) == "2.62 GB"
    assert units.fmt_bytes(t.per_gpu_bytes) == "328 MB"
    assert units.fmt_seconds(t.seconds) == "6.6 ms"
    assert t.links == 8 and t.link_bytes_per_s == 50e9
    assert (
        units.fmt_seconds(disagg.kv_transfer(LLAMA_70B, 8_000, link="nvlink").seconds) == "0.73 ms"
    )
    assert (
        units.fmt_seconds(disagg.kv_transfer(LLAMA_70B, 8_000, link="one_nic").seconds) == "52 ms"
    )
    assert units.fmt_bytes(disagg.kv_transfer(LLAMA_70B, 8_000, "fp8").bytes) == "1.31 GB"
    big = disagg.kv_transfer(LLAMA_70B, 100_000)
    assert units.fmt_bytes(big.bytes) == "32.8 GB"
    assert units.fmt_seconds(big.seconds) == "82 ms"


def test_link_bandwidths_are_one_way():
    assert disagg.link_bandwidth("nvlink") == 450e9
    assert disagg.link_bandwidth("pcie") == 64e9
    assert disagg.link_bandwidth("one_nic") == 50e9
    with pytest.raises(ValueError, match="nvlink"):
        disagg.link_bandwidth("nvlink", hardware.L4)


def test_mha_moves_eight_times_more():
    mha = LLAMA_70B.with_(kv_heads=64)
    assert disagg.kv_transfer(mha, 1000).bytes == 8 * disagg.kv_transfer(LLAMA_70B, 1000).bytes


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="precision"):
        disagg.kv_transfer(LLAMA_70B, 10, precision="int3")
    with pytest.raises(ValueError, match="link"):
        disagg.kv_transfer(LLAMA_70B, 10, link="carrier pigeon")
    with pytest.raises(ValueError, match="prompt_tokens"):
        disagg.kv_transfer(LLAMA_70B, -1)
    with pytest.raises(ValueError, match="layers"):
        disagg.exposed_transfer_seconds(1, 1, 0)
    with pytest.raises(ValueError, match="tp"):
        disagg.heads_on_gpu(8, 3, 0)
    with pytest.raises(ValueError, match="share"):
        disagg.crossover_prompt_tokens(LLAMA_70B, share=1.5)


# --- layer-by-layer overlap ---------------------------------------------------------------------


def test_overlap_fast_link_leaves_one_layer():
    # 6.6 ms of transfer behind 0.8 s of prefill over 80 layers: one layer's send stays exposed
    assert disagg.exposed_transfer_seconds(0.8, 0.0066, 80) == pytest.approx(0.0066 / 80)


def test_overlap_slow_link_leaves_the_difference():
    exposed = disagg.exposed_transfer_seconds(1.0, 3.0, 10)
    assert exposed == pytest.approx(3.0 - 1.0 + 0.1)


@settings(max_examples=200, deadline=None)
@given(
    pre=st.floats(0.001, 10),
    xfer=st.floats(0.0, 10),
    layers=st.integers(1, 120),
    msg=st.floats(0.0, 0.01),
)
def test_overlap_formula_matches_event_simulation(pre, xfer, layers, msg):
    exact = disagg.exposed_transfer_seconds(pre, xfer, layers, msg)
    sim = disagg.simulate_layerwise(pre, xfer, layers, msg)
    assert exact == pytest.approx(sim, rel=1e-9, abs=1e-12)
    # never worse than sending everything after prefill, never below one layer's send
    assert exact <= xfer + layers * msg + 1e-12
    assert exact >= msg + xfer / layers - 1e-12


# --- re-sharding ----------------------------------------------------------------------------------


def test_reshard_same_tp_is_one_message_per_gpu():
    r = disagg.reshard(8, 8, 8, 8.0)
    assert r.n_messages == 8
    assert all(s == d for s, d, _, _ in r.messages)
    assert r.total_bytes == 8.0
    assert r.sources_per_decode_gpu() == [1] * 8


def test_reshard_to_fewer_decode_gpus():
    r = disagg.reshard(8, 8, 4, 8.0)  # TP 8 -> TP 4: each decode GPU holds 2 heads from 2 senders
    assert r.n_messages == 8
    assert r.sources_per_decode_gpu() == [2] * 4
    assert r.received_bytes() == [2.0] * 4
    assert r.sent_bytes() == [1.0] * 8
    assert r.seconds(1.0) == 2.0  # the receivers are the bottleneck


def test_reshard_to_more_decode_gpus():
    r = disagg.reshard(8, 2, 8, 8.0)  # TP 2 -> TP 8: each sender feeds 4 receivers
    assert r.n_messages == 8
    assert r.sources_per_decode_gpu() == [1] * 8
    assert r.sent_bytes() == [4.0, 4.0]
    assert r.seconds(1.0) == 4.0


def test_reshard_with_replicated_heads():
    # 4 KV heads on TP 8: each head on 2 GPUs; the decode side (TP 8) also needs each head twice
    assert [disagg.heads_on_gpu(4, 8, g) for g in range(8)] == [
        (0,),
        (0,),
        (1,),
        (1,),
        (2,),
        (2,),
        (3,),
        (3,),
    ]
    r = disagg.reshard(4, 8, 8, 4.0)
    assert r.total_bytes == 8.0  # replication doubles what crosses the wire
    assert sorted(r.sent_bytes()) == [1.0] * 8  # replicas share the sending
    r2 = disagg.reshard(4, 8, 2, 4.0)
    assert r2.total_bytes == 4.0 and r2.sources_per_decode_gpu() == [2, 2]


@given(
    heads=st.sampled_from([1, 2, 4, 8, 16]),
    p=st.sampled_from([1, 2, 4, 8, 16]),
    d=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_reshard_every_decode_gpu_gets_its_heads(heads, p, d):
    r = disagg.reshard(heads, p, d, float(heads))
    for dst in range(d):
        got = sorted(hd for _, t, hs, _ in r.messages if t == dst for hd in hs)
        assert got == sorted(disagg.heads_on_gpu(heads, d, dst))
    for src, _, hs, _ in r.messages:
        assert set(hs) <= set(disagg.heads_on_gpu(heads, p, src))


# --- pools ------------------------------------------------------------------------------------------


def test_pool_sizes_book():
    plan = disagg.size_pools(20, 3_000, 300, 0.040)
    assert (plan.prefill, plan.decode) == (6, 3)
    assert plan.prefill_exact == pytest.approx(6.0)
    assert plan.decode_exact == pytest.approx(2.4)
    assert plan.decode_concurrency == pytest.approx(240)
    assert plan.max_batch == 100
    hit = disagg.size_pools(20, 3_000, 300, 0.040, hit_rate=0.83)
    assert hit.prefill_demand_tokens_per_s == pytest.approx(10_200)
    assert (hit.prefill, hit.decode) == (2, 3)


# --- roofline ----------------------------------------------------------------------------------------


def test_roofline_prefill_compute_decode_memory():
    gpu = hardware.H100_SXM
    assert gpu.ridge_flops_per_byte == pytest.approx(295, abs=1)
    assert disagg.bound(disagg.prefill_intensity(LLAMA_70B, 3_000)) == "compute"
    for batch in (1, 16, 64, 128):
        assert disagg.bound(disagg.decode_intensity(LLAMA_70B, batch, 3_300)) == "memory"
    # without KV reads a batch of 1 does 2 FLOPs per 2-byte weight: intensity 1
    assert disagg.prefill_intensity(LLAMA_70B, 1, attention=False) == 1
    # KV reads cap decode intensity: huge batches approach 2 N + attention per KV byte, not infinity
    assert disagg.decode_intensity(LLAMA_70B, 1e6, 3_300) < 200


def test_cost_model_check():
    c = disagg.cost_model_check(models.LLAMA_70B)
    assert c.implied_flops == pytest.approx(1.4e15)
    assert c.implied_mfu == pytest.approx(0.177, abs=0.001)
    assert c.weight_read_s == pytest.approx(5.22e-3, abs=1e-5)


def test_crossover():
    # linear cost, no set-up: the share is a constant per link, so there is no crossover
    assert disagg.crossover_prompt_tokens(LLAMA_70B, link="nic_per_gpu") == 0.0
    assert math.isinf(disagg.crossover_prompt_tokens(LLAMA_70B, link="one_nic"))
    # attention makes long prefills slower, so a single NIC drops below 5 % somewhere
    n = disagg.crossover_prompt_tokens(LLAMA_70B, link="one_nic", attention=True)
    assert 10_000 < n < 50_000
    x = disagg.kv_transfer(LLAMA_70B, n, link="one_nic").seconds
    from kvlab import calc

    pre = calc.prefill_seconds_attention(n, 1e-4, LLAMA_70B.params, LLAMA_70B.layers, 8192)
    assert disagg.transfer_share_of_ttft(x, pre) == pytest.approx(0.05, abs=1e-4)


def test_latex_renders():
    assert "max" in disagg.latex("exposed_transfer")
    with pytest.raises(ValueError, match="name"):
        disagg.latex("nope")


# --- one per-GPU rule: split while tp <= KV heads, one replicated head beyond ---------------------


@settings(max_examples=60, deadline=None)
@given(
    heads_exp=st.integers(min_value=0, max_value=4),
    tp_exp=st.integers(min_value=0, max_value=6),
    tokens=st.integers(min_value=1, max_value=200_000),
    link=st.sampled_from(["nvlink", "pcie", "nic_per_gpu"]),
)
def test_kv_transfer_per_gpu_agrees_with_reshard(heads_exp, tp_exp, tokens, link):
    heads, tp = 2**heads_exp, 2**tp_exp
    model = LLAMA_70B.with_(kv_heads=heads)
    t = disagg.kv_transfer(model, tokens, tp=tp, link=link)
    plan = disagg.reshard(heads, tp, tp, t.bytes)
    assert t.per_gpu_bytes == pytest.approx(max(plan.received_bytes()))
    assert t.per_gpu_bytes == pytest.approx(max(plan.sent_bytes()))
    assert t.moved_bytes == pytest.approx(plan.total_bytes)
    assert t.seconds == pytest.approx(plan.seconds(t.link_bytes_per_s))
    # never less than one whole head per GPU
    assert t.per_gpu_bytes >= t.bytes / heads * (1 - 1e-12)


def test_tp_beyond_kv_heads_replicates_one_head_per_gpu():
    t16 = disagg.kv_transfer(LLAMA_70B, 8_000, tp=16)
    t8 = disagg.kv_transfer(LLAMA_70B, 8_000, tp=8)
    assert units.fmt_bytes(t16.per_gpu_bytes) == "328 MB"  # one whole head, not 164 MB
    assert units.fmt_seconds(t16.seconds) == "6.6 ms"  # not 3.3 ms
    assert units.fmt_bytes(t16.moved_bytes) == "5.24 GB"
    assert t16.per_gpu_bytes == t8.per_gpu_bytes and t8.moved_bytes == t8.bytes
    one = disagg.kv_transfer(LLAMA_70B, 8_000, tp=16, link="one_nic")
    assert one.seconds == pytest.approx(
        2 * disagg.kv_transfer(LLAMA_70B, 8_000, link="one_nic").seconds
    )


def test_exposed_transfer_per_path():
    pre, x = 0.8, disagg.kv_transfer(LLAMA_70B, 8_000).seconds
    assert disagg.exposed_on_path("pull after prefill", pre, x, 80) == x
    assert disagg.exposed_on_path("push after prefill", pre, x, 80) == x
    layerwise = disagg.exposed_on_path("push layer by layer", pre, x, 80)
    assert layerwise == pytest.approx(x / 80) and units.fmt_seconds(layerwise) == "82 µs"
    with pytest.raises(ValueError, match="path"):
        disagg.exposed_on_path("carrier pigeon", pre, x, 80)
