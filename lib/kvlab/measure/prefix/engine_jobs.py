"""The engine jobs: what runs next to a real vLLM engine and comes back as JSON.

Each job is a function of plain keyword arguments returning a JSON-ready dict. The notebook calls
them through :func:`kvlab.measure.prefix.runs.run_job`, in-process where ``vllm`` imports, else in the
engine environment as ``python -m kvlab.measure.prefix.engine_jobs JOB PARAMS.json OUT.json`` (vLLM starts
its engine in spawned processes, so this module's ``__main__`` guard matters).

Why one module: it is the one program the engine environment runs, and every job in it starts,
measures and stops an engine with the same helpers (peak memory, waiting for GPU memory after a
shutdown, the model's revision); Lab 1's recordings fingerprint it with the rest of the lab's code.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

#: Lab 1's chat-stream replay (``ChatWorkload`` arguments; token ids mapped into the model's
#: vocabulary by the job) and the fleet stream its servers are routed (no answers cached).
LAB1_REPLAY = dict(
    conversations=8,
    requests=240,
    system_prompts=2,
    system_tokens=320,
    history_start=0,
    history_step=200,
    history_max=2000,
    new_tokens=40,
    output_tokens=24,
    seed=0,
)
LAB1_FLEET = dict(LAB1_REPLAY, requests=200, output_tokens=0)


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
    from ..serving.engine import TINY_MODEL_DIR, check_model_dir

    path = check_model_dir(model or TINY_MODEL_DIR)
    t0 = time.perf_counter()
    import torch
    import transformers
    import vllm

    import_s = time.perf_counter() - t0
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


def gpu_free_bytes() -> tuple[int, int] | None:
    """(free, total) bytes of GPU 0 as the driver sees them (``torch.cuda.mem_get_info``: every
    process's use counts, not only this one's), or None without a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info(0)
    return int(free), int(total)


def wait_for_gpu_memory(
    needed_bytes: int, timeout_s: float = 120.0, poll_s: float = 1.0, what: str = "the engine"
) -> dict:
    """Wait until GPU 0 has ``needed_bytes`` free (an engine that just stopped gives its memory
    back when its processes have exited); :class:`~kvlab.measure.serving.engine.EngineError` naming both
    figures when it has not after ``timeout_s``. Returns what was seen (nothing to wait for
    without a GPU)."""
    from ..serving.engine import EngineError

    t0 = time.monotonic()
    seen = gpu_free_bytes()
    if seen is None:
        return {"gpu": False}
    while seen[0] < needed_bytes:
        if time.monotonic() - t0 > timeout_s:
            raise EngineError(
                f"GPU memory: {seen[0] / 2**30:.1f} GiB free of {seen[1] / 2**30:.1f} GiB after "
                f"{timeout_s:g} s, but {what} needs {needed_bytes / 2**30:.1f} GiB; another process "
                f"still holds the rest (see nvidia-smi): stop it, or restart the kernel"
            )
        time.sleep(poll_s)
        seen = gpu_free_bytes() or seen
    return {
        "gpu": True,
        "free_bytes": seen[0],
        "total_bytes": seen[1],
        "needed_bytes": int(needed_bytes),
        "waited_s": time.monotonic() - t0,
    }


def shutdown_engine(llm, free_before: int | None = None, timeout_s: float = 120.0) -> dict:
    """Stop the engine behind ``vllm.LLM`` now, not whenever the garbage collector gets to it:
    vLLM's engine core runs in its own process, which holds the GPU memory until
    ``llm.llm_engine.engine_core.shutdown()`` ends it. On a GPU, then wait until the free memory
    is back to ``free_before`` (less 2 % of the GPU for what this process keeps, its CUDA
    context). Returns what happened, for the record."""
    import gc

    from ..serving.engine import EngineError

    t0 = time.monotonic()
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        try:
            core.shutdown(timeout=timeout_s)
        except TypeError:  # a client whose shutdown takes no time-out
            core.shutdown()
    gc.collect()
    out: dict = {"stopped": core is not None, "stop_s": time.monotonic() - t0}
    seen = gpu_free_bytes()
    if seen is not None:
        import torch

        torch.cuda.empty_cache()
        out["gpu_free_before_bytes"] = free_before
        if free_before is not None:
            needed = free_before - int(0.02 * seen[1])
            try:
                wait_for_gpu_memory(needed, timeout_s, what="the next engine")
                out["gpu_memory_back"] = True
            except EngineError as exc:  # recorded; the next engine's own wait says what to do
                out["gpu_memory_back"] = False
                out["error"] = str(exc)
        out["gpu_free_after_bytes"] = (gpu_free_bytes() or seen)[0]
    return out


def model_revision(model: str) -> str | None:
    """Which revision of ``model`` ran: for a hub model id, the commit of the snapshot in the
    local hub cache (``.../snapshots/<commit>/config.json``); for a local folder, ``folder
    <digest>`` (:func:`kvlab.measure.prefix.tinymodel.folder_digest`); None when it cannot be told."""
    from ..serving.engine import is_local_model

    if is_local_model(model):
        from .tinymodel import folder_digest

        try:
            return f"folder {folder_digest(model)}"
        except OSError:
            return None
    try:
        from huggingface_hub import try_to_load_from_cache  # type: ignore[import-not-found]

        hit = try_to_load_from_cache(str(model), "config.json")
    except Exception:  # no huggingface_hub, or an unusual cache
        return None
    if isinstance(hit, str) and "/snapshots/" in hit:
        return hit.split("/snapshots/")[1].split("/")[0]
    return None


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
    fit_repeats: int = 4,
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

    from ..serving.engine import TINY_MODEL_DIR, check_model_dir, is_local_model
    from . import vllm_lab

    if model is None:
        model = str(check_model_dir(TINY_MODEL_DIR))
    elif is_local_model(model):
        check_model_dir(model)
    kw = vllm_lab.engine_kwargs(
        model, block_size=block_size, num_blocks=num_blocks, max_model_len=max_model_len, seed=seed
    )
    out: dict = {"engine_kwargs": kw}
    before = gpu_free_bytes()
    with MemoryPeak() as mem:
        t0 = time.perf_counter()
        import vllm

        out["import_s"] = time.perf_counter() - t0
        llm = LLM(**kw)
        try:
            out["start_s"] = time.perf_counter() - t0
            out["vllm"] = vllm.__version__
            _lab1_runs(
                llm, out, system_tokens, requests, fit_lengths, fit_repeats, hit_pairs, replay, seed
            )
        finally:
            # the engine is stopped and its memory seen back before anything else starts (Lab 1's
            # servers come next, and vLLM's start-up fails if memory is freed while it profiles)
            out["shutdown"] = shutdown_engine(llm, None if before is None else before[0])
            del llm
        out["memory_peak_bytes"] = mem.peak_bytes
    out["model_revision"] = model_revision(model)
    return out


def _lab1_runs(
    llm, out, system_tokens, requests, fit_lengths, fit_repeats, hit_pairs, replay, seed
):
    """The body of :func:`lab1` on a started engine; fills ``out``."""
    from . import vllm_lab

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
        from ...workload import ChatWorkload

        w = ChatWorkload(**replay)
        ids = [vllm_lab.to_vocab(w.tokens(i)[0], vocab) for i in range(len(w))]
        t1 = time.perf_counter()
        rep = vllm_lab.run_requests(llm, ids)
        rep["seconds"] = time.perf_counter() - t1
        rep["workload"] = dict(replay)
        out["replay"] = rep


def _counter_dict(c) -> dict:
    return {"queries": c.queries, "hits": c.hits, "name": c.source}


def _sum_counters(servers) -> dict:
    cs = [s.counters() for s in servers]
    return {
        "queries": sum(c.queries for c in cs),
        "hits": sum(c.hits for c in cs),
        "name": cs[0].source,
        "per_server": [_counter_dict(c) for c in cs],
    }


def _route(routing, servers, clients, served, ids, warmup) -> dict:
    """Send every request to the server ``routing`` chooses, in order on each server (each
    server serves one request at a time). Choices that do not depend on the answers (random,
    round-robin, sticky) are sent to the servers in parallel, one thread per server: each server
    still sees its own requests in the same order, so its cache goes through the same states.
    The counters of all servers are read after the first ``warmup`` requests and at the end."""
    from concurrent.futures import ThreadPoolExecutor

    from ..serving import server as srv

    n = len(ids)
    reps = [0] * n
    cached = [0] * n

    def run(indices):
        for i in indices:
            r = reps[i]
            out = srv.complete(clients[r], served, ids[i], stream=False)
            cached[i] = out["cached_tokens"]

    if routing.choices is None:  # cache-aware: each choice needs the answers so far
        c_warm = None
        for i in range(n):
            if i == warmup:
                c_warm = _sum_counters(servers)
            r = reps[i] = routing.choose(i)
            out = srv.complete(clients[r], served, ids[i], stream=False)
            cached[i] = out["cached_tokens"]
            routing.served(r, len(ids[i]), out["cached_tokens"])
    else:
        reps[:] = [int(x) for x in routing.choices[:n]]
        for part in (range(warmup), range(warmup, n)):
            if part.start == warmup:
                c_warm = _sum_counters(servers)
            per = [[i for i in part if reps[i] == r] for r in range(len(servers))]
            with ThreadPoolExecutor(len(servers)) as pool:
                list(pool.map(run, per))
    return {
        "replica": reps,
        "cached_tokens": cached,
        "counters_warm": c_warm,
        "counters_end": _sum_counters(servers),
    }


def start_servers(servers, together: bool, gpu_memory_utilization: float | None = None) -> list:
    """Start ``servers`` (:class:`kvlab.measure.serving.server.VllmServer`) and wait until each is ready.

    ``together``: launch all, then wait for all (on a CPU each server has its own core and its own
    KV space, ``VLLM_CPU_KVCACHE_SPACE``, so nothing is shared while they start). Otherwise one
    after the other, each ready before the next is launched: on a GPU, vLLM measures the free
    memory when a server starts and asserts, after profiling the model, that it did not grow
    (``v1/worker/gpu_worker.py``); memory that another engine releases meanwhile fails that check,
    and two servers sizing their KV cache at once would each count the other's share as free.
    With ``gpu_memory_utilization`` (a GPU), each launch first waits until that share of the GPU
    (and 1 GiB for the server's CUDA context) is free, and says so when it never is. Returns those
    waits. A server that fails to start is stopped; the caller stops the others."""
    waits: list = []
    if together:
        for s in servers:
            s.launch()
        for s in servers:
            s.wait_ready()
        return waits
    for s in servers:
        if gpu_memory_utilization is not None:
            seen = gpu_free_bytes()
            if seen is not None:
                needed = int(gpu_memory_utilization * seen[1]) + 2**30
                waits.append(wait_for_gpu_memory(needed, what=f"vllm serve on port {s.port}"))
        s.launch()
        s.wait_ready()
    return waits


def serving(
    model: str | None = None,
    block_size: int | None = None,
    num_blocks: int | None = 96,
    max_model_len: int = 2560,
    replicas: int = 2,
    base_port: int | None = None,
    system_tokens: int = 1000,
    demo_requests: int = 8,
    fleet_workload: dict | None = None,
    policies: tuple = ("random", "round_robin", "sticky", "cache_aware"),
    warmup: int = 20,
    gpu_memory_utilization: float = 0.3,
    seed: int = 0,
    start_together: bool | None = None,
    router_runs: list | None = None,
) -> dict:
    """Serving mode and a real fleet, with ``replicas`` ``vllm serve`` processes on loopback:

    1. the first server alone, through the ``openai`` client's chat API: a shared system prompt
       and different questions, counters scraped from ``/metrics`` before and after;
    2. every routing policy in turn: both caches emptied, the chat stream ``fleet_workload``
       routed by kvlab's router over the servers one request at a time (prompts as token ids),
       each server's counters scraped after the warm-up requests and at the end;
    3. with ``router_runs`` (``(policy, clients, requests)`` each), SGLang's real router in front
       of the same servers, caches emptied before each run
       (:func:`kvlab.measure.prefix.router_runs.measure_router`); where no Python with
       ``sglang-router`` is found, ``out["router"]["skipped"]`` says so.

    Every server is stopped by its own pid when the job ends, also on failure. ``base_port``: the
    first server's port, the next ones counting up (default: free ports chosen by the system).
    ``start_together``: see :func:`start_servers` (default: together on a CPU, one after the
    other on a GPU)."""
    from transformers import AutoTokenizer

    from ...workload import ChatWorkload
    from ..serving import server as srv
    from ..serving.engine import TINY_MODEL_DIR, allowed_cores, check_model_dir
    from . import prompts, vllm_lab
    from .engine_cache import ChatRouting

    if model is None:
        model = str(check_model_dir(TINY_MODEL_DIR))
    kw = vllm_lab.engine_kwargs(
        model,
        block_size=block_size,
        num_blocks=num_blocks,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        seed=seed,
    )
    cores = allowed_cores()
    gpu = vllm_lab.on_gpu()
    # ports the system says are free unless a first port is given (a fixed one may be taken)
    if base_port is None:
        ports: list[int] = []
        while len(ports) < replicas:
            p = srv.free_port()
            if p not in ports:
                ports.append(p)
    else:
        ports = [base_port + r for r in range(replicas)]
    servers = [
        srv.VllmServer(
            kw,
            port=ports[r],
            cpu_cores=str(cores[r % len(cores)]) if (not gpu and len(cores) >= replicas) else None,
        )
        for r in range(replicas)
    ]
    out: dict = {"engine_kwargs": kw, "replicas": replicas, "commands": []}
    tok = AutoTokenizer.from_pretrained(model)
    with MemoryPeak() as mem:
        try:
            t0 = time.perf_counter()
            if start_together is None:
                start_together = not gpu
            out["started_together"] = bool(start_together)
            out["gpu_memory_waits"] = start_servers(
                servers, start_together, gpu_memory_utilization if gpu else None
            )
            out["commands"] = [s.command() for s in servers]
            out["start_s"] = time.perf_counter() - t0
            out["pids"] = [s.pid for s in servers]
            clients = [srv.openai_client(s) for s in servers]
            served = clients[0].models.list().data[0].id
            out["served_model"] = served
            # 1. serving mode: the chat API, /metrics before and after
            system = vllm_lab.trimmed_system_prompt(tok, system_tokens)
            qs = prompts.questions(demo_requests)
            before = servers[0].counters()
            rows = [srv.chat(clients[0], served, system, q) for q in qs]
            after = servers[0].counters()
            out["demo"] = {
                "ttft_s": [r["ttft_s"] for r in rows],
                "cached_tokens": [r["cached_tokens"] for r in rows],
                "prompt_tokens": [r["prompt_tokens"] for r in rows],
                "prompt_ids": [vllm_lab.chat_ids(tok, system, q) for q in qs],
                "counters_before": _counter_dict(before),
                "counters_after": _counter_dict(after),
            }
            # 2. the fleet, one policy at a time
            if fleet_workload:
                w = ChatWorkload(**fleet_workload)
                vocab = len(tok)
                ids = [vllm_lab.to_vocab(w.tokens(i)[0], vocab) for i in range(len(w))]
                bs = int(kw["block_size"])
                fleet_out = {}
                for policy in policies:
                    for s in servers:
                        s.reset_prefix_cache()
                    routing = ChatRouting(w, policy, replicas, bs, seed=seed)
                    t1 = time.perf_counter()
                    res = _route(routing, servers, clients, served, ids, warmup)
                    res["prompt_tokens"] = [len(x) for x in ids]
                    res["seconds"] = time.perf_counter() - t1
                    fleet_out[policy] = res
                out["fleet"] = fleet_out
                out["fleet_workload"] = dict(fleet_workload)
                out["warmup"] = warmup
                if router_runs:
                    out["router"] = _router_runs(servers, served, ids, router_runs)
            out["alive_before_stop"] = [s.alive() for s in servers]
        finally:
            srv.stop_all(servers)
        out["memory_peak_bytes"] = mem.peak_bytes
    out["alive_after_stop"] = [s.alive() for s in servers]
    return out


def _router_runs(servers, served, ids, runs) -> dict:
    """The real router's runs over the running servers (see :func:`serving`)."""
    from ..serving import sglang_router
    from . import router_runs

    python = sglang_router.router_python()
    if python is None:
        return {
            "skipped": f"no Python with sglang-router {sglang_router.ROUTER_VERSION} here "
            f"(install it, or set {sglang_router.ROUTER_PYTHON_ENV})"
        }
    t0 = time.perf_counter()
    done = [
        router_runs.measure_router(servers, served, ids, p, int(c), int(n), python=python)
        for p, c, n in runs
    ]
    return {"runs": done, "seconds": time.perf_counter() - t0}


#: Job name -> function.
JOBS = {"probe": probe, "lab1": lab1, "serving": serving}


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"engine job stopped by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] not in JOBS:
        print(f"usage: python -m kvlab.measure.prefix.engine_jobs {{{','.join(JOBS)}}} PARAMS OUT")
        return 2
    job, pfile, ofile = args
    # run_job stops a job with SIGTERM (time-out, interrupted notebook): turn it into an exception
    # so that every ``finally`` runs and the servers a job started are stopped by their pids
    signal.signal(signal.SIGTERM, _terminate)
    params = json.loads(Path(pfile).read_text())
    out = JOBS[job](**params)
    Path(ofile).write_text(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
