"""A small PyTorch transformer with real prefix reuse.

:class:`TinyTransformer` is a decoder-only model (RMSNorm, rotary positions, grouped-query
attention through ``torch.nn.functional.scaled_dot_product_attention``, SwiGLU MLP) with random
weights and any shape (a :class:`kvlab.models.ModelShape` gives layers and heads). It returns the
KV of every layer, and accepts earlier KV as ``past`` so that only new tokens are computed.

:class:`PrefixKVStore` keeps KV in blocks of ``block_size`` tokens keyed by chained block hashes
(the vLLM scheme; :func:`kvlab.measure.prefix.prompts.block_hashes`) and counts queried and hit tokens
like vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits``. :class:`PrefixReuseEngine` prefills a
prompt, reusing the longest cached run of blocks. Because attention is causal, the reused KV is
exactly what a cold prefill would compute, so outputs match to float rounding (checked by
:func:`prefix_reuse_check`).

This module imports torch at load time; ``kvlab.measure`` loads it only on first use.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from ... import formulas
from ..._validate import check_int, non_negative, positive
from ..serving import prom
from .prompts import block_hashes

# --- the cost of a prefill that reuses a prefix: defined once in kvlab.formulas ----------------
#: Matmul FLOPs to prefill the last P - c tokens of a prompt whose first c tokens' KV is reused.
PREFILL_FLOPS_WITH_PREFIX = formulas.FORMULAS["prefill_flops_with_prefix"].rhs
P_s, c_s, N_s, L_s, d_s = (
    formulas.P,
    formulas.c_tok,
    formulas.N_params,
    formulas.L,
    formulas.d_model,
)


def prefill_flops_with_prefix(
    prompt_tokens: float, cached_tokens: float, params: float, layers: int, d_model: int
) -> float:
    """:data:`PREFILL_FLOPS_WITH_PREFIX` evaluated (FLOPs)."""
    non_negative("prompt_tokens", prompt_tokens)
    if not 0 <= cached_tokens <= prompt_tokens:
        raise ValueError(f"cached_tokens must be in [0, {prompt_tokens}], got {cached_tokens!r}")
    return float(
        PREFILL_FLOPS_WITH_PREFIX.subs(
            {P_s: prompt_tokens, c_s: cached_tokens, N_s: params, L_s: layers, d_s: d_model}
        )
    )


def predicted_saving_s(cold_s: float, prompt_tokens: int, cached_tokens: int, model=None) -> float:
    """Seconds a prefix hit should save, from a measured cold prefill of the same prompt.

    Without ``model``: the book's linear cost model (time per prompt token is constant), so the
    saving is ``cold_s x cached / prompt``. With a ``ModelShape``-like ``model`` (params, layers,
    d_model): the same share of :data:`PREFILL_FLOPS_WITH_PREFIX`, which counts attention.
    """
    positive("cold_s", cold_s)
    prompt_tokens = check_int("prompt_tokens", prompt_tokens, lo=1)
    cached_tokens = check_int("cached_tokens", cached_tokens, lo=0, hi=prompt_tokens)
    if model is None:
        return cold_s * cached_tokens / prompt_tokens
    full = prefill_flops_with_prefix(prompt_tokens, 0, model.params, model.layers, model.d_model)
    rest = prefill_flops_with_prefix(
        prompt_tokens, cached_tokens, model.params, model.layers, model.d_model
    )
    return cold_s * (1 - rest / full)


# --- the model -----------------------------------------------------------------------------------


class _Factory(TypedDict):
    """Where, and in which dtype, a module creates its parameters (torch's factory kwargs)."""

    dtype: torch.dtype
    device: torch.device | str


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6, **kw):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, **kw))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rope(x, positions, base: float):
    """Rotary position embedding of x [heads, T, head_dim] at integer ``positions`` [T]."""
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, x[..., 2 * half :]], dim=-1)


class Block(nn.Module):
    def __init__(self, d_model, q_heads, kv_heads, head_dim, ffn_dim, rope_base, **kw):
        super().__init__()
        self.q_heads, self.kv_heads, self.head_dim, self.rope_base = (
            q_heads,
            kv_heads,
            head_dim,
            rope_base,
        )
        self.norm1 = RMSNorm(d_model, **kw)
        self.norm2 = RMSNorm(d_model, **kw)
        self.wq = nn.Linear(d_model, q_heads * head_dim, bias=False, **kw)
        self.wk = nn.Linear(d_model, kv_heads * head_dim, bias=False, **kw)
        self.wv = nn.Linear(d_model, kv_heads * head_dim, bias=False, **kw)
        self.wo = nn.Linear(q_heads * head_dim, d_model, bias=False, **kw)
        self.w1 = nn.Linear(d_model, ffn_dim, bias=False, **kw)
        self.w3 = nn.Linear(d_model, ffn_dim, bias=False, **kw)
        self.w2 = nn.Linear(ffn_dim, d_model, bias=False, **kw)

    def forward(self, x, positions, past):
        T = x.shape[0]
        h = self.norm1(x)
        q = self.wq(h).view(T, self.q_heads, self.head_dim).transpose(0, 1)
        k = self.wk(h).view(T, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.wv(h).view(T, self.kv_heads, self.head_dim).transpose(0, 1)
        q = _rope(q, positions, self.rope_base)
        k = _rope(k, positions, self.rope_base)
        past_len = 0
        if past is not None:
            past_len = past[0].shape[1]
            k = torch.cat([past[0], k], dim=1)
            v = torch.cat([past[1], v], dim=1)
        group = self.q_heads // self.kv_heads
        kr = k.repeat_interleave(group, dim=0) if group > 1 else k
        vr = v.repeat_interleave(group, dim=0) if group > 1 else v
        if past_len == 0:
            att = F.scaled_dot_product_attention(q[None], kr[None], vr[None], is_causal=True)
        else:
            S = k.shape[1]
            allowed = (
                torch.arange(S, device=x.device)[None, :]
                <= (past_len + torch.arange(T, device=x.device))[:, None]
            )
            att = F.scaled_dot_product_attention(q[None], kr[None], vr[None], attn_mask=allowed)
        x = x + self.wo(att[0].transpose(0, 1).reshape(T, -1))
        h = self.norm2(x)
        x = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x, (k, v)


class TinyTransformer(nn.Module):
    """A decoder-only transformer with random weights; batch of one prompt (1-D token ids)."""

    def __init__(
        self,
        layers: int = 4,
        q_heads: int = 8,
        kv_heads: int = 2,
        head_dim: int = 32,
        d_model: int | None = None,
        ffn_dim: int | None = None,
        vocab: int = 1024,
        rope_base: float = 10_000.0,
        seed: int = 0,
        dtype=None,
        device=None,
    ):
        super().__init__()
        layers = check_int("layers", layers, lo=1)
        q_heads = check_int("q_heads", q_heads, lo=1)
        kv_heads = check_int("kv_heads", kv_heads, lo=1, hi=q_heads)
        if q_heads % kv_heads:
            raise ValueError(f"kv_heads must divide q_heads ({q_heads}), got {kv_heads}")
        head_dim = check_int("head_dim", head_dim, lo=2)
        d_model = check_int("d_model", d_model or q_heads * head_dim, lo=1)
        ffn_dim = check_int("ffn_dim", ffn_dim or 4 * d_model, lo=1)
        vocab = check_int("vocab", vocab, lo=2)
        kw: _Factory = {"dtype": dtype or torch.float32, "device": device or "cpu"}
        self.shape = {
            "layers": layers,
            "q_heads": q_heads,
            "kv_heads": kv_heads,
            "head_dim": head_dim,
            "d_model": d_model,
            "ffn_dim": ffn_dim,
            "vocab": vocab,
        }
        self.embed = nn.Embedding(vocab, d_model, **kw)
        self.blocks = nn.ModuleList(
            Block(d_model, q_heads, kv_heads, head_dim, ffn_dim, rope_base, **kw)
            for _ in range(layers)
        )
        self.norm = RMSNorm(d_model, **kw)
        self.head = nn.Linear(d_model, vocab, bias=False, **kw)
        g = torch.Generator(device=kw["device"]).manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" not in name:
                    p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=g)
        self.eval()

    @classmethod
    def from_shape(cls, shape, vocab: int = 1024, ffn_dim: int | None = None, **kw):
        """A model with the layers and heads of a :class:`kvlab.models.ModelShape`."""
        return cls(
            layers=shape.layers,
            q_heads=shape.q_heads,
            kv_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            d_model=shape.d_model,
            ffn_dim=ffn_dim,
            vocab=vocab,
            **kw,
        )

    @property
    def device(self):
        return self.head.weight.device

    @property
    def kv_bytes_per_token(self) -> int:
        s = self.shape
        return 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * self.head.weight.element_size()

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def block_params(self) -> int:
        """Parameters of the transformer blocks only: the weights every prompt token multiplies
        through. The embedding is a lookup (no FLOPs) and the LM head runs on the last position
        only, so neither belongs in a prefill FLOP count."""
        return sum(p.numel() for p in self.blocks.parameters())

    @torch.no_grad()
    def forward(self, ids, past=None):
        """(logits of the last position [vocab], hidden states [T, d_model], KV per layer).

        ``ids``: 1-D token ids of the new tokens; ``past``: KV of the tokens before them (a list
        of (k, v) per layer, each [kv_heads, past_len, head_dim]). KV returned covers all tokens.
        """
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        if ids.ndim != 1 or ids.numel() == 0:
            raise ValueError(
                f"ids must be a non-empty 1-D sequence of token ids, got shape {tuple(ids.shape)}"
            )
        past_len = 0 if past is None else past[0][0].shape[1]
        positions = torch.arange(past_len, past_len + ids.numel(), device=self.device)
        x = self.embed(ids)
        kv = []
        for i, blk in enumerate(self.blocks):
            x, layer_kv = blk(x, positions, None if past is None else past[i])
            kv.append(layer_kv)
        x = self.norm(x)
        return self.head(x[-1]), x, kv


def make_model(
    shape=None,
    vocab: int = 1024,
    device: str = "cpu",
    dtype=None,
    seed: int = 0,
    ffn_dim: int | None = None,
) -> TinyTransformer:
    """A :class:`TinyTransformer` of ``shape`` (default :data:`kvlab.models.TINY_LAB`)."""
    from ... import models

    return TinyTransformer.from_shape(
        shape or models.TINY_LAB,
        vocab=vocab,
        ffn_dim=ffn_dim,
        device=device,
        dtype=dtype,
        seed=seed,
    )


# --- the prefix store and the engine -------------------------------------------------------------


class PrefixKVStore:
    """KV blocks keyed by chained block hashes, with vLLM-style query/hit token counters.

    ``capacity_blocks`` bounds the store; the least recently used block is dropped first (a
    simplification: :mod:`kvlab.cache` implements reference counts and leaves-first eviction).
    """

    def __init__(self, block_size: int = 16, capacity_blocks: int | None = None):
        self.block_size = check_int("block_size", block_size, lo=1)
        self.capacity_blocks = (
            None if capacity_blocks is None else check_int("capacity_blocks", capacity_blocks, lo=1)
        )
        self.blocks: OrderedDict[str, list] = OrderedDict()
        self.queries_tokens = 0
        self.hits_tokens = 0

    def __len__(self) -> int:
        return len(self.blocks)

    def lookup(self, tokens) -> list[str]:
        """Hashes of the leading cached blocks of ``tokens`` (at least one token left to compute);
        counts the query and the hit."""
        n = len(tokens)
        hashes = block_hashes(tokens, self.block_size)[: (n - 1) // self.block_size]
        hit = []
        for h in hashes:
            if h not in self.blocks:
                break
            self.blocks.move_to_end(h)
            hit.append(h)
        self.queries_tokens += n
        self.hits_tokens += len(hit) * self.block_size
        return hit

    def gather(self, hashes):
        """The KV of ``hashes`` (consecutive blocks from the start) as ``past`` for the model."""
        if not hashes:
            return None
        per_block = [self.blocks[h] for h in hashes]
        layers = len(per_block[0])
        return [
            (
                torch.cat([b[i][0] for b in per_block], dim=1),
                torch.cat([b[i][1] for b in per_block], dim=1),
            )
            for i in range(layers)
        ]

    def insert(self, tokens, kv) -> int:
        """Store the full blocks of ``tokens`` from ``kv`` (KV of all tokens). Returns new blocks."""
        bs = self.block_size
        added = 0
        for i, h in enumerate(block_hashes(tokens, bs)):
            if h in self.blocks:
                self.blocks.move_to_end(h)
                continue
            sl = slice(i * bs, (i + 1) * bs)
            self.blocks[h] = [(k[:, sl].clone(), v[:, sl].clone()) for k, v in kv]
            added += 1
            if self.capacity_blocks is not None and len(self.blocks) > self.capacity_blocks:
                self.blocks.popitem(last=False)
        return added

    def reset(self) -> None:
        """Drop every block (the counters keep counting, as a server's do)."""
        self.blocks.clear()

    def metrics_text(self) -> str:
        """The counters as Prometheus text (``kvlab:prefix_cache_queries_total`` ...)."""
        return prom.metrics_text(self.queries_tokens, self.hits_tokens)


@dataclass
class PrefillResult:
    """One prefill: the first output token and what it cost."""

    first_token: int
    prompt_tokens: int
    cached_tokens: int
    seconds: float
    logits: object = None

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


class PrefixReuseEngine:
    """Prefill prompts with a :class:`TinyTransformer`, reusing cached prefix KV when ``store``
    is given (set ``reuse=False`` on a call for a cold prefill)."""

    def __init__(self, model: TinyTransformer, store: PrefixKVStore | None = None):
        self.model = model
        self.store = store

    def _sync(self):
        if self.model.device.type == "cuda":
            torch.cuda.synchronize(self.model.device)

    def prefill(self, tokens, reuse: bool = True, keep_logits: bool = False) -> PrefillResult:
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        n = int(tokens.numel())
        if n == 0:
            raise ValueError("tokens must hold at least one token, got 0")
        self._sync()
        t0 = time.perf_counter()
        hashes = self.store.lookup(tokens.numpy()) if (self.store is not None and reuse) else []
        cached = len(hashes) * (self.store.block_size if self.store is not None else 0)
        # hashes only come from a store
        past = self.store.gather(hashes) if hashes and self.store is not None else None
        logits, _hidden, kv = self.model(tokens[cached:], past=past)
        first = int(torch.argmax(logits))
        self._sync()
        seconds = time.perf_counter() - t0
        if self.store is not None:
            self.store.insert(tokens.numpy(), kv)
        return PrefillResult(
            first, n, cached, seconds, logits.float().cpu() if keep_logits else None
        )


def prefix_reuse_check(
    model: TinyTransformer, tokens, prefix_tokens: int, rtol: float = 1e-4, atol: float = 1e-4
) -> dict:
    """Prefill ``tokens`` cold, and again reusing the KV of its first ``prefix_tokens`` tokens;
    compare the hidden states of the reused part's continuation and the last logits.

    Returns ``{"match": bool, "max_abs_diff": float, "same_first_token": bool}``.
    """
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    n = int(tokens.numel())
    prefix_tokens = check_int("prefix_tokens", prefix_tokens, lo=1, hi=n - 1)
    cold_logits, cold_hidden, cold_kv = model(tokens)
    _, _, prefix_kv = model(tokens[:prefix_tokens])
    warm_logits, warm_hidden, warm_kv = model(tokens[prefix_tokens:], past=prefix_kv)
    diffs = [
        (cold_hidden[prefix_tokens:] - warm_hidden).abs().max(),
        (cold_logits - warm_logits).abs().max(),
        max((ck - wk).abs().max() for (ck, _), (wk, _) in zip(cold_kv, warm_kv, strict=True)),
    ]
    match = torch.allclose(
        cold_hidden[prefix_tokens:], warm_hidden, rtol=rtol, atol=atol
    ) and torch.allclose(cold_logits, warm_logits, rtol=rtol, atol=atol)
    return {
        "match": bool(match),
        "max_abs_diff": float(max(float(d) for d in diffs)),
        "same_first_token": int(cold_logits.argmax()) == int(warm_logits.argmax()),
    }
