"""Problem 22's corrected figures: MLA's latent KV and the per-GPU rule for replicated latents,
NVLink per generation with B200 and GB200 NVL72, and the transfer paths as the sources give them."""

from __future__ import annotations

import pytest

from kvlab import calc, disagg, hardware, models


def test_deepseek_v3_latent_kv_per_token():
    beta = calc.mla_kv_bytes_per_token(**calc.DEEPSEEK_V3_MLA)
    assert beta == (512 + 64) * 61 * 2 == 70_272
    llama = calc.model_kv_bytes_per_token(models.LLAMA_70B)
    assert round(llama / beta, 1) == 4.7


def test_latents_are_replicated_on_every_tp_rank():
    mla = calc.kv_bytes(8000, calc.mla_kv_bytes_per_token(**calc.DEEPSEEK_V3_MLA))
    llama = calc.kv_bytes(8000, calc.model_kv_bytes_per_token(models.LLAMA_70B))
    # heads split: the 70B's 8 KV heads over TP 8; latents: the whole latent KV on each GPU
    assert round(calc.per_gpu_bytes_general(llama, 0, 8, 8) / 1e6) == 328
    assert round(calc.per_gpu_bytes_general(0, mla, 8) / 1e6) == 562
    for tp in (1, 2, 8, 16):
        assert calc.per_gpu_bytes_general(0, mla, tp) == mla  # TP does not shrink it
        assert calc.per_gpu_bytes_general(llama, 0, tp, 8) == calc.per_gpu_bytes(llama, tp, 8)
    with pytest.raises(ValueError, match="replicated_bytes"):
        calc.per_gpu_bytes_general(1.0, -1.0, 8)
    with pytest.raises(ValueError, match="latent_dim"):
        calc.mla_kv_bytes_per_token(61, 0, 64)


def test_nvlink_per_generation():
    gen = hardware.NVLINK_GENERATIONS
    assert [v / 1e9 for v in gen.values()] == [600, 900, 1800]
    assert (
        hardware.B200.nvlink_one_way_bytes_per_s
        == hardware.GB200.nvlink_one_way_bytes_per_s
        == 900e9
    )
    assert hardware.H100_SXM.nvlink_one_way_bytes_per_s == 450e9
    rack = hardware.NVLINK_DOMAINS["GB200 NVL72 rack"]
    assert rack.gpus == 72 and rack.gpu is hardware.GB200
    # 8,000 tokens of the 70B at TP 8: 328 MB per GPU, 0.36 ms one way on NVLink 5
    per_gpu = calc.per_gpu_bytes(
        calc.kv_bytes(8000, calc.model_kv_bytes_per_token(models.LLAMA_70B)), 8, 8
    )
    assert round(calc.transfer_seconds(per_gpu, rack.one_way_bytes_per_s) * 1e3, 2) == 0.36
    assert hardware.find_gpu("NVIDIA B200") is hardware.B200
    assert hardware.find_gpu("NVIDIA GB200") is hardware.GB200
    assert hardware.find_gpu("NVIDIA H200") is hardware.H200


def test_transfer_paths_agree_with_the_sources():
    paths = disagg.TRANSFER_PATHS
    assert (
        "DistServe" in paths["pull after prefill"]
        and "NixlConnector" in paths["pull after prefill"]
    )
    assert "DistServe" not in paths["push layer by layer"]
    assert "NixlPushConnector" in paths["push after prefill"]
    assert (
        "send_kv_chunk" in paths["push layer by layer"]
        and "P2pNccl" in paths["push layer by layer"]
    )
