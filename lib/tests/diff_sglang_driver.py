"""Drive SGLang's own RadixCache with requests one after another; print what it did.

Runs in an environment with SGLang (``KVLAB_SGLANG_PYTHON``: ``pip install sglang`` in its own
venv; no kvlab, no pytest), started once by ``test_diff_sglang.py``. The cache is SGLang's
``RadixCache.create_simulated`` (no model, no GPU) with a token counter standing in for the KV
pool; each request goes through the steps SGLang's scheduler takes: ``match_prefix`` on all but
the last prompt token, ``inc_lock_ref``, eviction of the shortfall if the pool lacks room for the
tokens to compute, then ``insert`` of the page-aligned prompt, the pool gets back the duplicates
and the unaligned tail, and ``dec_lock_ref``.

Protocol: one JSON object per line on stdin, ``{"page_size", "capacity", "requests": [[prompt_ids,
extra_key], ...]}``; one JSON line back per stream, ``{"version", "steps"}`` with, per request,
``ok`` (False: no room even after eviction), ``hit``, ``size`` (tokens in the tree) and ``paths``
(``[extra_key, token ids]`` of every leaf, sorted).
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version

_OUT = os.fdopen(os.dup(1), "w")  # SGLang may print: keep stdout for the protocol
os.dup2(2, 1)

import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: E402


class TokenPool:
    """The KV pool as a count of free token slots (what eviction and insertion give back)."""

    device = torch.device("cpu")

    def __init__(self, capacity: int):
        self.free_tokens = capacity

    def available_size(self) -> int:
        return self.free_tokens

    def free(self, indices) -> None:
        self.free_tokens += len(indices)

    def free_segment(self, indices, start_pos: int = 0) -> None:
        self.free_tokens += len(indices)


def _paths(tree: RadixCache) -> list:
    out = []
    stack = [(tree.root_node, [])]
    while stack:
        node, prefix = stack.pop()
        kids = list(node.children.values())
        if node is not tree.root_node and not kids:
            out.append([node.key.extra_key, prefix])
        stack.extend((c, prefix + list(c.key.token_ids)) for c in kids)
    return sorted(out, key=repr)


def run_stream(job: dict) -> list[dict]:
    ps = int(job["page_size"])
    pool = TokenPool(int(job["capacity"]))
    tree = RadixCache.create_simulated(page_size=ps, mock_allocator=pool)
    steps = []
    for prompt, extra in job["requests"]:
        n = len(prompt)
        match = tree.match_prefix(MatchPrefixParams(key=RadixKey(prompt[: n - 1], extra)))
        hit, node = match.device_prefix_len, match.last_device_node
        tree.inc_lock_ref(node)
        need = n - hit
        if need > pool.available_size():
            tree.evict(EvictParams(num_tokens=need - pool.available_size()))
        if need > pool.available_size():
            tree.dec_lock_ref(node)
            steps.append({"ok": False, "size": tree.total_size(), "paths": _paths(tree)})
            continue
        pool.free_tokens -= need
        keys = prompt[: n // ps * ps]
        values = torch.arange(len(keys), dtype=torch.int64)
        done = tree.insert(InsertParams(key=RadixKey(keys, extra), value=values))
        pool.free_tokens += (done.prefix_len - hit) + (n - len(keys))
        tree.dec_lock_ref(node)
        steps.append({"ok": True, "hit": hit, "size": tree.total_size(), "paths": _paths(tree)})
    return steps


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            job = json.loads(line)
            try:
                reply = {"version": version("sglang"), "steps": run_stream(job)}
            except Exception as err:  # reported to the test, which fails with it
                reply = {"version": version("sglang"), "error": f"{type(err).__name__}: {err}"}
            _OUT.write(json.dumps(reply) + "\n")
            _OUT.flush()


if __name__ == "__main__":
    main()
