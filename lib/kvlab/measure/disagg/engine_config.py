"""What Lab 3's engines are started with: the model, the prompts, and vLLM's arguments and process
environment on each device.

- The model: its :class:`kvlab.models.ModelShape` read from ``config.json``
  (:func:`shape_from_config`, :func:`shape_from_dict`, :func:`model_config`).
- The prompts: :func:`random_prompts` (the same lists on every machine) and the check every split
  makes of the prompts it is handed (``_prompts_ok``).
- One engine: its ``vllm.LLM`` arguments (:func:`engine_kwargs`), its process environment
  (:func:`engine_env`), the block size per device (:func:`block_size_for`); both live-split
  engines together with ``NixlConnector`` (:func:`nixl_transfer_config`, :func:`engine_configs`).
- :func:`gpu_here`: whether this Python can run the split on a GPU; :func:`gpu_missing` and
  :func:`gpu_path_note`: what it lacks, what getting it costs and how.

Rules: both devices run fp32 (:data:`DTYPE`), so two engines' outputs compare token for token; the
CPU backend takes block sizes that are multiples of 32 (:data:`BLOCK_SIZE`), a GPU vLLM's default;
two engines on one GPU take :data:`GPU_MEMORY_SHARE` each; NIXL's side channel and UCX stay on the
loopback device. Nothing here starts a process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..._validate import check_choice, check_int
from ..serving import engine
from ..serving.engine import DEFAULT_GPU_MODEL, GPU_BLOCK_SIZE
from .nixl_sweep import UCX_ENV

#: vLLM's CPU attention backend takes block sizes that are multiples of 32.
BLOCK_SIZE = 32


#: Where the live split can run: vLLM's CPU build, or one CUDA GPU shared by both engines.
DEVICES = ("cpu", "cuda")


#: The GPU path's model: Lab 1's (one download serves both labs).
GPU_MODEL = DEFAULT_GPU_MODEL


#: The fraction of the GPU's memory each engine may take (vLLM's ``gpu_memory_utilization``, a
#: per-instance limit): two engines take 80 %, leaving room for two CUDA contexts and NIXL.
GPU_MEMORY_SHARE = {"prefill": 0.4, "decode": 0.4}


#: Both devices run fp32: the two engines' outputs can then be compared token for token, and fp32
#: runs on every GPU vLLM supports (a T4 included; bfloat16 needs compute capability 8.0).
DTYPE = "float32"


def shape_from_config(model_dir: str | os.PathLike):
    """The :class:`kvlab.models.ModelShape` of a Hugging Face Llama-style model folder, read from
    its ``config.json`` (layers, query and KV heads, head dimension, hidden size)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return shape_from_dict(cfg, Path(model_dir).name)


def shape_from_dict(cfg: dict, name: str):
    """:func:`shape_from_config` from the parsed ``config.json`` (as a recording keeps it)."""
    from ... import models

    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    d, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    ffn, vocab = int(cfg.get("intermediate_size", 4 * d)), int(cfg.get("vocab_size", 0))
    kv = int(cfg.get("num_key_value_heads", heads))
    params = layers * (d * head_dim * (heads + 2 * kv) + heads * head_dim * d + 3 * d * ffn)
    return models.ModelShape(
        name=name,
        layers=layers,
        q_heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        d_model=d,
        params=params + 2 * vocab * d,
        source=f"config.json of {name}",
    )


def model_config(model: str) -> dict:
    """``config.json`` of a local model folder, or of a hub model id (through the hub cache,
    downloaded if need be: a GPU machine's path)."""
    if engine.is_local_model(model):
        return json.loads((Path(model) / "config.json").read_text())
    from huggingface_hub import hf_hub_download  # type: ignore[import-not-found]

    return json.loads(Path(hf_hub_download(model, "config.json")).read_text())


def random_prompts(vocab_size: int, n: int, tokens: int, seed: int = 0) -> list[list[int]]:
    """The lab's prompts: ``n`` lists of ``tokens`` random token ids in [10, ``vocab_size``)
    (Python's ``random.Random(seed)``, the same lists on every machine)."""
    import random

    check_int("vocab_size", vocab_size, lo=11)
    check_int("n", n, lo=1)
    check_int("tokens", tokens, lo=1)
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab_size) for _ in range(tokens)] for _ in range(n)]


def _prompts_ok(prompts) -> list[list[int]]:
    if not prompts:
        raise ValueError("prompts must hold at least one list of token ids, got none")
    return [[int(t) for t in p] for p in prompts]


#: On a GPU, full fp32 everywhere: Triton's ``tl.dot`` on fp32 inputs runs as TF32 by default on
#: compute capability 8.0 and later (``TRITON_F32_DEFAULT`` sets its default ``input_precision``,
#: triton/knobs.py), and vLLM's attention kernels leave it at that default; torch's own fp32
#: matrix products stay at "highest" (vLLM's ``VLLM_FLOAT32_MATMUL_PRECISION``, its default).
GPU_FP32_ENV = {"TRITON_F32_DEFAULT": "ieee", "VLLM_FLOAT32_MATMUL_PRECISION": "highest"}

#: vLLM's batch-invariant mode (``VLLM_BATCH_INVARIANT=1``, vLLM 0.32.0:
#: vllm/model_executor/determinism/batch_invariant.py): among others, the Triton attention backend
#: then launches its 2D kernel for every step, so the decode engine's one-token step and the
#: colocated run's prefill go through the same kernel. vLLM documents it as a beta for compute
#: capability 9.0 and later (H100, H200, B200), where it is set; elsewhere the comparison's
#: tolerance (:mod:`kvlab.measure.disagg.token_match`) covers the difference.
BATCH_INVARIANT_MIN_CAPABILITY = (9, 0)

#: The variables that decide the GPU engines' kernels, which a GPU recording keeps.
GPU_KERNEL_ENV = ("TRITON_F32_DEFAULT", "VLLM_FLOAT32_MATMUL_PRECISION", "VLLM_BATCH_INVARIANT")


def gpu_compute_capability() -> tuple[int, int] | None:
    """The first GPU's compute capability from ``nvidia-smi`` (no CUDA context is made in this
    process), or None without a GPU or an ``nvidia-smi`` that answers."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        major, minor = out.stdout.strip().splitlines()[0].strip().split(".")
        return int(major), int(minor)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def batch_invariant_for(capability: tuple[int, int] | None) -> bool:
    """Whether the GPU engines run in vLLM's batch-invariant mode on a GPU of ``capability``
    (:data:`BATCH_INVARIANT_MIN_CAPABILITY` or later)."""
    return capability is not None and tuple(capability) >= BATCH_INVARIANT_MIN_CAPABILITY


def engine_env(
    core: int | None = None,
    extra: dict | None = None,
    device: str = "cpu",
    model: str | None = None,
    batch_invariant: bool = False,
) -> dict:
    """Environment for one engine process: the engine core in-process (one process per engine),
    NIXL's side channel and UCX's network devices on loopback. On the CPU: 1 GiB of KV cache and
    OpenMP bound to ``core``. On a GPU (``device="cuda"``): no CPU variables; the KV cache is sized
    by ``gpu_memory_utilization`` (:func:`engine_kwargs`); full fp32 (:data:`GPU_FP32_ENV`), and
    with ``batch_invariant`` vLLM's batch-invariant mode. ``model``: the offline variables are
    set for a local folder (None: the tiny model) and left out for a hub model id, which must be
    downloaded."""
    check_choice("device", device, DEVICES)
    if batch_invariant and device != "cuda":
        raise ValueError("batch_invariant applies to device='cuda' only")
    env = engine.engine_env(UCX_ENV, model=model)
    env.update(
        {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_LOGGING_LEVEL": "INFO",
            "VLLM_LOGGING_STREAM": "ext://sys.stderr",  # logs to the log file, not the pipe
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
        }
    )
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        if core is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    else:
        for k in [k for k in env if k.startswith("VLLM_CPU_")]:
            del env[k]
        env.update(GPU_FP32_ENV)
        if batch_invariant:
            env["VLLM_BATCH_INVARIANT"] = "1"
    env.update(extra or {})
    return env


def block_size_for(device: str) -> int:
    """The block size the lab's engines use: 32 on the CPU (its attention backend takes multiples
    of 32), vLLM's CUDA default of 16 on a GPU."""
    check_choice("device", device, DEVICES)
    return BLOCK_SIZE if device == "cpu" else GPU_BLOCK_SIZE


def nixl_transfer_config(device: str = "cpu") -> dict:
    """``KVTransferConfig`` of both live-split engines: ``NixlConnector``, each engine both
    producer and consumer, KV moved from the buffers on ``device`` (on a GPU: the KV cache in GPU
    memory, registered with NIXL as VRAM; no copy through the host)."""
    check_choice("device", device, DEVICES)
    return {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": device}


def engine_kwargs(
    model: str,
    kv_transfer_config: dict | None = None,
    device: str = "cpu",
    memory_share: float | None = None,
    **over,
) -> dict:
    """``vllm.LLM`` arguments shared by every engine of the lab: fp32 (so outputs can be compared
    exactly), eager mode, the device's block size (:func:`block_size_for`), no prefix caching
    (every request asks the connector), a seed, stats on for ``get_metrics``. On a GPU,
    ``memory_share`` is the engine's ``gpu_memory_utilization``."""
    check_choice("device", device, DEVICES)
    kw = {
        "model": model,
        "dtype": DTYPE,
        "enforce_eager": True,
        "block_size": block_size_for(device),
        "max_model_len": 4096,
        "enable_prefix_caching": False,
        "seed": 0,
        "disable_log_stats": False,
    }
    if device == "cuda":
        share = GPU_MEMORY_SHARE["prefill"] if memory_share is None else memory_share
        if not 0.05 <= share <= 0.5:
            raise ValueError(
                f"memory_share must be within [0.05, 0.5] (two engines share one GPU), got {share}"
            )
        kw["gpu_memory_utilization"] = share
    elif memory_share is not None:
        raise ValueError("memory_share applies to device='cuda' only")
    if kv_transfer_config:
        kw["kv_transfer_config"] = kv_transfer_config
    kw.update(over)
    return kw


def engine_configs(
    model: str,
    device: str = "cpu",
    cores: tuple[int, int] = (0, 0),
    ports: tuple[int, int] = (5600, 5601),
    capability: tuple[int, int] | None = None,
) -> dict[str, tuple[dict, dict]]:
    """What :func:`run_nixl_split` starts, engine by engine: ``{"prefill": (kwargs, env),
    "decode": (kwargs, env)}``. Both engines get :func:`nixl_transfer_config` and their own NIXL
    side-channel port; on the CPU each is pinned to its core, on a GPU each takes its
    :data:`GPU_MEMORY_SHARE` of the same GPU, full fp32, and vLLM's batch-invariant mode where the
    GPU's compute ``capability`` allows it (:func:`batch_invariant_for`; None: asked of
    ``nvidia-smi``)."""
    kvc = nixl_transfer_config(device)
    invariant = False
    if device == "cuda":
        invariant = batch_invariant_for(capability or gpu_compute_capability())
    out = {}
    for name, core, port in zip(("prefill", "decode"), cores, ports, strict=True):
        share = GPU_MEMORY_SHARE[name] if device == "cuda" else None
        kwargs = engine_kwargs(model, kvc, device=device, memory_share=share)
        env = engine_env(core, {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(port)}, device, model, invariant)
        out[name] = (kwargs, env)
    return out


#: What the GPU split costs a reader before and while it runs. Wheel sizes: PyPI's files for
#: Python 3.12 on Linux x86-64 (vllm-0.32.0 abi3 327 MB, torch-2.13.0 527 MB, nixl_cu13 and
#: nixl_cu12 1.5.1 59 and 69 MB; torch's CUDA 13 libraries come on top); the model:
#: Qwen2.5-0.5B-Instruct's ``model.safetensors`` (bf16, 988 MB).
GPU_INSTALL_COST = (
    "about 1 GB of wheels for vLLM, torch and NIXL (327, 527 and 128 MB) plus the CUDA libraries "
    "torch pulls in, several GB on disk, a few minutes on Colab"
)
GPU_RUN_COST = (
    f"the first run downloads {GPU_MODEL} (about 1 GB); both engines take "
    f"{GPU_MEMORY_SHARE['prefill'] * 100:.0f} % of the GPU's memory each, and the run takes a few minutes"
)


def gpu_missing() -> list[str]:
    """What this Python lacks for the GPU split ([] when nothing): vLLM, NIXL, a torch that sees a
    CUDA GPU."""
    import importlib.util

    missing = []
    if not engine.vllm_here():
        missing.append("vLLM is not installed in this Python")
    if importlib.util.find_spec("nixl") is None:
        missing.append("NIXL is not installed in this Python")
    try:
        import torch
    except ImportError:
        missing.append("torch is not installed")
    else:
        if not torch.cuda.is_available():
            missing.append(f"torch {torch.__version__} sees no CUDA GPU")
    return missing


def gpu_here() -> bool:
    """True when this Python can run the GPU split: vLLM and NIXL import here and torch sees a
    CUDA GPU (a Colab GPU runtime or a GPU machine with ``requirements-gpu.txt``)."""
    return not gpu_missing()


def gpu_path_note(missing: list[str] | None = None) -> str:
    """Why the GPU split does not run in this Python, what getting it costs and how (``missing``:
    :func:`gpu_missing`'s answer; None: ask it). Empty when nothing is missing."""
    missing = gpu_missing() if missing is None else missing
    if not missing:
        return ""
    return (
        f"The GPU split does not run here: {'; '.join(missing)}. To run it: on Colab, choose a "
        "GPU runtime (Runtime > Change runtime type) and run this notebook from the top: its "
        "set-up cell installs requirements-gpu.txt (vLLM 0.32.0, NIXL 1.5.1, torch 2.13.0: "
        f"{GPU_INSTALL_COST}); elsewhere `pip install -r requirements-gpu.txt` into Python 3.11 or "
        f"later beside an NVIDIA driver 580 or newer. Then {GPU_RUN_COST}."
    )
