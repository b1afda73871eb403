"""Problem 8's working set against the cache it must fit: one replica's free KV pool as vLLM
sizes it (the prefix cache *is* that pool), the live conversations Little's law keeps, the share
of them the fleet's pools hold, and how that share moves with the assumptions that decide it (KV
precision, vLLM's memory share, the time users take to come back).

The worked answer (notebooks/p08-04) and :func:`kvlab.claims.p08_card_claims` use these; the
scenario's numbers are :data:`kvlab.assumptions.P8`'s.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

__all__ = [
    "P8_EARLIER_MEMORY_SHARE",
    "P8_POOL_GPU",
    "P8_POOL_MODEL",
    "P8_POOL_SETTINGS",
    "P8_RETURNS_S",
    "P8Pool",
    "P8WorkingSet",
    "p08_pool",
    "p08_sensitivity",
    "p08_working_set",
]


#: The book's 70B shape by its config.json (80 layers, 8 KV heads of 128), for the engine's pool.
P8_POOL_MODEL = "meta-llama/Llama-3.1-70B"
P8_POOL_GPU = "H100-SXM"


class P8Pool(NamedTuple):
    """One replica's free KV pool as vLLM sizes it (:func:`kvlab.engine_model.kv_blocks`)."""

    kv_bytes_per_value: int  # 2 for bf16 KV, 1 for fp8
    gpu_memory_utilization: float
    tokens: int  # KV tokens the pool holds, whole blocks
    kv_bytes: float  # bytes of the pool, all GPUs of the replica
    weight_bytes: float  # bf16 weights, all GPUs of the replica
    hbm_bytes: float  # device memory as CUDA reports it, all GPUs of the replica
    non_kv_bytes: float  # activations, CUDA graphs and buffers, all GPUs of the replica


def p08_pool(p8=None, *, kv_bytes_per_value=None, gpu_memory_utilization=None) -> P8Pool:
    """The free KV pool of one replica of Problem 8 (default: :data:`kvlab.assumptions.P8`'s
    precision and memory share): each GPU's memory at ``gpu_memory_utilization``, less its share
    of the bf16 weights at tensor parallelism ``p8.tp`` and the engine's non-KV memory, in blocks.
    In vLLM this pool *is* the prefix cache: every block no running request holds stays cached."""
    from .assumptions import P8
    from .engine_model import engine, shapes

    p8 = P8 if p8 is None else p8
    kvb = p8.kv_bytes_per_value if kv_bytes_per_value is None else kv_bytes_per_value
    util = p8.gpu_memory_utilization if gpu_memory_utilization is None else gpu_memory_utilization
    model = shapes.model_spec(P8_POOL_MODEL)
    defaults = inspect.signature(engine.kv_blocks).parameters  # the engine model's own defaults
    non_kv = defaults["non_kv_bytes_per_gpu"].default
    block = defaults["block_size"].default
    blocks = engine.kv_blocks(
        model, P8_POOL_GPU, p8.tp, "bf16", gpu_memory_utilization=util, kv_bytes=kvb
    )
    per_token = model.kv_bytes_per_token_per_gpu(p8.tp, kvb) * p8.tp
    return P8Pool(
        kv_bytes_per_value=kvb,
        gpu_memory_utilization=util,
        tokens=blocks * block,
        kv_bytes=blocks * block * per_token,
        weight_bytes=model.weight_bytes_per_gpu(p8.tp, "bf16") * p8.tp,
        hbm_bytes=engine.DEVICE_MEMORY_BYTES[P8_POOL_GPU] * p8.tp,
        non_kv_bytes=non_kv * p8.tp,
    )


class P8WorkingSet(NamedTuple):
    """Problem 8's live conversations against what the replicas' pools hold."""

    return_s: float  # mean time from an answer to the conversation's next turn
    live: float  # conversations alive at once (Little's law)
    fit: float  # conversations the fleet's pools hold after a turn
    share: float  # fit / live (above 1: every live conversation fits)
    all_fit_within_s: float  # the return time at which the pools hold every live conversation


def p08_working_set(pool_tokens: float, return_s=None, p8=None) -> P8WorkingSet:
    """Live conversations (turns per second x ``return_s``) against the conversations that
    ``p8.replicas`` pools of ``pool_tokens`` hold after a turn (history, new message and answer
    each; the system prompt on every replica)."""
    from . import calc, formulas
    from .assumptions import P8

    p8 = P8 if p8 is None else p8
    back = p8.return_s if return_s is None else return_s
    live = calc.live_conversations(p8.rate_rps, back)
    fit = calc.conversations_that_fit(
        p8.replicas, pool_tokens, p8.system_tokens, p8.history_tokens, p8.new_tokens,
        p8.answer_tokens,
    )  # fmt: skip
    within = formulas.solve_for("live_conversations", formulas.T_back)
    within_s = float(within.subs({formulas.lam: p8.rate_rps, formulas.formula(
        "live_conversations").lhs: fit}))  # fmt: skip
    return P8WorkingSet(back, live, fit, fit / live, within_s)


#: vLLM's default ``gpu_memory_utilization`` before 0.32 (0.32's is
#: ``kvlab.assumptions.P8.gpu_memory_utilization``): the sensitivity table's first row.
P8_EARLIER_MEMORY_SHARE = 0.90
#: The return times and pool settings of the card's sensitivity table.
P8_RETURNS_S = (60.0, 300.0, 900.0)
P8_POOL_SETTINGS = (
    (2, P8_EARLIER_MEMORY_SHARE),
    (2, 0.92),
    (1, 0.92),
)  # (KV bytes per value, share)


def p08_sensitivity(p8=None) -> list[tuple[P8Pool, list[P8WorkingSet]]]:
    """The card's sensitivity table: for each pool setting of :data:`P8_POOL_SETTINGS`, the pool
    and the working set at each return time of :data:`P8_RETURNS_S`."""
    rows = []
    for kvb, util in P8_POOL_SETTINGS:
        pool = p08_pool(p8, kv_bytes_per_value=kvb, gpu_memory_utilization=util)
        rows.append((pool, [p08_working_set(pool.tokens, r, p8) for r in P8_RETURNS_S]))
    return rows
