"""Lab 1 on a real vLLM engine: the same functions on a CPU (vLLM's CPU build, the tiny model) and
on a GPU (a real small instruct model).

Everything here runs next to the engine (in-process, or inside the engine environment through
:mod:`kvlab.measure.prefix.engine_jobs`) and returns plain numbers and token ids, so the notebook can
check the engine against kvlab's prediction in the book's own environment.

- :func:`engine_kwargs`: how the lab configures ``vllm.LLM`` (prefix caching on, statistics on
  for ``LLM.get_metrics()``, eager mode, the block size the device allows, optionally a pool of a
  known number of blocks through ``num_gpu_blocks_override``).
- :func:`send`: one request with ``max_tokens=1``: wall-clock TTFT, the engine's own first-token
  latency (``RequestOutput.metrics.first_token_latency``), ``num_cached_tokens``.
- :func:`counters`: the engine's ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` now.
- :func:`run_requests`: a list of prompts one at a time, with the counters before and after.
"""

from __future__ import annotations

import time

import numpy as np

from ..serving import prom
from ..serving.engine import (  # Lab 1 and the GPU recorder read them here
    CPU_BLOCK_SIZE,
    GPU_BLOCK_SIZE,
)
from ..serving.engine import (
    DEFAULT_GPU_MODEL as DEFAULT_GPU_MODEL,
)
from . import prompts


def on_gpu() -> bool:
    """True when torch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pick_dtype(torch=None) -> str:
    """'bfloat16' on GPUs that support it (Ampere and newer), 'half' on older ones (a T4), and
    'float32' on a CPU."""
    if torch is None:
        import torch
    if not torch.cuda.is_available():
        return "float32"
    major, _ = torch.cuda.get_device_capability(0)
    return "bfloat16" if major >= 8 else "half"


def engine_kwargs(
    model: str,
    block_size: int | None = None,
    num_blocks: int | None = None,
    max_model_len: int = 4096,
    dtype: str | None = None,
    gpu_memory_utilization: float = 0.6,
    seed: int = 0,
) -> dict:
    """Keyword arguments for ``vllm.LLM`` (and, as flags, for ``vllm serve``).

    ``block_size`` defaults to 16 on a GPU and 32 on a CPU. ``num_blocks`` fixes the KV pool at
    that many blocks (``num_gpu_blocks_override``; on a CPU too), null block included, so a cache
    model can be given the same capacity.
    """
    gpu = on_gpu()
    kw = {
        "model": str(model),
        "enable_prefix_caching": True,
        "disable_log_stats": False,
        "enforce_eager": True,
        "block_size": block_size or (GPU_BLOCK_SIZE if gpu else CPU_BLOCK_SIZE),
        "max_model_len": max_model_len,
        "dtype": dtype or pick_dtype(),
        "seed": seed,
    }
    if gpu:
        kw["gpu_memory_utilization"] = gpu_memory_utilization
    if num_blocks is not None:
        kw["num_gpu_blocks_override"] = int(num_blocks)
    return kw


def counters(llm) -> prom.PrefixCounters:
    """The engine's prefix-cache counters now (``LLM.get_metrics()``, needs stats on)."""
    return prom.prefix_cache_counters(prom.flatten_vllm_metrics(llm.get_metrics()))


def send(llm, ids: list[int]) -> dict:
    """One request of ``ids`` with ``max_tokens=1``: ``ttft_s`` (wall clock around the call),
    ``engine_ttft_s`` (the engine's first-token latency, from arrival to first token),
    ``cached_tokens``."""
    from vllm import SamplingParams

    sp = SamplingParams(max_tokens=1, temperature=0.0)
    t0 = time.perf_counter()
    out = llm.generate([{"prompt_token_ids": [int(t) for t in ids]}], sp, use_tqdm=False)[0]
    wall = time.perf_counter() - t0
    m = getattr(out, "metrics", None)
    engine = getattr(m, "first_token_latency", None)
    return {
        "ttft_s": wall,
        "engine_ttft_s": None if engine is None else float(engine),
        "cached_tokens": int(out.num_cached_tokens or 0),
        "prompt_tokens": len(ids),
    }


def run_requests(llm, prompt_ids: list[list[int]]) -> dict:
    """Send every prompt one at a time; per-request figures and the counters before and after."""
    before = counters(llm)
    rows = [send(llm, ids) for ids in prompt_ids]
    after = counters(llm)
    return {
        "ttft_s": [r["ttft_s"] for r in rows],
        "engine_ttft_s": [r["engine_ttft_s"] for r in rows],
        "cached_tokens": [r["cached_tokens"] for r in rows],
        "prompt_tokens": [r["prompt_tokens"] for r in rows],
        "counters_before": {"queries": before.queries, "hits": before.hits, "name": before.source},
        "counters_after": {"queries": after.queries, "hits": after.hits, "name": after.source},
    }


def reset_cache(llm) -> None:
    """Empty the engine's prefix cache (every request must have finished)."""
    if not llm.reset_prefix_cache():
        raise RuntimeError("vLLM refused to reset its prefix cache: a request is still running")


def trimmed_system_prompt(tokenizer, system_tokens: int = 2000, seed: int = 0) -> str:
    """A system prompt of exactly ``system_tokens`` tokens for this tokenizer (on its own)."""
    text = prompts.system_prompt_text(words=int(system_tokens * 1.2) + 50, seed=seed)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) < system_tokens:
        raise ValueError(f"system prompt too short for {system_tokens} tokens ({len(ids)})")
    return tokenizer.decode(ids[:system_tokens])


def chat_ids(tokenizer, system: str, user: str) -> list[int]:
    """Token ids of a two-message chat with the generation prompt, via the chat template."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    ids = tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    if hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def lab1_prompts(tokenizer, requests: int, system_tokens: int, timestamp: bool) -> list[list[int]]:
    """Lab 1's chat prompts as token ids: one shared system prompt, a different question each;
    with ``timestamp`` a (deterministic) timestamp line starts every system prompt."""
    system = trimmed_system_prompt(tokenizer, system_tokens)
    out = []
    for i, q in enumerate(prompts.questions(requests)):
        s = prompts.timestamp_text(i) + system if timestamp else system
        out.append(chat_ids(tokenizer, s, q))
    return out


def random_prompts(lengths: list[int], vocab: int, seed: int = 0, low: int = 16) -> list[list[int]]:
    """Prompts of the given lengths with seeded random ids in ``[low, vocab)``: all different from
    their first token (the chance that two share it is 1 / (vocab - low)), so each is a cold
    prefill unless a prompt is built to share a prefix."""
    rng = np.random.default_rng(seed)
    return [rng.integers(low, vocab, size=int(n)).tolist() for n in lengths]


def to_vocab(ids, vocab: int, low: int = 16) -> list[int]:
    """Map arbitrary non-negative token ids into ``[low, vocab)`` (``low + id mod (vocab - low)``):
    equal ids stay equal, so shared prefixes stay shared."""
    arr = np.asarray(ids, dtype=np.int64)
    return (low + arr % (vocab - low)).tolist()
