"""Lab 3's GPU configuration, checked without a GPU: what ``pd_split.engine_configs`` hands each
engine on ``device="cuda"`` (vLLM's arguments and the process environment) against the values the
lab's text states and vLLM 0.32.0's source accepts, and the CPU configuration kept as it was."""

from __future__ import annotations

import pytest

from kvlab.measure.disagg import pd_split


@pytest.fixture
def gpu():
    return pd_split.engine_configs(pd_split.GPU_MODEL, "cuda", ports=(5611, 5612))


def test_gpu_engines_share_one_gpu_and_pull_from_gpu_memory(gpu):
    assert list(gpu) == ["prefill", "decode"]
    shares = []
    for kwargs, _ in gpu.values():
        assert kwargs["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
        assert kwargs["dtype"] == "float32"  # exact comparisons; runs on a T4 too
        assert kwargs["block_size"] == 16  # vLLM's CUDA default (config/cache.py)
        assert kwargs["kv_transfer_config"] == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "kv_buffer_device": "cuda",
        }
        assert kwargs["enable_prefix_caching"] is False and kwargs["enforce_eager"] is True
        shares.append(kwargs["gpu_memory_utilization"])
    assert shares == [0.4, 0.4] and sum(shares) <= 0.8


def test_gpu_environment(gpu):
    ports = []
    for _, env in gpu.values():
        assert not [k for k in env if k.startswith("VLLM_CPU_")], "CPU-only variables on a GPU"
        assert "HF_HUB_OFFLINE" not in env and "TRANSFORMERS_OFFLINE" not in env  # a hub id
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
        assert env["VLLM_HOST_IP"] == "127.0.0.1"
        assert env["UCX_NET_DEVICES"] == "lo"
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        ports.append(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    assert ports == ["5611", "5612"]


def test_cpu_configuration_is_unchanged(tmp_path):
    cpu = pd_split.engine_configs(str(tmp_path), "cpu", cores=(0, 1), ports=(1, 2))
    for core, (kwargs, env) in zip((0, 1), cpu.values(), strict=True):
        assert kwargs["kv_transfer_config"]["kv_buffer_device"] == "cpu"
        assert kwargs["block_size"] == pd_split.BLOCK_SIZE == 32
        assert "gpu_memory_utilization" not in kwargs
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == str(core)
        assert env["HF_HUB_OFFLINE"] == "1"  # a local folder: no hub access


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="device"):
        pd_split.engine_configs("m", "tpu")
    with pytest.raises(ValueError, match="memory_share"):
        pd_split.engine_kwargs("m", device="cuda", memory_share=0.9)
    with pytest.raises(ValueError, match="memory_share"):
        pd_split.engine_kwargs("m", device="cpu", memory_share=0.4)
    with pytest.raises(ValueError, match="device"):
        pd_split.run_nixl_split("m", [[1, 2]], device="gpu")


def test_formula_at_the_gpu_block_size():
    # Qwen2.5-0.5B: 24 layers, 2 KV heads of 64, fp32
    cfg = {
        "num_attention_heads": 14,
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
    }
    shape = pd_split.shape_from_dict(cfg, "qwen")
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (24, 2, 64)
    assert pd_split.pulled_tokens(2000, pd_split.block_size_for("cuda")) == 2000
    assert pd_split.pulled_tokens(2001, pd_split.block_size_for("cuda")) == 2016
    prompts = pd_split.random_prompts(cfg["vocab_size"], 3, 2000)
    assert len(prompts) == 3 and all(10 <= t < 151936 for p in prompts for t in p)
    assert prompts == pd_split.random_prompts(cfg["vocab_size"], 3, 2000)  # same on every machine


def test_gpu_engines_run_full_fp32_and_batch_invariant_where_vllm_supports_it():
    """Triton's fp32 dot product is TF32 by default on compute capability 8.0+; both GPU engines
    force IEEE fp32, and vLLM's batch-invariant mode (documented for 9.0+) where the GPU has it."""
    for cap, invariant in (((9, 0), True), ((10, 0), True), ((8, 9), False), ((7, 5), False)):
        cfg = pd_split.engine_configs(pd_split.GPU_MODEL, "cuda", capability=cap)
        for _, env in cfg.values():
            assert env["TRITON_F32_DEFAULT"] == "ieee"
            assert env["VLLM_FLOAT32_MATMUL_PRECISION"] == "highest"
            assert (env.get("VLLM_BATCH_INVARIANT") == "1") is invariant, cap
    for _, env in pd_split.engine_configs("m", "cpu", cores=(0, 1)).values():
        assert "TRITON_F32_DEFAULT" not in env and "VLLM_BATCH_INVARIANT" not in env
    with pytest.raises(ValueError, match="batch_invariant"):
        pd_split.engine_env(0, device="cpu", batch_invariant=True)
    assert not pd_split.batch_invariant_for(None)
