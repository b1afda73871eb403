"""Differential tests: kvlab.cache.VLLMBlockPool against vLLM's own KV cache manager.

vLLM runs in the engine environment (``.venv-engine``, made by ``make engine``) as a subprocess,
``diff_vllm_driver.py``, started once for this module; kvlab runs here. Both get the same streams
of operations (start a request, decode a token, finish) and, after every operation, must agree on
the hit, the request's block ids, the KV events (blocks stored and evicted, in order), the free
queue (the eviction order) and which block holds which key; kvlab's keys and vLLM's hashes must
pair one to one (hash chaining and extra keys agree). A failure names the first differing step.

``results/differential-vllm.json`` records the vLLM version and the operation counts the book
quotes; this test checks them (``KVLAB_DIFF_RECORD=1`` rewrites the file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvlab.cache

sys.path.insert(0, str(Path(__file__).parent))
from diff_streams import Knobs, first_difference, gen_stream, replay_pool  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("diff_vllm_driver.py")
RECORD = ROOT / "results" / "differential-vllm.json"
EXAMPLES = 100  # generated streams
MIN_OPS = 100  # operations per stream, at least
MOONCAKE_REQUESTS = 400  # the trace's first requests, on one replica
MOONCAKE_BLOCK = 32  # tokens per block (the CPU engine's attention needs a multiple of 32)
MOONCAKE_SIZES = (4096, 16384, 65536)  # blocks in the pool (the largest prompt needs 3,791)


def engine_python() -> Path | None:
    """The engine environment's Python (``KVLAB_ENGINE_PYTHON`` or ``.venv-engine``), if any."""
    p = Path(os.environ.get("KVLAB_ENGINE_PYTHON", ROOT / ".venv-engine" / "bin" / "python"))
    return p if p.exists() else None


class Driver:
    """An engine's cache in a subprocess (vLLM's by default): one stream in, its records out."""

    def __init__(self, python: Path, log: Path, script: Path = DRIVER):
        self.log = log
        self._err = open(log, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [str(python), str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR"),
        )
        self.version: str | None = None

    def run(self, stream: dict) -> list[dict]:
        self.proc.stdin.write(json.dumps(stream) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log.read_text()[-3000:]
            raise RuntimeError(f"the driver stopped; its log ends with:\n{tail}")
        reply = json.loads(line)
        self.version = reply["version"]
        if "error" in reply:
            raise RuntimeError(f"the driver failed on a stream: {reply['error']}")
        return reply["steps"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # this process only, by its own handle
                self.proc.wait()
        self._err.close()


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    python = engine_python()
    if python is None:
        if os.environ.get("CI"):  # `make test` builds it first: missing there is a failure
            pytest.fail("no engine environment (.venv-engine): `make engine` did not run")
        pytest.skip("no engine environment (.venv-engine): run `make engine`")
    d = Driver(python, tmp_path_factory.mktemp("vllm") / "driver.log")
    yield d
    d.close()


@pytest.fixture(scope="module")
def counts():
    """Operations compared by this module's tests, for the record."""
    return {}


def check(driver: Driver, stream: dict, module=kvlab.cache) -> str | None:
    return first_difference(stream, replay_pool(stream, module), driver.run(stream))


knobs_st = st.builds(
    Knobs,
    seed=st.integers(0, 2**32 - 1),
    block_size=st.sampled_from([1, 2, 3, 4, 16]),
    num_blocks=st.integers(2, 40),
    n_ops=st.integers(MIN_OPS, 2 * MIN_OPS),
    alphabet=st.integers(2, 4),
    concurrency=st.integers(1, 4),
    p_restart=st.floats(0, 0.3),
    p_extend=st.floats(0, 0.3),
    p_prefix=st.floats(0, 0.2),
    p_short=st.floats(0, 0.2),
    p_extras=st.floats(0, 0.5),
)


def test_generated_streams_match_vllm(driver, counts):
    seen = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
    @given(knobs_st)
    def one(knobs):
        stream = gen_stream(knobs)
        diff = check(driver, stream)
        assert diff is None, f"{knobs}\n{diff}"
        seen.append(len(stream["ops"]))

    t0 = time.perf_counter()
    one()
    counts["streams"] = len(seen)
    counts["stream_ops"] = sum(seen)
    counts["stream_seconds"] = round(time.perf_counter() - t0, 1)
    assert sum(seen) >= EXAMPLES * MIN_OPS


def mooncake_stream(num_blocks: int) -> dict:
    return {
        "num_blocks": num_blocks,
        "block_size": MOONCAKE_BLOCK,
        "detail": False,
        "mooncake": MOONCAKE_REQUESTS,
        "state_every": 25,  # the whole queue's checksum; hits, block ids and events every step
    }


@pytest.mark.parametrize("num_blocks", MOONCAKE_SIZES)
def test_mooncake_trace_matches_vllm(driver, counts, num_blocks):
    stream = mooncake_stream(num_blocks)
    kv = replay_pool(stream, kvlab.cache)
    vl = driver.run(stream)
    assert (diff := first_difference(stream, kv, vl)) is None, diff
    hits = [r["hit"] for r in kv if "hit" in r]
    evicted = sum(len(r["removed"]) for r in kv)
    assert evicted > 0 and sum(hits) > 0, "the trace must hit and evict at this size"
    counts.setdefault("mooncake", {})[str(num_blocks)] = {
        "ops": len(kv),
        "hit_tokens": sum(hits),
        "evicted_blocks": evicted,
    }


def test_record(driver, counts):
    """The numbers the book quotes are the ones this module compares."""
    if "stream_ops" not in counts or len(counts.get("mooncake", {})) != len(MOONCAKE_SIZES):
        pytest.skip("run with the other tests of this module")
    now = {
        "vllm": driver.version,
        "streams": counts["streams"],
        "stream_ops": counts["stream_ops"],
        "mooncake_requests": MOONCAKE_REQUESTS,
        "mooncake_block_size": MOONCAKE_BLOCK,
        "mooncake": counts["mooncake"],
    }
    if os.environ.get("KVLAB_DIFF_RECORD") == "1":
        RECORD.write_text(json.dumps(now, indent=2) + "\n")
    rec = json.loads(RECORD.read_text())
    assert rec["vllm"] == now["vllm"], "another vLLM version: re-record with KVLAB_DIFF_RECORD=1"
    # The generated streams' total can differ by an operation or two between machines (hypothesis
    # draws a few knobs differently): the book quotes the record, so hold it within 1 %.
    assert now["stream_ops"] >= 10_000, "fewer than 10,000 generated operations compared"
    assert abs(now["stream_ops"] - rec["stream_ops"]) <= 0.01 * rec["stream_ops"], (
        f"{now['stream_ops']} operations compared, the book says {rec['stream_ops']}: re-record"
    )
    assert rec["mooncake"] == now["mooncake"], "the Mooncake replay changed: re-record"


# ---------------------------------------------------------------------------------------------
# the differential test can fail: a copy of kvlab.cache with one rule broken must be caught

MUTANTS = {
    "eviction order: a finished request's blocks freed first block first": (
        "for b in reversed(run.blocks):  # vLLM's free_blocks(reversed(blocks))",
        "for b in run.blocks:",
    ),
    "hash chaining: a block's key ignores its parent": (
        "key = hash_block(parent if chained else None, arr[lo:hi], extra)",
        "key = hash_block(None, arr[lo:hi], extra)",
    ),
    "partial blocks freed to the back of the queue, not the front": (
        "(back if self._key[b] is not None else front).append(b)",
        "back.append(b)",
    ),
    "a hit may cover the last prompt token": (
        "for key in keys[: max(n_tokens - 1, 0) // self.block_size]:",
        "for key in keys[: n_tokens // self.block_size]:",
    ),
}
FIXED = [
    Knobs(s, bs, nb, 150, 3, 3, 0.2, 0.2, 0.15, 0.1, 0.3)
    for s, (bs, nb) in enumerate([(2, 6), (4, 12), (3, 9), (16, 8), (1, 20), (2, 30)] * 3)
]


def _cache_copy(tmp_path: Path, name: str, old: str | None = None, new: str | None = None):
    """kvlab.cache (the package, and the one module it imports) as a fresh package, optionally
    with one line of one of its modules changed."""
    import importlib.util

    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    src = Path(kvlab.cache.__file__).parent
    (pkg / "_validate.py").write_text((src.parent / "_validate.py").read_text())
    shutil.copytree(src, pkg / "cache", ignore=shutil.ignore_patterns("__pycache__"))
    if old is not None:
        hits = [f for f in sorted((pkg / "cache").glob("*.py")) if old in f.read_text()]
        assert len(hits) == 1 and hits[0].read_text().count(old) == 1, (
            f"the mutated line moved in kvlab/cache/: {old!r}"
        )
        hits[0].write_text(hits[0].read_text().replace(old, new))
    spec = importlib.util.spec_from_file_location(
        name, pkg / "__init__.py", submodule_search_locations=[str(pkg)]
    )
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    return importlib.import_module(f"{name}.cache")


def test_unchanged_copy_matches(driver, tmp_path):
    module = _cache_copy(tmp_path, "kvlab_copy")
    for knobs in FIXED:
        assert check(driver, gen_stream(knobs), module) is None


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_broken_copy_is_caught(driver, tmp_path, mutant):
    old, new = MUTANTS[mutant]
    module = _cache_copy(tmp_path, f"kvlab_mutant_{list(MUTANTS).index(mutant)}", old, new)
    found = [d for knobs in FIXED if (d := check(driver, gen_stream(knobs), module))]
    assert found, f"no stream told the mutant apart ({mutant})"
    assert all(d.startswith("step ") for d in found), found[0]
