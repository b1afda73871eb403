"""What one engine step costs on a real GPU: per-operation times from NVIDIA aiconfigurator's
measured database (vLLM backend), composed for any mix of prompt chunks and decoding requests.

``tools/tabulate_engine_costs.py`` (run once, in aiconfigurator's own environment) asks the
database for four tables per model, GPU, TP and precision and writes
``data/costs/engine_tables.json``; this module reads that file only. A step's time is

* ``shared(m)``: every operation but attention (GEMMs, norms, activations, all-reduce, embedding,
  logits) of a forward pass over ``m`` tokens (the prompt tokens of the step plus one per decoding
  request); a step with no prompt token uses the decode-pass table ``decode_shared(b)``;
* ``sum_i A_ctx(n_i, p_i)``: causal attention of each prompt chunk, ``n_i`` new tokens after
  ``p_i`` tokens already in the KV cache, computed as ``A_ctx(n + p, 0) - A_ctx(p, 0)`` from the
  table's first column (the new tokens' query-key pairs are those of the whole ``n + p`` prompt
  less those of its first ``p`` tokens). The database's own prefix columns fall as the prefix
  grows (1,024 new tokens after 32,768 cached cost less than after none), which no kernel does,
  so they are kept in the file but not used;
* ``A_dec(b, c)``: attention of ``b`` decoding requests with a mean ``c`` tokens of context;
* the host's share of a step that no kernel time contains: ``step_overhead_s`` per step
  (scheduling, launches) plus ``host_s_per_seq`` per request in the step (its input preparation,
  sampling, detokenising and streaming its token out); stated knobs, zero unless given
  (:mod:`kvlab.validate.silicon` sets them on held-out measured rows).

Tables are interpolated linearly (bilinearly for the 2-D ones) and extended past their last point
along their last segment; attention past the longest tabulated prompt grows with the square of
the length.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._validate import check_choice, check_number
from .shapes import ModelSpec, model_spec
from .tables import tables_doc

#: kvlab's GPU names for the systems the tables cover
GPUS = ("H100-SXM", "H200", "A100-SXM")
PRECISIONS = ("bf16", "fp8")
TPS = (1, 2, 4, 8)


def covered() -> list[tuple[str, str, int, str]]:
    """(model, gpu, tp, precision) combinations the tables cover."""
    out = []
    for key in tables_doc()["tables"]:
        model, gpu, tp, prec = key.split("|")
        out.append((model, gpu, int(tp), prec))
    return sorted(out)


def _interp1(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """Linear interpolation, extended along the first/last segment."""
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = len(xs) - 2
    else:
        i = bisect_right(xs, x) - 1
    x0, x1 = xs[i], xs[i + 1]
    w = (x - x0) / (x1 - x0)
    return ys[i] + w * (ys[i + 1] - ys[i])


def _interp2(x: float, y: float, xs, ys, grid) -> float:
    """Bilinear interpolation over ``grid[i][j]`` at (xs[i], ys[j]), extended linearly."""
    i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    j = min(max(bisect_right(ys, y) - 1, 0), len(ys) - 2)
    wx = (x - xs[i]) / (xs[i + 1] - xs[i])
    wy = (y - ys[j]) / (ys[j + 1] - ys[j])
    a = grid[i][j] + wy * (grid[i][j + 1] - grid[i][j])
    b = grid[i + 1][j] + wy * (grid[i + 1][j + 1] - grid[i + 1][j])
    return a + wx * (b - a)


@dataclass(frozen=True)
class StepCosts:
    """Step times (seconds) of one replica: ``model`` on ``tp`` GPUs of type ``gpu`` in
    ``precision`` (``"bf16"``; ``"fp8"``: fp8 weights and GEMMs, KV cache and attention in bf16).
    """

    model: ModelSpec
    gpu: str
    tp: int
    precision: str
    step_overhead_s: float
    database_version: str
    _t: dict
    host_s_per_seq: float = 0.0

    # --- the parts -------------------------------------------------------------------------------

    def shared_s(self, tokens: float, *, decode_only: bool = False) -> float:
        """Non-attention time of a pass over ``tokens`` tokens (a decode-only pass if asked)."""
        g = tables_doc()["grids"]
        if decode_only:
            return _interp1(tokens, g["b"], self._t["decode_shared_ms"]) / 1e3
        return _interp1(tokens, g["m"], self._t["shared_ms"]) / 1e3

    def _ctx_full_ms(self, length: float) -> float:
        g = tables_doc()["grids"]
        ns, col = g["n"], [row[0] for row in self._t["context_attn_ms"]]
        if length <= 0:
            return 0.0
        if length <= ns[-1]:
            if length < ns[0]:
                return col[0] * length / ns[0]
            return _interp1(length, ns, col)
        return col[-1] * (length / ns[-1]) ** 2

    def context_attention_s(self, new_tokens: float, cached_tokens: float = 0.0) -> float:
        """Attention of a prompt chunk of ``new_tokens`` after ``cached_tokens`` in the cache."""
        full = self._ctx_full_ms(new_tokens + cached_tokens)
        return max(full - self._ctx_full_ms(cached_tokens), 0.0) / 1e3

    def decode_attention_s(self, batch: float, mean_context_tokens: float) -> float:
        """Attention of ``batch`` decoding requests with ``mean_context_tokens`` each."""
        if batch <= 0:
            return 0.0
        g = tables_doc()["grids"]
        v = _interp2(batch, mean_context_tokens, g["b"], g["c"], self._t["decode_attn_ms"])
        return max(v, 0.0) / 1e3

    # --- a whole step ------------------------------------------------------------------------------

    def step_s(
        self,
        chunks: Sequence[tuple[float, float]] = (),
        decode_batch: int = 0,
        decode_context_tokens: float = 0.0,
    ) -> float:
        """Seconds of one step: prompt ``chunks`` as (new tokens, tokens already cached) and
        ``decode_batch`` decoding requests holding ``decode_context_tokens`` tokens in all."""
        prompt = 0.0
        attn = 0.0
        for n, p in chunks:
            prompt += n
            attn += self.context_attention_s(n, p)
        if prompt == 0 and decode_batch == 0:
            return 0.0
        mean_ctx = decode_context_tokens / decode_batch if decode_batch else 0.0
        if prompt:
            shared = self.shared_s(prompt + decode_batch)
        else:
            shared = self.shared_s(decode_batch, decode_only=True)
        dec = self.decode_attention_s(decode_batch, mean_ctx)
        host = self.step_overhead_s + self.host_s_per_seq * (len(chunks) + decode_batch)
        return shared + attn + dec + host

    def decode_run_s(self, batch: int, context_tokens: float, steps: int) -> np.ndarray:
        """End times (seconds from the first step's start) of ``steps`` decode-only steps of
        ``batch`` requests whose total context starts at ``context_tokens`` and grows by
        ``batch`` per step."""
        g = tables_doc()["grids"]
        shared = _interp1(batch, g["b"], self._t["decode_shared_ms"]) / 1e3
        ctx = (context_tokens + batch * np.arange(steps)) / batch
        cs = g["c"]
        bi = min(max(bisect_right(g["b"], batch) - 1, 0), len(g["b"]) - 2)
        wb = (batch - g["b"][bi]) / (g["b"][bi + 1] - g["b"][bi])
        rows = np.asarray(self._t["decode_attn_ms"])
        along = rows[bi] + wb * (rows[bi + 1] - rows[bi])
        # np.interp clamps: extend the last segment by hand
        att = np.interp(ctx, cs, along)
        hi = ctx > cs[-1]
        if hi.any():
            slope = (along[-1] - along[-2]) / (cs[-1] - cs[-2])
            att[hi] = along[-1] + slope * (ctx[hi] - cs[-1])
        lo = ctx < cs[0]
        if lo.any():
            slope = (along[1] - along[0]) / (cs[1] - cs[0])
            att[lo] = along[0] + slope * (ctx[lo] - cs[0])
        host = self.step_overhead_s + self.host_s_per_seq * batch
        per_step = shared + np.maximum(att, 0.0) / 1e3 + host
        return np.cumsum(per_step)


def step_costs(
    model: str | ModelSpec,
    gpu: str = "H100-SXM",
    tp: int = 1,
    precision: str = "bf16",
    *,
    step_overhead_s: float = 0.0,
    host_s_per_seq: float = 0.0,
) -> StepCosts:
    """The :class:`StepCosts` of ``model`` (a model id the tables cover, e.g.
    ``"Qwen/Qwen3-32B"``) on ``tp`` GPUs of type ``gpu`` in ``precision``."""
    spec = model if isinstance(model, ModelSpec) else model_spec(model)
    check_choice("gpu", gpu, GPUS)
    check_choice("precision", precision, PRECISIONS)
    if isinstance(tp, bool) or tp not in TPS:
        raise ValueError(f"tp must be one of {list(TPS)}, got {tp!r}")
    check_number("step_overhead_s", step_overhead_s, lo=0)
    check_number("host_s_per_seq", host_s_per_seq, lo=0)
    doc = tables_doc()
    key = f"{spec.name}|{gpu}|{tp}|{precision}"
    t = doc["tables"].get(key)
    if t is None:
        why = doc.get("missing", {}).get(key, "not tabulated")
        raise ValueError(
            f"no step costs for model={spec.name!r}, gpu={gpu!r}, tp={tp}, "
            f"precision={precision!r}: {why}"
        )
    return StepCosts(spec, gpu, int(tp), precision, float(step_overhead_s),
                     t["database_version"], t, float(host_s_per_seq))  # fmt: skip
