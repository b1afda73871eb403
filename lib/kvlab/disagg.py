"""Prefill/decode disaggregation: moving a request's KV, hiding it behind prefill, re-sharding it,
sizing the two pools, and the roofline that says why the phases want different hardware.

Builds on :mod:`kvlab.calc` (KV size, transfer time, pool sizes) and adds the few formulas it lacks
as sympy expressions (:data:`FORMULAS`), evaluated with ``sympy.lambdify`` so notebooks can render
them as LaTeX. Units: bytes, seconds, tokens, bytes per second, FLOP, FLOP per byte.

Why one module: it holds Problem 22's calculators (the transfer, its overlap with prefill,
re-sharding, pool sizes, the roofline), each a few short functions over :mod:`kvlab.calc` and the
formulas above; and :func:`kvlab.explorer_p22.cache_key` fingerprints this whole module, so moving
a function out would change the committed grid's key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import sympy as sp

from . import calc, formulas, hardware
from ._validate import check_choice, check_int, check_number, fraction, non_negative, positive
from .assumptions import NIC_BYTES_PER_S
from .costs import BOOK as COST
from .costs import linearised
from .models import ModelShape

#: Bytes per stored KV value for each precision the book uses.
PRECISION_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1}

#: How the KV leaves the prefill server. Each entry: (description, uses every GPU's own link?).
LINKS = {
    "nvlink": "NVLink inside one node: every GPU sends its share at the one-way NVLink rate",
    "pcie": "PCIe Gen5 per GPU (one way), e.g. staging through host memory",
    "nic_per_gpu": "one 400 Gb/s (50 GB/s) NIC per GPU, all GPUs sending their share in parallel",
    "one_nic": "every byte through a single 50 GB/s NIC",
}

# --- the formulas this module evaluates: defined once in kvlab.formulas ---------------------------
_NAMES = (
    "exposed_transfer",
    "prefill_intensity",
    "decode_intensity",
    "implied_flops",
    "implied_mfu",
    "weight_read_seconds",
    "decode_step_bytes",
)
#: name -> (left-hand symbol, right-hand expression, meaning), views of kvlab.formulas.FORMULAS.
FORMULAS: dict[str, tuple[sp.Symbol, sp.Expr, str]] = {
    n: (formulas.FORMULAS[n].lhs, formulas.FORMULAS[n].rhs, formulas.FORMULAS[n].meaning)
    for n in _NAMES
}
#: Symbols notebooks substitute into these formulas.
n_gpu, F_peak, W_hbm, ctx = formulas.n_gpu, formulas.F_peak, formulas.W_hbm, formulas.ctx


@cache
def _compiled(name: str, module: str = "math"):
    _, rhs, _ = FORMULAS[name]
    symbols = sorted(rhs.free_symbols, key=lambda s: s.name)
    return [s.name for s in symbols], sp.lambdify(symbols, rhs, modules=module)


def evaluate(name: str, **values: float) -> float:
    """Evaluate one of this module's :data:`FORMULAS` with every symbol given by name."""
    check_choice("name", name, FORMULAS)
    names, fn = _compiled(name)
    if set(names) != set(values):
        raise ValueError(f"{name} needs exactly the symbols {names}, got {sorted(values)}")
    return float(fn(*(values[n] for n in names)))


def evaluate_array(name: str, **values):
    """:func:`evaluate` on numpy arrays (element by element, no input checks)."""
    check_choice("name", name, FORMULAS)
    names, fn = _compiled(name, "numpy")
    if set(names) != set(values):
        raise ValueError(f"{name} needs exactly the symbols {names}, got {sorted(values)}")
    return fn(*(values[n] for n in names))


def latex(name: str) -> str:
    """The formula as LaTeX, ``lhs = rhs``."""
    check_choice("name", name, FORMULAS)
    lhs, rhs, _ = FORMULAS[name]
    return f"{sp.latex(lhs)} = {sp.latex(rhs)}"


# --- moving one request's KV ----------------------------------------------------------------------


def bytes_per_value(precision: str) -> int:
    """2 for fp16/bf16, 1 for fp8."""
    return PRECISION_BYTES[check_choice("precision", precision, PRECISION_BYTES)]


def link_bandwidth(
    link: str, gpu: hardware.GPU = hardware.H100_SXM, nic_bytes_per_s: float = NIC_BYTES_PER_S
) -> float:
    """One-way bytes/s of one link of kind ``link`` (see :data:`LINKS`)."""
    check_choice("link", link, LINKS)
    if link == "nvlink":
        if gpu.nvlink_one_way_bytes_per_s is None:
            raise ValueError(f"link must not be 'nvlink' for {gpu.name}, which has no NVLink")
        # checked just above through the property: mypy cannot see that; testing
        # nvlink_bidir_bytes_per_s itself would change the code kvlab.explorer_p22.cache_key()
        # fingerprints, so it waits for the next grid recompute
        return calc.one_way_bandwidth(gpu.nvlink_bidir_bytes_per_s)  # type: ignore[arg-type]
    if link == "pcie":
        return calc.one_way_bandwidth(gpu.pcie_bidir_bytes_per_s)
    return positive("nic_bytes_per_s", nic_bytes_per_s)


@dataclass(frozen=True)
class KVTransfer:
    """One request's KV moving from prefill to decode."""

    prompt_tokens: float
    bytes: float  # the whole request's KV
    per_gpu_bytes: float  # what each of the tp GPUs holds and sends (one head when tp > heads)
    seconds: float  # set-up + bytes over the links in parallel
    link: str
    link_bytes_per_s: float  # one-way bandwidth of one link
    links: int  # links used in parallel
    setup_s: float
    moved_bytes: float = math.nan  # bytes crossing the links: tp x per-GPU bytes (> bytes when
    #                                 heads are replicated, each receiving GPU needs its copy)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Aggregate bandwidth used: links x one link's rate."""
        return self.links * self.link_bytes_per_s


def kv_transfer(
    model: ModelShape,
    prompt_tokens: float,
    precision: str = "fp16",
    tp: int = 8,
    link: str = "nic_per_gpu",
    setup_s: float = 0.0,
    gpu: hardware.GPU = hardware.H100_SXM,
    nic_bytes_per_s: float = NIC_BYTES_PER_S,
) -> KVTransfer:
    """Size and time of sending one request's KV between two servers with the same TP layout.

    Each of the ``tp`` GPUs holds its KV heads (:func:`kvlab.calc.per_gpu_bytes`: 1/tp of them
    while tp <= KV heads, one whole replicated head beyond) and sends them over its own link
    (NVLink, PCIe, or its own NIC) to its counterpart, all in parallel; with ``one_nic`` every
    byte shares one NIC. The same plan as :func:`reshard` with equal TP on both sides.
    """
    non_negative("prompt_tokens", prompt_tokens)
    tp = check_int("tp", tp, lo=1)
    non_negative("setup_s", setup_s)
    beta_ = calc.model_kv_bytes_per_token(model, bytes_per_value(precision))
    total = calc.kv_bytes(prompt_tokens, beta_)
    per_gpu = calc.per_gpu_bytes(total, tp, model.kv_heads)
    moved = per_gpu * tp
    w = link_bandwidth(link, gpu, nic_bytes_per_s)
    if link == "one_nic":
        links, seconds = 1, calc.transfer_seconds(moved, w, links=1, setup_s=setup_s)
    else:
        links, seconds = tp, calc.transfer_seconds(per_gpu, w, links=1, setup_s=setup_s)
    return KVTransfer(prompt_tokens, total, per_gpu, seconds, link, w, links, setup_s, moved)


def transfer_share_of_ttft(transfer_s: float, prefill_s: float) -> float:
    """Transfer as a share of TTFT = prefill + transfer (the first token waits for both)."""
    non_negative("transfer_s", transfer_s)
    non_negative("prefill_s", prefill_s)
    total = transfer_s + prefill_s
    return 0.0 if total == 0 else transfer_s / total


def crossover_prompt_tokens(
    model: ModelShape,
    share: float = 0.05,
    link: str = "one_nic",
    precision: str = "fp16",
    tp: int = 8,
    setup_s: float = 0.0,
    prefill_s_per_token: float = COST.prefill_s_per_token,
    attention: bool = False,
    gpu: hardware.GPU = hardware.H100_SXM,
    nic_bytes_per_s: float = NIC_BYTES_PER_S,
) -> float:
    """Smallest prompt (tokens) at which transfer reaches ``share`` of TTFT, or ``math.inf``.

    Under the linear prefill cost both transfer and prefill grow linearly, so the share only falls
    with the prompt (the set-up cost fades): it is above ``share`` for short prompts and the
    crossover is where it drops to ``share``. With ``attention=True`` prefill grows faster still.
    Returned is the prompt length where the share equals ``share`` (bisection), ``0`` if the share
    is already below it for a 1-token prompt, or ``inf`` if it never gets there.
    """
    check_number("share", share, lo=0, hi=1, lo_open=True, hi_open=True)

    def excess(tokens: float) -> float:
        x = kv_transfer(model, tokens, precision, tp, link, setup_s, gpu, nic_bytes_per_s).seconds
        if attention:
            pre = calc.prefill_seconds_attention(
                tokens, prefill_s_per_token, model.params, model.layers, model.d_model
            )
        else:
            pre = tokens * prefill_s_per_token
        return transfer_share_of_ttft(x, pre) - share

    lo, hi = 1.0, 1e7
    if excess(lo) <= 0:
        return 0.0
    if excess(hi) > 0:
        return math.inf
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 0.5:
            break
    return hi


# --- layer-by-layer sending -----------------------------------------------------------------------


def exposed_transfer_seconds(
    prefill_s: float, transfer_s: float, layers: int, per_message_s: float = 0.0
) -> float:
    """Transfer still running when prefill ends, if each layer's KV is sent once it is computed.

    Per layer: compute ``prefill_s / layers``, send ``per_message_s + transfer_s / layers``. The
    exact pipeline result is max(x, L x - (L - 1) c): one layer's send when the link keeps up
    (x <= c), otherwise the whole transfer minus the prefill it hid behind (plus one layer).
    """
    non_negative("prefill_s", prefill_s)
    non_negative("transfer_s", transfer_s)
    layers = check_int("layers", layers, lo=1)
    non_negative("per_message_s", per_message_s)
    if transfer_s == 0 and per_message_s == 0:
        return 0.0
    if prefill_s == 0:
        return layers * per_message_s + transfer_s
    return evaluate(
        "exposed_transfer", t_pre=prefill_s, t_x=transfer_s, L=layers, t_m=per_message_s
    )


def simulate_layerwise(
    prefill_s: float, transfer_s: float, layers: int, per_message_s: float = 0.0
) -> float:
    """Event-by-event version of :func:`exposed_transfer_seconds` (for checking it)."""
    c = prefill_s / layers
    x = per_message_s + transfer_s / layers
    link_free = 0.0
    for i in range(1, layers + 1):
        link_free = max(i * c, link_free) + x
    return max(link_free - layers * c, 0.0)


#: How the KV moves, per path: who starts the copy, and when, with the systems that take it. What
#: the first token waits for differs: a pull or a push after prefill exposes the whole transfer; a
#: push layer by layer (or chunk by chunk, with chunks for layers) exposes only what is still in
#: flight when the last piece is computed. Sources: vLLM's nixl connector package (NixlConnector
#: is NixlPullConnector; NixlPushConnector writes instead), its P2pNcclConnector (sends each layer
#: from save_kv_layer), DistServe's decode-side pull, SGLang's prefill.py (send_kv_chunk), the
#: Splitwise paper and vLLM Ascend's layer-wise Mooncake connector (book/references.bib).
TRANSFER_PATHS = {
    "pull after prefill": "the decode worker reads the blocks once prefill has finished "
    "(vLLM's default NixlConnector; DistServe's decode instances, when they admit the request)",
    "push after prefill": "the prefill worker writes the blocks into slots the decode worker "
    "reserved, once its forward pass is done (vLLM's NixlPushConnector; SGLang's PD mode when the "
    "prompt fits one prefill chunk)",
    "push layer by layer": "the prefill worker sends each layer's KV as soon as that layer is "
    "computed (Splitwise; vLLM's P2pNcclConnector; Mooncake's layer-wise connector in vLLM "
    "Ascend); SGLang's send_kv_chunk does the same per chunk of a chunked prefill",
}


def exposed_on_path(
    path: str, prefill_s: float, transfer_s: float, layers: int, per_message_s: float = 0.0
) -> float:
    """Seconds of transfer the first token waits for on ``path`` (:data:`TRANSFER_PATHS`): the
    whole transfer after prefill, or :func:`exposed_transfer_seconds` layer by layer."""
    check_choice("path", path, TRANSFER_PATHS)
    exposed = exposed_transfer_seconds(prefill_s, transfer_s, layers, per_message_s)  # checks
    if path == "push layer by layer":
        return exposed
    return per_message_s + transfer_s  # one message, started when prefill ends


# --- re-sharding between tensor-parallel layouts --------------------------------------------------


def heads_on_gpu(kv_heads: int, tp: int, rank: int) -> tuple[int, ...]:
    """KV heads held by GPU ``rank`` of ``tp``: an even split when tp divides kv_heads, else
    (tp > kv_heads, a multiple of it) each head replicated on tp / kv_heads neighbouring GPUs, as
    vLLM and SGLang do."""
    kv_heads = check_int("kv_heads", kv_heads, lo=1)
    tp = check_int("tp", tp, lo=1)
    rank = check_int("rank", rank, lo=0, hi=tp - 1)
    if kv_heads % tp == 0:
        per = kv_heads // tp
        return tuple(range(rank * per, (rank + 1) * per))
    if tp % kv_heads == 0:
        return (rank // (tp // kv_heads),)
    raise ValueError(f"tp must divide kv_heads ({kv_heads}) or be a multiple of it, got {tp}")


@dataclass(frozen=True)
class Resharding:
    """Messages that move one request's KV from a TP-``prefill_tp`` to a TP-``decode_tp`` layout."""

    prefill_tp: int
    decode_tp: int
    kv_heads: int
    messages: tuple[tuple[int, int, tuple[int, ...], float], ...]  # (src, dst, heads, bytes)
    bytes_per_head: float

    @property
    def n_messages(self) -> int:
        return len(self.messages)

    @property
    def total_bytes(self) -> float:
        return sum(m[3] for m in self.messages)

    def sent_bytes(self) -> list[float]:
        """Bytes each prefill GPU sends."""
        out = [0.0] * self.prefill_tp
        for src, _, _, nbytes in self.messages:
            out[src] += nbytes
        return out

    def received_bytes(self) -> list[float]:
        """Bytes each decode GPU receives."""
        out = [0.0] * self.decode_tp
        for _, dst, _, nbytes in self.messages:
            out[dst] += nbytes
        return out

    def sources_per_decode_gpu(self) -> list[int]:
        """How many prefill GPUs each decode GPU hears from."""
        out: list[set[int]] = [set() for _ in range(self.decode_tp)]
        for src, dst, _, _ in self.messages:
            out[dst].add(src)
        return [len(s) for s in out]

    def seconds(self, link_bytes_per_s: float, setup_s: float = 0.0) -> float:
        """Time when every GPU has its own full-duplex link: the busiest sender or receiver."""
        positive("link_bytes_per_s", link_bytes_per_s)
        non_negative("setup_s", setup_s)
        busiest = max(max(self.sent_bytes()), max(self.received_bytes()))
        return setup_s + busiest / link_bytes_per_s


def reshard(kv_heads: int, prefill_tp: int, decode_tp: int, request_bytes: float) -> Resharding:
    """Plan the messages: every decode GPU gets each head it needs from one prefill GPU holding it.

    Where the prefill side replicates a head, decode GPUs take it from the replicas in turn, so the
    senders share the work. One message per (prefill GPU, decode GPU) pair, carrying all its heads.
    """
    kv_heads = check_int("kv_heads", kv_heads, lo=1)
    non_negative("request_bytes", request_bytes)
    per_head = request_bytes / kv_heads
    holders: dict[int, list[int]] = {}
    for r in range(check_int("prefill_tp", prefill_tp, lo=1)):
        for hd in heads_on_gpu(kv_heads, prefill_tp, r):
            holders.setdefault(hd, []).append(r)
    pairs: dict[tuple[int, int], list[int]] = {}
    taken: dict[int, int] = {}
    for dst in range(check_int("decode_tp", decode_tp, lo=1)):
        for hd in heads_on_gpu(kv_heads, decode_tp, dst):
            reps = holders[hd]
            src = reps[taken.get(hd, 0) % len(reps)]
            taken[hd] = taken.get(hd, 0) + 1
            pairs.setdefault((src, dst), []).append(hd)
    messages = tuple((s, d, tuple(hs), len(hs) * per_head) for (s, d), hs in sorted(pairs.items()))
    return Resharding(prefill_tp, decode_tp, kv_heads, messages, per_head)


# --- pool sizing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolPlan:
    """Prefill and decode pools for one traffic mix."""

    prefill_demand_tokens_per_s: float
    prefill_exact: float  # replicas' worth of prefill work
    decode_concurrency: float  # requests decoding at once (Little's law)
    max_batch: int  # largest batch that meets the TPOT target
    decode_exact: float  # replicas' worth of decode work
    prefill: int  # deployed (rounded up)
    decode: int

    @property
    def total(self) -> int:
        return self.prefill + self.decode

    @property
    def ratio(self) -> float:
        """P / D."""
        return self.prefill / self.decode


def size_pools(
    rate_rps: float,
    prompt_tokens: float,
    output_tokens: float,
    tpot_s: float,
    hit_rate: float = 0.0,
    cost=COST,
) -> PoolPlan:
    """Pools for a traffic mix under the cost model ``cost`` (wraps :func:`kvlab.calc.pool_sizes`;
    a :mod:`kvlab.costs` calibration with context terms is linearised at this mix first)."""
    fraction("hit_rate", hit_rate)
    cost = linearised(cost, prompt_tokens, prompt_tokens + output_tokens / 2)
    mu = cost.prefill_tokens_per_s
    p, d = calc.pool_sizes(
        rate_rps,
        prompt_tokens,
        output_tokens,
        tpot_s,
        hit_rate,
        mu,
        cost.decode_base_s,
        cost.decode_per_request_s,
    )
    batch = calc.max_decode_batch(tpot_s, cost.decode_base_s, cost.decode_per_request_s)
    conc = calc.decode_concurrency(rate_rps, output_tokens, tpot_s)
    return PoolPlan(
        prefill_demand_tokens_per_s=calc.prefill_demand(rate_rps, prompt_tokens, hit_rate),
        prefill_exact=calc.prefill_replicas_exact(rate_rps, prompt_tokens, hit_rate, mu),
        decode_concurrency=conc,
        max_batch=batch,
        decode_exact=conc / batch,
        prefill=p,
        decode=d,
    )


# --- roofline -----------------------------------------------------------------------------------


def prefill_intensity(
    model: ModelShape,
    prompt_tokens: float,
    bytes_per_param: float = 2,
    kv_bytes_per_value: float = 2,
    attention: bool = True,
) -> float:
    """FLOP per byte of a prefill pass of ``prompt_tokens`` tokens (weights read once)."""
    positive("prompt_tokens", prompt_tokens)
    positive("bytes_per_param", bytes_per_param)
    kvb = calc.model_kv_bytes_per_token(model, kv_bytes_per_value)
    if not attention:
        return calc.arithmetic_intensity(prompt_tokens, bytes_per_param)
    return evaluate(
        "prefill_intensity",
        N_params=model.params,
        P=prompt_tokens,
        L=model.layers,
        d_model=model.d_model,
        b=bytes_per_param,
        beta=kvb,
    )


def decode_intensity(
    model: ModelShape,
    batch: float,
    context_tokens: float,
    bytes_per_param: float = 2,
    kv_bytes_per_value: float = 2,
) -> float:
    """FLOP per byte of a decode step: ``batch`` requests share one read of the weights, but each
    reads its own ``context_tokens`` tokens of KV."""
    positive("batch", batch)
    positive("context_tokens", context_tokens)
    positive("bytes_per_param", bytes_per_param)
    kvb = calc.model_kv_bytes_per_token(model, kv_bytes_per_value)
    return evaluate(
        "decode_intensity",
        N_params=model.params,
        n_b=batch,
        n_ctx=context_tokens,
        L=model.layers,
        d_model=model.d_model,
        b=bytes_per_param,
        beta=kvb,
    )


def attainable_flops(intensity: float, gpu: hardware.GPU = hardware.H100_SXM) -> float:
    """Roofline: min(peak FLOP/s, intensity x HBM bandwidth) for one GPU."""
    positive("intensity", intensity)
    return min(gpu.dense_fp16_flops, intensity * gpu.hbm_bytes_per_s)


def bound(intensity: float, gpu: hardware.GPU = hardware.H100_SXM) -> str:
    """'compute' above the GPU's ridge point, 'memory' below it."""
    positive("intensity", intensity)
    return "compute" if intensity >= gpu.ridge_flops_per_byte else "memory"


@dataclass(frozen=True)
class CostModelCheck:
    """What the book's assumed cost model implies for a replica of ``gpus`` GPUs."""

    implied_flops: float  # weight FLOP/s needed for prefill_s_per_token
    peak_flops: float  # gpus x dense fp16 peak
    implied_mfu: float  # implied / peak
    weight_read_s: float  # ideal time to read every weight once (decode step floor)
    decode_base_s: float  # assumed fixed part of a decode step
    bandwidth_use: float  # weight_read_s / decode_base_s
    kv_read_s_per_request: float  # ideal time to read one request's KV at context_tokens
    decode_per_request_s: float  # assumed


def cost_model_check(
    model: ModelShape,
    gpu: hardware.GPU = hardware.H100_SXM,
    gpus: int = 8,
    cost=COST,
    context_tokens: float = 3_300,
    bytes_per_param: float = 2,
) -> CostModelCheck:
    """Compare the assumed cost model with the roofline ideal on ``gpus`` GPUs."""
    gpus = check_int("gpus", gpus, lo=1)
    positive("context_tokens", context_tokens)
    implied = evaluate("implied_flops", N_params=model.params, tau=cost.prefill_s_per_token)
    mfu = evaluate(
        "implied_mfu",
        N_params=model.params,
        tau=cost.prefill_s_per_token,
        n_gpu=gpus,
        F_peak=gpu.dense_fp16_flops,
    )
    w_s = evaluate(
        "weight_read_seconds",
        N_params=model.params,
        b=bytes_per_param,
        n_gpu=gpus,
        W_hbm=gpu.hbm_bytes_per_s,
    )
    kv_s = calc.kv_bytes(context_tokens, calc.model_kv_bytes_per_token(model)) / (
        gpus * gpu.hbm_bytes_per_s
    )
    return CostModelCheck(
        implied,
        gpus * gpu.dense_fp16_flops,
        mfu,
        w_s,
        cost.decode_base_s,
        w_s / cost.decode_base_s,
        kv_s,
        cost.decode_per_request_s,
    )


__all__ = [
    "FORMULAS",
    "LINKS",
    "PRECISION_BYTES",
    "TRANSFER_PATHS",
    "CostModelCheck",
    "KVTransfer",
    "PoolPlan",
    "Resharding",
    "attainable_flops",
    "bound",
    "bytes_per_value",
    "cost_model_check",
    "crossover_prompt_tokens",
    "decode_intensity",
    "evaluate",
    "evaluate_array",
    "exposed_on_path",
    "exposed_transfer_seconds",
    "heads_on_gpu",
    "kv_transfer",
    "latex",
    "link_bandwidth",
    "prefill_intensity",
    "reshard",
    "simulate_layerwise",
    "size_pools",
    "transfer_share_of_ttft",
]
