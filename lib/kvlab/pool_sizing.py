"""Problem 22's pool sizing (:func:`deployed_pools`): how many prefill and decode replicas one
traffic mix needs under a cost model, both pools with the same headroom."""

from __future__ import annotations

from typing import NamedTuple

from . import calc
from ._validate import check_int, check_number, positive
from .assumptions import CostModel
from .costs import as_costs, prefill_cost_s


class DeployedPools(NamedTuple):
    """Pools for one traffic mix (:func:`deployed_pools`)."""

    prefill_work: float  #: prefill demand over one replica's prompt throughput, in replicas
    decode_work: float  #: Little's-law concurrency over the largest batch, in replicas
    prefill: int  #: prefill replicas deployed, each at most ``max_busy`` busy
    decode: int  #: decode replicas deployed, each batch at most ``max_busy`` of the largest
    batch: int  #: the largest decode batch whose step meets the TPOT target (capped)


def deployed_pools(
    cost: CostModel | str,
    rate_rps: float,
    prompt_tokens: float,
    output_tokens: float,
    tpot_s: float,
    *,
    hit_rate: float = 0.0,
    max_busy: float = 0.9,
    max_batch_cap: int = 256,
    decode_cost: CostModel | str | None = None,
) -> DeployedPools:
    """The one sizing rule of Problem 22, for any calibration and for decode on another GPU.

    Prefill: demand (``calc.prefill_demand``, uncached tokens per second) over one replica's rate
    for a whole prompt (``prompt_tokens`` over :func:`kvlab.costs.prefill_cost_s` of it). Decode: Little's-law
    concurrency at the TPOT target over the largest batch whose step meets the target at the mean
    context of a decoding request (prompt + output / 2), capped at ``max_batch_cap`` (the
    simulator's cap). Both pools are deployed with the same headroom
    (``calc.replicas_with_headroom``: every replica at most ``max_busy`` busy). ``decode_cost``
    prices the decode pool when it differs from ``cost`` (e.g. :func:`kvlab.costs.on_other_gpu`); the prefill
    pool stays on ``cost``. A decode step that cannot meet the target at all raises a
    ``ValueError``.
    """
    c = as_costs(cost)
    d = c if decode_cost is None else as_costs(decode_cost)
    positive("rate_rps", rate_rps)
    check_number("prompt_tokens", prompt_tokens, lo=1)
    check_number("output_tokens", output_tokens, lo=1)
    positive("tpot_s", tpot_s)
    check_number("hit_rate", hit_rate, lo=0, hi=1)
    check_number("max_busy", max_busy, lo=0, hi=1)
    check_int("max_batch_cap", max_batch_cap, lo=1)
    per_replica = prompt_tokens / prefill_cost_s(c, prompt_tokens)
    demand = calc.prefill_demand(rate_rps, prompt_tokens, hit_rate)
    k_eff = d.decode_per_request_s + d.decode_per_context_token_s * (
        prompt_tokens + output_tokens / 2
    )
    if tpot_s <= d.decode_base_s + k_eff:
        batch = 0
    else:  # rounded down, float noise ignored (99.99999999999999 is 100)
        batch = min(calc.max_decode_batch(tpot_s, d.decode_base_s, k_eff), max_batch_cap)
    if batch < 1:
        raise ValueError(
            f"tpot_s {tpot_s} s leaves no room for one request in a decode step of this cost "
            f"(fixed part {d.decode_base_s} s + {k_eff} s per request); allowed: a larger tpot_s"
        )
    concurrency = calc.decode_concurrency(rate_rps, output_tokens, tpot_s)
    return DeployedPools(
        prefill_work=demand / per_replica,
        decode_work=concurrency / batch,
        prefill=calc.replicas_with_headroom(demand, per_replica, max_busy),
        decode=calc.replicas_with_headroom(concurrency, batch, max_busy),
        batch=batch,
    )
