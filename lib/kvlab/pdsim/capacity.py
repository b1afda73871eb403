"""The most requests per second that can meet the targets, from the cost model alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validate import positive
from ..assumptions import CostModel
from ..costs import BOOK
from ..engine_model import EngineCalibration, batch_defaults
from .systems import Colocated, Disaggregated, at_tp, prefill_seconds
from .traffic import Traffic


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
    if isinstance(cost, EngineCalibration):
        return _engine_bound(system, traffic, tpot_slo_s, cost)
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


#: how far above the engine model's estimate :func:`capacity_bound` puts its ceiling: the estimate
#: prices whole-budget prefill steps and the largest TPOT-meeting batch, which a run can beat a
#: little (shared prefix blocks, shorter contexts early in a request's life)
ENGINE_BOUND_MARGIN = 1.5


def _engine_bound(system, traffic: Traffic, tpot_slo_s: float, cal: EngineCalibration):
    """The same bound for engine-model replicas: prefill in full-budget steps of whole prompts,
    decode in steps of the largest batch whose step meets the TPOT target, both times
    :data:`ENGINE_BOUND_MARGIN`."""
    uncached = max(1, math.ceil(traffic.prompt_tokens * (1 - traffic.hit_rate) - 1e-9))
    cached = max(0, round(traffic.prompt_tokens) - uncached)
    steps = max(round(traffic.output_tokens) - 1, 0)
    ctx = traffic.prompt_tokens + traffic.output_tokens / 2
    p_tp, d_tp = (
        (system.tp, system.tp) if isinstance(system, Colocated) else (system.p_tp, system.d_tp)
    )
    cp, cd = cal.costs(p_tp), cal.costs(d_tp)
    per_step = max(1, batch_defaults(cal.gpu)[0] // uncached)
    pre_s = cp.step_s([(uncached, cached)] * per_step) / per_step
    batch = 0
    for b in range(1, system.max_batch + 1):
        if cd.step_s([], b, b * ctx) > tpot_slo_s:
            break
        batch = b
    if batch == 0:
        dec_s = math.inf
    else:
        dec_s = steps * cd.step_s([], batch, batch * ctx) / batch
    m = ENGINE_BOUND_MARGIN
    if isinstance(system, Disaggregated):
        p = m * system.prefill / pre_s
        d = m * system.decode / dec_s if dec_s > 0 else math.inf
        return CapacityBound(p, d, min(p, d))
    n = system.replicas
    p = m * n / pre_s
    d = m * n / dec_s if dec_s > 0 else math.inf
    both = m * n / (pre_s + dec_s)
    return CapacityBound(p, d, min(p, d, both))
