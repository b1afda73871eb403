"""Colocated vs disaggregated serving, simulated event by event on the book's cost model.

One replica is one 8-GPU server. Its costs (:data:`kvlab.assumptions.COST`): prefill takes
``prefill_s_per_token`` per uncached prompt token; a decode step takes ``decode_base_s`` plus
``decode_per_request_s`` per running request, and gives every running request one token
(continuous batching, up to ``max_batch`` requests; the rest wait for a slot).

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
it is counted when the KV has landed on the decode replica (the conservative convention). TPOT is
(last token - first token) / (output tokens - 1). Goodput, after DistServe, counts requests that
meet both a TTFT and a TPOT target.

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
from .assumptions import COST, CostModel
from .latency import RequestTimes
from .models import LLAMA_70B, ModelShape

DISTRIBUTIONS = ("fixed", "lognormal")


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

    def __post_init__(self):
        check_int("replicas", self.replicas, lo=1)
        if self.chunk_tokens is not None:
            check_int("chunk_tokens", self.chunk_tokens, lo=1)
        check_int("max_batch", self.max_batch, lo=1)
        fraction("overlap", self.overlap)

    @property
    def total(self) -> int:
        return self.replicas

    @property
    def label(self) -> str:
        return f"colocated x{self.replicas}" + (
            f" (chunk {self.chunk_tokens})" if self.chunk_tokens else " (no chunking)"
        )


@dataclass(frozen=True)
class Disaggregated:
    """``prefill`` prefill-only and ``decode`` decode-only replicas, KV shipped in between."""

    prefill: int = 6
    decode: int = 3
    max_batch: int = 256
    link: str = "nic_per_gpu"
    layerwise: bool = False
    setup_s: float = 0.0
    precision: str = "fp16"
    tp: int = 8
    model: ModelShape = field(default=LLAMA_70B)

    def __post_init__(self):
        check_int("prefill", self.prefill, lo=1)
        check_int("decode", self.decode, lo=1)
        check_int("max_batch", self.max_batch, lo=1)
        check_choice("link", self.link, disagg.LINKS)
        non_negative("setup_s", self.setup_s)
        disagg.bytes_per_value(self.precision)
        check_int("tp", self.tp, lo=1)

    @property
    def total(self) -> int:
        return self.prefill + self.decode

    @property
    def label(self) -> str:
        return f"disaggregated {self.prefill}:{self.decode}"

    def transfer_seconds(self, prompt: np.ndarray, prefill_s: np.ndarray) -> np.ndarray:
        """Per-request KV transfer time (exposed part only when ``layerwise``)."""
        one = disagg.kv_transfer(self.model, 1, self.precision, self.tp, self.link)
        full = self.setup_s + prompt * one.seconds  # linear in tokens (no set-up in ``one``)
        if not self.layerwise:
            return full
        exposed = disagg.evaluate_array(
            "exposed_transfer",
            t_pre=np.asarray(prefill_s, float),
            t_x=full - self.setup_s,
            L=self.model.layers,
            t_m=0.0,
        )
        return self.setup_s + np.asarray(exposed, float)


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
    O(1 + finishing requests), not O(batch).
    """

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
    ):
        self.loop, self.role, self.max_batch = loop, role, max_batch
        self.chunk = chunk_tokens
        self.overlap = overlap
        self.tau, self.a, self.k = (
            cost.prefill_s_per_token,
            cost.decode_base_s,
            cost.decode_per_request_s,
        )
        self.on_prefilled, self.on_finished = on_prefilled, on_finished
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

    # -- inputs -----------------------------------------------------------------------------------
    def add_prefill(self, rid: int, tokens: int) -> None:
        self.prefill_q.append(rid)
        self.left[rid] = tokens
        self.queued_tokens += tokens
        self.pending_tokens += tokens
        if not self.busy:
            self._start()

    def add_decode(self, rid: int, tokens: int) -> None:
        self.waiting.append((rid, tokens))
        if not self.busy:
            self._start()

    # -- one step ---------------------------------------------------------------------------------
    def _start(self) -> None:
        running, waiting = self.running, self.waiting
        while waiting and len(running) < self.max_batch:
            rid, tokens = waiting.popleft()
            heapq.heappush(running, (self.steps + tokens, rid))
        done: list[int] = []
        pre_tokens = 0
        q = self.prefill_q
        if q:
            if self.role == "colocated" and self.chunk is not None:
                budget = self.chunk
                while q and budget:
                    rid = q[0]
                    take = min(budget, self.left[rid])
                    budget -= take
                    pre_tokens += take
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
            self.queued_tokens -= pre_tokens
        decoding = bool(running) and (self.chunk is not None or not done)
        if not done and not pre_tokens and not decoding:
            self.busy = False
            return
        pre_s = pre_tokens * self.tau
        dec_s = self.a + self.k * len(running) if decoding else 0.0
        duration = pre_s + dec_s - self.overlap * min(pre_s, dec_s)
        self.busy = True
        self.busy_s += duration
        self.loop.at(self.loop.now + duration, self._end, (decoding, done, pre_tokens))

    def _end(self, arg) -> None:
        decoding, done, pre_tokens = arg
        self.pending_tokens -= pre_tokens
        if decoding:
            self.steps += 1
            running = self.running
            while running and running[0][0] <= self.steps:
                _, rid = heapq.heappop(running)
                self.on_finished(self, rid)
        for rid in done:
            self.on_prefilled(self, rid)
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

    def _window(self, warmup: float) -> np.ndarray:
        fraction("warmup", warmup)
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
        arr = self.arrival_s[w]
        span = arr[-1] - arr[0] if len(arr) > 1 else 1.0
        ok = (self.ttft_s <= ttft_slo_s) & (self.tpot_s <= tpot_slo_s)
        return float(ok[w].sum() / span)

    def summary(self, ttft_slo_s: float, tpot_slo_s: float, warmup: float = 0.1) -> dict:
        out = {"system": self.label}
        for m in ("ttft", "tpot"):
            for q in (50, 95, 99):
                out[f"{m}_p{q}_s"] = self.percentile(m, q, warmup)
        out["attainment"] = self.attainment(ttft_slo_s, tpot_slo_s, warmup)
        out["goodput_rps"] = self.goodput_rps(ttft_slo_s, tpot_slo_s, warmup)
        return out


# --- the simulation ----------------------------------------------------------------------------


class Simulation:
    """Route requests to replicas, move them between phases, record their times."""

    def __init__(self, system: Colocated | Disaggregated, traffic: Traffic, cost: CostModel = COST):
        if not isinstance(system, (Colocated, Disaggregated)):
            raise ValueError(f"system must be a Colocated or Disaggregated, got {system!r}")
        if not isinstance(traffic, Traffic):
            raise ValueError(f"traffic must be a Traffic, got {traffic!r}")
        self.system, self.traffic, self.cost = system, traffic, cost
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
                self.prompt, self.uncached * cost.prefill_s_per_token
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
                    cost,
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
                Replica(loop, "prefill", cost, 1, None, 0.0, self._prefilled_disagg, None)
                for _ in range(system.prefill)
            ]
            self.back = [
                Replica(loop, "decode", cost, system.max_batch, None, 0.0, None, self._finished)
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
        r.add_prefill(rid, self._unc[rid])

    def _first_token(self, replica: Replica, rid: int) -> None:
        self._first[rid] = self.loop.now
        tokens = self._out[rid] - 1
        if tokens > 0:
            replica.add_decode(rid, tokens)
        else:
            self._finished(replica, rid)

    def _prefilled_colocated(self, replica: Replica, rid: int) -> None:
        self._first_token(replica, rid)

    def _prefilled_disagg(self, replica: Replica, rid: int) -> None:
        replica.load -= 1
        target = min(self.back, key=_load)
        target.load += 1
        self.loop.at(self.loop.now + self._xf[rid], self._landed, (target, rid))

    def _landed(self, arg) -> None:
        target, rid = arg
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
    system: Colocated | Disaggregated, traffic: Traffic, cost: CostModel = COST
) -> SimResult:
    """Run one simulation and return per-request times."""
    return Simulation(system, traffic, cost).run()


def splits(total: int) -> list[tuple[int, int]]:
    """Every (prefill, decode) split of ``total`` replicas with at least one of each."""
    total = check_int("total", total, lo=2)
    return [(p, total - p) for p in range(1, total)]


def max_rate(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    target: float = 0.9,
    lo_rps: float = 0.5,
    hi_rps: float = 100.0,
    iters: int = 8,
    cost: CostModel = COST,
    duration_s: float | None = None,
) -> float:
    """DistServe's goodput: the highest arrival rate whose SLO attainment stays >= ``target``
    (bisection on the rate, same seed each time). Returns 0 if even ``lo_rps`` misses it.

    Each trial simulates ``traffic.requests`` requests, or, with ``duration_s``, as many as arrive
    in that many seconds at the trial's rate (so fast trials are not cut short before queues form).
    """
    check_number("target", target, lo=0, hi=1, lo_open=True)
    positive("lo_rps", lo_rps)
    check_number("hi_rps", hi_rps, lo=lo_rps, lo_open=True)
    check_int("iters", iters, lo=1)
    if duration_s is not None:
        positive("duration_s", duration_s)

    def ok(rate):
        n = traffic.requests if duration_s is None else max(50, math.ceil(rate * duration_s))
        t = Traffic(**{**traffic.__dict__, "rate_rps": rate, "requests": n})
        return simulate(system, t, cost).attainment(ttft_slo_s, tpot_slo_s) >= target

    if not ok(lo_rps):
        return 0.0
    if ok(hi_rps):
        return hi_rps
    lo, hi = lo_rps, hi_rps
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


__all__ = [
    "Colocated",
    "Disaggregated",
    "EventLoop",
    "Replica",
    "SimResult",
    "Simulation",
    "Traffic",
    "bench",
    "goodput_table",
    "max_rate",
    "simulate",
    "splits",
]


def goodput_table(
    systems,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    target: float = 0.9,
    lo_rps: float = 0.5,
    hi_rps: float = 60.0,
    iters: int = 6,
    progress: Callable | None = None,
    cost: CostModel = COST,
    duration_s: float | None = None,
):
    """One row per system: its label, P and D (0 for colocated) and :func:`max_rate`.

    ``progress`` wraps the iterable (pass ``tqdm`` for a progress bar). Returns a pandas DataFrame.
    """
    import pandas as pd

    systems = list(systems)
    rows = []
    for system in progress(systems) if progress else systems:
        rate = max_rate(
            system, traffic, ttft_slo_s, tpot_slo_s, target, lo_rps, hi_rps, iters, cost, duration_s
        )
        p, d = (system.prefill, system.decode) if isinstance(system, Disaggregated) else (0, 0)
        rows.append(
            {
                "system": system.label,
                "prefill": p,
                "decode": d,
                "replicas": system.total,
                "max_rate_rps": rate,
            }
        )
    return pd.DataFrame(rows)


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
