"""Every formula of the book, defined once as a sympy expression.

Each entry of :data:`FORMULAS` is a :class:`Formula`: a named left-hand symbol, a right-hand sympy
expression over named symbols, a one-line meaning and the units. Notebooks render them with
:func:`latex`, solve them for another unknown with :func:`solve_for`, and :mod:`kvlab.calc` turns
them into checked numeric functions with ``sympy.lambdify``. Nothing else in the package restates
these formulas.

Why one module: it is one table, the book's formulas, each defined once; splitting it by chapter
would make a reader (and :func:`formula`) look in several places for the one definition of each.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

# --- symbols (all positive reals unless stated) --------------------------------------------------
L = sp.Symbol("L", positive=True)  # layers
H_kv = sp.Symbol("H_kv", positive=True)  # KV heads
d_h = sp.Symbol("d_h", positive=True)  # head dimension
b = sp.Symbol("b", positive=True)  # bytes per stored value (2 for fp16, 1 for fp8)
beta = sp.Symbol("beta", positive=True)  # KV bytes per token
P = sp.Symbol("P", positive=True)  # prompt tokens
B_kv = sp.Symbol("B", positive=True)  # bytes to move
W = sp.Symbol("W", positive=True)  # bandwidth of one link, bytes/s (one way)
W_bidir = sp.Symbol("W_bidir", positive=True)  # headline both-directions figure, bytes/s
n_links = sp.Symbol("n_links", positive=True)  # links used in parallel
t_0 = sp.Symbol("t_0", nonnegative=True)  # fixed set-up latency of a transfer, s
tp = sp.Symbol("tp", positive=True)  # tensor-parallel degree

S = sp.Symbol("S", nonnegative=True)  # shared system-prompt tokens (cached on every replica)
H = sp.Symbol("H", nonnegative=True)  # conversation-history tokens (cached on one replica)
U = sp.Symbol("U", nonnegative=True)  # new, never-seen tokens
N = sp.Symbol("N", positive=True)  # replicas
c_tok = sp.Symbol("c", nonnegative=True)  # cached prompt tokens of a request
K_turns = sp.Symbol("K", positive=True)  # earlier turns the history is made of (each H / K tokens)
lam = sp.Symbol("lambda", positive=True)  # arrival rate, requests/s
mu = sp.Symbol("mu", positive=True)  # prefill throughput of one replica, prompt tokens/s
tau = sp.Symbol("tau", positive=True)  # prefill time per prompt token, s (= 1/mu)
C = sp.Symbol("C", positive=True)  # cache capacity of one replica, tokens
h = sp.Symbol("h", nonnegative=True)  # prefix hit rate (fraction of prompt tokens cached)
X = sp.Symbol("X", positive=True)  # a generic load or demand

a = sp.Symbol("a", positive=True)  # decode step fixed cost, s
k = sp.Symbol("k", positive=True)  # decode step cost per running request, s
n_b = sp.Symbol("n_b", positive=True)  # running requests in a decode batch
T = sp.Symbol("T", positive=True)  # TPOT target, s per output token
O_out = sp.Symbol("O", positive=True)  # output tokens per request
Q = sp.Symbol("Q", positive=True)  # requests in the system (Little's law)
R_time = sp.Symbol("R", positive=True)  # time a request spends in the system, s

N_params = sp.Symbol("N_params", positive=True)  # model parameters
d_model = sp.Symbol("d_model", positive=True)  # hidden size
F = sp.Symbol("F", positive=True)  # achieved FLOP/s of a replica
t_pre = sp.Symbol("t_pre", positive=True)  # prefill time of one request, s
t_x = sp.Symbol("t_x", positive=True)  # time to send a request's whole KV at the link's rate, s
t_m = sp.Symbol("t_m", nonnegative=True)  # fixed cost of one message (one layer's send), s
ctx = sp.Symbol("n_ctx", positive=True)  # context tokens each decoding request attends to
n_gpu = sp.Symbol("n_gpu", positive=True)  # GPUs in a replica
F_peak = sp.Symbol("F_peak", positive=True)  # peak dense FLOP/s of one GPU
W_hbm = sp.Symbol("W_hbm", positive=True)  # HBM bandwidth of one GPU, bytes/s
ES = sp.Symbol("E_S", positive=True)  # mean service time, s
ES2 = sp.Symbol("E_S2", positive=True)  # second moment of the service time, s^2


@dataclass(frozen=True)
class Formula:
    """``lhs = rhs``; ``units`` describes the left-hand side."""

    name: str
    lhs: sp.Symbol
    rhs: sp.Expr
    meaning: str
    units: str

    @property
    def equation(self) -> sp.Eq:
        return sp.Eq(self.lhs, self.rhs, evaluate=False)

    @property
    def symbols(self) -> list[sp.Symbol]:
        """The free symbols of the right-hand side, sorted by name (the lambdified argument order)."""
        return sorted(self.rhs.free_symbols, key=lambda s: s.name)


def _f(name, lhs, rhs, meaning, units) -> Formula:
    return Formula(
        name, sp.Symbol(lhs, positive=True) if isinstance(lhs, str) else lhs, rhs, meaning, units
    )


# Derived once from simpler statements, so that no formula is restated by hand:
# the largest batch is the step-time formula a + k n_b = T solved for n_b;
_MAX_BATCH = sp.solve(sp.Eq(a + k * n_b, T), n_b)[0]
# requests decoding at once is Little's law with time in system = O steps of T seconds;
_DECODE_CONCURRENCY = (lam * R_time).subs(R_time, O_out * T)
# the batch a decode replica carries when its steps last as long as that batch makes them (not the
# target T): Little's law with R = O (a + k n_b), shared by N replicas, solved for n_b (finite only
# while N > lambda O k: otherwise the replicas cannot keep up at any batch);
_LOADED_BATCH = sp.solve(sp.Eq(n_b, (lam * R_time).subs(R_time, O_out * (a + k * n_b)) / N), n_b)[0]
# prefill FLOPs: 2 FLOPs per parameter per token, plus QK^T and AV over the causal triangle
# (2 matmuls x 2 FLOPs x P^2/2 pairs x d_model per layer = 2 L P^2 d_model);
_PREFILL_FLOPS = 2 * N_params * P + 2 * L * P**2 * d_model
# attention-aware prefill time at the FLOP/s F that makes the weight FLOPs cost tau per token.
_PREFILL_ATTENTION_SECONDS = sp.factor(_PREFILL_FLOPS / F).subs(F, 2 * N_params / tau)

# Layer-by-layer sending: layer i is computed at i c (c = t_pre / L) and its send (x = t_m + t_x / L)
# starts when it is computed and the link is free; the last send ends max_m ((m+1) x - m c) after
# prefill, linear in m, so the maximum is at m = 0 or m = L - 1.
_LAYER_C = t_pre / L
_LAYER_X = t_m + t_x / L
_EXPOSED = sp.Max(_LAYER_X, L * _LAYER_X - (L - 1) * _LAYER_C)
# Roofline: bytes are the weights read once per pass plus the KV written (prefill) or read (decode);
# a decode step's FLOPs are 2 per parameter per request plus attention over n_ctx tokens.
_PREFILL_BYTES = N_params * b + P * beta
_DECODE_FLOPS = n_b * (2 * N_params + 4 * L * ctx * d_model)
_DECODE_BYTES = N_params * b + n_b * ctx * beta
_IMPLIED_FLOPS = 2 * N_params / tau

# random routing with nested prefix hits: the history is K earlier turns of H / K tokens, each
# served by a random one of N replicas that keeps it (unlimited caches). The chosen replica holds
# the prompt up to the end of the latest earlier turn it served: turn j of K (1 = the oldest) with
# probability (1/N)(1 - 1/N)^(K-j), worth j H / K tokens. The sum, in closed form (checked against
# the sum in lib/tests/test_calc.py), is H (1 - (N - 1)(1 - (1 - 1/N)^K) / K); K = 1 gives H / N.
_RANDOM_NESTED = S + H * (1 - (N - 1) * (1 - (1 - 1 / N) ** K_turns) / K_turns)

FORMULAS: dict[str, Formula] = {
    f.name: f
    for f in [
        # KV cache size
        _f(
            "kv_bytes_per_token",
            beta,
            2 * L * H_kv * d_h * b,
            "K and V, for every layer and KV head, one head_dim vector each",
            "bytes per token",
        ),
        _f("kv_bytes", "B_req", P * beta, "KV cache of a P-token prompt", "bytes"),
        _f("cache_bytes", "M", C * beta, "memory to keep C tokens of KV", "bytes"),
        # moving it
        _f(
            "one_way_bandwidth",
            W,
            W_bidir / 2,
            "one direction of a link quoted as both directions together",
            "bytes/s",
        ),
        _f(
            "per_gpu_share",
            "B_gpu",
            B_kv / sp.Min(tp, H_kv),
            "bytes each GPU holds and sends: KV heads split over tp GPUs while tp <= H_kv, "
            "each GPU one whole head (replicated) beyond",
            "bytes",
        ),
        _f(
            "transfer_seconds",
            "t_xfer",
            t_0 + B_kv / (n_links * W),
            "time to move B bytes over n_links links in parallel",
            "s",
        ),
        # Problem 8: what routing does to the hit rate
        _f(
            "cached_tokens_random",
            "c_rand",
            S + H / N,
            "expected cached tokens when a request lands on a random one of N replicas",
            "tokens",
        ),
        _f(
            "cached_tokens_random_nested",
            "c_nest",
            _RANDOM_NESTED,
            "expected cached tokens under random routing when the history is K equal earlier "
            "turns and every replica keeps what it served (prefix hits nest)",
            "tokens",
        ),
        _f(
            "cached_tokens_cache_aware",
            "c_aware",
            S + H,
            "cached tokens when the router finds the replica holding the history",
            "tokens",
        ),
        _f("hit_fraction", h, c_tok / (S + H + U), "share of the prompt served from cache", "1"),
        _f(
            "prefill_load",
            "X_pre",
            lam * (S + H + U - c_tok),
            "prompt tokens per second the fleet must compute",
            "tokens/s",
        ),
        _f(
            "fleet_prefill_capacity",
            "X_cap",
            N * mu,
            "prompt tokens per second N replicas can compute",
            "tokens/s",
        ),
        _f(
            "capacity_share",
            "rho",
            X / (N * mu),
            "share of the fleet's prefill capacity in use",
            "1",
        ),
        _f(
            "prefill_seconds",
            "t_pre",
            (S + H + U - c_tok) * tau,
            "prefill time of one request under the linear cost model",
            "s",
        ),
        _f(
            "fleet_cache_tokens",
            "C_fleet",
            N * C,
            "tokens the whole fleet can keep cached",
            "tokens",
        ),
        _f(
            "histories_that_fit",
            "n_hist",
            N * C / H,
            "H-token histories the fleet cache can hold",
            "1",
        ),
        _f(
            "conversations_that_fit",
            "n_conv",
            N * (C - S) / (H + U + O_out),
            "conversations the fleet cache holds after a turn (history, new message and answer "
            "each), with the system prompt kept on every replica",
            "1",
        ),
        _f(
            "tier_break_even_bandwidth",
            "W_even",
            beta / tau,
            "bandwidth at which loading cached KV takes as long as recomputing it",
            "bytes/s",
        ),
        # Problem 22: sizing the pools
        _f(
            "prefill_demand",
            "X_P",
            lam * P * (1 - h),
            "prompt tokens per second still to compute",
            "tokens/s",
        ),
        _f(
            "prefill_replicas_exact",
            "n_P",
            lam * P * (1 - h) / mu,
            "prefill replicas' worth of work (round up to deploy)",
            "replicas",
        ),
        _f(
            "decode_step_seconds",
            "t_step",
            a + k * n_b,
            "one decode step with n_b running requests",
            "s",
        ),
        _f(
            "max_decode_batch",
            "n_max",
            _MAX_BATCH,
            "largest batch whose step time meets the TPOT target (round down)",
            "requests",
        ),
        _f(
            "littles_law",
            Q,
            lam * R_time,
            "requests in a system = arrival rate x time in it",
            "requests",
        ),
        _f(
            "decode_concurrency",
            "Q_D",
            _DECODE_CONCURRENCY,
            "requests decoding at once: each stays O steps of T seconds",
            "requests",
        ),
        _f(
            "decode_batch_at_load",
            "n_L",
            _LOADED_BATCH,
            "batch each of N decode replicas carries at rate lambda when a step lasts a + k n_b "
            "(valid while N > lambda O k)",
            "requests",
        ),
        _f(
            "decode_replicas_exact",
            "n_D",
            _DECODE_CONCURRENCY / _MAX_BATCH,
            "decode replicas' worth of work (round up to deploy)",
            "replicas",
        ),
        # prefill compute with attention
        _f(
            "prefill_flops",
            "F_pre",
            _PREFILL_FLOPS,
            "matmul FLOPs of a P-token prefill: weights plus causal attention (QK^T and AV)",
            "FLOP",
        ),
        _f(
            "prefill_flops_with_prefix",
            "F_rest",
            2 * N_params * (P - c_tok) + 2 * L * d_model * (P - c_tok) * (P + c_tok),
            "prefill FLOPs when the first c tokens' KV is reused (c = 0 gives prefill_flops)",
            "FLOP",
        ),
        _f(
            "prefill_seconds_attention",
            "t_pre_att",
            _PREFILL_ATTENTION_SECONDS,
            "prefill time when the linear cost tau per token is the weight FLOPs at the same FLOP/s",
            "s",
        ),
        # disaggregation: overlap and roofline
        _f(
            "exposed_transfer",
            "t_exposed",
            _EXPOSED,
            "transfer left after prefill ends when each layer's KV is sent as soon as it is computed",
            "s",
        ),
        _f(
            "prefill_intensity",
            "I_pre",
            _PREFILL_FLOPS / _PREFILL_BYTES,
            "FLOP per byte of one P-token prefill pass (weights read once, KV written)",
            "FLOP/byte",
        ),
        _f(
            "decode_intensity",
            "I_dec",
            _DECODE_FLOPS / _DECODE_BYTES,
            "FLOP per byte of one decode step of n_b requests with n_ctx tokens of context each",
            "FLOP/byte",
        ),
        _f(
            "implied_flops",
            "F_impl",
            _IMPLIED_FLOPS,
            "weight FLOP/s a replica must sustain to prefill one token every tau seconds",
            "FLOP/s",
        ),
        _f(
            "implied_mfu",
            "MFU",
            _IMPLIED_FLOPS / (n_gpu * F_peak),
            "share of the replica's peak FLOP/s that the assumed prefill cost implies",
            "1",
        ),
        _f(
            "weight_read_seconds",
            "t_w",
            N_params * b / (n_gpu * W_hbm),
            "time to read every weight once from HBM, all GPUs in parallel (a decode step's floor)",
            "s",
        ),
        _f(
            "decode_step_bytes",
            "B_step",
            _DECODE_BYTES,
            "bytes a decode step reads: the weights plus every running request's KV",
            "bytes",
        ),
        # queueing
        _f(
            "mg1_wait",
            "W_q",
            lam * ES2 / (2 * (1 - lam * ES)),
            "mean wait in an M/G/1 queue (Pollaczek-Khinchine), valid while lambda E[S] < 1",
            "s",
        ),
        _f(
            "arithmetic_intensity_linear",
            "I",
            2 * n_b / b,
            "FLOP per byte of weights read when n_b tokens share one pass over the weights",
            "FLOP/byte",
        ),
    ]
}


# --- exercises (issue 16): decode memory, network load, cost, a CPU tier, operations ------------
u_mem = sp.Symbol("u_mem", positive=True)  # share of HBM the engine may use (vLLM default 0.9)
M_gpu = sp.Symbol("M_gpu", positive=True)  # HBM of one GPU, bytes
b_w = sp.Symbol("b_w", positive=True)  # bytes per weight (2 for fp16)
M_kv = sp.Symbol("M_kv", positive=True)  # HBM left for KV in one replica, bytes
n_mem = sp.Symbol("n_mem", positive=True)  # requests whose KV fits at once
k_in = sp.Symbol("k_in", positive=True)  # senders converging on one receiver at once
rho_max = sp.Symbol("rho_max", positive=True)  # highest busy share a pool is sized for
g_P = sp.Symbol("g_P", positive=True)  # GPUs per prefill replica
g_D = sp.Symbol("g_D", positive=True)  # GPUs per decode replica
c_P = sp.Symbol("c_P", positive=True)  # price of a prefill GPU, $ per GPU-hour
c_D = sp.Symbol("c_D", positive=True)  # price of a decode GPU, $ per GPU-hour
n_P = sp.Symbol("n_P", positive=True)  # prefill replicas
n_D = sp.Symbol("n_D", positive=True)  # decode replicas
W_ref = sp.Symbol("W_ref", positive=True)  # HBM bandwidth the decode step costs were set on
W_new = sp.Symbol("W_new", positive=True)  # HBM bandwidth of the other GPU
T_back = sp.Symbol("T_back", positive=True)  # mean time between a conversation's turns, s

# A bandwidth-bound decode step reads the same bytes on any GPU, so its time scales with
# W_ref / W_new; the largest batch on that GPU is that step time set equal to T, solved for n_b.
_STEP_OTHER = (a + k * n_b) * W_ref / W_new
_MAX_BATCH_OTHER = sp.solve(sp.Eq(_STEP_OTHER, T), n_b)[0]
# KV memory: n requests of P + O tokens each fill M_kv, solved for n.
_HBM_FOR_KV = u_mem * n_gpu * M_gpu - N_params * b_w
_MAX_BATCH_MEMORY = sp.solve(sp.Eq(n_mem * (P + O_out) * beta, M_kv), n_mem)[0]
# k senders each moving B bytes into one receiver share its n_links links (transfer_seconds, t_0 = 0).
_INCAST = (t_0 + B_kv / (n_links * W)).subs({B_kv: k_in * B_kv, t_0: 0})
# After the router forgets, a conversation's next turn finds its history with probability 1/N:
# the history tokens lost are cache-aware minus random cached tokens, for every live conversation.
_LIVE_CONVERSATIONS = (lam * R_time).subs(R_time, T_back)
_RESTART_LOST = sp.simplify(_LIVE_CONVERSATIONS * ((S + H) - (S + H / N)))

FORMULAS.update(
    {
        f.name: f
        for f in [
            _f(
                "hbm_for_kv",
                M_kv,
                _HBM_FOR_KV,
                "HBM left for KV in a replica of n_gpu GPUs after the weights, at share u_mem",
                "bytes",
            ),
            _f(
                "max_batch_memory",
                n_mem,
                _MAX_BATCH_MEMORY,
                "requests whose whole KV (prompt plus output) fits in M_kv (round down)",
                "requests",
            ),
            _f(
                "kv_stream_bandwidth",
                "W_kv",
                lam * P * beta,
                "bytes per second the prefill pool ships to the decode pool",
                "bytes/s",
            ),
            _f(
                "incast_seconds",
                "t_incast",
                _INCAST,
                "time for k senders' KV of B bytes each to enter one receiver over n_links links",
                "s",
            ),
            _f(
                "replicas_with_headroom",
                "n_dep",
                X / (mu * rho_max),
                "replicas that keep each one at most rho_max busy (round up to deploy)",
                "replicas",
            ),
            _f(
                "cost_per_request",
                "c_req",
                (n_P * g_P * c_P + n_D * g_D * c_D) / (3600 * lam),
                "dollars per request: GPU-hours of both pools per second over requests per second",
                "$",
            ),
            _f(
                "decode_step_other_gpu",
                "t_step_other",
                _STEP_OTHER,
                "bandwidth-bound decode step moved to a GPU with HBM bandwidth W_new",
                "s",
            ),
            _f(
                "max_decode_batch_other_gpu",
                "n_max_other",
                _MAX_BATCH_OTHER,
                "largest batch meeting T on that GPU (round down)",
                "requests",
            ),
            _f(
                "live_conversations",
                "Q_conv",
                _LIVE_CONVERSATIONS,
                "conversations alive at once (Little's law): turn rate x time between turns",
                "conversations",
            ),
            _f(
                "tier_capacity_bytes",
                "M_tier",
                _LIVE_CONVERSATIONS * H * beta,
                "memory to keep every live conversation's history of H tokens",
                "bytes",
            ),
            _f(
                "restart_lost_tokens",
                "X_lost",
                _RESTART_LOST,
                "history tokens recomputed once when a cache-aware router loses its record",
                "tokens",
            ),
        ]
    }
)


# --- one cost model for every simulator (issue 20) ------------------------------------------------
t_p0 = sp.Symbol("t_p0", nonnegative=True)  # fixed part of a prefill pass, s
eta_lin = sp.Symbol("eta_lin", positive=True)  # share of peak FLOP/s the weight matmuls reach
eta_att = sp.Symbol("eta_att", positive=True)  # share of peak FLOP/s the attention reaches
c_kv = sp.Symbol("c_kv", nonnegative=True)  # decode step cost per context token in the batch, s
n_tok = sp.Symbol("n_tok", nonnegative=True)  # prompt tokens prefilled inside a mixed step
n_msg = sp.Symbol("n_msg", nonnegative=True)  # messages a transfer is split into
eta_kv = sp.Symbol("eta_kv", positive=True)  # share of HBM bandwidth a decode step's KV read gets

t_pair = sp.Symbol("t_pair", nonnegative=True)  # prefill attention cost per (query, key) pair, s

# U new tokens after c cached ones: token i attends to c + i tokens, so the pairs are U c + U^2/2
# (U^2 / 2 at c = 0, as in _PREFILL_FLOPS). Each pair costs 2 matmuls x 2 FLOPs x d_model per layer.
_PAIRS = U * c_tok + U**2 / 2
_PAIR_SECONDS = 4 * L * d_model / (tp * F_peak * eta_att)
# Prefill: a fixed part, tau per new token (the weight FLOPs; tau and the MFU it implies are linked
# by implied_mfu with n_gpu = tp) and the attention pairs. The efficiency of the whole pass rises
# with U because t_p0 is spread over more tokens (prefill_mfu).
_PREFILL_MODEL = t_p0 + tau * U + t_pair * _PAIRS
# A decode step reads the weights once (folded into the fixed part a, with the launch overhead),
# does a little work per request (k) and reads every request's KV: n_b n_ctx tokens at c_kv each.
_DECODE_MODEL = a + k * n_b + c_kv * n_b * ctx
# c_kv from first principles: beta bytes per context token over tp GPUs' HBM at efficiency eta_kv.
_KV_READ_PER_TOKEN = beta / (tp * W_hbm * eta_kv)
# A mixed step (a chunk of n_tok prompt tokens riding with the decode batch) is one forward pass:
# the fixed part and the weight read are paid once, so the chunk adds only its marginal cost.
_MIXED_MODEL = _DECODE_MODEL + (_PREFILL_MODEL - t_p0).subs({U: n_tok})
# Average-level ratio of split to colocated capacity (the lever). With steps of T seconds a replica
# loses a / T of its time to the fixed part; the rest serves r (P + k (O - 1)) per second when it
# also prefills (chunks ride in the steps), so colocated r_c = (1 - a/T) / (P + k (O - 1)) per
# replica. Prefill-only replicas pay no a: 1 / P each; decode-only (1 - a/T) / (k (O - 1)). The best
# split of N replicas serves N / (P + k (O - 1) / (1 - a/T)); over N r_c that is:
_LEVER = (k * (O_out - 1) + t_pre) / ((1 - a / T) * t_pre + k * (O_out - 1))
# The same with prefill's fixed part t_p0: a whole prompt on a prefill replica is a pass of its own
# and pays t_p0; a chunk riding in a colocated step does not (the mixed step above), so colocated
# prefill costs t_pre - t_p0 a request. With t_p0 = 0 this is the lever above.
_LEVER_P0 = (k * (O_out - 1) + t_pre - t_p0) / ((1 - a / T) * t_pre + k * (O_out - 1))

FORMULAS.update(
    {
        f.name: f
        for f in [
            _f(
                "prefill_seconds_model",
                "t_prefill",
                _PREFILL_MODEL,
                "prefill of U new tokens after c cached ones: fixed part, tau per token (weight "
                "FLOPs), t_pair per attention pair over the whole context",
                "s",
            ),
            _f(
                "attention_pair_seconds",
                t_pair,
                _PAIR_SECONDS,
                "prefill attention cost per (query, key) pair on tp GPUs at share eta_att of peak",
                "s",
            ),
            _f(
                "prefill_mfu",
                "MFU_pre",
                2 * N_params * U / (tp * F_peak * _PREFILL_MODEL),
                "share of peak FLOP/s the weight FLOPs of a prefill reach (rises with U: the "
                "fixed part is spread over more tokens)",
                "1",
            ),
            _f(
                "decode_step_seconds_model",
                "t_dec",
                _DECODE_MODEL,
                "decode step of n_b requests with n_ctx context tokens each: fixed part (weights "
                "and overhead), per-request cost, KV read",
                "s",
            ),
            _f(
                "kv_read_seconds_per_token",
                c_kv,
                _KV_READ_PER_TOKEN,
                "time to read one context token's KV on tp GPUs at share eta of HBM bandwidth",
                "s",
            ),
            _f(
                "mixed_step_seconds_model",
                "t_mix",
                _MIXED_MODEL,
                "one step carrying a chunk of n_tok prompt tokens (after c cached) and a decode "
                "batch: the prefill's fixed part is not paid twice",
                "s",
            ),
            _f(
                "transfer_seconds_messages",
                "t_xfer_msg",
                t_0 + B_kv / (n_links * W) + n_msg * t_m,
                "B bytes over n_links links, sent as n_msg messages of fixed cost t_m each",
                "s",
            ),
            _f(
                "split_colocated_ratio",
                "r_split",
                _LEVER,
                "average-level capacity of a split fleet over a colocated one: decode-only "
                "replicas shed the fixed step part a from each request's prefill time",
                "1",
            ),
            _f(
                "split_colocated_ratio_p0",
                "r_split_p0",
                _LEVER_P0,
                "the lever with prefill's fixed part t_p0, which a prefill replica's whole-prompt "
                "pass pays and a colocated chunk riding in a decode step does not",
                "1",
            ),
        ]
    }
)


def formula(name: str) -> Formula:
    try:
        return FORMULAS[name]
    except KeyError:
        raise ValueError(f"name must be one of {sorted(FORMULAS)}, got {name!r}") from None


def latex(name: str) -> str:
    """The formula as LaTeX, ``lhs = rhs``."""
    f = formula(name)
    return f"{sp.latex(f.lhs)} = {sp.latex(f.rhs)}"


def solve_for(name: str, symbol: sp.Symbol) -> sp.Expr:
    """Solve the formula ``name`` for ``symbol`` (one solution expected)."""
    f = formula(name)
    solutions = sp.solve(sp.Eq(f.lhs, f.rhs), symbol)
    if len(solutions) != 1:
        raise ValueError(f"expected one solution for {symbol} in {name}, got {solutions}")
    return solutions[0]


def substituted(name: str, **values) -> sp.Expr:
    """The right-hand side with some symbols replaced by numbers (keys are symbol names)."""
    f = formula(name)
    by_name = {s.name: s for s in f.rhs.free_symbols}
    unknown = set(values) - set(by_name)
    if unknown:
        raise ValueError(f"{name} has no symbols {sorted(unknown)}; it has {sorted(by_name)}")
    return f.rhs.subs({by_name[key]: sp.nsimplify(v) for key, v in values.items()})


# --- Problem 22: latent KV (MLA) and the per-GPU rule for replicated latents ----------------------
d_c = sp.Symbol("d_c", positive=True)  # MLA: compressed KV latent dimension (kv_lora_rank)
d_r = sp.Symbol("d_r", positive=True)  # MLA: decoupled RoPE key dimension, shared by all heads
B_split = sp.Symbol("B_split", nonnegative=True)  # request KV held per head (split across TP)
B_repl = sp.Symbol("B_repl", nonnegative=True)  # request KV shared by all heads (replicated)

FORMULAS.update(
    {
        f.name: f
        for f in [
            _f(
                "mla_kv_bytes_per_token",
                "beta_MLA",
                L * (d_c + d_r) * b,
                "MLA keeps one latent vector and one RoPE key per layer, shared by every head",
                "bytes per token",
            ),
            _f(
                "per_gpu_share_general",
                "B_gpu",
                B_split / sp.Min(tp, H_kv) + B_repl,
                "bytes each TP GPU holds and sends: per-head KV split over min(tp, H_kv) GPUs, "
                "latents that every head reads (MLA) replicated on every GPU",
                "bytes",
            ),
        ]
    }
)
