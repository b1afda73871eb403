"""Differential tests: kvlab.cache.RadixTree against SGLang's own RadixCache (opt-in).

SGLang installs from PyPI on a CPU-only machine and its ``RadixCache`` runs there without a GPU,
but only in an environment of about 11 GB (``pip install sglang`` brings PyTorch's CUDA build, the
CUDA libraries and SGLang's kernels) whose import takes a minute: too much for every ``make test``.
This module therefore runs when ``KVLAB_SGLANG_PYTHON`` names that environment's Python::

    python3 -m venv /tmp/sglang && /tmp/sglang/bin/pip install sglang==0.5.23
    KVLAB_SGLANG_PYTHON=/tmp/sglang/bin/python .venv/bin/python -m pytest lib/tests/test_diff_sglang.py

It checks that, requests one after another with room for everything, both caches find the same
hit for every request and hold the same token paths afterwards, at page size 1 and 16 (adapters
and salts as SGLang's ``extra_key`` namespaces). Under eviction they differ by design; the two
tests at the end pin the two reasons, so a change on either side shows up here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kvlab.cache import CacheFullError, RadixTree

sys.path.insert(0, str(Path(__file__).parent))
from diff_streams import Knobs, gen_stream  # noqa: E402
from test_diff_vllm import ROOT, Driver  # noqa: E402

SGLANG_PYTHON = os.environ.get("KVLAB_SGLANG_PYTHON")
DRIVER = Path(__file__).with_name("diff_sglang_driver.py")
RECORD = ROOT / "results" / "differential-sglang.json"
STREAMS = 30  # per page size
pytestmark = pytest.mark.skipif(
    not SGLANG_PYTHON, reason="opt-in: set KVLAB_SGLANG_PYTHON to a Python with sglang installed"
)


@pytest.fixture(scope="module")
def sglang(tmp_path_factory):
    d = Driver(Path(SGLANG_PYTHON), tmp_path_factory.mktemp("sglang") / "driver.log", DRIVER)
    yield d
    d.close()


def extra_key(adapter, salt) -> str | None:
    """kvlab's namespace (adapter, salt) as one SGLang ``extra_key``."""
    return None if adapter is None and salt is None else f"{adapter}|{salt}"


def kvlab_steps(page_size: int, capacity: int, requests: list) -> list[dict]:
    tree = RadixTree(capacity, page_size=page_size)
    steps = []
    for prompt, (adapter, salt) in requests:
        rec: dict = {"ok": True}
        try:
            rec["hit"] = tree.serve(prompt, adapter=adapter, cache_salt=salt)
        except CacheFullError:
            rec = {"ok": False}
        rec["size"] = tree.cached_tokens
        rec["paths"] = sorted(([extra_key(*ns), list(p)] for ns, p in tree.paths()), key=repr)
        steps.append(rec)
    return steps


def first_difference(requests: list, kv: list[dict], sg: list[dict]) -> str | None:
    for i, (a, b) in enumerate(zip(kv, sg, strict=True)):
        for field in ("ok", "hit", "size", "paths"):
            if a.get(field) != b.get(field):
                prompt, ns = requests[i]
                return (
                    f"request {i} of {len(requests)} ({len(prompt)} tokens, namespace {ns}): "
                    f"{field} differs: kvlab {a.get(field)!r}, SGLang {b.get(field)!r}"
                )
    return None


def compare(sglang: Driver, page_size: int, capacity: int, requests: list) -> str | None:
    job = {
        "page_size": page_size,
        "capacity": capacity,
        "requests": [[p, extra_key(*ns)] for p, ns in requests],
    }
    return first_difference(requests, kvlab_steps(page_size, capacity, requests), sglang.run(job))


def stream_requests(seed: int, block_size: int) -> list:
    """The prompts of a generated stream (shared prefixes, restarts, prefixes, short prompts,
    adapters and salts), one request after another."""
    knobs = Knobs(seed, block_size, 10, 150, 2 + seed % 3, 1, 0.2, 0.2, 0.15, 0.1, 0.3)
    ops = gen_stream(knobs)["ops"]
    return [(op[2], (op[3], op[4])) for op in ops if op[0] == "start"]


@pytest.mark.parametrize("page_size", [1, 16])
def test_hits_and_paths_match_sglang(sglang, page_size):
    compared = 0
    for seed in range(STREAMS):
        requests = stream_requests(seed, 4 if page_size == 1 else 16)
        diff = compare(sglang, page_size, 10**7, requests)
        assert diff is None, f"stream {seed}, page size {page_size}: {diff}"
        compared += len(requests)
    if os.environ.get("KVLAB_DIFF_RECORD") == "1":
        rec = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        rec["sglang"] = sglang.version
        rec[f"requests_page_{page_size}"] = compared
        RECORD.write_text(json.dumps(rec, indent=2) + "\n")


def test_difference_whole_leaf_eviction(sglang):
    """Page size 16, room for three pages: SGLang evicts the least recently used leaf whole
    (radix_cache.py, ``evict``: ``num_evicted += len(x.value)``), kvlab one page from its tail,
    the way vLLM's block pool gives back one block at a time."""
    a = list(range(100, 132))  # two pages, one leaf
    b = list(range(200, 232))  # two more pages: one page must go
    again = a[:16] + [7]
    requests = [(a, (None, None)), (b, (None, None)), (again, (None, None))]
    job = {"page_size": 16, "capacity": 48, "requests": [[p, None] for p, _ in requests]}
    sg, kv = sglang.run(job), kvlab_steps(16, 48, requests)
    # SGLang: b evicts all of a; the third request misses and, one token short, evicts all of b
    assert [s["size"] for s in sg] == [32, 32, 16] and [s["hit"] for s in sg] == [0, 0, 0]
    assert [s["size"] for s in kv] == [32, 48, 48] and [s["hit"] for s in kv] == [0, 0, 16]


def test_difference_split_refreshes_the_lower_part(sglang):
    """Page size 1: when a lookup or an insert splits an edge, SGLang has already stamped the
    edge's node with the access time, and the node keeps the *lower* part (radix_cache.py,
    ``_match_prefix_helper`` / ``_insert_helper`` set ``last_access_time`` before
    ``_split_node``): the untouched tail counts as just used. kvlab stamps only the path a
    request used, so it evicts that tail first."""
    r0 = [1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0]
    r1 = r0[:8]  # all prefix: splits r0's edge after 8 tokens
    r2 = [1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0, 0]
    r3 = r0[:15] + [0, 1, 1, 0]
    requests = [(r, (None, None)) for r in (r0, r1, r2, r3)]
    job = {"page_size": 1, "capacity": 34, "requests": [[p, None] for p, _ in requests]}
    sg, kv = sglang.run(job), kvlab_steps(1, 34, requests)
    assert [s["hit"] for s in sg] == [s["hit"] for s in kv] == [0, 7, 2, 15]
    assert sorted(p for _, p in sg[-1]["paths"]) == sorted([r0, r3])  # SGLang evicted r2's tail
    assert sorted(p for _, p in kv[-1]["paths"]) == sorted([r2, r3])  # kvlab evicted r0's tail
