"""The book's assumptions, in one place, each with where it comes from.

These are round numbers chosen to teach with (the cost model is *assumed*, not measured); the
hardware figures are vendors' published numbers (see :mod:`kvlab.hardware`). :data:`COST` is the
one copy of the book's cost numbers: :mod:`kvlab.costs` builds its "book" calibration from it, and
its "measured" calibration is fitted to aiconfigurator's database (``data/costs/measured.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from . import hardware, models


@dataclass(frozen=True)
class CostModel:
    """Per-replica costs (one replica = one 8-GPU server running the 70B model)."""

    prefill_s_per_token: float = 1e-4  # 0.1 ms per prompt token = 10,000 prompt tokens/s
    decode_base_s: float = 0.020  # fixed part of a decode step
    decode_per_request_s: float = 0.0002  # added per running request

    @property
    def prefill_tokens_per_s(self) -> float:
        return 1 / self.prefill_s_per_token


@dataclass(frozen=True)
class Problem8:
    """The worked scenario of Problem 8."""

    replicas: int = 8
    rate_rps: float = 20
    system_tokens: int = 2_000  # shared by every request, cached on every replica
    history_tokens: int = 3_000  # the conversation so far, cached where it was served
    new_tokens: int = 1_000  # never seen before
    cache_tokens_per_replica: int = 400_000  # the simulators' roomy cache, a round number
    # the worked answer's working set: each replica's free KV pool, not a round number
    answer_tokens: int = 200  # the model's answer, kept in the cache with the turn
    return_s: float = 300  # a user comes back about 5 minutes after an answer (assumed)
    tp: int = 8  # a replica is one 8-GPU server, the 70B model at tensor parallelism 8
    gpu_memory_utilization: float = 0.92  # vLLM 0.32.0's default share of each GPU's memory
    kv_bytes_per_value: int = 2  # bf16 KV (1 for fp8)

    @property
    def prompt_tokens(self) -> int:
        return self.system_tokens + self.history_tokens + self.new_tokens

    @property
    def earlier_turns(self) -> float:
        """The turns the history is made of: each added a new message and an answer."""
        return self.history_tokens / (self.new_tokens + self.answer_tokens)


@dataclass(frozen=True)
class Problem22Transfer:
    """One request's KV moving from a prefill to a decode server."""

    prompt_tokens: int = 8_000
    tp: int = 8  # tensor parallel on both sides: each GPU holds 1 of the 8 KV heads
    long_prompt_tokens: int = 100_000
    self_check_tokens: int = 16_000
    nics: int = 8  # one NIC per GPU
    # how the bytes go: one message per KV block per layer (vLLM's default block of 16 tokens,
    # blocks not contiguous), each costing a fixed time on top of its bytes; 2 us is an assumption
    # (the measured-costs chapter also tries 10 us): measure your transfer engine's
    block_tokens: int = 16
    per_message_s: float = 2e-6


@dataclass(frozen=True)
class Problem22Pools:
    """The traffic mix the pools are sized for."""

    rate_rps: float = 20
    prompt_tokens: int = 3_000
    output_tokens: int = 300
    tpot_s: float = 0.040
    hit_rate_with_caching: float = 0.83


MODEL = models.LLAMA_70B
GPU = hardware.H100_SXM
NIC_BYTES_PER_S = hardware.NIC_NDR_BYTES_PER_S
COST = CostModel()
P8 = Problem8()
P22_TRANSFER = Problem22Transfer()
P22_POOLS = Problem22Pools()

SOURCES = {
    "CostModel": "assumed round numbers for teaching (not a measurement)",
    "Problem8": "the book's Problem 8 scenario",
    "Problem22Transfer": "the book's Problem 22 transfer example",
    "Problem22Pools": "the book's Problem 22 pool-sizing example",
}


def as_rows():
    """(group, name, value, source) for every assumption, for the assumptions page."""
    rows = []
    for obj in (COST, P8, P22_TRANSFER, P22_POOLS):
        group = type(obj).__name__
        for f in fields(obj):
            rows.append((group, f.name, getattr(obj, f.name), SOURCES[group]))
    return rows
