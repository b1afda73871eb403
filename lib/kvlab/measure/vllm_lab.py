"""Lab 1 on a GPU: prefix caching in vLLM, measured.

Two ways to drive vLLM (neither is imported until called; both need a CUDA GPU and ``vllm``):

- :func:`run_offline`: the offline ``vllm.LLM`` API with ``enable_prefix_caching=True``. Requests
  are sent one at a time with ``max_tokens=1``, so the wall time of each ``generate`` call is its
  time to first token (TTFT). ``RequestOutput.num_cached_tokens`` gives the prefix hit of each
  request, and ``LLM.get_metrics()`` (needs ``disable_log_stats=False``) the engine's
  ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` counters.
- :func:`run_server`: a running OpenAI-compatible server (``vllm serve MODEL
  --enable-prefix-caching``, see :func:`server_command`); TTFT from a streaming completion (time to
  the first chunk), counters from ``GET /metrics`` through the Prometheus text parser.

Both build the prompts as token ids through the model's chat template, so the hit rate the
prompts predict (:func:`kvlab.measure.prompts.predicted_hit_rate`) is computed on exactly the ids
vLLM sees. Each experiment runs twice: the shared system prompt as is, then with a timestamp at its
very start.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from datetime import datetime

from . import prom, prompts

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
BLOCK_SIZE = 16  # vLLM's default KV block size on CUDA


def pick_dtype(torch=None) -> str:
    """'bfloat16' on GPUs that support it (Ampere and newer), else 'half' (a T4 has no bf16)."""
    if torch is None:
        import torch
    major, _ = torch.cuda.get_device_capability(0)
    return "bfloat16" if major >= 8 else "half"


def engine_kwargs(
    model: str = DEFAULT_MODEL,
    dtype: str | None = None,
    max_model_len: int = 4096,
    gpu_memory_utilization: float = 0.6,
    enforce_eager: bool = True,
    seed: int = 0,
) -> dict:
    """Keyword arguments for ``vllm.LLM``: prefix caching on, stats on (for ``get_metrics``),
    fp16 on a T4, a short context and eager mode (no CUDA-graph capture) so start-up is quick."""
    return {
        "model": model,
        "enable_prefix_caching": True,
        "disable_log_stats": False,
        "dtype": dtype or pick_dtype(),
        "max_model_len": max_model_len,
        "gpu_memory_utilization": gpu_memory_utilization,
        "enforce_eager": enforce_eager,
        "seed": seed,
    }


def server_command(
    model: str = DEFAULT_MODEL, port: int = 8000, dtype: str = "half", max_model_len: int = 4096
) -> list[str]:
    """The command that starts the OpenAI-compatible server for :func:`run_server`."""
    return [
        "vllm",
        "serve",
        model,
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
    ]


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


def _now_stamp() -> str:
    return f"Current date and time: {datetime.now().isoformat(sep=' ', timespec='microseconds')}\n"


def _counters_offline(llm):
    if not hasattr(llm, "get_metrics"):
        return None
    try:
        return prom.prefix_cache_counters(prom.flatten_vllm_metrics(llm.get_metrics()))
    except ValueError:
        return None


def _summary(ttft, cached, ids, before, after, block_size) -> dict:
    predicted = prompts.predicted_cached_tokens(ids, block_size)
    total = sum(len(x) for x in ids)
    measured = None if any(c is None for c in cached) else sum(cached) / total
    return {
        "requests": len(ids),
        "prompt_tokens": [len(x) for x in ids],
        "ttft_s": ttft,
        "ttft_first_s": ttft[0],
        "ttft_rest_median_s": statistics.median(ttft[1:]) if len(ttft) > 1 else None,
        "cached_tokens": cached,
        "predicted_cached_tokens": predicted,
        "predicted_hit_rate": sum(predicted) / total,
        "measured_hit_rate_from_requests": measured,
        "counters_before": None if before is None else vars(before),
        "counters_after": None if after is None else vars(after),
        "hit_rate_from_counters": (
            None if before is None or after is None else prom.hit_rate_from_deltas(before, after)
        ),
    }


def run_offline(
    model: str = DEFAULT_MODEL, requests: int = 100, system_tokens: int = 2000, llm=None, **kwargs
) -> dict:
    """Run both Lab 1 experiments through the offline API. Returns a JSON-ready dict.

    ``llm`` reuses an existing ``vllm.LLM``; otherwise one is created with :func:`engine_kwargs`
    (``kwargs`` go there).
    """
    import vllm
    from vllm import LLM, SamplingParams

    if llm is None:
        llm = LLM(**engine_kwargs(model, **kwargs))
    tok = llm.get_tokenizer()
    sp = SamplingParams(max_tokens=1, temperature=0.0)
    system = trimmed_system_prompt(tok, system_tokens)
    qs = prompts.questions(requests)

    def send(ids):
        t0 = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)[0]
        return time.perf_counter() - t0, getattr(out, "num_cached_tokens", None)

    # warm-up on an unrelated prompt (kernels, allocator), then an empty cache
    send(chat_ids(tok, "You are terse.", "Say hi."))
    if hasattr(llm, "reset_prefix_cache"):
        llm.reset_prefix_cache()
    runs = {}
    for name in ("shared_system_prompt", "timestamp_first"):
        before = _counters_offline(llm)
        ttft, cached, ids_all = [], [], []
        for q in qs:
            s = (_now_stamp() + system) if name == "timestamp_first" else system
            ids = chat_ids(tok, s, q)
            t, c = send(ids)
            ttft.append(t)
            cached.append(c)
            ids_all.append(ids)
        after = _counters_offline(llm)
        runs[name] = _summary(ttft, cached, ids_all, before, after, BLOCK_SIZE)
        if hasattr(llm, "reset_prefix_cache"):
            llm.reset_prefix_cache()
    return {
        "mode": "offline",
        "model": model,
        "vllm": vllm.__version__,
        "system_tokens": system_tokens,
        "block_size": BLOCK_SIZE,
        "runs": runs,
    }


def fetch_metrics(base_url: str = "http://127.0.0.1:8000", timeout_s: float = 10) -> str:
    """The server's ``/metrics`` text."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as r:
        return r.read().decode()


def stream_ttft(base_url: str, model: str, prompt_ids: list[int], timeout_s: float = 120):
    """(TTFT seconds, cached tokens or None) of one streamed completion of ``prompt_ids``."""
    body = json.dumps(
        {
            "model": model,
            "prompt": prompt_ids,
            "max_tokens": 1,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = urllib.request.Request(
        base_url.rstrip("/") + "/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    ttft, cached = None, None
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if ttft is None and chunk.get("choices"):
                ttft = time.perf_counter() - t0
            usage = chunk.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            if "cached_tokens" in details:
                cached = details["cached_tokens"]
    return ttft, cached


def run_server(
    base_url: str = "http://127.0.0.1:8000",
    model: str = DEFAULT_MODEL,
    requests: int = 100,
    system_tokens: int = 2000,
) -> dict:
    """Both experiments against a running server (start it with :func:`server_command`;
    restart it between experiments for an empty cache, or accept the first run's blocks)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    system = trimmed_system_prompt(tok, system_tokens)
    qs = prompts.questions(requests)
    runs = {}
    for name in ("shared_system_prompt", "timestamp_first"):
        before = prom.prefix_cache_counters(fetch_metrics(base_url))
        ttft, cached, ids_all = [], [], []
        for q in qs:
            s = (_now_stamp() + system) if name == "timestamp_first" else system
            ids = chat_ids(tok, s, q)
            t, c = stream_ttft(base_url, model, ids)
            ttft.append(t)
            cached.append(c)
            ids_all.append(ids)
        after = prom.prefix_cache_counters(fetch_metrics(base_url))
        runs[name] = _summary(ttft, cached, ids_all, before, after, BLOCK_SIZE)
    return {
        "mode": "server",
        "model": model,
        "base_url": base_url,
        "system_tokens": system_tokens,
        "block_size": BLOCK_SIZE,
        "runs": runs,
    }
