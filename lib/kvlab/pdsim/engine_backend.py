"""The colocated-vs-disaggregated simulation on the engine model (:func:`run`): every replica is a
:class:`kvlab.engine_model.Engine` (vLLM's scheduling: several prompts per step up to a token
budget, chunked prefill, admission on free KV blocks, preemption), costed step by step from
aiconfigurator's measured database (:class:`kvlab.engine_model.EngineCalibration`).

The traffic, the routing and the first-token convention are those of :mod:`kvlab.pdsim.reference`:
a colocated arrival goes to the replica with the fewest requests in it, a disaggregated one to the
prefill replica with the fewest prompt tokens left to compute, and a prefilled request to the
decode replica with the fewest requests; the KV then takes :meth:`Disaggregated.transfer_seconds`
(computed with the engine's own prefill time of the prompt). What the engine model changes:

* a colocated replica's step budget is ``chunk_tokens`` prompt tokens on top of a full decode
  batch (``max_batch + chunk_tokens``; vLLM's default of 8,192 without chunking) and a prefill
  replica's is vLLM's default (8,192 on an H100 or H200): several waiting prompts share a step;
* a prompt's cached share (``Traffic.hit_rate``) is a run of blocks every prompt starts with, found
  in the replica's prefix cache (so the first prompt on a replica misses it) and held once per
  replica; a decode replica receives every block of the prompt;
* KV capacity is the calibration's pool: a replica takes requests only while blocks are free.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from ..engine_model import Engine, EngineCalibration, EngineConfig, Request, batch_defaults
from .result import SimResult
from .systems import Colocated, Disaggregated
from .traffic import Traffic

_ARRIVE, _LAND, _ENGINE = 0, 1, 2


def _in_system(arrival: np.ndarray, finish: np.ndarray) -> float:
    """Time-average of requests in the system from 0 to the last arrival."""
    until = float(arrival[-1]) if len(arrival) else 0.0
    if until <= 0:
        return 0.0
    stay = np.clip(np.minimum(finish, until) - arrival, 0, None)
    return float(stay.sum() / until)


def run(system: Colocated | Disaggregated, traffic: Traffic, cal: EngineCalibration) -> SimResult:
    """One simulation of ``traffic`` on ``system`` with every replica an engine-model engine."""
    if not isinstance(cal, EngineCalibration):
        raise ValueError(f"cal must be an EngineCalibration, got {cal!r}")
    t = traffic.sample()
    arr, prompt, unc, out = t["arrival_s"], t["prompt"], t["uncached"], t["output"]
    n = len(arr)
    mbt, mns = batch_defaults(cal.gpu)
    colocated = isinstance(system, Colocated)
    if isinstance(system, Colocated):
        tp = system.tp
        budget = system.max_batch + system.chunk_tokens if system.chunk_tokens else mbt
        cfg = EngineConfig(cal.num_blocks(tp), max_num_batched_tokens=budget,
                           max_num_seqs=system.max_batch)  # fmt: skip
        front = [Engine(cal.costs(tp), cfg) for _ in range(system.replicas)]
        back = front
        p_costs = front[0].costs
    else:
        p_cfg = EngineConfig(cal.num_blocks(system.p_tp), max_num_batched_tokens=mbt,
                             max_num_seqs=mns, decode=False)  # fmt: skip
        d_cfg = EngineConfig(cal.num_blocks(system.d_tp),
                             max_num_batched_tokens=max(mbt, system.max_batch),
                             max_num_seqs=system.max_batch)  # fmt: skip
        front = [Engine(cal.costs(system.p_tp), p_cfg) for _ in range(system.prefill)]
        back = [Engine(cal.costs(system.d_tp), d_cfg) for _ in range(system.decode)]
        p_costs = front[0].costs
    engines = front if colocated else front + back
    serves = [colocated or i >= len(front) for i in range(len(engines))]  # emits output tokens
    load = [0] * len(engines)
    version = [0] * len(engines)
    plans: list = [None] * len(engines)
    pending: list[bool] = [False] * len(engines)  # an _ENGINE event is in the heap
    bs = front[0].config.block_size

    # KV transfer per request, with the engine's own prefill time of the prompt alone
    if isinstance(system, Colocated):
        xfer = np.zeros(n)
    else:
        cached = prompt - unc
        alone = {}
        for u, c in set(zip(unc.tolist(), cached.tolist(), strict=True)):
            alone[(u, c)] = p_costs.step_s([(u, c)])
        pre_s = np.array(
            [alone[(u, c)] for u, c in zip(unc.tolist(), cached.tolist(), strict=True)]
        )
        xfer = np.asarray(system.transfer_seconds(prompt, pre_s), float)

    first = np.full(n, math.nan)
    finish = np.full(n, math.nan)
    heap: list = []
    seq = 0

    def push(time: float, kind: int, payload) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (time, seq, kind, payload))

    def schedule(i: int) -> None:
        e = engines[i]
        version[i] += 1
        plans[i] = None
        pending[i] = False
        if not e.has_work():
            return
        plan = e.plan_run()
        if plan is not None:
            plans[i] = plan
            push(float(plan.ends_s[-1]), _ENGINE, (i, version[i], None))
        else:
            rec = e.step()
            push(rec.end_s, _ENGINE, (i, version[i], rec))
        pending[i] = True

    def outputs(i: int, rec) -> None:
        for r in rec.first:
            if serves[i]:
                if math.isnan(first[r.rid]):
                    first[r.rid] = rec.end_s
        for r in rec.finished:
            rid = r.rid
            load[i] -= 1
            if serves[i]:
                finish[rid] = rec.end_s
                continue
            # a prefill replica is done: pick the decode replica, ship the KV
            j = min(range(len(front), len(engines)), key=load.__getitem__)
            load[j] += 1
            push(rec.end_s + xfer[rid], _LAND, (j, rid))

    def give(i: int, req: Request, now: float) -> None:
        e = engines[i]
        plan = plans[i]
        if plan is not None and now > plan.start_s:
            k = plan.steps_before(now)
            outputs(i, e.apply_run(plan, k))
            plans[i] = None
        elif plan is None and not pending[i]:
            e.now = max(e.now, now)
        e.add(req)
        if plans[i] is None and pending[i] and plan is None:
            return  # a step is under way: the request waits for the next one
        schedule(i)

    def prompt_keys(rid: int) -> list:
        shared = int(prompt[rid] - unc[rid]) // bs
        return [("shared", b) for b in range(shared)] + [
            (rid, b) for b in range(shared, int(prompt[rid]) // bs)
        ]

    def pending_tokens(e: Engine) -> int:
        return sum(r.num_tokens - r.num_computed for r in e.waiting) + sum(
            r.num_tokens - r.num_computed for r in e.running if r.generated == 0
        )

    for rid in range(n):
        push(float(arr[rid]), _ARRIVE, rid)
    while heap:
        now, _, kind, payload = heapq.heappop(heap)
        if kind == _ARRIVE:
            rid = payload
            if colocated:
                i = min(range(len(front)), key=load.__getitem__)
            else:
                i = min(range(len(front)), key=lambda k: pending_tokens(front[k]))
            load[i] += 1
            req = Request(rid, int(prompt[rid]), int(out[rid]) if colocated else 1,
                          arrival_s=now, keys=prompt_keys(rid))  # fmt: skip
            give(i, req, now)
        elif kind == _LAND:
            j, rid = payload
            p, o = int(prompt[rid]), int(out[rid])
            if getattr(system, "first_step", False):
                req = Request(rid, p, o, arrival_s=now)
                req.num_computed = p - 1
            else:
                first[rid] = now
                if o == 1:
                    finish[rid] = now
                    load[j] -= 1
                    continue
                req = Request(rid, p, o, arrival_s=now)
                req.num_computed, req.num_tokens, req.generated = p, p + 1, 1
            req.cached_tokens = 0
            give(j, req, now)
        else:
            i, ver, rec = payload
            if ver != version[i]:
                continue
            if rec is None:
                rec = engines[i].apply_run(plans[i])
            outputs(i, rec)
            schedule(i)
    if np.isnan(finish).any():
        raise RuntimeError("pdsim engine run: a request never finished")
    return SimResult(
        label=f"{system.label} [{cal.label}]",
        arrival_s=arr,
        first_token_s=first,
        finish_s=finish,
        prompt_tokens=prompt,
        output_tokens=out,
        transfer_s=xfer,
        mean_in_system=_in_system(arr, finish),
        end_s=float(finish.max()),
        replica_busy_s=np.array([e.busy_s for e in engines]),
    )
