"""Operation streams for the differential tests, and kvlab's side of them.

A stream is a JSON-ready dict ``{"num_blocks", "block_size", "detail", "ops"}`` (the protocol of
``diff_vllm_driver.py``), or ``{..., "mooncake": n}`` for the Mooncake trace's first ``n`` requests
(:func:`mooncake_ops` makes the operations on both sides, so the tokens never cross the pipe). :func:`gen_stream` makes one from a seed and a few knobs, so hypothesis
only draws the knobs; :func:`replay_pool` runs a stream through a ``VLLMBlockPool`` and records the
same fields as the driver; :func:`first_difference` compares two records step by step.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass

import numpy as np

BASES = 3  # shared "system prompts" per stream


@dataclass(frozen=True)
class Knobs:
    """What hypothesis draws: the pool, the mix of requests and the stream's length."""

    seed: int
    block_size: int
    num_blocks: int
    n_ops: int
    alphabet: int  # token ids 0 .. alphabet-1: small, so block contents collide
    concurrency: int  # requests running at once, at most
    p_restart: float  # resend an earlier prompt unchanged
    p_extend: float  # next turn of an earlier conversation: prompt + answer + new text
    p_prefix: float  # an earlier prompt cut short (all of it cached)
    p_short: float  # shorter than a block
    p_extras: float  # an adapter, a cache salt or an image on a new prompt


def gen_stream(k: Knobs) -> dict:
    """A stream of start / decode / finish operations with shared prefixes, restarts, extensions,
    prompts that are all prefix, prompts shorter than a block, adapters, salts and images."""
    rng = np.random.default_rng(k.seed)
    bs = k.block_size
    bases = [
        rng.integers(0, k.alphabet, int(rng.integers(1, 4 * bs + 2))).tolist() for _ in range(BASES)
    ]
    history: list[tuple[list[int], list[int], object, object, list]] = []
    running: dict[str, dict] = {}
    ops: list[list] = []
    n = 0
    while len(ops) < k.n_ops:
        busy = len(running) >= k.concurrency
        if running and (busy or rng.random() < 0.5):
            rid = sorted(running)[int(rng.integers(len(running)))]
            r = running[rid]
            if r["left"] and rng.random() < 0.7:
                tok = int(rng.integers(0, k.alphabet))
                r["out"].append(tok)
                r["left"] -= 1
                ops.append(["decode", rid, [tok]])
            else:
                ops.append(["finish", rid])
                history.append((r["prompt"], r["out"], r["adapter"], r["salt"], r["mm"]))
                del running[rid]
            continue
        u = rng.random()
        adapter = salt = None
        mm: list = []
        if history and u < k.p_restart:
            prompt, _, adapter, salt, mm = history[int(rng.integers(len(history)))]
            prompt = list(prompt)
        elif history and u < k.p_restart + k.p_extend:
            p, out, adapter, salt, mm = history[int(rng.integers(len(history)))]
            prompt = (
                p + out + rng.integers(0, k.alphabet, int(rng.integers(1, 2 * bs + 2))).tolist()
            )
        elif history and u < k.p_restart + k.p_extend + k.p_prefix:
            p, _, adapter, salt, mm = history[int(rng.integers(len(history)))]
            cut = int(rng.integers(1, len(p) + 1))
            if rng.random() < 0.5 and cut >= bs:
                cut -= cut % bs  # a whole number of blocks, sometimes the whole prompt
            prompt = p[:cut]
            mm = [m for m in mm if m[1] <= cut]
        elif u < k.p_restart + k.p_extend + k.p_prefix + k.p_short:
            prompt = rng.integers(0, k.alphabet, int(rng.integers(1, bs + 1))).tolist()
        else:
            prompt = (
                bases[int(rng.integers(BASES))]
                + rng.integers(0, k.alphabet, int(rng.integers(0, 3 * bs + 1))).tolist()
            )
            if not prompt:
                prompt = [0]
            if rng.random() < k.p_extras:
                adapter = [None, "A", 7][int(rng.integers(3))]
            if rng.random() < k.p_extras:
                salt = [None, "tenant-1", "tenant-2"][int(rng.integers(3))]
            if rng.random() < k.p_extras and len(prompt) >= 2:
                start = int(rng.integers(0, len(prompt) - 1))
                end = int(rng.integers(start + 1, min(len(prompt), start + 2 * bs) + 1))
                mm = [[start, end, ["cat", "dog"][int(rng.integers(2))]]]
        rid = f"r{n}"
        n += 1
        running[rid] = {
            "prompt": prompt,
            "out": [],
            "left": int(rng.integers(0, 3 * bs)),
            "adapter": adapter,
            "salt": salt,
            "mm": mm,
        }
        ops.append(["start", rid, prompt, adapter, salt, mm])
    return {"num_blocks": k.num_blocks, "block_size": bs, "detail": True, "ops": ops}


def state_crc(free: list[int], keyed: list[int]) -> int:
    """A checksum of the free queue's order and of which blocks hold a key (both sides use it)."""
    return zlib.crc32(array("q", [*free, -1, *keyed]).tobytes())


def mooncake_ops(n: int) -> list[list]:
    """The Mooncake trace's first ``n`` requests one after another on one replica: start, the
    answer's KV in one decode step (all of it but the last token: it is never fed back), finish."""
    from kvlab.traces import load_mooncake

    trace = load_mooncake(limit=n)
    ops: list[list] = []
    for i in range(len(trace)):
        prompt, out = trace.tokens(i)
        rid = f"m{i}"
        ops.append(["start", rid, prompt.tolist(), None, None, []])
        if len(out) > 1:
            ops.append(["decode", rid, out[:-1].tolist()])
        ops.append(["finish", rid])
    return ops


def stream_ops(stream: dict) -> list[list]:
    """A stream's operations (built here for a Mooncake stream)."""
    return mooncake_ops(stream["mooncake"]) if "mooncake" in stream else stream["ops"]


def replay_pool(stream: dict, cache_module) -> list[dict]:
    """Run ``stream`` through ``cache_module.VLLMBlockPool`` (the module is a parameter so that the
    mutation test can pass a changed copy); one record per operation, as the driver's."""
    cm = cache_module
    bs = stream["block_size"]
    pool = cm.VLLMBlockPool(stream["num_blocks"], bs)
    live: dict[str, object] = {}
    steps = []
    ops, every = stream_ops(stream), int(stream.get("state_every", 1))
    for i, op in enumerate(ops):
        kind, rid = op[0], op[1]
        rec: dict = {"ok": True}
        if kind == "start":
            prompt, adapter, salt = op[2], op[3], op[4]
            mms = [cm.MMInput(s, e, d) for s, e, d in op[5]]
            req = cm.Request(
                prompt, adapter=adapter, mm_inputs=mms, cache_salt=salt, request_id=rid
            )
            try:
                rec["hit"] = pool.start(req)
                rec["blocks"] = pool.request_blocks(rid)
                rec["hashes"] = pool.request_keys(rid)
                live[rid] = req
            except cm.CacheFullError:
                rec["ok"] = False
                rec["hashes"] = cm.block_keys(
                    prompt, bs, adapter=adapter, mm_inputs=mms, cache_salt=salt, mm_offsets=True
                )
        elif kind == "decode":
            req = live.get(rid)
            if req is None:
                rec["ok"] = False
            else:
                try:
                    pool.decode(req, op[2])
                    rec["blocks"] = pool.request_blocks(rid)
                except cm.CacheFullError:
                    rec["ok"] = False
                    pool.finish(live.pop(rid), cache_output=False)
        elif kind == "finish":
            req = live.pop(rid, None)
            if req is None:
                rec["ok"] = False
            else:
                pool.finish(req, cache_output=False)
        ev = pool.clear_events()
        rec["stored"] = [e.key for e in ev if e.kind == "stored"]
        rec["removed"] = [e.key for e in ev if e.kind == "removed"]
        if stream["detail"]:
            rec["free"] = pool.free_queue()
            rec["keyed"] = {str(b): pool.block_key(b) for b in pool.keyed_blocks()}
        elif i % every == 0 or i == len(ops) - 1:
            rec["crc"] = state_crc(pool.free_queue(), pool.keyed_blocks())
        steps.append(rec)
    return steps


def _describe(op: list) -> str:
    if op[0] == "start":
        extra = "".join(
            f", {name}={v!r}"
            for name, v in (("adapter", op[3]), ("salt", op[4]), ("mm", op[5]))
            if v
        )
        head = op[2][:12]
        return (
            f"start {op[1]} ({len(op[2])} tokens {head}{'...' if len(op[2]) > 12 else ''}{extra})"
        )
    if op[0] == "decode":
        return f"decode {op[1]} ({len(op[2])} token(s))"
    return f"finish {op[1]}"


class _Pairing:
    """kvlab key <-> vLLM hash: one to one, or the hash chaining differs."""

    def __init__(self):
        self.k2v: dict[str, str] = {}
        self.v2k: dict[str, str] = {}

    def pair(self, k: str, v: str) -> str | None:
        if self.k2v.setdefault(k, v) != v:
            return f"kvlab key {k[:8]} stands for two vLLM hashes ({self.k2v[k]}, {v})"
        if self.v2k.setdefault(v, k) != k:
            return f"vLLM hash {v} stands for two kvlab keys ({self.v2k[v][:8]}, {k[:8]})"
        return None

    def pair_all(self, ks: list[str], vs: list[str], what: str) -> str | None:
        if len(ks) != len(vs):
            return f"{what}: kvlab has {len(ks)}, vLLM {len(vs)}"
        for k, v in zip(ks, vs, strict=True):
            if err := self.pair(k, v):
                return f"{what}: {err}"
        return None


def first_difference(stream: dict, kv: list[dict], vl: list[dict]) -> str | None:
    """None if kvlab's records equal vLLM's at every step, else a message naming the first
    differing step, the operation and the field."""
    pairing = _Pairing()
    ops = stream_ops(stream)
    if not len(ops) == len(kv) == len(vl):
        return f"{len(ops)} operations, {len(kv)} kvlab records, {len(vl)} vLLM records"
    for i, (op, a, b) in enumerate(zip(ops, kv, vl, strict=True)):
        where = f"step {i} of {len(ops)} ({_describe(op)})"
        for field in ("ok", "hit", "blocks", "free", "crc"):
            if a.get(field) != b.get(field):
                return f"{where}: {field} differs: kvlab {a.get(field)!r}, vLLM {b.get(field)!r}"
        for field in ("hashes", "stored", "removed"):
            if field in a or field in b:
                err = pairing.pair_all(a.get(field, []), b.get(field, []), field)
                if err:
                    return f"{where}: {err}"
        if "keyed" in a or "keyed" in b:
            ka, kb = a.get("keyed", {}), b.get("keyed", {})
            if sorted(ka) != sorted(kb):
                return (
                    f"{where}: blocks holding a key differ: kvlab {sorted(ka)}, vLLM {sorted(kb)}"
                )
            err = pairing.pair_all([ka[x] for x in sorted(ka)], [kb[x] for x in sorted(ka)], "keys")
            if err:
                return f"{where}: {err}"
    return None
