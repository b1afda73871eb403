"""One cost model for every simulator, with two calibrations.

The model (sympy forms in :mod:`kvlab.formulas`, section "one cost model for every simulator"):

* **prefill** of ``tokens`` new tokens after ``cached`` ones on ``tp`` GPUs
  (``prefill_seconds_model``): a fixed part ``t_p0``, ``tau`` per token for the weight FLOPs and
  ``t_pair`` per attention (query, key) pair over the whole context (``U c + U^2 / 2`` pairs). The
  share of peak FLOP/s reached (``prefill_mfu``) rises with the tokens, since ``t_p0`` is spread
  over more of them, and differs by TP, since each calibration point has its own coefficients.
* a **decode step** of ``batch`` requests with ``context_tokens`` tokens of context each
  (``decode_step_seconds_model``): a fixed part ``a`` (the weight read and the step's overhead),
  ``k`` per request and ``c_kv`` per context token in the batch (the KV read).
* a **mixed step** (a chunk of prompt tokens riding with a decode batch) is one forward pass
  (``mixed_step_seconds_model``): the decode step plus the chunk's marginal prefill cost, the fixed
  part paid once.
* a **transfer** (``transfer_seconds_messages``): set-up + bytes over bandwidth + a cost per
  message.

Calibrations:

* ``"book"``: the round numbers of :data:`kvlab.assumptions.COST` (assumed, not measured): prefill
  0.1 ms per token, a decode step 20 ms + 0.2 ms per running request, no fixed prefill part, no
  attention or KV-read term. It is defined for the book's replica only: 8 H100 SXM GPUs (TP 8).
  :func:`book_mfu` gives the prefill MFU those numbers imply.
* ``"measured"``: fitted by ``tools/fit_costs.py`` to the measured per-operation database of NVIDIA
  aiconfigurator (TensorRT-LLM backend) for Llama-3.1-70B in bf16 on H100 SXM and H200 at TP 1, 2,
  4 and 8 where the weights fit; read from ``data/costs/measured.json`` (no aiconfigurator needed).
  A GPU/TP pair the database does not cover raises a ``ValueError`` that says so.

Simulators take a :class:`Costs` (from :func:`cost_model`); the default everywhere is :data:`BOOK`,
so every figure computed before this module stays as it was.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import sympy as sp

from . import assumptions, calc, formulas, hardware
from ._validate import check_choice, check_int, check_number, non_negative, positive
from .assumptions import CostModel
from .models import LLAMA_70B

CALIBRATIONS = ("book", "measured")
#: The GPUs a calibration may be asked for, by the names the public functions take.
GPUS = {"H100-SXM": hardware.H100_SXM, "H200": hardware.H200}
TPS = (1, 2, 4, 8)
#: Where ``tools/fit_costs.py`` writes the measured calibration.
MEASURED_PATH = Path(__file__).resolve().parents[2] / "data" / "costs" / "measured.json"
BOOK_GPU, BOOK_TP = "H100-SXM", 8


@dataclass(frozen=True)
class Costs(CostModel):
    """A calibrated cost model for one replica of ``tp`` GPUs of type ``gpu``.

    The first three fields are those of :class:`kvlab.assumptions.CostModel` (so every simulator
    that took the book's costs takes these); the rest are zero in the book's calibration.
    ``prefill_s_per_token`` is ``tau``; ``prefill_s_per_pair`` is ``t_pair``;
    ``decode_per_context_token_s`` is ``c_kv``.
    """

    prefill_fixed_s: float = 0.0
    prefill_s_per_pair: float = 0.0
    decode_per_context_token_s: float = 0.0
    calibration: str = "book"
    gpu: str = BOOK_GPU
    tp: int = BOOK_TP

    @property
    def gpus(self) -> int:
        """GPUs in one replica."""
        return self.tp

    @property
    def label(self) -> str:
        return f"{self.calibration} ({self.gpu}, TP {self.tp})"


#: The book's calibration: :data:`kvlab.assumptions.COST`, the one copy of its numbers.
BOOK = Costs(
    prefill_s_per_token=assumptions.COST.prefill_s_per_token,
    decode_base_s=assumptions.COST.decode_base_s,
    decode_per_request_s=assumptions.COST.decode_per_request_s,
)


def as_costs(cost: CostModel | str) -> Costs:
    """``cost`` as a :class:`Costs`: a calibration's name (``"book"``, ``"measured"``: one replica of
    8 H100 SXM GPUs; :func:`cost_model` for other GPUs) or a plain book-style CostModel (the extra
    terms at zero)."""
    if isinstance(cost, Costs):
        return cost
    if isinstance(cost, str):
        return cost_model(cost)
    if not isinstance(cost, CostModel):
        raise ValueError(
            f"cost must be a calibration name {list(CALIBRATIONS)}, a kvlab.costs.Costs or an "
            f"assumptions.CostModel, got {cost!r}"
        )
    return Costs(
        prefill_s_per_token=cost.prefill_s_per_token,
        decode_base_s=cost.decode_base_s,
        decode_per_request_s=cost.decode_per_request_s,
    )


@cache
def measured_data() -> dict:
    """The contents of ``data/costs/measured.json`` (fitted parameters, raw points, residuals)."""
    if not MEASURED_PATH.exists():
        raise ValueError(
            f"the measured calibration needs {MEASURED_PATH}; make it with tools/fit_costs.py"
        )
    return json.loads(MEASURED_PATH.read_text())


def _check_gpu_tp(gpu: str, tp: int) -> int:
    check_choice("gpu", gpu, GPUS)
    if isinstance(tp, bool) or tp not in TPS:
        raise ValueError(f"tp must be one of {list(TPS)}, got {tp!r}")
    return int(tp)


def cost_model(calibration: str = "measured", *, gpu: str = BOOK_GPU, tp: int = BOOK_TP) -> Costs:
    """The :class:`Costs` of one replica of ``tp`` GPUs of type ``gpu`` under ``calibration``."""
    check_choice("calibration", calibration, CALIBRATIONS)
    tp = _check_gpu_tp(gpu, tp)
    if calibration == "book":
        if (gpu, tp) != (BOOK_GPU, BOOK_TP):
            raise ValueError(
                f"the book calibration is assumed for one replica of 8 H100 SXM GPUs only "
                f"(gpu={BOOK_GPU!r}, tp={BOOK_TP}), got gpu={gpu!r}, tp={tp}; use "
                f"calibration='measured' for other GPUs and TP"
            )
        return BOOK
    return _measured(gpu, tp)


@cache
def _measured(gpu: str, tp: int) -> Costs:
    data = measured_data()
    fit = data["fits"].get(gpu, {}).get(str(tp))
    if fit is None:
        why = data.get("missing", {}).get(gpu, {}).get(str(tp), "no point was fitted")
        raise ValueError(
            f"the measured calibration has no gpu={gpu!r}, tp={tp}: {why} (covered: {covered()})"
        )
    return Costs(
        prefill_s_per_token=fit["prefill_s_per_token"],
        decode_base_s=fit["decode_base_s"],
        decode_per_request_s=fit["decode_per_request_s"],
        prefill_fixed_s=fit["prefill_fixed_s"],
        prefill_s_per_pair=fit["prefill_s_per_pair"],
        decode_per_context_token_s=fit["decode_per_context_token_s"],
        calibration="measured",
        gpu=gpu,
        tp=tp,
    )


def covered() -> list[tuple[str, int]]:
    """(gpu, tp) pairs the measured calibration has."""
    fits = measured_data()["fits"]
    return sorted((g, int(t)) for g in fits for t in fits[g])


# --- the model's four costs -------------------------------------------------------------------------


def prefill_cost_s(cost: CostModel, tokens: float, cached: float = 0.0) -> float:
    """Prefill of ``tokens`` new tokens after ``cached`` ones under ``cost``."""
    c = as_costs(cost)
    check_number("tokens", tokens, lo=1)
    non_negative("cached", cached)
    return calc.evaluate(
        "prefill_seconds_model",
        t_p0=c.prefill_fixed_s,
        tau=c.prefill_s_per_token,
        t_pair=c.prefill_s_per_pair,
        U=tokens,
        c=cached,
    )


@cache
def _numpy_formula(name: str):
    f = formulas.FORMULAS[name]
    return [x.name for x in f.symbols], sp.lambdify(f.symbols, f.rhs, modules="numpy")


def prefill_array(cost: CostModel, tokens, cached) -> np.ndarray:
    """:func:`prefill_cost_s` on arrays (element by element, no input checks)."""
    c = as_costs(cost)
    names, fn = _numpy_formula("prefill_seconds_model")
    values = {
        "t_p0": c.prefill_fixed_s,
        "tau": c.prefill_s_per_token,
        "t_pair": c.prefill_s_per_pair,
        "U": np.asarray(tokens, float),
        "c": np.asarray(cached, float),
    }
    return np.asarray(fn(*(values[n] for n in names)), float)


def decode_cost_s(cost: CostModel, batch: float, context_tokens: float) -> float:
    """A decode step of ``batch`` requests with ``context_tokens`` of context each under ``cost``."""
    c = as_costs(cost)
    check_number("batch", batch, lo=1)
    non_negative("context_tokens", context_tokens)
    return calc.evaluate(
        "decode_step_seconds_model",
        a=c.decode_base_s,
        k=c.decode_per_request_s,
        c_kv=c.decode_per_context_token_s,
        n_b=batch,
        n_ctx=context_tokens,
    )


def prefill_s(
    tokens: float,
    *,
    cached: float = 0.0,
    gpu: str = BOOK_GPU,
    tp: int = BOOK_TP,
    calibration: str = "measured",
) -> float:
    """Seconds to prefill ``tokens`` new prompt tokens after ``cached`` ones on one replica."""
    return prefill_cost_s(cost_model(calibration, gpu=gpu, tp=tp), tokens, cached)


def decode_step_s(
    batch: float,
    context_tokens: float,
    *,
    gpu: str = BOOK_GPU,
    tp: int = BOOK_TP,
    calibration: str = "measured",
) -> float:
    """Seconds of one decode step of ``batch`` requests with ``context_tokens`` (mean) each."""
    return decode_cost_s(cost_model(calibration, gpu=gpu, tp=tp), batch, context_tokens)


def mixed_step_s(
    chunk_tokens: float,
    batch: float,
    context_tokens: float,
    *,
    cached: float = 0.0,
    gpu: str = BOOK_GPU,
    tp: int = BOOK_TP,
    calibration: str = "measured",
) -> float:
    """One step carrying ``chunk_tokens`` prompt tokens (after ``cached``) and a decode batch,
    costed as one forward pass (the fixed part once). ``batch`` may be 0 (a chunk alone)."""
    c = cost_model(calibration, gpu=gpu, tp=tp)
    non_negative("chunk_tokens", chunk_tokens)
    non_negative("batch", batch)
    non_negative("context_tokens", context_tokens)
    non_negative("cached", cached)
    return calc.evaluate(
        "mixed_step_seconds_model",
        a=c.decode_base_s,
        k=c.decode_per_request_s,
        c_kv=c.decode_per_context_token_s,
        n_b=batch,
        n_ctx=context_tokens,
        tau=c.prefill_s_per_token,
        t_pair=c.prefill_s_per_pair,
        n_tok=chunk_tokens,
        c=cached,
    )


def transfer_s(
    nbytes: float,
    bandwidth_bytes_per_s: float,
    *,
    links: int = 1,
    messages: int = 1,
    per_message_s: float = 0.0,
    setup_s: float = 0.0,
) -> float:
    """Seconds to move ``nbytes`` over ``links`` links of ``bandwidth_bytes_per_s`` each, sent as
    ``messages`` messages of fixed cost ``per_message_s``, after a set-up of ``setup_s``. The
    database behind the measured calibration has no transfers: both calibrations take the
    bandwidth, per-message and set-up costs as given."""
    non_negative("nbytes", nbytes)
    positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    check_int("links", links, lo=1)
    check_int("messages", messages, lo=0)
    non_negative("per_message_s", per_message_s)
    non_negative("setup_s", setup_s)
    return calc.evaluate(
        "transfer_seconds_messages",
        t_0=setup_s,
        B=nbytes,
        n_links=links,
        W=bandwidth_bytes_per_s,
        n_msg=messages,
        t_m=per_message_s,
    )


def linearised(cost: CostModel, prompt_tokens: float, context_tokens: float) -> Costs:
    """``cost`` as a linear model for simulators that take only tau, a and k (:mod:`kvlab.queueing`):
    tau is the whole prefill of ``prompt_tokens`` per token (fixed part and attention included),
    k takes the KV read at ``context_tokens`` of context per request."""
    c = as_costs(cost)
    check_number("prompt_tokens", prompt_tokens, lo=1)
    non_negative("context_tokens", context_tokens)
    if not (c.prefill_fixed_s or c.prefill_s_per_pair or c.decode_per_context_token_s):
        return c
    return Costs(
        prefill_s_per_token=prefill_cost_s(c, prompt_tokens) / prompt_tokens,
        decode_base_s=c.decode_base_s,
        decode_per_request_s=c.decode_per_request_s + c.decode_per_context_token_s * context_tokens,
        calibration=c.calibration,
        gpu=c.gpu,
        tp=c.tp,
    )


# --- what a calibration implies -------------------------------------------------------------------


def prefill_mfu(cost: CostModel, tokens: float, cached: float = 0.0) -> float:
    """Share of the replica's peak dense FLOP/s that a prefill's weight FLOPs reach under ``cost``
    (the book's model, 70B parameters; attention FLOPs not counted)."""
    c = as_costs(cost)
    t = prefill_cost_s(c, tokens, cached)
    return 2 * LLAMA_70B.params * tokens / (c.tp * GPUS[c.gpu].dense_fp16_flops * t)


def book_mfu() -> float:
    """The prefill MFU the book's 0.1 ms per token implies on 8 H100 SXM GPUs (``implied_mfu``)."""
    return calc.evaluate(
        "implied_mfu",
        N_params=LLAMA_70B.params,
        tau=BOOK.prefill_s_per_token,
        n_gpu=BOOK_TP,
        F_peak=GPUS[BOOK_GPU].dense_fp16_flops,
    )


def weight_read_s(gpu: str = BOOK_GPU, tp: int = BOOK_TP, bytes_per_weight: float = 2.0) -> float:
    """Seconds to read the 70B weights once from ``tp`` GPUs' HBM at the vendor's bandwidth: the
    HBM-bound floor under a decode step's fixed part."""
    tp = _check_gpu_tp(gpu, tp)
    positive("bytes_per_weight", bytes_per_weight)
    return LLAMA_70B.params * bytes_per_weight / (tp * GPUS[gpu].hbm_bytes_per_s)


def kv_read_efficiency(cost: CostModel) -> float:
    """The share of HBM bandwidth (``eta_kv``) that ``cost``'s per-context-token decode term means
    (``kv_read_seconds_per_token`` solved for eta_kv); nan when the term is zero (the book)."""
    c = as_costs(cost)
    if c.decode_per_context_token_s == 0:
        return math.nan
    m = LLAMA_70B
    beta = calc.kv_bytes_per_token(m.layers, m.kv_heads, m.head_dim, 2)
    return beta / (c.tp * GPUS[c.gpu].hbm_bytes_per_s * c.decode_per_context_token_s)


def lever_ratio(
    cost: CostModel, prompt_tokens: float, output_tokens: float, tpot_s: float
) -> float:
    """Average-level capacity of a split fleet over a colocated one (``split_colocated_ratio``):
    prefill time ``P`` of the prompt, per-request decode cost ``k`` (plus the KV read at the mean
    context, prompt + output / 2), fixed step part ``a``, TPOT target ``T``."""
    c = as_costs(cost)
    check_number("prompt_tokens", prompt_tokens, lo=1)
    check_number("output_tokens", output_tokens, lo=1)
    positive("tpot_s", tpot_s)
    if tpot_s <= c.decode_base_s:
        raise ValueError(
            f"tpot_s must exceed the fixed step part {c.decode_base_s} s, got {tpot_s}"
        )
    k_eff = c.decode_per_request_s + c.decode_per_context_token_s * (
        prompt_tokens + output_tokens / 2
    )
    return calc.evaluate(
        "split_colocated_ratio",
        k=k_eff,
        O=output_tokens,
        t_pre=prefill_cost_s(c, prompt_tokens),
        a=c.decode_base_s,
        T=tpot_s,
    )


def on_other_gpu(
    cost: CostModel,
    hbm_bytes_per_s: float,
    *,
    hbm_share: float,
    reference_hbm_bytes_per_s: float | None = None,
) -> Costs:
    """``cost``'s decode step moved to a GPU whose HBM moves ``hbm_bytes_per_s``: the share
    ``hbm_share`` of the step's fixed and per-request parts (a, k) is HBM-bound and scales by the
    bandwidth ratio (``decode_step_other_gpu``), the rest does not; the KV read (c_kv) is all
    HBM-bound. ``hbm_share=1`` scales the whole step, the book's A100 line; the weight read's share
    of a is :func:`weight_read_s` / a. Prefill terms are kept (prefill stays where it was).
    ``reference_hbm_bytes_per_s``: the bandwidth ``cost`` was set on (default: its GPU's)."""
    c = as_costs(cost)
    w_new = positive("hbm_bytes_per_s", hbm_bytes_per_s)
    s = check_number("hbm_share", hbm_share, lo=0, hi=1)
    w_ref = (
        GPUS[c.gpu].hbm_bytes_per_s
        if reference_hbm_bytes_per_s is None
        else positive("reference_hbm_bytes_per_s", reference_hbm_bytes_per_s)
    )

    def scaled(x: float) -> float:
        return calc.evaluate("decode_step_other_gpu", a=x, k=0.0, n_b=0, W_ref=w_ref, W_new=w_new)

    return Costs(
        prefill_s_per_token=c.prefill_s_per_token,
        decode_base_s=(1 - s) * c.decode_base_s + scaled(s * c.decode_base_s),
        decode_per_request_s=(1 - s) * c.decode_per_request_s + scaled(s * c.decode_per_request_s),
        prefill_fixed_s=c.prefill_fixed_s,
        prefill_s_per_pair=c.prefill_s_per_pair,
        decode_per_context_token_s=scaled(c.decode_per_context_token_s),
        calibration=c.calibration,
        gpu=c.gpu,
        tp=c.tp,
    )
