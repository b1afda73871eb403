"""Colocated vs disaggregated serving, simulated event by event on one cost model.

Costs come from :mod:`kvlab.costs` (``cost=``: a calibration's name, ``"book"`` or ``"measured"``,
or a :class:`kvlab.costs.Costs`; default :data:`kvlab.costs.BOOK`, the book's
assumed round numbers, one replica = one 8-GPU server): prefill takes ``prefill_s_per_token`` per
uncached prompt token; a decode step takes ``decode_base_s`` plus ``decode_per_request_s`` per
running request, and gives every running request one token (continuous batching, up to
``max_batch`` requests; the rest wait for a slot). A measured calibration
(``kvlab.costs.cost_model("measured", gpu=..., tp=...)``) adds a fixed prefill part, attention
over the context, and a decode term per context token in the batch (the KV read); the replica
then tracks its batch's total context step by step. A replica's TP comes from its system
(``Colocated.tp``, ``Disaggregated.prefill_tp`` / ``decode_tp``): the cost model is re-derived at
that TP from the same calibration (the book's is defined at TP 8 only).

Two ways to spend the same replicas:

* :class:`Colocated`: every replica prefills and decodes. With chunked prefill (``chunk_tokens``)
  each step carries up to that many prompt tokens along with the decode batch, so a step that
  carries a chunk is slower for every request decoding on that replica: interference. ``overlap``
  says how much of the smaller part hides under the larger (0: the costs add, the book's model;
  1: the step takes the longer of the two, ideal piggybacking). ``chunk_tokens=None`` turns
  chunking off: a waiting prompt is prefilled whole and decoding stops meanwhile.
* :class:`Disaggregated`: ``prefill`` replicas only prefill; ``decode`` replicas only decode. The
  KV moves in between (:func:`kvlab.disagg.kv_transfer`, optionally layer by layer, leaving only
  the exposed part).

TTFT is arrival to first token. The first token comes out of prefill; for a disaggregated request
it is counted when the KV has landed on the decode replica (the book's convention), or, with
``Disaggregated(first_step=True)``, at the end of the decode replica's first step with the
request in its batch: vLLM's decode side recomputes the last prompt token before it emits
anything, so the first token waits for a decode step. (vLLM ``vllm/v1/core/sched/scheduler.py``,
``Scheduler._update_waiting_for_remote_kv``, commit 00024d31: when the received KV covers the
whole request, ``num_computed_tokens`` is set to the request's length minus one, so the next step
computes that token.) TPOT is
(last token - first token) / (output tokens - 1). Goodput, after DistServe, counts requests that
meet both a TTFT and a TPOT target.

Goodput is measured in steady state (:func:`steady_run`, :func:`max_rate`): a warm-up of
:data:`WARMUP_LIFETIMES` request lifetimes, then requests counted over :data:`WINDOW_LIFETIMES`,
with arrivals continuing one lifetime beyond; :func:`goodput_table` repeats it over seeds.
:func:`capacity_bound` gives the ceiling the cost model allows (prefill tokens per second,
Little's law on the decode batches); :func:`point` is one trial for grids of runs.

The event loop (:class:`EventLoop`) and replica (:class:`Replica`) are generic: a replica only
knows its queues and the cost model; routing and bookkeeping live in :class:`Simulation`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import disagg
from ._validate import check_choice, check_int, check_number, fraction, non_negative, positive
from .assumptions import CostModel
from .costs import BOOK, Costs, as_costs, cost_model, prefill_array
from .latency import RequestTimes
from .models import LLAMA_70B, ModelShape

DISTRIBUTIONS = ("fixed", "lognormal")
#: The default costs: :data:`kvlab.costs.BOOK` under its old name here (the same object).
COST = BOOK


# --- traffic ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Poisson arrivals with prompt and output lengths drawn from a seeded generator.

    ``lognormal`` lengths keep the given mean, with shape ``sigma`` (of the underlying normal).
    ``hit_rate`` is the share of every prompt found in a prefix cache: it is not prefilled, but
    its KV is still shipped to a decode replica.
    """

    rate_rps: float = 20.0
    requests: int = 2_000
    prompt_tokens: float = 3_000
    output_tokens: float = 300
    prompt_dist: str = "fixed"
    output_dist: str = "fixed"
    sigma: float = 0.6
    hit_rate: float = 0.0
    seed: int = 0

    def __post_init__(self):
        positive("rate_rps", self.rate_rps)
        check_int("requests", self.requests, lo=1)
        check_number("prompt_tokens", self.prompt_tokens, lo=1)
        check_number("output_tokens", self.output_tokens, lo=1)
        check_choice("prompt_dist", self.prompt_dist, DISTRIBUTIONS)
        check_choice("output_dist", self.output_dist, DISTRIBUTIONS)
        positive("sigma", self.sigma)
        check_number("hit_rate", self.hit_rate, lo=0, hi=1, hi_open=True)
        check_int("seed", self.seed, lo=0)

    def sample(self) -> dict[str, np.ndarray]:
        """Arrival times (s), prompt, uncached and output tokens, one entry per request."""
        rng = np.random.default_rng(self.seed)
        n = self.requests
        arrival = np.cumsum(rng.exponential(1 / self.rate_rps, n))

        def lengths(mean, dist):
            if dist == "fixed":
                return np.full(n, max(1, round(mean)), dtype=np.int64)
            mu = math.log(mean) - self.sigma**2 / 2
            return np.maximum(1, np.rint(rng.lognormal(mu, self.sigma, n))).astype(np.int64)

        prompt = lengths(self.prompt_tokens, self.prompt_dist)
        output = lengths(self.output_tokens, self.output_dist)
        uncached = np.maximum(1, np.ceil(prompt * (1 - self.hit_rate) - 1e-9)).astype(np.int64)
        return {"arrival_s": arrival, "prompt": prompt, "uncached": uncached, "output": output}


# --- systems ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Colocated:
    """``replicas`` replicas that each prefill and decode."""

    replicas: int = 8
    chunk_tokens: int | None = 512
    max_batch: int = 256
    overlap: float = 0.0
    tp: int = 8  # GPUs per replica (the cost model is taken at this TP)

    def __post_init__(self):
        check_int("replicas", self.replicas, lo=1)
        check_int("tp", self.tp, lo=1)
        if self.chunk_tokens is not None:
            check_int("chunk_tokens", self.chunk_tokens, lo=1)
        check_int("max_batch", self.max_batch, lo=1)
        fraction("overlap", self.overlap)

    @property
    def total(self) -> int:
        return self.replicas

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def label(self) -> str:
        chunk = f"chunk {self.chunk_tokens}" if self.chunk_tokens else "no chunking"
        overlap = "" if self.overlap == 0 else f", overlap {self.overlap:g}"
        tp = "" if self.tp == 8 else f", TP {self.tp}"
        return f"colocated x{self.replicas} ({chunk}{overlap}{tp})"


@dataclass(frozen=True)
class Disaggregated:
    """``prefill`` prefill-only and ``decode`` decode-only replicas, KV shipped in between.

    ``tp`` is the GPUs per replica on both sides unless ``prefill_tp`` / ``decode_tp`` set a side
    of its own (per-phase parallelism; the KV then crosses ``min`` of the two GPUs' links in
    parallel). ``first_step``: the first token comes out of the decode replica's first step, not
    when the KV lands (see the module's docstring). ``per_message_s``: fixed cost of each message
    of a transfer (one per layer when ``layerwise``, one otherwise).
    """

    prefill: int = 6
    decode: int = 3
    max_batch: int = 256
    link: str = "nic_per_gpu"
    layerwise: bool = False
    setup_s: float = 0.0
    precision: str = "fp16"
    tp: int = 8
    model: ModelShape = field(default=LLAMA_70B)
    prefill_tp: int | None = None
    decode_tp: int | None = None
    first_step: bool = False
    per_message_s: float = 0.0

    def __post_init__(self):
        check_int("prefill", self.prefill, lo=1)
        check_int("decode", self.decode, lo=1)
        check_int("max_batch", self.max_batch, lo=1)
        check_choice("link", self.link, disagg.LINKS)
        non_negative("setup_s", self.setup_s)
        disagg.bytes_per_value(self.precision)
        check_int("tp", self.tp, lo=1)
        if self.prefill_tp is not None:
            check_int("prefill_tp", self.prefill_tp, lo=1)
        if self.decode_tp is not None:
            check_int("decode_tp", self.decode_tp, lo=1)
        non_negative("per_message_s", self.per_message_s)

    @property
    def p_tp(self) -> int:
        """GPUs per prefill replica."""
        return self.tp if self.prefill_tp is None else self.prefill_tp

    @property
    def d_tp(self) -> int:
        """GPUs per decode replica."""
        return self.tp if self.decode_tp is None else self.decode_tp

    @property
    def total(self) -> int:
        return self.prefill + self.decode

    @property
    def gpus(self) -> int:
        return self.prefill * self.p_tp + self.decode * self.d_tp

    @property
    def gpu_split(self) -> tuple[int, int]:
        """(prefill GPUs, decode GPUs): P : D in GPUs, where ``prefill : decode`` is in replicas."""
        return self.prefill * self.p_tp, self.decode * self.d_tp

    @property
    def label(self) -> str:
        tps = "" if (self.p_tp, self.d_tp) == (8, 8) else f" (TP {self.p_tp}/{self.d_tp})"
        return f"disaggregated {self.prefill}:{self.decode}{tps}"

    def transfer_seconds(self, prompt: np.ndarray, prefill_s: np.ndarray) -> np.ndarray:
        """Per-request KV transfer time (exposed part only when ``layerwise``)."""
        tp = min(self.p_tp, self.d_tp)
        one = disagg.kv_transfer(self.model, 1, self.precision, tp, self.link)
        full = self.setup_s + prompt * one.seconds  # linear in tokens (no set-up in ``one``)
        if not self.layerwise:
            return full + self.per_message_s if self.per_message_s else full
        exposed = disagg.evaluate_array(
            "exposed_transfer",
            t_pre=np.asarray(prefill_s, float),
            t_x=full - self.setup_s,
            L=self.model.layers,
            t_m=self.per_message_s,
        )
        return self.setup_s + np.asarray(exposed, float)


# --- costs at a replica's TP ---------------------------------------------------------------------


def at_tp(cost: CostModel | str, tp: int) -> Costs:
    """``cost``'s calibration re-derived for a replica of ``tp`` GPUs (``cost`` itself when its TP
    is ``tp``). The book's calibration exists at TP 8 only: other TPs raise."""
    c = as_costs(cost)
    if c.tp == tp:
        return c
    if c.calibration == "book" and c != BOOK:
        raise ValueError(
            f"a custom book-style cost model is defined at TP {c.tp} only, got tp={tp}"
        )
    return cost_model(c.calibration, gpu=c.gpu, tp=tp)


def prefill_seconds(cost: CostModel | str, uncached, cached) -> np.ndarray:
    """Prefill time of each request (whole prompts, one pass each) under ``cost``: ``uncached``
    tokens after ``cached`` ones (arrays). The book's calibration gives ``uncached x tau``."""
    c = as_costs(cost)
    u = np.asarray(uncached)
    if not (c.prefill_s_per_pair or c.prefill_fixed_s):
        return u * c.prefill_s_per_token  # the book's linear prefill, as before
    return prefill_array(c, u, cached)


# --- the event loop -----------------------------------------------------------------------------


class EventLoop:
    """A heap of (time, sequence, callback, argument); callbacks may schedule more events."""

    __slots__ = ("now", "_heap", "_seq")

    def __init__(self):
        self.now = 0.0
        self._heap: list = []
        self._seq = 0

    def at(self, time_s: float, callback: Callable, arg=None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time_s, self._seq, callback, arg))

    def run(self) -> None:
        heap, pop = self._heap, heapq.heappop
        while heap:
            t, _, callback, arg = pop(heap)
            self.now = t
            callback(arg)


class Replica:
    """One replica's queues and steps. ``role`` is 'colocated', 'prefill' or 'decode'.

    Decoding requests sit in a heap keyed by the decode step at which they finish, so a step costs
    O(1 + finishing requests), not O(batch). Identical decode steps (same batch, no prefill, nobody
    waiting to join) run as one event until the next request finishes or new work arrives; the
    times are those of stepping one by one (``runs = False`` turns this off, for checking).
    """

    runs = True

    def __init__(
        self,
        loop: EventLoop,
        role: str,
        cost: CostModel,
        max_batch: int,
        chunk_tokens: int | None = None,
        overlap: float = 0.0,
        on_prefilled: Callable | None = None,
        on_finished: Callable | None = None,
        on_first: Callable | None = None,
    ):
        self.loop, self.role, self.max_batch = loop, role, max_batch
        self.chunk = chunk_tokens
        self.overlap = overlap
        c = as_costs(cost)
        self.tau, self.a, self.k = (
            c.prefill_s_per_token,
            c.decode_base_s,
            c.decode_per_request_s,
        )
        # the measured calibration's extra terms (all zero in the book's: then none of the context
        # bookkeeping below changes a step's time, and runs of identical steps stay on)
        self.p0, self.pair, self.ckv = (
            c.prefill_fixed_s,
            c.prefill_s_per_pair,
            c.decode_per_context_token_s,
        )
        self._inc = 0.0  # growth of each step of the current run (the KV read of one more token)
        self.cached: dict[int, int] = {}  # cached prompt tokens, per queued request (pair term)
        self.done_tokens: dict[int, int] = {}  # prompt tokens computed so far (pair term)
        self.ctx_base = 0  # sum over the running of (context at joining - step at joining)
        self.ctx_of: dict[int, int] = {}
        self.first_q: list[int] = []  # joined this step and emit their first token at its end
        self.on_prefilled, self.on_finished = on_prefilled, on_finished
        self.on_first = on_first
        self.prefill_q: deque = deque()  # request ids waiting for (the rest of) their prefill
        self.left: dict[int, int] = {}  # prefill tokens still to compute, per queued request
        self.queued_tokens = 0  # prompt tokens waiting for a step
        self.pending_tokens = 0  # prompt tokens not yet computed (queued + in the current step)
        self.waiting: deque = deque()  # (request id, tokens to decode) waiting for a batch slot
        self.running: list = []  # heap of (step at which it finishes, request id)
        self.steps = 0
        self.busy = False
        self.load = 0  # requests assigned here and not yet done with this replica (for routing)
        self.busy_s = 0.0
        self._token = 0  # identifies the scheduled end of the current step (or run of steps)
        self._run: tuple[float, float, int] | None = None  # (start, step seconds, steps)
        self._started = 0.0  # when the current busy stretch's step began

    # -- inputs -----------------------------------------------------------------------------------
    def add_prefill(self, rid: int, tokens: int, cached: int = 0) -> None:
        self.prefill_q.append(rid)
        self.left[rid] = tokens
        self.queued_tokens += tokens
        self.pending_tokens += tokens
        if self.pair:
            self.cached[rid] = cached
            self.done_tokens[rid] = 0
        self._wake()

    def add_decode(self, rid: int, tokens: int, context: int = 0, first: bool = False) -> None:
        """Decode ``tokens`` tokens for ``rid``, whose context is ``context`` tokens on joining;
        ``first``: tell ``on_first`` when its first step ends."""
        self.waiting.append((rid, tokens, context, first))
        self._wake()

    def _wake(self) -> None:
        """New work: start a step if idle; if a run of identical decode steps is under way, end it
        at the next step boundary so the newcomer joins there (as it would step by step)."""
        if not self.busy:
            self._start()
            return
        run = self._run
        if run is None:
            return
        start, step_s, steps = run
        inc = self._inc
        if inc:  # step i lasts step_s + i inc: n steps end at n step_s + inc n (n - 1) / 2
            h = step_s - inc / 2
            done = math.floor(
                (-h + math.sqrt(h * h + 2 * inc * (self.loop.now - start))) / inc + 1e-9
            )
        else:
            done = math.floor((self.loop.now - start) / step_s + 1e-9)
        if done + 1 >= steps:
            return  # the run already ends at the next boundary
        self._token += 1
        self._run = None
        n = done + 1
        end = start + n * step_s
        if inc:
            end += inc * n * (n - 1) / 2
        self.loop.at(end, self._end, (self._token, n, (), 0))

    # -- one step ---------------------------------------------------------------------------------
    def _start(self) -> None:
        running, waiting = self.running, self.waiting
        firsts = self.first_q
        while waiting and len(running) < self.max_batch:
            rid, tokens, context, first = waiting.popleft()
            heapq.heappush(running, (self.steps + tokens, rid))
            if self.ckv:
                self.ctx_of[rid] = context - self.steps
                self.ctx_base += context - self.steps
            if first:
                firsts.append(rid)
        done: list[int] = []
        pre_tokens = 0
        pairs = 0.0  # attention pairs of the prompt tokens in this step (only with a pair cost)
        q = self.prefill_q
        if q:
            if self.role == "colocated" and self.chunk is not None:
                budget = self.chunk
                while q and budget:
                    rid = q[0]
                    take = min(budget, self.left[rid])
                    budget -= take
                    pre_tokens += take
                    if self.pair:
                        before = self.cached[rid] + self.done_tokens[rid]
                        pairs += take * before + take * take / 2
                        self.done_tokens[rid] += take
                    if take == self.left[rid]:
                        q.popleft()
                        del self.left[rid]
                        done.append(rid)
                    else:
                        self.left[rid] -= take
            else:  # a whole prompt, decoding paused (prefill replicas never decode anyway)
                rid = q.popleft()
                pre_tokens = self.left.pop(rid)
                done.append(rid)
                if self.pair:
                    pairs = pre_tokens * self.cached[rid] + pre_tokens * pre_tokens / 2
            self.queued_tokens -= pre_tokens
            if self.pair:
                for rid in done:
                    del self.cached[rid], self.done_tokens[rid]
        decoding = bool(running) and (self.chunk is not None or not done)
        if not done and not pre_tokens and not decoding:
            self.busy = False
            return
        pre_s = pre_tokens * self.tau
        if self.pair:
            pre_s += self.pair * pairs
        if self.p0 and pre_tokens and not decoding:
            pre_s += self.p0  # a pass of prompt tokens alone pays the fixed part once
        dec_s = self.a + self.k * len(running) if decoding else 0.0
        if self.ckv and decoding:
            dec_s += self.ckv * (self.ctx_base + len(running) * self.steps)
        duration = pre_s + dec_s - self.overlap * min(pre_s, dec_s)
        self.busy = True
        self._started = self.loop.now
        self._token += 1
        if (
            self.runs
            and pre_tokens == 0
            and not firsts
            and (not waiting or len(running) >= self.max_batch)
        ):
            # a pure decode step with nobody able to join: the batch stays the same until the next
            # request finishes, so run those steps as one event (each step the same, or, with a
            # KV-read term, longer by the read of one more token per request than the last)
            steps = running[0][0] - self.steps
            self._run = (self.loop.now, duration, steps) if steps > 1 else None
            end = self.loop.now + steps * duration
            self._inc = inc = self.ckv * len(running)
            if inc:
                end += inc * steps * (steps - 1) / 2
            self.loop.at(end, self._end, (self._token, steps, (), 0))
            return
        self._run = None
        self.loop.at(
            self.loop.now + duration, self._end, (self._token, int(decoding), done, pre_tokens)
        )

    def _end(self, arg) -> None:
        token, steps, done, pre_tokens = arg
        if token != self._token:
            return  # a run of decode steps cut short by new work (see _wake)
        self._run = None
        self.busy_s += self.loop.now - self._started
        self.pending_tokens -= pre_tokens
        # on_finished / on_prefilled are None only on replicas that never decode / never prefill.
        # An explicit None check would change the code, which kvlab.explorer_p22.cache_key()
        # fingerprints: it waits for the next grid recompute.
        if steps:
            self.steps += steps
            if self.first_q:
                for rid in self.first_q:
                    self.on_first(self, rid)  # type: ignore[misc]
                self.first_q = []
            running = self.running
            while running and running[0][0] <= self.steps:
                _, rid = heapq.heappop(running)
                if self.ckv:
                    self.ctx_base -= self.ctx_of.pop(rid)
                self.on_finished(self, rid)  # type: ignore[misc]
        for rid in done:
            self.on_prefilled(self, rid)  # type: ignore[misc]
        self._start()


# --- results -------------------------------------------------------------------------------------


@dataclass
class SimResult(RequestTimes):
    """Per-request times (arrays indexed by request) and a few system-level figures."""

    label: str
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    transfer_s: np.ndarray
    mean_in_system: float  # time-average of requests in the system up to the last arrival,
    #                       counted by the event loop as requests come and go
    end_s: float  # time the last request finished
    replica_busy_s: np.ndarray  # per replica
    window_s: tuple[float, float] | None = None  # steady-state window (see :func:`steady_run`)

    def _window(self, warmup: float) -> np.ndarray:
        """The counted requests: those arriving inside ``window_s`` when it is set (``warmup`` is
        then ignored), else all but the first ``warmup`` share."""
        fraction("warmup", warmup)
        if self.window_s is not None:
            t0, t1 = self.window_s
            return (self.arrival_s >= t0) & (self.arrival_s < t1)
        n = len(self.arrival_s)
        return np.arange(n) >= int(n * warmup)

    def percentile(self, metric: str, q: float, warmup: float = 0.1) -> float:
        """``q``-th percentile of 'ttft', 'tpot' or 'latency' (seconds), after ``warmup``."""
        check_choice("metric", metric, ("ttft", "tpot", "latency"))
        check_number("q", q, lo=0, hi=100)
        values = getattr(self, f"{metric}_s")[self._window(warmup)]
        return float(np.percentile(values, q))

    def attainment(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> float:
        """Share of requests meeting both targets."""
        positive("ttft_slo_s", ttft_slo_s)
        positive("tpot_slo_s", tpot_slo_s)
        w = self._window(warmup)
        ok = (self.ttft_s <= ttft_slo_s) & (self.tpot_s <= tpot_slo_s)
        return float(ok[w].mean())

    def goodput_rps(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> float:
        """Requests per second that meet both targets (over the counted arrivals' time span)."""
        w = self._window(warmup)
        if self.window_s is not None:
            span = self.window_s[1] - self.window_s[0]
        else:
            arr = self.arrival_s[w]
            span = arr[-1] - arr[0] if len(arr) > 1 else 1.0
        ok = (self.ttft_s <= ttft_slo_s) & (self.tpot_s <= tpot_slo_s)
        return float(ok[w].sum() / span)

    def summary(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> dict:
        out: dict[str, str | float] = {"system": self.label}
        for m in ("ttft", "tpot"):
            for q in (50, 95, 99):
                out[f"{m}_p{q}_s"] = self.percentile(m, q, warmup)
        out["attainment"] = self.attainment(ttft_slo_s, tpot_slo_s, warmup)
        out["goodput_rps"] = self.goodput_rps(ttft_slo_s, tpot_slo_s, warmup)
        return out


# --- the simulation ----------------------------------------------------------------------------


class Simulation:
    """Route requests to replicas, move them between phases, record their times."""

    def __init__(
        self, system: Colocated | Disaggregated, traffic: Traffic, cost: CostModel | str = BOOK
    ):
        if not isinstance(system, (Colocated, Disaggregated)):
            raise ValueError(f"system must be a Colocated or Disaggregated, got {system!r}")
        if not isinstance(traffic, Traffic):
            raise ValueError(f"traffic must be a Traffic, got {traffic!r}")
        self.system, self.traffic, self.cost = system, traffic, cost
        if isinstance(system, Colocated):
            cost_p = cost_d = at_tp(cost, system.tp)
        else:
            cost_p, cost_d = at_tp(cost, system.p_tp), at_tp(cost, system.d_tp)
        self.cost_p, self.cost_d = cost_p, cost_d
        s = traffic.sample()
        self.arrival, self.prompt, self.uncached, self.output = (
            s["arrival_s"],
            s["prompt"],
            s["uncached"],
            s["output"],
        )
        n = traffic.requests
        if isinstance(system, Disaggregated):
            self.xfer = system.transfer_seconds(
                self.prompt, prefill_seconds(cost_p, self.uncached, self.prompt - self.uncached)
            )
        else:
            self.xfer = np.zeros(n)
        self.loop = EventLoop()
        self._in_system = 0
        self._area = 0.0
        self._last = 0.0
        self._window = (0.0, 0.0)
        self._out = self.output.tolist()
        self._unc = self.uncached.tolist()
        self._cached = (self.prompt - self.uncached).tolist()
        self._prompt = self.prompt.tolist()
        self._xf = self.xfer.tolist()
        self._arr = self.arrival.tolist()
        self._first = [math.nan] * n
        self._finish = [math.nan] * n
        loop = self.loop
        if isinstance(system, Colocated):
            self.front = [
                Replica(
                    loop,
                    "colocated",
                    cost_p,
                    system.max_batch,
                    system.chunk_tokens,
                    system.overlap,
                    self._prefilled_colocated,
                    self._finished,
                )
                for _ in range(system.replicas)
            ]
            self.back = self.front
        else:
            self.front = [
                Replica(loop, "prefill", cost_p, 1, None, 0.0, self._prefilled_disagg, None)
                for _ in range(system.prefill)
            ]
            self.back = [
                Replica(
                    loop,
                    "decode",
                    cost_d,
                    system.max_batch,
                    None,
                    0.0,
                    None,
                    self._finished,
                    self._first_from_decode,
                )
                for _ in range(system.decode)
            ]

    # -- bookkeeping --------------------------------------------------------------------------
    def _count(self, delta: int) -> None:
        now = self.loop.now
        self._area += self._in_system * (now - self._last)
        self._last = now
        self._in_system += delta

    def _arrive(self, rid: int) -> None:
        self._count(+1)
        if rid + 1 < len(self._arr):
            self.loop.at(self._arr[rid + 1], self._arrive, rid + 1)
        else:  # Little's law window: time zero to the last arrival
            self._window = (self._area, self.loop.now)
        if isinstance(self.system, Colocated):
            r = min(self.front, key=_load)
        else:
            r = min(self.front, key=_queued)
        r.load += 1
        r.add_prefill(rid, self._unc[rid], self._cached[rid])

    def _first_token(self, replica: Replica, rid: int) -> None:
        self._first[rid] = self.loop.now
        tokens = self._out[rid] - 1
        if tokens > 0:
            replica.add_decode(rid, tokens, self._prompt[rid] + 1)
        else:
            self._finished(replica, rid)

    def _first_from_decode(self, replica: Replica, rid: int) -> None:
        self._first[rid] = self.loop.now  # (a one-token request then finishes in the same step)

    def _prefilled_colocated(self, replica: Replica, rid: int) -> None:
        self._first_token(replica, rid)

    def _prefilled_disagg(self, replica: Replica, rid: int) -> None:
        replica.load -= 1
        target = min(self.back, key=_load)
        target.load += 1
        self.loop.at(self.loop.now + self._xf[rid], self._landed, (target, rid))

    def _landed(self, arg) -> None:
        target, rid = arg
        if self.system.first_step:  # type: ignore[union-attr]
            # the decode side recomputes the last prompt token: all O tokens come from its steps
            target.add_decode(rid, self._out[rid], self._prompt[rid], first=True)
        else:
            self._first_token(target, rid)

    def _finished(self, replica: Replica, rid: int) -> None:
        replica.load -= 1
        self._finish[rid] = self.loop.now
        self._count(-1)

    # -- run --------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        self.loop.at(self._arr[0], self._arrive, 0)
        self.loop.run()
        area, until = self._window
        first, finish = np.array(self._first), np.array(self._finish)
        end = float(np.nanmax(finish))
        replicas = self.front if self.front is self.back else self.front + self.back
        return SimResult(
            label=self.system.label,
            arrival_s=self.arrival,
            first_token_s=first,
            finish_s=finish,
            prompt_tokens=self.prompt,
            output_tokens=self.output,
            transfer_s=self.xfer,
            mean_in_system=area / until if until > 0 else 0.0,
            end_s=end,
            replica_busy_s=np.array([r.busy_s for r in replicas]),
        )


def _load(r: Replica) -> int:
    return r.load


def _queued(r: Replica) -> int:
    return r.pending_tokens


def simulate(
    system: Colocated | Disaggregated, traffic: Traffic, cost: CostModel | str = BOOK
) -> SimResult:
    """Run one simulation and return per-request times."""
    return Simulation(system, traffic, cost).run()


def splits(total: int) -> list[tuple[int, int]]:
    """Every (prefill, decode) split of ``total`` replicas with at least one of each."""
    total = check_int("total", total, lo=2)
    return [(p, total - p) for p in range(1, total)]


# --- steady state ---------------------------------------------------------------------------------
#
# A trial starts from an empty system. Until the decode batches have filled, requests see shorter
# queues and smaller batches than they will later, so a short run flatters every system, and the
# more so the longer its requests live. A steady-state trial therefore warms up for a few request
# lifetimes, counts only the requests that arrive in the window after that, and keeps the arrivals
# coming for one more lifetime so that the last counted requests still share their replicas with
# later ones. The window's length, in lifetimes, was chosen in ``p22-04`` from the attainment
# against window length: by WINDOW_LIFETIMES the mean over seeds has settled.

#: Warm-up before the counted window, in request lifetimes (:func:`lifetime_s`).
WARMUP_LIFETIMES = 2.0
#: Length of the counted window, in request lifetimes.
WINDOW_LIFETIMES = 10.0


def lifetime_s(traffic: Traffic, ttft_slo_s: float, tpot_slo_s: float) -> float:
    """Seconds a long request lives when it just meets both targets: TTFT plus (output - 1) x TPOT,
    with the output length at its 99th percentile for lognormal outputs."""
    positive("ttft_slo_s", ttft_slo_s)
    positive("tpot_slo_s", tpot_slo_s)
    out = traffic.output_tokens
    if traffic.output_dist == "lognormal":
        mu = math.log(out) - traffic.sigma**2 / 2
        out = math.exp(mu + 2.326 * traffic.sigma)
    return ttft_slo_s + max(out - 1, 0) * tpot_slo_s


@dataclass(frozen=True)
class Window:
    """A steady-state trial: arrivals over ``warmup_s + measure_s + tail_s`` seconds, requests
    counted when they arrive in ``[warmup_s, warmup_s + measure_s)``."""

    warmup_s: float
    measure_s: float
    tail_s: float

    def __post_init__(self):
        non_negative("warmup_s", self.warmup_s)
        positive("measure_s", self.measure_s)
        non_negative("tail_s", self.tail_s)

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.measure_s + self.tail_s


def window_for(
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    warmup_lifetimes: float = WARMUP_LIFETIMES,
    window_lifetimes: float = WINDOW_LIFETIMES,
) -> Window:
    """The book's steady-state window for ``traffic``: warm-up and counted window in lifetimes,
    then one lifetime of arrivals that are not counted."""
    life = lifetime_s(traffic, ttft_slo_s, tpot_slo_s)
    non_negative("warmup_lifetimes", warmup_lifetimes)
    positive("window_lifetimes", window_lifetimes)
    return Window(warmup_lifetimes * life, window_lifetimes * life, life)


def steady_run(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    window: Window,
    cost: CostModel | str = BOOK,
) -> SimResult:
    """Simulate ``traffic`` at its rate for ``window.total_s`` seconds of arrivals (its
    ``requests`` is ignored) and count only the requests arriving inside the window."""
    if not isinstance(window, Window):
        raise ValueError(f"window must be a Window, got {window!r}")
    mean = traffic.rate_rps * window.total_s
    n = max(2, math.ceil(mean + 6 * math.sqrt(mean) + 10))
    t = Traffic(**{**traffic.__dict__, "requests": n})
    result = simulate(system, t, cost)
    result.window_s = (window.warmup_s, window.warmup_s + window.measure_s)
    return result


def attainment(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    window: Window | None = None,
    cost: CostModel | str = BOOK,
) -> float:
    """Steady-state share of requests meeting both targets at ``traffic.rate_rps`` (one seed)."""
    window = window or window_for(traffic, ttft_slo_s, tpot_slo_s)
    return steady_run(system, traffic, window, cost).attainment(ttft_slo_s, tpot_slo_s)


# --- capacity bounds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityBound:
    """The most requests per second that can meet the targets, from the cost model alone.

    ``prefill_rps``: prefill work, replicas x prefill tokens/s over uncached tokens per request.
    ``decode_rps``: Little's law on the decode batches: a request meeting TPOT ``t`` sees steps of
    at most ``t`` on average, which caps the batch at ``b* = (t - a) / k``, so a replica serves at
    most ``b* / ((output - 1) t)`` such requests per second. For colocated replicas the two share
    each replica's time (costs add when ``overlap`` is 0, the longer one counts when it is 1).
    ``rps`` is the binding bound. These hold for requests that meet the targets, so a rate at
    which a share ``target`` of requests meets them is at most ``rps / target``; with mean lengths
    for lognormal traffic they are a guide, not a proof.
    """

    prefill_rps: float
    decode_rps: float
    rps: float


def capacity_bound(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    tpot_slo_s: float,
    cost: CostModel | str = BOOK,
) -> CapacityBound:
    """Upper bound on the rate of requests meeting the TPOT target (and any TTFT target)."""
    positive("tpot_slo_s", tpot_slo_s)
    if isinstance(system, Colocated):
        cost_p = cost_d = at_tp(cost, system.tp)
    else:
        cost_p, cost_d = at_tp(cost, system.p_tp), at_tp(cost, system.d_tp)
    a, k = cost_d.decode_base_s, cost_d.decode_per_request_s
    if cost_d.decode_per_context_token_s:  # the KV read at the mean context of a decoding request
        k = k + cost_d.decode_per_context_token_s * (
            traffic.prompt_tokens + traffic.output_tokens / 2
        )
    if tpot_slo_s <= a:
        raise ValueError(
            f"tpot_slo_s must exceed the decode step's fixed part {a} s, got {tpot_slo_s}"
        )
    uncached = max(1.0, math.ceil(traffic.prompt_tokens * (1 - traffic.hit_rate) - 1e-9))
    steps = max(traffic.output_tokens - 1, 0)
    # replica-seconds of prefill per request (a colocated chunk rides in a step: no fixed part)
    pre_s = float(prefill_seconds(cost_p, uncached, traffic.prompt_tokens - uncached))
    if isinstance(system, Colocated):
        pre_s -= cost_p.prefill_fixed_s
    # replica-seconds of decode per request meeting TPOT: (O - 1) steps of batch <= b*, so at
    # least (O - 1) x k x t / (t - a) (the fixed part a shared by at most b* requests)
    batch = min((tpot_slo_s - a) / k, system.max_batch)
    dec_s = steps * (a + k * batch) / batch
    if isinstance(system, Disaggregated):
        p = system.prefill / pre_s
        d = math.inf if dec_s == 0 else system.decode / dec_s
        return CapacityBound(p, d, min(p, d))
    n, w = system.replicas, system.overlap
    p = n / pre_s
    d = math.inf if dec_s == 0 else n / dec_s
    both = n / ((1 - w) * (pre_s + dec_s) + w * max(pre_s, dec_s))
    return CapacityBound(p, d, min(p, d, both))


# --- goodput -----------------------------------------------------------------------------------------


def _with_rate(traffic: Traffic, rate: float, seed: int | None = None) -> Traffic:
    fields_ = {**traffic.__dict__, "rate_rps": rate}
    if seed is not None:
        fields_["seed"] = seed
    return Traffic(**fields_)


def max_rate(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    target: float = 0.9,
    guess_rps: float | None = None,
    rtol: float = 0.02,
    window: Window | None = None,
    cost: CostModel | str = BOOK,
) -> float:
    """DistServe's goodput for one seed (``traffic.seed``): the highest arrival rate whose
    steady-state SLO attainment stays >= ``target``, to a relative tolerance ``rtol``.

    The search starts at ``guess_rps`` (default: 80 % of the capacity bound), steps up or down
    until the target is crossed, then bisects. It never goes above the capacity bound over
    ``target``, which no rate can beat with fixed lengths (:class:`CapacityBound`; twice that
    with lognormal lengths); returns 0 when even a hundredth of the bound misses.
    """
    check_number("target", target, lo=0, hi=1, lo_open=True)
    check_number("rtol", rtol, lo=1e-4, hi=0.5)
    cap = capacity_bound(system, traffic, tpot_slo_s, cost).rps / target
    if traffic.prompt_dist != "fixed" or traffic.output_dist != "fixed":
        cap *= 2  # the bound uses mean lengths: only a guide for varied lengths
    window = window or window_for(traffic, ttft_slo_s, tpot_slo_s)
    if guess_rps is not None:
        positive("guess_rps", guess_rps)
    guess = min(guess_rps or 0.8 * cap, cap)

    def ok(rate: float) -> bool:
        t = _with_rate(traffic, rate)
        return steady_run(system, t, window, cost).attainment(ttft_slo_s, tpot_slo_s) >= target

    step = 1.0 + 2 * rtol if guess_rps is not None else 1.25
    lo: float | None  # the highest rate known to pass, once found
    hi: float | None  # the lowest rate known to fail, once found
    if ok(guess):
        lo, hi = guess, None
        while hi is None:
            nxt = min(lo * step, cap)
            if nxt <= lo * (1 + rtol / 2):
                return lo  # at the bound
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        lo, hi = None, guess
        while lo is None:
            nxt = hi / step
            if nxt < cap / 100:
                return 0.0
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def attainment_by_window(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    lifetimes=(1, 2, 5, 10, 20),
    warmup_lifetimes: float = WARMUP_LIFETIMES,
    cost: CostModel | str = BOOK,
) -> dict[float, float]:
    """Attainment over counted windows of each length in ``lifetimes`` (request lifetimes), all
    starting after the same warm-up, from one run as long as the longest: how long a window has
    to be for the figure to settle."""
    lifetimes = sorted(float(positive("lifetimes", x)) for x in lifetimes)
    life = lifetime_s(traffic, ttft_slo_s, tpot_slo_s)
    window = Window(warmup_lifetimes * life, lifetimes[-1] * life, life)
    r = steady_run(system, traffic, window, cost)
    ok = (r.ttft_s <= ttft_slo_s) & (r.tpot_s <= tpot_slo_s)
    out = {}
    for n in lifetimes:
        w = (r.arrival_s >= window.warmup_s) & (r.arrival_s < window.warmup_s + n * life)
        out[n] = float(ok[w].mean()) if w.any() else math.nan
    return out


def _seed_rate(args) -> float:
    system, traffic, ttft, tpot, target, guess, rtol, window, cost = args
    return max_rate(system, traffic, ttft, tpot, target, guess, rtol, window, cost)


def _map(fn, items: list, processes: int) -> list:
    if processes <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(min(processes, len(items))) as pool:
        return pool.map(fn, items, chunksize=1)


def goodput_table(
    systems,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    target: float = 0.9,
    seeds=None,
    rtol: float = 0.02,
    window: Window | None = None,
    processes: int = 1,
    cost: CostModel | str = BOOK,
):
    """Steady-state goodput of each system over ``seeds`` (default
    :data:`kvlab.seeds.DEFAULT_SEEDS`), one row per system.

    Columns: ``system``, ``prefill`` and ``decode`` (0 for colocated), ``replicas``,
    ``prefill_gpus``, ``decode_gpus`` (P : D in GPUs; 0 for colocated) and ``gpus``,
    ``goodput`` (a :class:`kvlab.seeds.Spread` of the per-seed rates, requests/s), its
    ``goodput_rps`` mean, ``std``, ``lo`` and ``hi``, and ``capacity_rps`` (the capacity bound).
    The first seed's search starts from the capacity bound; the other seeds start from its
    result, which saves most of their trials. ``processes`` > 1 spreads the trials over that
    many worker processes.
    """
    import pandas as pd

    from . import seeds as seeds_mod

    systems = list(systems)
    seed_list = list(seeds_mod.DEFAULT_SEEDS if seeds is None else seeds)
    if not seed_list:
        raise ValueError("seeds must hold at least one seed, got none")
    processes = check_int("processes", processes, lo=1)
    windows = [window or window_for(traffic, ttft_slo_s, tpot_slo_s) for _ in systems]
    first = _map(
        _seed_rate,
        [
            (
                s,
                _with_rate(traffic, traffic.rate_rps, seed_list[0]),
                ttft_slo_s,
                tpot_slo_s,
                target,
                None,
                rtol,
                w,
                cost,
            )
            for s, w in zip(systems, windows, strict=True)
        ],
        processes,
    )
    rest_args = [
        (
            s,
            _with_rate(traffic, traffic.rate_rps, seed),
            ttft_slo_s,
            tpot_slo_s,
            target,
            g if g > 0 else None,
            rtol,
            w,
            cost,
        )
        for s, w, g in zip(systems, windows, first, strict=True)
        for seed in seed_list[1:]
    ]
    rest = _map(_seed_rate, rest_args, processes)
    per = len(seed_list) - 1
    rows = []
    for i, system in enumerate(systems):
        values = [first[i], *rest[i * per : (i + 1) * per]]
        spread = seeds_mod.summarise(values, seed_list)
        p, d = (system.prefill, system.decode) if isinstance(system, Disaggregated) else (0, 0)
        gp, gd = system.gpu_split if isinstance(system, Disaggregated) else (0, 0)
        rows.append(
            {
                "system": system.label,
                "prefill": p,
                "decode": d,
                "replicas": system.total,
                "prefill_gpus": gp,
                "decode_gpus": gd,
                "gpus": system.gpus,
                "goodput": spread,
                "goodput_rps": spread.mean,
                "std": spread.std,
                "lo": spread.lo,
                "hi": spread.hi,
                "capacity_rps": capacity_bound(system, traffic, tpot_slo_s, cost).rps,
            }
        )
    return pd.DataFrame(rows)


def system_for(split: int | tuple[int, int], **options) -> Colocated | Disaggregated:
    """``n`` -> ``Colocated(n)``; ``(p, d)`` -> ``Disaggregated(p, d)`` (``options`` passed on)."""
    if isinstance(split, tuple):
        if len(split) != 2:
            raise ValueError(f"split must be an int or a (prefill, decode) pair, got {split!r}")
        return Disaggregated(split[0], split[1], **options)
    return Colocated(check_int("split", split, lo=1), **options)


@dataclass(frozen=True)
class Point:
    """One steady-state trial: attainment (share) and goodput (requests/s meeting both targets)."""

    attainment: float
    goodput_rps: float
    capacity_rps: float


def point(
    rate_rps: float,
    prompt_tokens: float,
    output_tokens: float,
    hit_rate: float,
    split: int | tuple[int, int],
    seed: int = 0,
    ttft_slo_s: float = 1.0,
    tpot_slo_s: float = 0.040,
    window_lifetimes: float = WINDOW_LIFETIMES,
    cost: CostModel | str = BOOK,
) -> Point:
    """One steady-state trial of the book's systems, for grids of runs: ``split`` is ``n``
    colocated replicas (chunked prefill) or a ``(prefill, decode)`` pair. Fixed lengths."""
    traffic = Traffic(
        rate_rps=rate_rps,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        hit_rate=hit_rate,
        seed=seed,
    )
    system = system_for(split)
    window = window_for(traffic, ttft_slo_s, tpot_slo_s, window_lifetimes=window_lifetimes)
    r = steady_run(system, traffic, window, cost)
    return Point(
        r.attainment(ttft_slo_s, tpot_slo_s),
        r.goodput_rps(ttft_slo_s, tpot_slo_s),
        capacity_bound(system, traffic, tpot_slo_s, cost).rps,
    )


__all__ = [
    "WARMUP_LIFETIMES",
    "WINDOW_LIFETIMES",
    "CapacityBound",
    "Colocated",
    "Disaggregated",
    "EventLoop",
    "Point",
    "Replica",
    "SimResult",
    "Simulation",
    "Traffic",
    "Window",
    "attainment",
    "attainment_by_window",
    "at_tp",
    "bench",
    "capacity_bound",
    "goodput_table",
    "lifetime_s",
    "max_rate",
    "point",
    "prefill_seconds",
    "simulate",
    "splits",
    "steady_run",
    "system_for",
    "window_for",
]


def bench(requests: int = 100_000, seed: int = 0) -> dict[str, float]:
    """Wall-clock seconds to simulate ``requests`` requests on 8 replicas, colocated (chunked, 14
    requests/s) and disaggregated 5 : 3 (15 requests/s), lognormal lengths. For ``make bench``."""
    import time

    requests = check_int("requests", requests, lo=1)
    out: dict[str, float] = {"requests": float(requests)}
    for name, system, rate in (
        ("colocated", Colocated(8), 14.0),
        ("disaggregated", Disaggregated(5, 3), 15.0),
    ):
        traffic = Traffic(
            rate_rps=rate,
            requests=requests,
            prompt_dist="lognormal",
            output_dist="lognormal",
            seed=seed,
        )
        start = time.perf_counter()
        simulate(system, traffic)
        seconds = time.perf_counter() - start
        out[f"{name}_s"] = seconds
        out[f"{name}_requests_per_s"] = requests / seconds
    return out
