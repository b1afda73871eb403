"""Numeric calculators, lambdified from :mod:`kvlab.formulas` and guarded against bad input.

Every function checks its arguments and raises a ``ValueError`` that names the parameter, the
value and the allowed range. Units: bytes, seconds, tokens, bytes per second, requests per second.

Why one module: it is the numeric face of :mod:`kvlab.formulas`, one short checked function per
formula; the length is the number of formulas, not several subjects.
"""

from __future__ import annotations

import math
from functools import cache

import sympy as sp

from . import formulas
from ._validate import check_int, check_number, fraction, non_negative, positive


@cache
def _compiled(name: str):
    f = formulas.formula(name)
    symbols = f.symbols
    return [s.name for s in symbols], sp.lambdify(symbols, f.rhs, modules="math")


def evaluate(name: str, **values: float) -> float:
    """Evaluate formula ``name`` with every symbol given by its name (e.g. ``H_kv=8``)."""
    names, fn = _compiled(name)
    missing = set(names) - set(values)
    extra = set(values) - set(names)
    if missing or extra:
        raise ValueError(
            f"{name} needs exactly the symbols {names}; missing {sorted(missing)}, unexpected {sorted(extra)}"
        )
    return float(fn(*(values[n] for n in names)))


def _ceil(x: float) -> int:
    """Round up, ignoring float noise such as 6.000000000000001."""
    return math.ceil(round(x, 9))


def _floor(x: float) -> int:
    """Round down, ignoring float noise such as 99.99999999999999."""
    return math.floor(round(x, 9))


# --- KV size -------------------------------------------------------------------------------------


def kv_bytes_per_token(
    layers: int, kv_heads: int, head_dim: int, bytes_per_value: float = 2
) -> int | float:
    """KV cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes_per_value
    (an int when whole, a float for fractional bytes per value)."""
    layers = check_int("layers", layers, lo=1)
    kv_heads = check_int("kv_heads", kv_heads, lo=1)
    head_dim = check_int("head_dim", head_dim, lo=1)
    bytes_per_value = positive("bytes_per_value", bytes_per_value)
    v = evaluate("kv_bytes_per_token", L=layers, H_kv=kv_heads, d_h=head_dim, b=bytes_per_value)
    return int(v) if v.is_integer() else v


def model_kv_bytes_per_token(model, bytes_per_value: float = 2) -> int | float:
    """:func:`kv_bytes_per_token` for a :class:`kvlab.models.ModelShape`."""
    return kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, bytes_per_value)


def kv_bytes(tokens: float, bytes_per_token: float) -> float:
    """KV cache bytes of ``tokens`` tokens."""
    non_negative("tokens", tokens)
    positive("bytes_per_token", bytes_per_token)
    return evaluate("kv_bytes", P=tokens, beta=bytes_per_token)


def cache_bytes(cache_tokens: float, bytes_per_token: float) -> float:
    """Memory needed to keep ``cache_tokens`` tokens of KV."""
    non_negative("cache_tokens", cache_tokens)
    positive("bytes_per_token", bytes_per_token)
    return evaluate("cache_bytes", C=cache_tokens, beta=bytes_per_token)


# --- moving KV -----------------------------------------------------------------------------------


def one_way_bandwidth(bidirectional_bytes_per_s: float) -> float:
    """One direction of a link quoted as both directions together (NVLink 900 -> 450 GB/s)."""
    positive("bidirectional_bytes_per_s", bidirectional_bytes_per_s)
    return evaluate("one_way_bandwidth", W_bidir=bidirectional_bytes_per_s)


def per_gpu_bytes(n_bytes: float, tp: int, kv_heads: int | None = None) -> float:
    """Bytes each of ``tp`` tensor-parallel GPUs holds: ``n_bytes / tp`` while the ``kv_heads``
    KV heads split evenly (tp <= kv_heads), one whole head (``n_bytes / kv_heads``) beyond, where
    engines replicate heads. Without ``kv_heads`` the heads are assumed to split (tp <= heads)."""
    non_negative("n_bytes", n_bytes)
    tp = check_int("tp", tp, lo=1)
    heads = tp if kv_heads is None else check_int("kv_heads", kv_heads, lo=1)
    return evaluate("per_gpu_share", B=n_bytes, tp=tp, H_kv=heads)


def transfer_seconds(
    n_bytes: float, link_bytes_per_s: float, links: int = 1, setup_s: float = 0.0
) -> float:
    """Seconds to move ``n_bytes`` split evenly over ``links`` links of ``link_bytes_per_s`` each
    (one-way bandwidth), plus a fixed ``setup_s``."""
    non_negative("n_bytes", n_bytes)
    positive("link_bytes_per_s", link_bytes_per_s)
    links = check_int("links", links, lo=1)
    non_negative("setup_s", setup_s)
    return evaluate("transfer_seconds", B=n_bytes, W=link_bytes_per_s, n_links=links, t_0=setup_s)


# --- Problem 8 -----------------------------------------------------------------------------------


def _tokens(shared_tokens, history_tokens, new_tokens=None):
    non_negative("shared_tokens", shared_tokens)
    non_negative("history_tokens", history_tokens)
    if new_tokens is not None:
        non_negative("new_tokens", new_tokens)


def cached_tokens_random(shared_tokens: float, history_tokens: float, replicas: int) -> float:
    """Expected cached tokens under random routing: S + H / N."""
    _tokens(shared_tokens, history_tokens)
    replicas = check_int("replicas", replicas, lo=1)
    return evaluate("cached_tokens_random", S=shared_tokens, H=history_tokens, N=replicas)


def cached_tokens_random_nested(
    shared_tokens: float, history_tokens: float, replicas: int, earlier_turns: float
) -> float:
    """Expected cached tokens under random routing when prefix hits nest: the history is
    ``earlier_turns`` equal turns, each served by a random replica that still holds it (unlimited
    caches), so the chosen replica holds the prompt up to the latest earlier turn it served.
    ``earlier_turns`` = 1 is the 1-in-N bound, :func:`cached_tokens_random`."""
    _tokens(shared_tokens, history_tokens)
    replicas = check_int("replicas", replicas, lo=1)
    check_number("earlier_turns", earlier_turns, lo=1)
    return evaluate(
        "cached_tokens_random_nested",
        S=shared_tokens,
        H=history_tokens,
        N=replicas,
        K=earlier_turns,
    )


def cached_tokens_cache_aware(shared_tokens: float, history_tokens: float) -> float:
    """Cached tokens when the router finds the history's replica: S + H."""
    _tokens(shared_tokens, history_tokens)
    return evaluate("cached_tokens_cache_aware", S=shared_tokens, H=history_tokens)


def _cached(cached_tokens, shared_tokens, history_tokens, new_tokens):
    _tokens(shared_tokens, history_tokens, new_tokens)
    prompt = shared_tokens + history_tokens + new_tokens
    if prompt <= 0:
        raise ValueError("shared_tokens + history_tokens + new_tokens must be > 0, got 0")
    check_number("cached_tokens", cached_tokens, lo=0, hi=prompt)


def hit_fraction(
    cached_tokens: float, shared_tokens: float, history_tokens: float, new_tokens: float
) -> float:
    """Share of the prompt served from cache."""
    _cached(cached_tokens, shared_tokens, history_tokens, new_tokens)
    return evaluate(
        "hit_fraction", c=cached_tokens, S=shared_tokens, H=history_tokens, U=new_tokens
    )


def prefill_load(
    rate_rps: float,
    shared_tokens: float,
    history_tokens: float,
    new_tokens: float,
    cached_tokens: float,
) -> float:
    """Prompt tokens per second the fleet must compute."""
    positive("rate_rps", rate_rps)
    _cached(cached_tokens, shared_tokens, history_tokens, new_tokens)
    return evaluate(
        "prefill_load",
        **{"lambda": rate_rps},
        S=shared_tokens,
        H=history_tokens,
        U=new_tokens,
        c=cached_tokens,
    )


def fleet_prefill_capacity(replicas: int, prefill_tokens_per_s: float) -> float:
    """Prompt tokens per second ``replicas`` replicas can compute."""
    replicas = check_int("replicas", replicas, lo=1)
    positive("prefill_tokens_per_s", prefill_tokens_per_s)
    return evaluate("fleet_prefill_capacity", N=replicas, mu=prefill_tokens_per_s)


def capacity_share(load_tokens_per_s: float, replicas: int, prefill_tokens_per_s: float) -> float:
    """Share of the fleet's prefill capacity a load uses (above 1 means the fleet cannot keep up)."""
    non_negative("load_tokens_per_s", load_tokens_per_s)
    replicas = check_int("replicas", replicas, lo=1)
    positive("prefill_tokens_per_s", prefill_tokens_per_s)
    return evaluate("capacity_share", X=load_tokens_per_s, N=replicas, mu=prefill_tokens_per_s)


def prefill_seconds(
    shared_tokens: float,
    history_tokens: float,
    new_tokens: float,
    cached_tokens: float,
    seconds_per_token: float,
) -> float:
    """Prefill time of one request under the linear cost model."""
    _cached(cached_tokens, shared_tokens, history_tokens, new_tokens)
    positive("seconds_per_token", seconds_per_token)
    return evaluate(
        "prefill_seconds",
        S=shared_tokens,
        H=history_tokens,
        U=new_tokens,
        c=cached_tokens,
        tau=seconds_per_token,
    )


def fleet_cache_tokens(replicas: int, cache_tokens: float) -> float:
    """Tokens the whole fleet can keep cached."""
    replicas = check_int("replicas", replicas, lo=1)
    positive("cache_tokens", cache_tokens)
    return evaluate("fleet_cache_tokens", N=replicas, C=cache_tokens)


def histories_that_fit(replicas: int, cache_tokens: float, history_tokens: float) -> float:
    """How many ``history_tokens``-token histories the fleet's caches hold together."""
    replicas = check_int("replicas", replicas, lo=1)
    positive("cache_tokens", cache_tokens)
    positive("history_tokens", history_tokens)
    return evaluate("histories_that_fit", N=replicas, C=cache_tokens, H=history_tokens)


def conversations_that_fit(
    replicas: int,
    cache_tokens: float,
    system_tokens: float,
    history_tokens: float,
    new_tokens: float,
    output_tokens: float,
) -> float:
    """How many conversations the fleet's caches hold after a turn: each keeps its history, new
    message and answer (tokens), and every replica also keeps the system prompt."""
    replicas = check_int("replicas", replicas, lo=1)
    positive("cache_tokens", cache_tokens)
    check_number("system_tokens", system_tokens, lo=0, hi=cache_tokens, hi_open=True)
    for name, v in (("history_tokens", history_tokens), ("new_tokens", new_tokens)):
        check_number(name, v, lo=0)
    positive("output_tokens", output_tokens)
    return evaluate(
        "conversations_that_fit",
        N=replicas,
        C=cache_tokens,
        S=system_tokens,
        H=history_tokens,
        U=new_tokens,
        O=output_tokens,
    )


def tier_break_even_bandwidth(bytes_per_token: float, seconds_per_token: float) -> float:
    """Bandwidth (bytes/s) above which loading KV from a slower tier beats recomputing it."""
    positive("bytes_per_token", bytes_per_token)
    positive("seconds_per_token", seconds_per_token)
    return evaluate("tier_break_even_bandwidth", beta=bytes_per_token, tau=seconds_per_token)


# --- Problem 22: pools ---------------------------------------------------------------------------


def prefill_demand(rate_rps: float, prompt_tokens: float, hit_rate: float = 0.0) -> float:
    """Prompt tokens per second still to compute after prefix hits."""
    positive("rate_rps", rate_rps)
    non_negative("prompt_tokens", prompt_tokens)
    fraction("hit_rate", hit_rate)
    return evaluate("prefill_demand", **{"lambda": rate_rps}, P=prompt_tokens, h=hit_rate)


def prefill_replicas_exact(
    rate_rps: float,
    prompt_tokens: float,
    hit_rate: float = 0.0,
    prefill_tokens_per_s: float = 10_000,
) -> float:
    """Prefill work in replicas, before rounding up."""
    prefill_demand(rate_rps, prompt_tokens, hit_rate)
    positive("prefill_tokens_per_s", prefill_tokens_per_s)
    return evaluate(
        "prefill_replicas_exact",
        **{"lambda": rate_rps},
        P=prompt_tokens,
        h=hit_rate,
        mu=prefill_tokens_per_s,
    )


def decode_step_seconds(
    batch: float, decode_base_s: float = 0.020, decode_per_request_s: float = 0.0002
) -> float:
    """One decode step with ``batch`` running requests."""
    non_negative("batch", batch)
    positive("decode_base_s", decode_base_s)
    positive("decode_per_request_s", decode_per_request_s)
    return evaluate("decode_step_seconds", a=decode_base_s, k=decode_per_request_s, n_b=batch)


def _tpot(tpot_s, decode_base_s, decode_per_request_s):
    positive("decode_base_s", decode_base_s)
    positive("decode_per_request_s", decode_per_request_s)
    check_number("tpot_s", tpot_s, lo=decode_base_s + decode_per_request_s)


def max_decode_batch(
    tpot_s: float, decode_base_s: float = 0.020, decode_per_request_s: float = 0.0002
) -> int:
    """Largest batch whose decode step still meets the TPOT target (rounded down)."""
    _tpot(tpot_s, decode_base_s, decode_per_request_s)
    return _floor(evaluate("max_decode_batch", T=tpot_s, a=decode_base_s, k=decode_per_request_s))


def decode_concurrency(rate_rps: float, output_tokens: float, tpot_s: float) -> float:
    """Requests decoding at once (Little's law): rate x output tokens x TPOT."""
    positive("rate_rps", rate_rps)
    positive("output_tokens", output_tokens)
    positive("tpot_s", tpot_s)
    return evaluate("decode_concurrency", **{"lambda": rate_rps}, O=output_tokens, T=tpot_s)


def littles_law(rate_rps: float, time_in_system_s: float) -> float:
    """Mean number in a system = arrival rate x mean time spent in it."""
    non_negative("rate_rps", rate_rps)
    non_negative("time_in_system_s", time_in_system_s)
    if rate_rps == 0 or time_in_system_s == 0:
        return 0.0
    return evaluate("littles_law", **{"lambda": rate_rps}, R=time_in_system_s)


def pool_sizes(
    rate_rps: float,
    prompt_tokens: float,
    output_tokens: float,
    tpot_s: float,
    hit_rate: float = 0.0,
    prefill_tokens_per_s: float = 10_000,
    decode_base_s: float = 0.020,
    decode_per_request_s: float = 0.0002,
) -> tuple[int, int]:
    """(prefill replicas, decode replicas) for a traffic mix, each rounded up.

    Prefill: rate x prompt x (1 - hit_rate) / prefill_tokens_per_s. Decode: the Little's-law
    concurrency divided by the largest batch that meets ``tpot_s``.
    """
    p = prefill_replicas_exact(rate_rps, prompt_tokens, hit_rate, prefill_tokens_per_s)
    batch = max_decode_batch(tpot_s, decode_base_s, decode_per_request_s)
    d = decode_concurrency(rate_rps, output_tokens, tpot_s) / batch
    return max(_ceil(p), 1 if prompt_tokens else 0), max(_ceil(d), 1)


# --- prefill compute with attention --------------------------------------------------------------


def prefill_flops(prompt_tokens: float, params: float, layers: int, d_model: int) -> float:
    """Matmul FLOPs of one prefill: 2 x params x P + 2 x layers x P^2 x d_model."""
    non_negative("prompt_tokens", prompt_tokens)
    positive("params", params)
    layers = check_int("layers", layers, lo=1)
    d_model = check_int("d_model", d_model, lo=1)
    return evaluate("prefill_flops", P=prompt_tokens, N_params=params, L=layers, d_model=d_model)


def prefill_seconds_attention(
    prompt_tokens: float, seconds_per_token: float, params: float, layers: int, d_model: int
) -> float:
    """Prefill time counting causal attention, at the FLOP/s implied by ``seconds_per_token``."""
    non_negative("prompt_tokens", prompt_tokens)
    positive("seconds_per_token", seconds_per_token)
    positive("params", params)
    layers = check_int("layers", layers, lo=1)
    d_model = check_int("d_model", d_model, lo=1)
    return evaluate(
        "prefill_seconds_attention",
        P=prompt_tokens,
        tau=seconds_per_token,
        N_params=params,
        L=layers,
        d_model=d_model,
    )


def arithmetic_intensity(tokens_per_pass: float, bytes_per_param: float = 2) -> float:
    """FLOP per byte of weights when ``tokens_per_pass`` tokens share one read of the weights."""
    positive("tokens_per_pass", tokens_per_pass)
    positive("bytes_per_param", bytes_per_param)
    return evaluate("arithmetic_intensity_linear", n_b=tokens_per_pass, b=bytes_per_param)


# --- exercises (issue 16): decode memory, network load, cost, a CPU tier, operations ------------


def hbm_for_kv(
    gpus: int,
    hbm_bytes_per_gpu: float,
    params: float,
    bytes_per_weight: float = 2,
    hbm_share: float = 0.9,
) -> float:
    """Bytes of HBM left for KV in one replica after the weights, using ``hbm_share`` of HBM."""
    gpus = check_int("gpus", gpus, lo=1)
    positive("hbm_bytes_per_gpu", hbm_bytes_per_gpu)
    positive("params", params)
    positive("bytes_per_weight", bytes_per_weight)
    check_number("hbm_share", hbm_share, lo=0, lo_open=True, hi=1)
    left = evaluate(
        "hbm_for_kv",
        u_mem=hbm_share,
        n_gpu=gpus,
        M_gpu=hbm_bytes_per_gpu,
        N_params=params,
        b_w=bytes_per_weight,
    )
    if left <= 0:
        raise ValueError(
            f"params={params:g} at {bytes_per_weight:g} B each do not fit in {gpus} x "
            f"{hbm_bytes_per_gpu:g} B x hbm_share {hbm_share:g}; nothing is left for KV"
        )
    return left


def max_batch_memory(
    kv_bytes_available: float, prompt_tokens: float, output_tokens: float, bytes_per_token: float
) -> int:
    """Largest number of requests whose full KV (prompt + output tokens) fits (rounded down)."""
    positive("kv_bytes_available", kv_bytes_available)
    non_negative("prompt_tokens", prompt_tokens)
    non_negative("output_tokens", output_tokens)
    positive("bytes_per_token", bytes_per_token)
    if prompt_tokens + output_tokens <= 0:
        raise ValueError("prompt_tokens + output_tokens must be > 0, got 0")
    return _floor(
        evaluate(
            "max_batch_memory",
            M_kv=kv_bytes_available,
            P=prompt_tokens,
            O=output_tokens,
            beta=bytes_per_token,
        )
    )


def decode_replicas_with_memory(
    rate_rps: float,
    output_tokens: float,
    tpot_s: float,
    memory_batch: int,
    decode_base_s: float = 0.020,
    decode_per_request_s: float = 0.0002,
) -> tuple[int, int]:
    """(decode replicas, batch used): concurrency over the smaller of the TPOT and memory limits."""
    memory_batch = check_int("memory_batch", memory_batch, lo=1)
    batch = min(max_decode_batch(tpot_s, decode_base_s, decode_per_request_s), memory_batch)
    return max(_ceil(decode_concurrency(rate_rps, output_tokens, tpot_s) / batch), 1), batch


def kv_stream_bandwidth(rate_rps: float, prompt_tokens: float, bytes_per_token: float) -> float:
    """Bytes per second of KV the prefill pool ships to the decode pool, sustained."""
    positive("rate_rps", rate_rps)
    non_negative("prompt_tokens", prompt_tokens)
    positive("bytes_per_token", bytes_per_token)
    if prompt_tokens == 0:
        return 0.0
    return evaluate(
        "kv_stream_bandwidth", **{"lambda": rate_rps}, P=prompt_tokens, beta=bytes_per_token
    )


def incast_seconds(senders: int, n_bytes: float, link_bytes_per_s: float, links: int = 1) -> float:
    """Time for ``senders`` transfers of ``n_bytes`` each to enter one receiver over ``links``."""
    senders = check_int("senders", senders, lo=1)
    positive("n_bytes", n_bytes)
    positive("link_bytes_per_s", link_bytes_per_s)
    links = check_int("links", links, lo=1)
    return evaluate("incast_seconds", k_in=senders, B=n_bytes, W=link_bytes_per_s, n_links=links)


def replicas_with_headroom(
    demand_tokens_per_s: float, tokens_per_s_per_replica: float = 10_000, max_busy: float = 0.9
) -> int:
    """Replicas that keep each one at most ``max_busy`` busy (at 100 % a queue never drains)."""
    positive("demand_tokens_per_s", demand_tokens_per_s)
    positive("tokens_per_s_per_replica", tokens_per_s_per_replica)
    check_number("max_busy", max_busy, lo=0, lo_open=True, hi=1)
    return _ceil(
        evaluate(
            "replicas_with_headroom",
            X=demand_tokens_per_s,
            mu=tokens_per_s_per_replica,
            rho_max=max_busy,
        )
    )


def cost_per_request(
    rate_rps: float,
    prefill_replicas: int,
    decode_replicas: int,
    prefill_gpu_per_hour: float,
    decode_gpu_per_hour: float,
    gpus_per_replica: int = 8,
) -> float:
    """Dollars per request: both pools' GPU-hours per second divided by requests per second."""
    positive("rate_rps", rate_rps)
    prefill_replicas = check_int("prefill_replicas", prefill_replicas, lo=0)
    decode_replicas = check_int("decode_replicas", decode_replicas, lo=1)
    positive("prefill_gpu_per_hour", prefill_gpu_per_hour)
    positive("decode_gpu_per_hour", decode_gpu_per_hour)
    g = check_int("gpus_per_replica", gpus_per_replica, lo=1)
    return evaluate(
        "cost_per_request",
        **{"lambda": rate_rps},
        n_P=prefill_replicas,
        n_D=decode_replicas,
        g_P=g,
        g_D=g,
        c_P=prefill_gpu_per_hour,
        c_D=decode_gpu_per_hour,
    )


def max_decode_batch_other_gpu(
    tpot_s: float,
    hbm_bytes_per_s: float,
    reference_hbm_bytes_per_s: float,
    decode_base_s: float = 0.020,
    decode_per_request_s: float = 0.0002,
) -> int:
    """Largest batch meeting ``tpot_s`` when the bandwidth-bound step runs on another GPU.

    0 means the GPU cannot meet the target even with one request."""
    positive("tpot_s", tpot_s)
    positive("hbm_bytes_per_s", hbm_bytes_per_s)
    positive("reference_hbm_bytes_per_s", reference_hbm_bytes_per_s)
    positive("decode_base_s", decode_base_s)
    positive("decode_per_request_s", decode_per_request_s)
    n = evaluate(
        "max_decode_batch_other_gpu",
        T=tpot_s,
        W_new=hbm_bytes_per_s,
        W_ref=reference_hbm_bytes_per_s,
        a=decode_base_s,
        k=decode_per_request_s,
    )
    return max(_floor(n), 0)


def live_conversations(turn_rate_rps: float, seconds_between_turns: float) -> float:
    """Conversations alive at once (Little's law): turns per second x seconds between turns."""
    positive("turn_rate_rps", turn_rate_rps)
    positive("seconds_between_turns", seconds_between_turns)
    return evaluate("live_conversations", **{"lambda": turn_rate_rps}, T_back=seconds_between_turns)


def tier_capacity_bytes(
    turn_rate_rps: float,
    seconds_between_turns: float,
    history_tokens: float,
    bytes_per_token: float,
) -> float:
    """Memory that keeps every live conversation's history of ``history_tokens`` tokens."""
    positive("turn_rate_rps", turn_rate_rps)
    positive("seconds_between_turns", seconds_between_turns)
    positive("history_tokens", history_tokens)
    positive("bytes_per_token", bytes_per_token)
    return evaluate(
        "tier_capacity_bytes",
        **{"lambda": turn_rate_rps},
        T_back=seconds_between_turns,
        H=history_tokens,
        beta=bytes_per_token,
    )


def restart_lost_tokens(
    turn_rate_rps: float, seconds_between_turns: float, history_tokens: float, replicas: int
) -> float:
    """History tokens recomputed once after a cache-aware router loses its record."""
    positive("turn_rate_rps", turn_rate_rps)
    positive("seconds_between_turns", seconds_between_turns)
    non_negative("history_tokens", history_tokens)
    replicas = check_int("replicas", replicas, lo=1)
    if history_tokens == 0:
        return 0.0
    return evaluate(
        "restart_lost_tokens",
        **{"lambda": turn_rate_rps},
        T_back=seconds_between_turns,
        H=history_tokens,
        N=replicas,
    )


# --- Problem 22: latent KV (MLA) -------------------------------------------------------------------

#: DeepSeek-V3's attention (its config.json): 61 layers, a 512-dimensional KV latent
#: (``kv_lora_rank``) and a 64-dimensional decoupled RoPE key (``qk_rope_head_dim``).
DEEPSEEK_V3_MLA = {"layers": 61, "latent_dim": 512, "rope_dim": 64}


def mla_kv_bytes_per_token(
    layers: int, latent_dim: int, rope_dim: int, bytes_per_value: float = 2
) -> int | float:
    """KV bytes per token of multi-head latent attention: one ``latent_dim`` latent and one
    ``rope_dim`` RoPE key per layer, shared by all heads (an int when whole)."""
    layers = check_int("layers", layers, lo=1)
    latent_dim = check_int("latent_dim", latent_dim, lo=1)
    rope_dim = check_int("rope_dim", rope_dim, lo=0)
    bytes_per_value = positive("bytes_per_value", bytes_per_value)
    v = evaluate(
        "mla_kv_bytes_per_token", L=layers, d_c=latent_dim, d_r=rope_dim, b=bytes_per_value
    )
    return int(v) if v.is_integer() else v


def per_gpu_bytes_general(
    split_bytes: float, replicated_bytes: float, tp: int, kv_heads: int | None = None
) -> float:
    """Bytes each of ``tp`` GPUs holds and sends: ``split_bytes`` (per-head K and V) divided over
    min(tp, kv_heads) GPUs, plus ``replicated_bytes`` (latents every head reads, as in MLA) on
    every GPU. :func:`per_gpu_bytes` is the case ``replicated_bytes = 0``; MLA is
    ``split_bytes = 0``: each GPU holds the whole latent KV, whatever the TP."""
    non_negative("split_bytes", split_bytes)
    non_negative("replicated_bytes", replicated_bytes)
    tp = check_int("tp", tp, lo=1)
    heads = tp if kv_heads is None else check_int("kv_heads", kv_heads, lo=1)
    return evaluate(
        "per_gpu_share_general", B_split=split_bytes, B_repl=replicated_bytes, tp=tp, H_kv=heads
    )
