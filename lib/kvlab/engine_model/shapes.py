"""Dense decoder models by their ``config.json`` fields, and what their shape decides: parameter
count, weight bytes per GPU, KV bytes per token per GPU.

The shapes come from the ``config.json`` files NVIDIA aiconfigurator ships (copied into
``data/costs/engine_tables.json`` by ``tools/tabulate_engine_costs.py``); nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import calc
from .._validate import check_choice, check_int
from .tables import tables_doc

#: bytes per weight of the linear layers, per precision (embeddings and norms stay bf16)
WEIGHT_BYTES = {"bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only model by its ``config.json`` fields."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    source: str = ""

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            check_int(f, getattr(self, f), lo=1)
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide heads ({self.heads}), got {self.kv_heads}")

    @property
    def linear_params(self) -> int:
        """Parameters of the per-layer linear layers (q, k, v, o, gate, up, down), all layers."""
        h, d = self.hidden, self.head_dim
        attn = h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h
        mlp = 3 * h * self.intermediate
        return self.layers * (attn + mlp)

    @property
    def embedding_params(self) -> int:
        """Input embedding and output head (one matrix when tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        """All parameters (norms included)."""
        return self.linear_params + self.embedding_params + (2 * self.layers + 1) * self.hidden

    def weight_bytes_per_gpu(self, tp: int, precision: str = "bf16") -> float:
        """Weight bytes one GPU holds at tensor parallelism ``tp`` (vLLM shards the linear layers
        and the vocabulary; norms are replicated)."""
        check_int("tp", tp, lo=1)
        check_choice("precision", precision, WEIGHT_BYTES)
        linear = self.linear_params * WEIGHT_BYTES[precision]
        emb = self.embedding_params * 2
        norms = (2 * self.layers + 1) * self.hidden * 2
        return (linear + emb) / tp + norms

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads one GPU stores: split across the TP group, replicated once TP exceeds them."""
        check_int("tp", tp, lo=1)
        return max(1, self.kv_heads // tp)

    def kv_bytes_per_token_per_gpu(self, tp: int, kv_bytes: int = 2) -> int:
        """KV bytes one GPU stores per token (K and V, every layer)."""
        check_int("kv_bytes", kv_bytes, lo=1, hi=4)
        return int(
            calc.kv_bytes_per_token(self.layers, self.kv_heads_per_gpu(tp), self.head_dim, kv_bytes)
        )


def model_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a model the step-cost tables cover, by its id."""
    shapes = tables_doc()["shapes"]
    check_choice("model", name, shapes)
    c = shapes[name]
    return ModelSpec(
        name=name,
        layers=c["num_hidden_layers"],
        hidden=c["hidden_size"],
        heads=c["num_attention_heads"],
        kv_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        intermediate=c["intermediate_size"],
        vocab=c["vocab_size"],
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        source=c["source"],
    )
