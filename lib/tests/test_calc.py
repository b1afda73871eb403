"""The calculators against numbers.md, against independent arithmetic, against sympy, and on bad input."""

import math

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from kvlab import assumptions as A
from kvlab import calc, formulas, hardware, models, units

KV70 = 2 * 80 * 8 * 128 * 2  # independent arithmetic: K and V x layers x heads x dim x 2 bytes


def test_kv_bytes_per_token_matches_numbers_md():
    assert (
        calc.kv_bytes_per_token(layers=80, kv_heads=8, head_dim=128, bytes_per_value=2) == 327_680
    )
    assert calc.kv_bytes_per_token(80, 8, 128, 1) == 163_840
    assert units.fmt_kib(calc.model_kv_bytes_per_token(models.LLAMA_70B)) == "320 KiB"
    assert units.fmt_kib(calc.model_kv_bytes_per_token(models.LLAMA_70B, 1)) == "160 KiB"
    assert KV70 == 327_680


def test_problem8_figures():
    p = A.P8
    beta = calc.model_kv_bytes_per_token(A.MODEL)
    assert units.fmt_bytes(calc.kv_bytes(p.system_tokens, beta)) == "655 MB"
    assert units.fmt_bytes(calc.kv_bytes(p.history_tokens, beta)) == "983 MB"
    c_rand = calc.cached_tokens_random(p.system_tokens, p.history_tokens, p.replicas)
    c_aware = calc.cached_tokens_cache_aware(p.system_tokens, p.history_tokens)
    assert c_rand == 2_375 and c_aware == 5_000
    args = (p.system_tokens, p.history_tokens, p.new_tokens)
    assert units.fmt_pct(calc.hit_fraction(c_rand, *args)) == "40 %"
    assert units.fmt_pct(calc.hit_fraction(c_aware, *args)) == "83 %"
    load_r = calc.prefill_load(p.rate_rps, *args, c_rand)
    load_a = calc.prefill_load(p.rate_rps, *args, c_aware)
    assert load_r == 72_500 and load_a == 20_000
    assert load_r == p.rate_rps * (6_000 - 2_375)  # independent arithmetic
    cap = calc.fleet_prefill_capacity(p.replicas, A.COST.prefill_tokens_per_s)
    assert cap == 80_000
    assert (
        units.fmt_pct(calc.capacity_share(load_r, p.replicas, A.COST.prefill_tokens_per_s))
        == "91 %"
    )
    assert (
        units.fmt_pct(calc.capacity_share(load_a, p.replicas, A.COST.prefill_tokens_per_s))
        == "25 %"
    )
    t_r = calc.prefill_seconds(*args, c_rand, A.COST.prefill_s_per_token)
    t_a = calc.prefill_seconds(*args, c_aware, A.COST.prefill_s_per_token)
    assert units.fmt_seconds(t_r) == "0.36 s" and units.fmt_seconds(t_a) == "0.10 s"
    assert units.fmt_bytes(calc.cache_bytes(p.cache_tokens_per_replica, beta)) == "131 GB"
    assert calc.fleet_cache_tokens(p.replicas, p.cache_tokens_per_replica) == 3_200_000
    assert units.fmt_tokens(3_200_000) == "3.2 million tokens"
    assert (
        math.floor(
            calc.histories_that_fit(p.replicas, p.cache_tokens_per_replica, p.history_tokens)
        )
        == 1_066
    )
    assert (
        round(calc.histories_that_fit(p.replicas, p.cache_tokens_per_replica, p.history_tokens))
        == 1_067
    )


def test_problem22_transfer_figures():
    beta = calc.model_kv_bytes_per_token(A.MODEL)
    b8k = calc.kv_bytes(8_000, beta)
    assert units.fmt_bytes(b8k) == "2.62 GB"
    assert (
        units.fmt_bytes(calc.kv_bytes(8_000, calc.model_kv_bytes_per_token(A.MODEL, 1)))
        == "1.31 GB"
    )
    per_gpu = calc.per_gpu_bytes(b8k, 8)
    assert units.fmt_bytes(per_gpu) == "328 MB"
    # one rule for every TP: split while tp <= KV heads, one whole (replicated) head beyond
    assert calc.per_gpu_bytes(b8k, 8, A.MODEL.kv_heads) == per_gpu
    assert calc.per_gpu_bytes(b8k, 16, A.MODEL.kv_heads) == per_gpu
    assert calc.per_gpu_bytes(b8k, 4, A.MODEL.kv_heads) == 2 * per_gpu
    assert calc.per_gpu_bytes(b8k, 16) == per_gpu / 2  # without kv_heads: heads assumed to split
    with pytest.raises(ValueError, match="kv_heads"):
        calc.per_gpu_bytes(b8k, 8, 0)
    nvlink = calc.one_way_bandwidth(hardware.H100_SXM.nvlink_bidir_bytes_per_s)
    assert nvlink == 450e9
    assert units.fmt_seconds(calc.transfer_seconds(per_gpu, nvlink)) == "0.73 ms"
    assert (
        units.fmt_seconds(calc.transfer_seconds(per_gpu, hardware.NIC_NDR_BYTES_PER_S)) == "6.6 ms"
    )
    assert units.fmt_seconds(calc.transfer_seconds(b8k, hardware.NIC_NDR_BYTES_PER_S)) == "52 ms"
    # 8 NICs in parallel on the whole request is the same as each GPU sending its share on its NIC
    assert calc.transfer_seconds(b8k, 50e9, links=8) == pytest.approx(
        calc.transfer_seconds(per_gpu, 50e9)
    )
    b100k = calc.kv_bytes(100_000, beta)
    assert units.fmt_bytes(b100k) == "32.8 GB"
    assert units.fmt_seconds(calc.transfer_seconds(b100k, 50e9, links=8)) == "82 ms"
    m = A.MODEL
    t_att = calc.prefill_seconds_attention(100_000, 1e-4, m.params, m.layers, m.d_model)
    assert units.fmt_seconds(t_att) == "19 s"
    # independent arithmetic: FLOPs / (2 x params / tau)
    flops = 2 * 70e9 * 1e5 + 2 * 80 * 1e10 * 8192
    assert t_att == pytest.approx(flops / (2 * 70e9 / 1e-4))
    b16k = calc.kv_bytes(16_000, beta)
    assert units.fmt_bytes(b16k) == "5.24 GB"
    assert units.fmt_seconds(calc.transfer_seconds(b16k, 50e9, links=8)) == "13 ms"
    mha = calc.kv_bytes_per_token(80, 64, 128, 2)
    assert mha / beta == 8


def test_pool_sizes_from_numbers_md():
    assert calc.pool_sizes(
        rate_rps=20, prompt_tokens=3000, output_tokens=300, tpot_s=0.040, hit_rate=0.0
    ) == (6, 3)
    assert calc.prefill_demand(20, 3000) == 60_000
    assert calc.decode_concurrency(20, 300, 0.040) == pytest.approx(240)
    assert calc.max_decode_batch(0.040) == 100
    assert calc.prefill_demand(20, 3000, 0.83) == pytest.approx(10_200)
    p, d = calc.pool_sizes(20, 3000, 300, 0.040, hit_rate=0.83)
    assert (p, d) == (2, 3)
    assert calc.prefill_replicas_exact(20, 3000, 0.83) == pytest.approx(1.02)


def test_sympy_solutions_agree_with_numbers():
    # solve the decode-step formula for the batch at a TPOT target: same as max_decode_batch
    n_b = formulas.solve_for("decode_step_seconds", formulas.n_b)
    t_step = formulas.FORMULAS["decode_step_seconds"].lhs
    batch = n_b.subs(
        {
            t_step: sp.Rational(40, 1000),
            formulas.a: sp.Rational(20, 1000),
            formulas.k: sp.Rational(2, 10000),
        }
    )
    assert batch == 100 == calc.max_decode_batch(0.040)
    # solve the transfer formula for the bandwidth that moves 2.62 GB in 52.4 ms
    w = formulas.solve_for("transfer_seconds", formulas.W)
    lhs = formulas.FORMULAS["transfer_seconds"].lhs
    value = float(
        w.subs({lhs: 0.052428, formulas.B_kv: 2_621_440_000, formulas.n_links: 1, formulas.t_0: 0})
    )
    assert value == pytest.approx(50e9, rel=1e-4)
    # the hit fraction solved for cached tokens reproduces 5,000
    c = formulas.solve_for("hit_fraction", formulas.c_tok)
    assert (
        c.subs(
            {formulas.h: sp.Rational(5, 6), formulas.S: 2000, formulas.H: 3000, formulas.U: 1000}
        )
        == 5000
    )
    # derived formulas are consistent with their parts
    f = formulas.FORMULAS
    assert (
        sp.simplify(
            f["decode_replicas_exact"].rhs - f["decode_concurrency"].rhs / f["max_decode_batch"].rhs
        )
        == 0
    )


def test_every_formula_renders_and_lambdifies():
    for name, f in formulas.FORMULAS.items():
        assert "=" in formulas.latex(name)
        values = {s.name: 1.5 + 0.37 * i for i, s in enumerate(f.symbols)}
        assert math.isfinite(calc.evaluate(name, **values)), name


@given(
    layers=st.integers(1, 200),
    kv_heads=st.integers(1, 128),
    head_dim=st.sampled_from([32, 64, 80, 96, 128, 256]),
    bpv=st.sampled_from([1, 2, 4]),
)
def test_kv_bytes_per_token_is_the_product(layers, kv_heads, head_dim, bpv):
    assert (
        calc.kv_bytes_per_token(layers, kv_heads, head_dim, bpv)
        == 2 * layers * kv_heads * head_dim * bpv
    )


@given(n=st.floats(0, 1e12), w=st.floats(1e6, 1e13), links=st.integers(1, 64))
def test_transfer_seconds_is_bytes_over_bandwidth(n, w, links):
    assert calc.transfer_seconds(n, w, links) == pytest.approx(n / (w * links))


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda: calc.kv_bytes_per_token(-1, 8, 128), "layers"),
        (lambda: calc.kv_bytes_per_token(80, 0, 128), "kv_heads"),
        (lambda: calc.kv_bytes_per_token(80, 8, 128, 0), "bytes_per_value"),
        (lambda: calc.kv_bytes(-5, 327680), "tokens"),
        (lambda: calc.transfer_seconds(1e9, 0), "link_bytes_per_s"),
        (lambda: calc.transfer_seconds(1e9, 50e9, links=0), "links"),
        (lambda: calc.transfer_seconds(-1, 50e9), "n_bytes"),
        (lambda: calc.cached_tokens_random(2000, 3000, 0), "replicas"),
        (lambda: calc.fleet_prefill_capacity(0, 10_000), "replicas"),
        (lambda: calc.pool_sizes(20, 3000, 300, 0.040, hit_rate=1.2), "hit_rate"),
        (lambda: calc.pool_sizes(20, -3000, 300, 0.040), "prompt_tokens"),
        (lambda: calc.pool_sizes(0, 3000, 300, 0.040), "rate_rps"),
        (lambda: calc.pool_sizes(20, 3000, 300, 0.010), "tpot_s"),
        (lambda: calc.hit_fraction(7000, 2000, 3000, 1000), "cached_tokens"),
        (lambda: calc.prefill_seconds(2000, 3000, 1000, 0, float("nan")), "seconds_per_token"),
        (lambda: calc.kv_bytes_per_token(80.5, 8, 128), "layers"),
        (lambda: calc.kv_bytes_per_token("80", 8, 128), "layers"),
    ],
)
def test_bad_input_names_the_parameter(call, param):
    with pytest.raises(ValueError, match=param):
        call()


def test_error_message_states_the_range():
    with pytest.raises(ValueError, match=r"hit_rate must be in \[0, 1\], got 1.2"):
        calc.prefill_demand(20, 3000, 1.2)
    with pytest.raises(ValueError, match=r"link_bytes_per_s must be in \(0, inf\), got 0"):
        calc.transfer_seconds(1, 0)


def test_units_formatting():
    assert units.fmt_bytes(655_360_000) == "655 MB"
    assert units.fmt_bytes(2_621_440_000) == "2.62 GB"
    assert units.fmt_bytes(999_600_000) == "1.00 GB"
    assert units.sig(0.1, 2) == "0.10"
    assert units.sig(999.6, 3) == "1,000"
    assert units.fmt_seconds(0.000728) == "0.73 ms"
    assert units.fmt_seconds(19.36) == "19 s"
    assert units.fmt_int(72_500) == "72,500"
    assert units.fmt_pct(0.8333) == "83 %"
    with pytest.raises(ValueError, match="unit"):
        units.fmt_bytes(1, "XB")


def test_hardware_and_models():
    assert hardware.H100_SXM.nvlink_one_way_bytes_per_s == 450e9
    assert hardware.find_gpu("Some CPU") is None


# the names drivers report (torch.cuda.get_device_name, nvidia-smi), one test per product
@pytest.mark.parametrize(
    "reported, name, hbm_tb_s",
    [
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM", 1.555),  # Colab's A100
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2.039),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1.935),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", 1.555),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 3.35),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2.0),
        ("NVIDIA H100 NVL", "H100 NVL", 3.9),
        ("NVIDIA H200", "H200", 4.8),
        ("NVIDIA GH200 480GB", "GH200", 4.0),  # Grace Hopper: not an H200
        ("NVIDIA GH200 144G HBM3e", "GH200 144GB", 4.9),
        ("NVIDIA L4", "L4", 0.3),
        ("Tesla T4", "T4", 0.32),
    ],
)
def test_find_gpu_matches_reported_product_names(reported, name, hbm_tb_s):
    gpu = hardware.find_gpu(reported)
    assert gpu is not None and gpu.name == name
    assert gpu.hbm_bytes_per_s == pytest.approx(hbm_tb_s * 1e12)
    assert models.LLAMA_70B.gqa_group == 8
    with pytest.raises(ValueError, match="kv_heads"):
        models.LLAMA_70B.with_(kv_heads=3)
    assert models.LLAMA_70B.with_(kv_heads=64).gqa_group == 1


def test_gh200_host_copies_are_judged_against_nvlink_c2c_not_pcie():
    from kvlab.measure.transfer import copies

    gh = hardware.find_gpu("NVIDIA GH200 480GB")
    assert gh is hardware.GH200 and gh is not hardware.H200
    bw, what = copies.reference_bandwidth("h2d_pinned", gh)
    assert bw == 450e9 and what == "GH200 NVLink-C2C, one way"  # 900 GB/s both ways
    bw, what = copies.reference_bandwidth("d2h_pinned", hardware.H200)
    assert bw == 64e9 and what == "H200 PCIe, one way"
    assert "GH200" not in {g.name for g in hardware.GPUS.values()}  # the book's table: unchanged
