"""The two ways to spend replicas (:class:`Colocated`, :class:`Disaggregated`) and the costs at a
replica's TP."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import disagg
from .._validate import check_choice, check_int, fraction, non_negative
from ..assumptions import CostModel
from ..costs import BOOK, Costs, as_costs, cost_model, prefill_array
from ..models import LLAMA_70B, ModelShape


@dataclass(frozen=True)
class Colocated:
    """``replicas`` replicas that each prefill and decode."""

    replicas: int = 8
    chunk_tokens: int | None = 512
    max_batch: int = 256
    overlap: float = 0.0
    tp: int = 8  # GPUs per replica (the cost model is taken at this TP)

    def __post_init__(self):
        check_int("replicas", self.replicas, lo=1)
        check_int("tp", self.tp, lo=1)
        if self.chunk_tokens is not None:
            check_int("chunk_tokens", self.chunk_tokens, lo=1)
        check_int("max_batch", self.max_batch, lo=1)
        fraction("overlap", self.overlap)

    @property
    def total(self) -> int:
        return self.replicas

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def label(self) -> str:
        chunk = f"chunk {self.chunk_tokens}" if self.chunk_tokens else "no chunking"
        overlap = "" if self.overlap == 0 else f", overlap {self.overlap:g}"
        tp = "" if self.tp == 8 else f", TP {self.tp}"
        return f"colocated x{self.replicas} ({chunk}{overlap}{tp})"


@dataclass(frozen=True)
class Disaggregated:
    """``prefill`` prefill-only and ``decode`` decode-only replicas, KV shipped in between.

    ``tp`` is the GPUs per replica on both sides unless ``prefill_tp`` / ``decode_tp`` set a side
    of its own (per-phase parallelism; the KV then crosses ``min`` of the two GPUs' links in
    parallel). ``first_step``: the first token comes out of the decode replica's first step, not
    when the KV lands (see the module's docstring). ``per_message_s``: fixed cost of each message
    of a transfer (one per layer when ``layerwise``, one otherwise).
    """

    prefill: int = 6
    decode: int = 3
    max_batch: int = 256
    link: str = "nic_per_gpu"
    layerwise: bool = False
    setup_s: float = 0.0
    precision: str = "fp16"
    tp: int = 8
    model: ModelShape = field(default=LLAMA_70B)
    prefill_tp: int | None = None
    decode_tp: int | None = None
    first_step: bool = False
    per_message_s: float = 0.0

    def __post_init__(self):
        check_int("prefill", self.prefill, lo=1)
        check_int("decode", self.decode, lo=1)
        check_int("max_batch", self.max_batch, lo=1)
        check_choice("link", self.link, disagg.LINKS)
        non_negative("setup_s", self.setup_s)
        disagg.bytes_per_value(self.precision)
        check_int("tp", self.tp, lo=1)
        if self.prefill_tp is not None:
            check_int("prefill_tp", self.prefill_tp, lo=1)
        if self.decode_tp is not None:
            check_int("decode_tp", self.decode_tp, lo=1)
        non_negative("per_message_s", self.per_message_s)

    @property
    def p_tp(self) -> int:
        """GPUs per prefill replica."""
        return self.tp if self.prefill_tp is None else self.prefill_tp

    @property
    def d_tp(self) -> int:
        """GPUs per decode replica."""
        return self.tp if self.decode_tp is None else self.decode_tp

    @property
    def total(self) -> int:
        return self.prefill + self.decode

    @property
    def gpus(self) -> int:
        return self.prefill * self.p_tp + self.decode * self.d_tp

    @property
    def gpu_split(self) -> tuple[int, int]:
        """(prefill GPUs, decode GPUs): P : D in GPUs, where ``prefill : decode`` is in replicas."""
        return self.prefill * self.p_tp, self.decode * self.d_tp

    @property
    def label(self) -> str:
        tps = "" if (self.p_tp, self.d_tp) == (8, 8) else f" (TP {self.p_tp}/{self.d_tp})"
        return f"disaggregated {self.prefill}:{self.decode}{tps}"

    def transfer_seconds(self, prompt: np.ndarray, prefill_s: np.ndarray) -> np.ndarray:
        """Per-request KV transfer time (exposed part only when ``layerwise``)."""
        tp = min(self.p_tp, self.d_tp)
        one = disagg.kv_transfer(self.model, 1, self.precision, tp, self.link)
        full = self.setup_s + prompt * one.seconds  # linear in tokens (no set-up in ``one``)
        if not self.layerwise:
            return full + self.per_message_s if self.per_message_s else full
        exposed = disagg.evaluate_array(
            "exposed_transfer",
            t_pre=np.asarray(prefill_s, float),
            t_x=full - self.setup_s,
            L=self.model.layers,
            t_m=self.per_message_s,
        )
        return self.setup_s + np.asarray(exposed, float)


def at_tp(cost: CostModel | str, tp: int) -> Costs:
    """``cost``'s calibration re-derived for a replica of ``tp`` GPUs (``cost`` itself when its TP
    is ``tp``). The book's calibration exists at TP 8 only: other TPs raise."""
    c = as_costs(cost)
    if c.tp == tp:
        return c
    if c.calibration == "book" and c != BOOK:
        raise ValueError(
            f"a custom book-style cost model is defined at TP {c.tp} only, got tp={tp}"
        )
    return cost_model(c.calibration, gpu=c.gpu, tp=tp)


def prefill_seconds(cost: CostModel | str, uncached, cached) -> np.ndarray:
    """Prefill time of each request (whole prompts, one pass each) under ``cost``: ``uncached``
    tokens after ``cached`` ones (arrays). The book's calibration gives ``uncached x tau``."""
    c = as_costs(cost)
    u = np.asarray(uncached)
    if not (c.prefill_s_per_pair or c.prefill_fixed_s):
        return u * c.prefill_s_per_token  # the book's linear prefill, as before
    return prefill_array(c, u, cached)


def splits(total: int) -> list[tuple[int, int]]:
    """Every (prefill, decode) split of ``total`` replicas with at least one of each."""
    total = check_int("total", total, lo=2)
    return [(p, total - p) for p in range(1, total)]


def system_for(split: int | tuple[int, int], **options) -> Colocated | Disaggregated:
    """``n`` -> ``Colocated(n)``; ``(p, d)`` -> ``Disaggregated(p, d)`` (``options`` passed on)."""
    if isinstance(split, tuple):
        if len(split) != 2:
            raise ValueError(f"split must be an int or a (prefill, decode) pair, got {split!r}")
        return Disaggregated(split[0], split[1], **options)
    return Colocated(check_int("split", split, lo=1), **options)
