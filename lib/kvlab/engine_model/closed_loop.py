"""A closed-loop concurrency benchmark against one :class:`Engine` (:func:`closed_loop`).

``clients`` clients each send a request of ``isl`` prompt tokens asking for exactly ``osl`` output
tokens (``ignore_eos``), wait for its last token and send the next at once: the load that
benchmark tools run in their concurrency mode (vLLM's ``vllm bench serve --max-concurrency``,
NVIDIA's AIPerf/GenAI-Perf ``--concurrency``). Prompts share nothing (random tokens).

Two knobs the engine's rules do not decide, stated wherever a result is shown:

* ``start``: ``"together"`` sends every client's first request at time 0, as those tools start;
  ``"staggered"`` (the default) spreads the first requests evenly over one request's expected
  duration, the state a long benchmark settles in once small timing differences have spread the
  clients (identical requests sent together stay in lockstep in a simulator, not on a server);
* ``frontend_s``: time a request spends outside the engine before its first token reaches the
  client (HTTP, chat template, tokenisation, the first token's way back), added to its TTFT.

Per request, as those tools define them: TTFT = first token's arrival - sending time (queueing for
a slot in the engine included); TPOT = (last token - first token) / (osl - 1).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from .._validate import check_choice, check_int, check_number
from .engine import Engine, EngineConfig, Request
from .step_costs import StepCosts


@dataclass(frozen=True)
class LoopResult:
    """Means over the counted requests (all but the first ``warmup`` per client), in ms."""

    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    output_tok_s: float
    requests: int
    preemptions: int
    ttft_all_ms: np.ndarray
    tpot_all_ms: np.ndarray


def closed_loop(
    costs: StepCosts,
    config: EngineConfig,
    *,
    clients: int,
    isl: int,
    osl: int,
    requests_per_client: int = 4,
    warmup: int = 1,
    start: str = "staggered",
    frontend_s: float = 0.0,
) -> LoopResult:
    """Run ``clients`` closed-loop clients, ``requests_per_client`` requests each, and return the
    means over every client's requests after its first ``warmup``."""
    check_int("clients", clients, lo=1)
    check_int("isl", isl, lo=1)
    check_int("osl", osl, lo=2)
    check_int("requests_per_client", requests_per_client, lo=1)
    check_int("warmup", warmup, lo=0, hi=requests_per_client - 1)
    check_choice("start", start, ("together", "staggered"))
    check_number("frontend_s", frontend_s, lo=0)
    eng = Engine(costs, config)
    pending: list[tuple[float, int, int, int]] = []  # (arrival at the engine, seq, client, k)
    spread = 0.0
    if start == "staggered" and clients > 1:
        # one request's expected duration: its prefill alone plus osl decode steps at full batch
        ctx = clients * (isl + osl / 2)
        spread = costs.step_s([(isl, 0)]) + float(costs.decode_run_s(clients, ctx, osl)[-1])
    seq = 0
    for c in range(clients):
        heapq.heappush(pending, (spread * c / clients + frontend_s, seq, c, 0))
        seq += 1
    done: list[tuple[int, Request]] = []
    total = clients * requests_per_client
    while len(done) < total:
        if not eng.has_work():
            if not pending:
                raise RuntimeError("closed_loop: no work left before every request finished")
            eng.now = max(eng.now, pending[0][0])
        while pending and pending[0][0] <= eng.now:
            t, _, c, k = heapq.heappop(pending)
            eng.add(Request((c, k), isl, osl, arrival_s=t))
        rec = eng.advance(pending[0][0] if pending else math.inf)
        if rec is None:
            continue
        for r in rec.finished:
            c, k = r.rid
            done.append((k, r))
            if k + 1 < requests_per_client:
                heapq.heappush(pending, (r.finish_s + frontend_s, seq, c, k + 1))
                seq += 1
    counted = [r for k, r in done if k >= warmup]
    ttft = np.array([r.first_token_s - r.arrival_s + frontend_s for r in counted]) * 1e3
    tpot = np.array([(r.finish_s - r.first_token_s) / (osl - 1) for r in counted]) * 1e3
    e2e = np.array([r.finish_s - r.arrival_s + frontend_s for r in counted]) * 1e3
    span = max(r.finish_s for _, r in done)  # the run starts at 0
    return LoopResult(
        ttft_ms=float(ttft.mean()),
        tpot_ms=float(tpot.mean()),
        e2e_ms=float(e2e.mean()),
        output_tok_s=total * osl / span,
        requests=len(counted),
        preemptions=eng.preemptions,
        ttft_all_ms=ttft,
        tpot_all_ms=tpot,
    )
