"""A toy causal decoder in numpy whose keys and values can be compared between prompts.

Used by the notebooks to show why only a shared prefix has reusable KV, and what goes wrong when a
cache key forgets the adapter. Random weights, fixed seed; not a language model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ._validate import check_int
from .cache.common import _as_tokens

__all__ = ["TinyDecoder"]

# What the cache holds: a toy decoder whose K/V can be compared between prompts


class TinyDecoder:
    """A tiny causal decoder in numpy (single-head attention + MLP per layer, random weights from a
    fixed seed, sinusoidal absolute positions), to show what a prefix cache stores and when it may
    be reused. ``adapters`` names LoRA-like adapters: each adds a seeded rank-2 change to every
    layer's key and value weights, so the same tokens give different K/V under different adapters.

    ``forward(tokens, adapter, past)`` returns (hidden states of the positions it computed, per-layer
    (K, V) for all positions); ``past`` is a per-layer list of (K, V) for the first positions, reused
    instead of recomputed (what a prefix-cache hit does).
    """

    def __init__(
        self,
        vocab: int = 32,
        d_model: int = 16,
        layers: int = 2,
        seed: int = 0,
        adapters: Sequence[str] = (),
        max_len: int = 512,
    ):
        self.vocab = check_int("vocab", vocab, lo=2)
        self.d = check_int("d_model", d_model, lo=2)
        self.layers = check_int("layers", layers, lo=1)
        self.max_len = check_int("max_len", max_len, lo=1)
        rng = np.random.default_rng(check_int("seed", seed, lo=0))
        d = self.d
        self.emb = rng.normal(0.0, 1.0, (self.vocab, d))
        pos = np.arange(self.max_len)[:, None] / (10_000 ** (np.arange(0, d, 2) / d))[None, :]
        self.pos = np.zeros((self.max_len, d))
        self.pos[:, 0::2], self.pos[:, 1::2] = np.sin(pos), np.cos(pos)
        s = 1 / np.sqrt(d)
        self.w = [
            {n: rng.normal(0.0, s, (d, d)) for n in ("q", "k", "v", "o", "up", "down")}
            for _ in range(self.layers)
        ]
        self.adapters: dict[str, list] = {}
        for name in adapters:
            seed_a = int.from_bytes(
                hashlib.blake2b(str(name).encode(), digest_size=8).digest(), "little"
            )
            r = np.random.default_rng(seed_a)
            self.adapters[name] = [
                {n: r.normal(0, 0.5 * s, (d, 2)) @ r.normal(0, 0.5 * s, (2, d)) for n in ("k", "v")}
                for _ in range(self.layers)
            ]

    def _weights(self, layer: int, adapter):
        w = dict(self.w[layer])
        if adapter is not None:
            if adapter not in self.adapters:
                raise ValueError(
                    f"adapter must be None or one of {sorted(self.adapters)}, got {adapter!r}"
                )
            for n, delta in self.adapters[adapter][layer].items():
                w[n] = w[n] + delta
        return w

    def layer(self, x: np.ndarray, w: dict, first: int, past_kv=None):
        """One layer for positions ``first``.. (rows of ``x``): K and V of those positions, appended
        to the cached ones, then causal attention (position i sees keys 0..i) and an MLP.

        Exact reuse by construction: every product is computed row by row (a stack of 1 x d rows
        times a matrix, one BLAS call per row), and each row's attention runs over all keys of the
        sequence with the later ones masked. So position i runs the same operations on arrays of
        the same shapes whether its prefix was computed in this call or taken from ``past_kv``, and
        a cache hit reproduces the full computation bit for bit on any BLAS kernel. One matrix
        product over all rows would not: the kernel a CPU picks for a shape fixes its summation
        order, and a cached and a fresh run multiply matrices of different shapes."""

        def rows(a: np.ndarray, m: np.ndarray) -> np.ndarray:
            return (a[:, None, :] @ m)[:, 0, :]  # row by row: the same call for every row

        k_new, v_new = rows(x, w["k"]), rows(x, w["v"])
        if past_kv is None:
            k_all, v_all = k_new, v_new
        else:
            k_all, v_all = np.vstack([past_kv[0], k_new]), np.vstack([past_kv[1], v_new])
        scores = rows(rows(x, w["q"]), k_all.T) / np.sqrt(self.d)
        pos = np.arange(first, first + len(x))[:, None]
        scores = np.where(np.arange(len(k_all))[None, :] > pos, -np.inf, scores)  # causal mask
        a = np.exp(scores - scores.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        x = x + rows(rows(a, v_all), w["o"])
        x = x + rows(np.tanh(rows(x, w["up"])), w["down"])
        return x, (k_all, v_all)

    def forward(self, tokens, adapter=None, past=None):
        """Hidden states of the uncached positions and per-layer (K, V) of every position."""
        arr = _as_tokens("tokens", tokens)
        if len(arr) > self.max_len or (len(arr) and arr.max() >= self.vocab):
            raise ValueError(f"tokens must be at most {self.max_len} ids in [0, {self.vocab - 1}]")
        first = 0 if past is None else len(past[0][0])
        x = self.emb[arr[first:]] + self.pos[first : len(arr)]
        kv = []
        for i in range(self.layers):
            x, layer_kv = self.layer(
                x, self._weights(i, adapter), first, None if past is None else past[i]
            )
            kv.append(layer_kv)
        return x, kv

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Next-token scores from hidden states (tied embeddings)."""
        return hidden @ self.emb.T
