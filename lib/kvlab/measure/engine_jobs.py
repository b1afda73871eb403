"""The engine jobs: what runs next to a real vLLM engine and comes back as JSON.

Each job is a function of plain keyword arguments returning a JSON-ready dict. The notebook calls
them through :func:`kvlab.measure.engine.run_job`, in-process where ``vllm`` imports, else in the
engine environment as ``python -m kvlab.measure.engine_jobs JOB PARAMS.json OUT.json`` (vLLM starts
its engine in spawned processes, so this module's ``__main__`` guard matters).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path


class MemoryPeak:
    """Peak resident memory of this process and all its children (bytes), sampled every
    ``interval_s`` in a background thread while the ``with`` block runs (needs psutil)."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def probe(model: str | None = None) -> dict:
    """Versions of the engine environment and the tiny model's tokenizer (no engine start)."""
    t0 = time.perf_counter()
    import torch
    import transformers
    import vllm

    from .engine import TINY_MODEL_DIR, check_model_dir

    import_s = time.perf_counter() - t0
    path = check_model_dir(model or TINY_MODEL_DIR)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "How do I ask about a refund?"}],
        tokenize=True,
        add_generation_prompt=True,
    )
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "import_s": import_s,
        "model": str(path),
        "vocab_size": len(tok),
        "chat_ids": [int(t) for t in ids],
    }


def _stats(xs) -> dict:
    xs = [float(x) for x in xs if x is not None]
    return {
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
    }


def lab1(
    model: str | None = None,
    block_size: int | None = None,
    num_blocks: int | None = 160,
    max_model_len: int = 4096,
    system_tokens: int = 2000,
    requests: int = 20,
    fit_lengths: tuple = (256, 512, 1024, 2048, 3072),
    fit_repeats: int = 3,
    hit_pairs: int = 6,
    replay: dict | None = None,
    seed: int = 0,
) -> dict:
    """Lab 1 on one engine: start-up; the shared system prompt and the timestamp-first runs
    (per-request TTFT, engine first-token latency, cached tokens, counters); cold prefills of
    several lengths (the prefill-time fit) and pairs of prompts sharing a prefix (the measured
    saving of a hit); then, when ``replay`` is given, a chat stream replayed one request at a time
    (``replay``: keyword arguments of :class:`kvlab.workload.ChatWorkload`). Returns token ids
    too, so the notebook can make its own prediction."""
    from vllm import LLM

    from . import vllm_lab
    from .engine import TINY_MODEL_DIR, check_model_dir

    if model is None:
        model = str(check_model_dir(TINY_MODEL_DIR))
    elif os.path.sep in str(model) or str(model).startswith("."):
        check_model_dir(model)
    kw = vllm_lab.engine_kwargs(
        model, block_size=block_size, num_blocks=num_blocks, max_model_len=max_model_len, seed=seed
    )
    out: dict = {"engine_kwargs": kw}
    with MemoryPeak() as mem:
        t0 = time.perf_counter()
        import vllm

        out["import_s"] = time.perf_counter() - t0
        llm = LLM(**kw)
        out["start_s"] = time.perf_counter() - t0
        out["vllm"] = vllm.__version__
        cfg = llm.llm_engine.vllm_config.cache_config
        out["num_blocks"] = int(cfg.num_gpu_blocks)
        out["block_size"] = int(cfg.block_size)
        tok = llm.get_tokenizer()
        vocab = len(tok)
        out["vocab_size"] = vocab
        # warm-up on an unrelated prompt (kernels, allocator), then an empty cache
        vllm_lab.send(llm, vllm_lab.random_prompts([300], vocab, seed=seed + 99)[0])
        vllm_lab.reset_cache(llm)
        runs = {}
        for name, stamp in (("shared_system_prompt", False), ("timestamp_first", True)):
            ids = vllm_lab.lab1_prompts(tok, requests, system_tokens, timestamp=stamp)
            runs[name] = vllm_lab.run_requests(llm, ids)
            runs[name]["prompt_ids"] = ids
            vllm_lab.reset_cache(llm)
        out["runs"] = runs
        # cold prefills of several lengths, each different from its first token
        lengths = [int(n) for n in fit_lengths for _ in range(fit_repeats)]
        cold = vllm_lab.run_requests(llm, vllm_lab.random_prompts(lengths, vocab, seed=seed + 1))
        out["cold"] = {k: cold[k] for k in ("ttft_s", "engine_ttft_s", "cached_tokens")}
        out["cold"]["lengths"] = lengths
        vllm_lab.reset_cache(llm)
        # pairs: a cold prompt, then one sharing all but its last 32 tokens (a hit)
        pair_len = int(max(fit_lengths))
        firsts = vllm_lab.random_prompts([pair_len] * hit_pairs, vocab, seed=seed + 2)
        tails = vllm_lab.random_prompts([32] * hit_pairs, vocab, seed=seed + 3)
        seq = []
        for a, t in zip(firsts, tails, strict=True):
            seq += [a, a[:-32] + t]
        pairs = vllm_lab.run_requests(llm, seq)
        out["pairs"] = {k: pairs[k] for k in ("ttft_s", "engine_ttft_s", "cached_tokens")}
        out["pairs"]["prompt_tokens"] = pair_len
        vllm_lab.reset_cache(llm)
        if replay:
            from ..workload import ChatWorkload

            w = ChatWorkload(**replay)
            ids = [vllm_lab.to_vocab(w.tokens(i)[0], vocab) for i in range(len(w))]
            t1 = time.perf_counter()
            rep = vllm_lab.run_requests(llm, ids)
            rep["seconds"] = time.perf_counter() - t1
            rep["workload"] = dict(replay)
            out["replay"] = rep
        out["memory_peak_bytes"] = mem.peak_bytes
    del llm
    return out


#: Job name -> function.
JOBS = {"probe": probe, "lab1": lab1}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] not in JOBS:
        print(f"usage: python -m kvlab.measure.engine_jobs {{{','.join(JOBS)}}} PARAMS OUT")
        return 2
    job, pfile, ofile = args
    params = json.loads(Path(pfile).read_text())
    out = JOBS[job](**params)
    Path(ofile).write_text(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
