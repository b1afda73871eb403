"""One serving engine, step by step, as vLLM v1's scheduler runs it (:class:`Engine`).

Each rule below is vLLM's (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``; the same
in the releases the sample was measured on, 0.12, and the CPU build this book runs, 0.32):

* a step has a budget of ``max_num_batched_tokens`` tokens; the **running** requests are served
  first, in order, each with all the tokens it has not computed yet (one for a decoding request,
  the rest of its prompt for one still prefilling), cut to the budget that is left (chunked
  prefill) and to ``long_prefill_token_threshold`` when set;
* a running request that finds no free block for its tokens **preempts** the last running
  request (freeing its blocks; it goes back to the front of the waiting queue and will recompute
  everything from its first token), and tries again; if it is itself the last, it waits;
* only when nothing was preempted, **waiting** requests are admitted in order while budget is left
  and fewer than ``max_num_seqs`` run: each takes its prefix-cache hit (whole blocks, never the
  last prompt token), then as many new tokens as the budget allows; one that finds too few free
  blocks stops admission for this step. Several prompts can share one step;
* a request whose computed tokens reach its length samples a token at the end of the step: its
  first token, or one more decoded token; it finishes after ``output_len`` tokens (``ignore_eos``).

The step's time is one :meth:`kvlab.engine_model.StepCosts.step_s` call for its whole mix. Runs
of identical decode-only steps (nobody waiting) are computed in one go up to the next finish, the
next arrival or the next block shortage, with the same result as stepping one by one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validate import check_int, check_number
from .kv_pool import KVPool
from .shapes import ModelSpec
from .step_costs import StepCosts

#: total device memory as CUDA reports it (nvidia-smi "MiB" of the 80 GB, 141 GB and 80 GB parts)
DEVICE_MEMORY_BYTES = {
    "H100-SXM": 81559 * 2**20,
    "H200": 143771 * 2**20,
    "A100-SXM": 81920 * 2**20,
}


@dataclass(frozen=True)
class EngineConfig:
    """The scheduler's settings (vLLM's names). Defaults: vLLM's OpenAI server on an H100 or
    H200 (``EngineArgs.get_batch_defaults``: 8,192 tokens and 1,024 sequences where the GPU has
    at least 70 GiB and is not an A100; 2,048 and 256 otherwise)."""

    num_blocks: int
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    long_prefill_token_threshold: int = 0
    enable_prefix_caching: bool = True
    decode: bool = True  # False: a prefill worker, a request leaves after its first token

    def __post_init__(self):
        check_int("num_blocks", self.num_blocks, lo=1)
        check_int("block_size", self.block_size, lo=1)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, lo=1)
        check_int("max_num_seqs", self.max_num_seqs, lo=1)
        check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, lo=0)


def batch_defaults(gpu: str) -> tuple[int, int]:
    """vLLM's (max_num_batched_tokens, max_num_seqs) for its OpenAI server on ``gpu``."""
    if gpu == "A100-SXM" or DEVICE_MEMORY_BYTES.get(gpu, 0) < 70 * 2**30:
        return 2048, 256
    return 8192, 1024


def kv_blocks(
    model: ModelSpec,
    gpu: str,
    tp: int,
    precision: str = "bf16",
    *,
    gpu_memory_utilization: float = 0.9,
    non_kv_bytes_per_gpu: float = 3 * 2**30,
    block_size: int = 16,
    kv_bytes: int = 2,
) -> int:
    """KV blocks vLLM gets on ``tp`` GPUs: ``gpu_memory_utilization`` of each GPU's memory, less
    its share of the weights and ``non_kv_bytes_per_gpu`` (activations of the profiling pass, CUDA
    graphs, communication buffers), divided into blocks of ``block_size`` tokens."""
    if gpu not in DEVICE_MEMORY_BYTES:
        raise ValueError(f"gpu must be one of {sorted(DEVICE_MEMORY_BYTES)}, got {gpu!r}")
    check_number("gpu_memory_utilization", gpu_memory_utilization, lo=0, hi=1, lo_open=True)
    check_number("non_kv_bytes_per_gpu", non_kv_bytes_per_gpu, lo=0)
    free = (
        DEVICE_MEMORY_BYTES[gpu] * gpu_memory_utilization
        - model.weight_bytes_per_gpu(tp, precision)
        - non_kv_bytes_per_gpu
    )
    per_block = model.kv_bytes_per_token_per_gpu(tp, kv_bytes) * block_size
    blocks = int(free // per_block)
    if blocks < 1:
        raise ValueError(
            f"{model.name} in {precision} does not fit on {tp} x {gpu} with "
            f"gpu_memory_utilization={gpu_memory_utilization}: no memory left for the KV cache"
        )
    return blocks


@dataclass(eq=False)
class Request:
    """One request: ``prompt_len`` tokens in, ``output_len`` out. ``keys``: the keys of its full
    blocks (prompt first, then output where known) for the prefix cache; empty = nothing shared.
    Times are seconds; ``first_token_s`` and ``finish_s`` are filled in by the engine."""

    rid: Hashable
    prompt_len: int
    output_len: int
    arrival_s: float = 0.0
    keys: Sequence[Hashable] = ()
    # state
    num_tokens: int = field(init=False)
    num_computed: int = 0
    generated: int = 0
    blocks: int = 0
    held_keys: list = field(default_factory=list)
    first_token_s: float = math.nan
    finish_s: float = math.nan
    cached_tokens: int = -1  # prefix-cache hit at its first admission
    preemptions: int = 0

    def __post_init__(self):
        check_int("prompt_len", self.prompt_len, lo=1)
        check_int("output_len", self.output_len, lo=1)
        self.num_tokens = self.prompt_len


@dataclass
class DecodeRun:
    """A planned run of decode-only steps (:meth:`Engine.plan_run`): its start, each step's end
    (seconds), and the running requests' tokens and blocks when it was planned."""

    start_s: float
    ends_s: np.ndarray
    tokens: np.ndarray
    held: np.ndarray

    def steps_before(self, t: float) -> int:
        """Steps of the run that start before ``t`` (at least one)."""
        if t == math.inf:
            return len(self.ends_s)
        starts = np.concatenate(([self.start_s], self.ends_s[:-1]))
        return max(1, int(np.searchsorted(starts, t, side="left")))


@dataclass
class StepRecord:
    """What one step (or one run of identical decode steps) did."""

    start_s: float
    end_s: float
    steps: int
    prompt_tokens: int
    decode_batch: int
    first: list = field(default_factory=list)
    finished: list = field(default_factory=list)


class Engine:
    """One replica's scheduler and KV pool, advanced step by step in simulated time."""

    def __init__(
        self,
        costs: StepCosts,
        config: EngineConfig,
        *,
        on_stored: Callable[[list], None] | None = None,
        on_removed: Callable[[list], None] | None = None,
        one_by_one: bool = False,
    ):
        self.costs = costs
        self.config = config
        self.pool = KVPool(
            config.num_blocks, config.block_size, on_stored=on_stored, on_removed=on_removed
        )
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.now = 0.0  # end of the last step: when the engine can start the next one
        self.steps = 0
        self.preemptions = 0
        self.busy_s = 0.0
        self.one_by_one = one_by_one  # step decode runs one by one (checks)

    # --- what the outside sees --------------------------------------------------------------------

    def add(self, req: Request) -> None:
        """``req`` joins the waiting queue (callers add requests in arrival order, at or before
        the engine's time)."""
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    # --- one step ----------------------------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _preempt(self, r: Request) -> None:
        self.pool.release(r.held_keys, r.blocks - len(r.held_keys))
        r.blocks, r.held_keys, r.num_computed = 0, [], 0
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def _store_full(self, r: Request, old: int, new: int) -> None:
        """Cache the blocks of ``r`` that filled between ``old`` and ``new`` computed tokens."""
        bs = self.config.block_size
        keys = r.keys
        for i in range(old // bs, min(new // bs, len(keys))):
            if i == len(r.held_keys) and self.pool.store(keys[i]):
                r.held_keys.append(keys[i])

    def _finish(self, r: Request, t: float) -> None:
        r.finish_s = t
        self.pool.release(r.held_keys, r.blocks - len(r.held_keys))
        r.blocks, r.held_keys = 0, []

    def _retire(self, done: list[Request], end: float, rec: StepRecord) -> None:
        """Take the requests that finished at ``end`` out of the running list, free their blocks
        and list them in ``rec``."""
        if not done:
            return
        gone = set(map(id, done))
        self.running = [r for r in self.running if id(r) not in gone]
        for r in done:
            self._finish(r, end)
        rec.finished = done

    def step(self) -> StepRecord:
        """Run one step from ``self.now``."""
        cfg, pool = self.config, self.pool
        budget = cfg.max_num_batched_tokens
        thr = cfg.long_prefill_token_threshold
        scheduled: list[tuple[Request, int]] = []
        preempted = False
        running = self.running
        bs = cfg.block_size
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = r.num_tokens - r.num_computed
            if thr:
                n = min(n, thr)
            n = min(n, budget)
            need = -(-(r.num_computed + n) // bs) - r.blocks
            lost = False
            while need > 0 and need > pool.num_free:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    lost = True
                    break
            if lost:
                break
            if need > 0:
                pool.allocate(need)
                r.blocks += need
            scheduled.append((r, n))
            budget -= n
            i += 1
        if not preempted:
            while self.waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                r = self.waiting[0]
                hits: Sequence[Hashable] = ()
                if r.num_computed == 0 and cfg.enable_prefix_caching and r.keys:
                    limit = min((r.num_tokens - 1) // bs, len(r.keys))
                    hits = r.keys[: pool.match(r.keys[:limit])]
                computed = len(hits) * bs if hits else r.num_computed
                n = r.num_tokens - computed
                if thr:
                    n = min(n, thr)
                n = min(n, budget)
                need = self._blocks_for(computed + n) - (len(hits) if hits else r.blocks)
                if need > pool.num_free - (pool.hits_in_free_queue(hits) if hits else 0):
                    break
                if hits:
                    pool.take_hits(hits)
                    r.held_keys = list(hits)
                    r.blocks = len(hits)
                    r.num_computed = computed
                if r.cached_tokens < 0:
                    r.cached_tokens = computed
                    pool.hits += computed
                    pool.queries += r.prompt_len
                pool.allocate(need)
                r.blocks += need
                self.waiting.popleft()
                running.append(r)
                scheduled.append((r, n))
                budget -= n
        return self._run(scheduled)

    def _run(self, scheduled: list[tuple[Request, int]]) -> StepRecord:
        chunks = []
        dec_b = 0
        dec_ctx = 0
        for r, n in scheduled:
            if n == 1 and r.generated and r.num_computed == r.num_tokens - 1:
                dec_b += 1
                dec_ctx += r.num_tokens
            else:
                chunks.append((n, r.num_computed))
        dt = self.costs.step_s(chunks, dec_b, dec_ctx)
        bs = self.config.block_size
        start = self.now
        end = start + dt
        rec = StepRecord(start, end, 1, sum(c[0] for c in chunks), dec_b)
        done = []
        for r, n in scheduled:
            old = r.num_computed
            r.num_computed += n
            if old < len(r.keys) * bs:
                self._store_full(r, old, r.num_computed)
            if r.num_computed == r.num_tokens:
                r.num_tokens += 1
                r.generated += 1
                if r.generated == 1:
                    r.first_token_s = end
                    rec.first.append(r)
                if r.generated >= r.output_len or not self.config.decode:
                    done.append(r)
        self._retire(done, end, rec)
        self.now = end
        self.steps += 1
        self.busy_s += dt
        return rec

    # --- runs of decode steps ------------------------------------------------------------------------

    def _decode_only(self) -> bool:
        if self.waiting or not self.running or self.one_by_one or not self.config.decode:
            return False
        if len(self.running) > self.config.max_num_batched_tokens:
            return False
        return all(r.generated and r.num_computed == r.num_tokens - 1 for r in self.running)

    def plan_run(self) -> DecodeRun | None:
        """The run of decode-only steps the engine would take from ``self.now`` if no new work
        came: up to the first finish or the first block shortage. Nothing changes until
        :meth:`apply_run`; None when the engine is not in a decode-only state."""
        if not self._decode_only():
            return None
        run = self.running
        b = len(run)
        toks = np.fromiter((r.num_tokens for r in run), dtype=np.int64, count=b)
        left = np.fromiter((r.output_len - r.generated for r in run), dtype=np.int64, count=b)
        k = int(left.min())
        held = np.fromiter((r.blocks for r in run), dtype=np.int64, count=b)
        bs = self.config.block_size

        def need(steps: int) -> int:
            return int((-(-(toks + steps - 1) // bs) - held).clip(min=0).sum())

        free = self.pool.num_free
        if need(k) > free:
            lo, hi = 0, k  # need(lo) <= free < need(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if need(mid) <= free:
                    lo = mid
                else:
                    hi = mid
            k = lo
        if k < 1:
            return None
        ends = self.now + self.costs.decode_run_s(b, float(toks.sum()), k)
        return DecodeRun(self.now, ends, toks, held)

    def apply_run(self, plan: DecodeRun, steps: int | None = None) -> StepRecord:
        """Carry out the first ``steps`` steps of ``plan`` (all by default), which must be the
        engine's latest plan with nothing changed since."""
        k = len(plan.ends_s) if steps is None else steps
        if not 1 <= k <= len(plan.ends_s) or plan.start_s != self.now:
            raise ValueError(f"steps must be in [1, {len(plan.ends_s)}] of a current plan, got {k}")
        run = self.running
        bs = self.config.block_size
        new_blocks = (-(-(plan.tokens + k - 1) // bs) - plan.held).clip(min=0)
        self.pool.allocate(int(new_blocks.sum()))
        end = float(plan.ends_s[k - 1])
        rec = StepRecord(self.now, end, k, 0, len(run))
        done = []
        for r, nb in zip(run, new_blocks.tolist(), strict=True):
            old = r.num_computed
            r.blocks += nb
            r.num_computed += k
            r.num_tokens += k
            r.generated += k
            if old < len(r.keys) * bs:
                self._store_full(r, old, r.num_computed)
            if r.generated >= r.output_len:
                done.append(r)
        self._retire(done, end, rec)
        self.busy_s += end - self.now
        self.now = end
        self.steps += k
        return rec

    def advance(self, until: float = math.inf) -> StepRecord | None:
        """Run one step, or one run of identical decode-only steps that stops at the first finish,
        at the first block shortage or before the first step that would start at or after
        ``until``. None when there is nothing to run."""
        if not self.has_work():
            return None
        plan = self.plan_run()
        if plan is None:
            return self.step()
        return self.apply_run(plan, plan.steps_before(until))
