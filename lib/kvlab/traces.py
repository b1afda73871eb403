"""Real traffic: the Mooncake conversation trace (Kimi production, FAST '25), as a workload.

Each line of the trace is ``{"timestamp": ms, "input_length": tokens, "output_length": tokens,
"hash_ids": [...]}`` with one hash id per 512-token block of the prompt; equal ids mean equal block
content and equal prefix. :func:`load_mooncake` turns it into a :class:`Trace` with the same
interface as :class:`kvlab.workload.ChatWorkload` (``len``, ``tokens(i)``, ``prompt_tokens`` ...,
``paths(block_size)``) plus ``arrival_s``. Hash id h becomes a deterministic run of 512 token ids;
the last block of a prompt is partial (its first ``input_length - 512 * (n - 1)`` ids). Answers are
fresh token ids that no other request shares.

The trace has no session id. The routing key (``conversation``) is the request's second block id
(the first block, id 0, is a system prompt every request shares), numbered densely in order of
first appearance; a one-block request uses its only block.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ._validate import check_int
from .workload import Paths, _stream_key, stream_ids

__all__ = ["TRACE_BLOCK_TOKENS", "Trace", "default_path", "load_mooncake"]

#: tokens per hash block in the Mooncake trace
TRACE_BLOCK_TOKENS = 512


def default_path() -> Path:
    """The repository's copy of the trace: data/mooncake/conversation_trace.jsonl."""
    import kvlab

    return Path(kvlab.__file__).resolve().parents[2] / "data/mooncake/conversation_trace.jsonl"


class Trace:
    """A replayable request trace. Per-request arrays: ``arrival_s``, ``prompt_tokens``,
    ``output_tokens``, ``conversation`` (routing key); ``hash_ids[i]``: request i's block ids."""

    def __init__(self, arrival_s, prompt_tokens, output_tokens, hash_ids, source: str = ""):
        self.arrival_s = np.asarray(arrival_s, dtype=float)
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(output_tokens, dtype=np.int64)
        self.hash_ids = [np.asarray(h, dtype=np.int64) for h in hash_ids]
        self.source = source
        first_seen: dict[int, int] = {}
        conv = np.empty(len(self.hash_ids), dtype=np.int64)
        for i, h in enumerate(self.hash_ids):
            k = int(h[1] if len(h) > 1 else h[0])
            conv[i] = first_seen.setdefault(k, len(first_seen))
        self.conversation = conv

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def __repr__(self) -> str:
        return f"Trace({len(self)} requests from {self.source or 'memory'})"

    @property
    def key(self) -> np.ndarray:
        """The routing key of each request (see the module docstring)."""
        return self.conversation

    @property
    def duration_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return float(self.arrival_s.max() - self.arrival_s.min()) if len(self) else 0.0

    def leading_block_reuse(self) -> float:
        """Share of all blocks that are a leading match of an earlier request: walking each
        request's block ids in order, a block counts while its id was seen before (equal ids mean
        equal content and prefix). The trace's own reuse figure, before any token-level rule."""
        seen: set[int] = set()
        matched = total = 0
        for ids in self.hash_ids:
            run = ids.tolist()
            k = 0
            while k < len(run) and run[k] in seen:
                k += 1
            matched += k
            total += len(run)
            seen.update(run)
        return matched / total if total else 0.0

    def tokens(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of request ``i``: (prompt_ids, output_ids), 1-D int64 arrays."""
        i = check_int("i", i, lo=0, hi=len(self) - 1)
        n = int(self.prompt_tokens[i])
        runs = [
            stream_ids(_stream_key("mooncake", int(h)), 0, TRACE_BLOCK_TOKENS)
            for h in self.hash_ids[i]
        ]
        prompt = np.concatenate(runs)[:n]
        output = stream_ids(_stream_key("mooncake-answer", i), 0, int(self.output_tokens[i]))
        return prompt, output

    def paths(self, block_size: int = 16) -> Paths:
        """Each request as cache entries: one per hash block (512 // block_size blocks; the last,
        partial one fewer) and one for the full blocks that hold the answer (never shared)."""
        bs = check_int("block_size", block_size, lo=1, hi=TRACE_BLOCK_TOKENS)
        if TRACE_BLOCK_TOKENS % bs:
            raise ValueError(f"block_size must divide {TRACE_BLOCK_TOKENS}, got {block_size!r}")
        per = TRACE_BLOCK_TOKENS // bs
        keys, blocks, offsets = [], [], [0]
        seen: dict[int, int] = {}
        for i, h in enumerate(self.hash_ids):
            p, o = int(self.prompt_tokens[i]), int(self.output_tokens[i])
            lens = np.full(len(h), per, dtype=np.int64)
            lens[-1] = (p - TRACE_BLOCK_TOKENS * (len(h) - 1)) // bs
            for hid, n in zip(h.tolist(), lens.tolist(), strict=True):
                if seen.setdefault(hid, n) != n:
                    raise ValueError(
                        f"hash id {hid} appears with {seen[hid]} and {n} blocks: the entry model "
                        "needs each id to be touched whole"
                    )
            tail = (p + o) // bs - p // bs
            k = list(h.tolist())
            n_list = lens.tolist()
            if n_list[-1] == 0:
                k.pop()
                n_list.pop()
            if tail:
                k.append(-(i + 1))  # the answer's blocks: a key no other request has
                n_list.append(tail)
            keys.extend(k)
            blocks.extend(n_list)
            offsets.append(len(keys))
        return Paths(
            bs,
            np.asarray(offsets),
            np.asarray(keys, dtype=np.int64),
            np.asarray(blocks, dtype=np.int64),
            (self.prompt_tokens - 1) // bs,
        )


def _parse_line(line: str, lineno: int) -> tuple[float, int, int, list[int]]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"line {lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
    for field in ("timestamp", "input_length", "output_length", "hash_ids"):
        if field not in obj:
            raise ValueError(f"line {lineno}: missing field {field!r}")
    ts, n_in, n_out, ids = (
        obj["timestamp"],
        obj["input_length"],
        obj["output_length"],
        obj["hash_ids"],
    )
    for name, v in (("timestamp", ts), ("input_length", n_in), ("output_length", n_out)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"line {lineno}: {name} must be a number >= 0, got {v!r}")
    for name, v in (("input_length", n_in), ("output_length", n_out)):
        if not float(v).is_integer():
            raise ValueError(f"line {lineno}: {name} must be an integer, got {v!r}")
    n_in, n_out = int(n_in), int(n_out)
    if n_in < 1:
        raise ValueError(f"line {lineno}: input_length must be >= 1, got {n_in}")
    if not isinstance(ids, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ids
    ):
        raise ValueError(f"line {lineno}: hash_ids must be a list of integers >= 0")
    expected = -(-n_in // TRACE_BLOCK_TOKENS)
    if len(ids) != expected:
        raise ValueError(
            f"line {lineno}: {len(ids)} hash_ids for input_length {n_in}, expected "
            f"ceil({n_in} / {TRACE_BLOCK_TOKENS}) = {expected}"
        )
    return float(ts), n_in, n_out, ids


def load_mooncake(path=None, limit: int | None = None) -> Trace:
    """Load a Mooncake-format trace (default: the repository's conversation trace).

    ``limit``: read only the first ``limit`` requests. Timestamps (ms) become ``arrival_s``.
    A malformed line (bad JSON, a missing field, a negative length, a hash-id count other than
    ceil(input_length / 512), an empty line) raises ValueError naming its line number: nothing is
    skipped.
    """
    path = default_path() if path is None else Path(path)
    if limit is not None:
        limit = check_int("limit", limit, lo=1)
    if not path.is_file():
        raise ValueError(f"path {str(path)!r} is not a file")
    ts: list[float] = []
    n_in: list[int] = []
    n_out: list[int] = []
    ids: list[list[int]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if limit is not None and len(ts) >= limit:
                break
            if not line.strip():
                raise ValueError(f"line {lineno}: empty line")
            t, a, b, h = _parse_line(line, lineno)
            ts.append(t)
            n_in.append(a)
            n_out.append(b)
            ids.append(h)
    if not ts:
        raise ValueError(f"path {str(path)!r} holds no requests")
    return Trace(np.asarray(ts) / 1000.0, n_in, n_out, ids, source=path.name)
