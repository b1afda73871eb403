"""Model shapes the book uses, each with its source.

Only the numbers that decide the KV cache and prefill compute are kept: layers, query and KV
heads, head dimension, hidden size and parameter count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ._validate import check_int, positive


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape. ``params`` is the parameter count (not bytes)."""

    name: str
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    d_model: int
    params: float
    source: str

    def __post_init__(self):
        check_int("layers", self.layers, lo=1)
        check_int("q_heads", self.q_heads, lo=1)
        check_int("kv_heads", self.kv_heads, lo=1, hi=self.q_heads)
        check_int("head_dim", self.head_dim, lo=1)
        check_int("d_model", self.d_model, lo=1)
        positive("params", self.params)
        if self.q_heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide q_heads ({self.q_heads}), got {self.kv_heads}")

    @property
    def gqa_group(self) -> int:
        """Query heads that share one KV head (1 = multi-head attention)."""
        return self.q_heads // self.kv_heads

    def with_(self, **changes) -> ModelShape:
        """A copy with some fields changed (e.g. ``kv_heads=64`` for the MHA variant)."""
        return replace(self, **changes)


#: The book's 70B shape (Llama 2/3 70B layout): 80 layers, 64 query heads, 8 KV heads (GQA).
LLAMA_70B = ModelShape(
    name="Llama-style 70B",
    layers=80,
    q_heads=64,
    kv_heads=8,
    head_dim=128,
    d_model=8192,
    params=70e9,
    source="Llama 3 70B config (Meta, 2024); the book rounds parameters to 70e9",
)

#: Llama 3 8B: 32 layers, 32 query heads, 8 KV heads.
LLAMA3_8B = ModelShape(
    name="Llama 3 8B",
    layers=32,
    q_heads=32,
    kv_heads=8,
    head_dim=128,
    d_model=4096,
    params=8.03e9,
    source="Llama 3 8B config.json (Meta, 2024)",
)

#: Qwen2.5 0.5B Instruct, the small model the vLLM lab serves (fits a free Colab T4).
QWEN25_05B = ModelShape(
    name="Qwen2.5-0.5B-Instruct",
    layers=24,
    q_heads=14,
    kv_heads=2,
    head_dim=64,
    d_model=896,
    params=0.49e9,
    source="Qwen2.5-0.5B-Instruct config.json (Qwen team, 2024)",
)

#: A tiny shape for the CPU path of the labs (random weights, seconds to run).
TINY_LAB = ModelShape(
    name="tiny lab model",
    layers=4,
    q_heads=8,
    kv_heads=2,
    head_dim=32,
    d_model=256,
    params=4 * 12 * 256 * 256,
    source="made up for the CPU path of the labs",
)

MODELS = {m.name: m for m in (LLAMA_70B, LLAMA3_8B, QWEN25_05B, TINY_LAB)}
