"""Lab 3's helpers without an engine: token and byte accounting, the safetensors reader, the
layout decoder, the socket check and the process supervisor. Each check is shown to fail on a
wrong input."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from kvlab import calc
from kvlab.measure.disagg import nixl_sweep, pd_split
from kvlab.measure.serving import procs as pd_procs
from kvlab.models import LLAMA_70B


def test_stored_and_pulled_tokens():
    assert pd_split.stored_tokens(2000) == 1984  # 62 whole blocks, last token never stored
    assert pd_split.stored_tokens(2017) == 2016
    assert pd_split.stored_tokens(32) == 0
    assert pd_split.pulled_tokens(2000) == 2016  # 63 blocks, the partial last one included
    assert pd_split.pulled_tokens(2016) == 2016
    with pytest.raises(ValueError, match="prompt_tokens"):
        pd_split.stored_tokens(0)


def _write_safetensors(path, arrays: dict[str, np.ndarray]) -> None:
    header, blobs, off = {}, [], 0
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(a.shape),
            "data_offsets": [off, off + len(raw)],
        }
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_read_zero_and_compare_stored(tmp_path):
    rng = np.random.default_rng(0)
    for store in ("a", "b"):
        (tmp_path / store / "req").mkdir(parents=True)
        for layer in range(2):
            a = rng.standard_normal((64, 2, 64)) if store == "a" else None
            path = tmp_path / store / "req" / f"model.layers.{layer}.self_attn.attn.safetensors"
            if store == "a":
                _write_safetensors(path, {"kv_cache": a})
            else:
                path.write_bytes((tmp_path / "a" / "req" / path.name).read_bytes())
    stored = pd_split.read_stored(tmp_path / "a")
    assert [s.shape for s in stored] == [(64, 2, 64)] * 2
    assert all(s.data_bytes == 64 * 2 * 64 * 4 and s.file_bytes > s.data_bytes for s in stored)
    assert pd_split.same_stored(tmp_path / "a", tmp_path / "b")
    assert pd_split.zero_stored(tmp_path / "b") == 2 * 64 * 2 * 64 * 4
    assert not pd_split.same_stored(tmp_path / "a", tmp_path / "b")
    assert not np.any(pd_split.read_tensor(stored[0].path.replace("/a/", "/b/")))
    assert pd_split.read_stored(tmp_path / "b")[0].shape == (64, 2, 64)  # header intact


def test_split_kv_inverts_the_cpu_block_layout():
    bs, heads, hd, blocks = 32, 2, 16, 3
    rng = np.random.default_rng(1)
    k = rng.standard_normal((blocks * bs, heads, hd))
    v = rng.standard_normal((blocks * bs, heads, hd))
    # build the paged layout: per block and head, K transposed [hd, bs], then V [bs, hd]
    tiles = np.empty((blocks, heads, 2 * bs * hd))
    for b in range(blocks):
        for h in range(heads):
            kt = k[b * bs : (b + 1) * bs, h].T.reshape(-1)
            tiles[b, h] = np.concatenate([kt, v[b * bs : (b + 1) * bs, h].reshape(-1)])
    stored = (
        tiles.reshape(blocks, heads, bs, 2 * hd).transpose(0, 2, 1, 3).reshape(-1, heads, 2 * hd)
    )
    k2, v2 = pd_split.split_kv(stored, bs)
    assert np.array_equal(k2, k) and np.array_equal(v2, v)
    k3, _ = pd_split.split_kv(stored[::-1].copy(), bs)  # the check can fail
    assert not np.array_equal(k3, k)
    with pytest.raises(ValueError, match="stored shape"):
        pd_split.split_kv(stored[:40], bs)


def test_run_comparisons():
    a = pd_split.Run("a", [[1, 2, 3], [4, 5]], [[-0.1, -0.2, -0.3], [-1.0, -2.0]], [0, 0], [1, 1])
    b = pd_split.Run("b", [[1, 2, 3], [4, 6]], [[-0.1, -0.25, -0.3], [-1.5, -2.0]], [0, 0], [1, 1])
    assert a.same_tokens(b) == [True, False]
    assert a.matching_tokens(b) == [3, 1]
    assert a.max_logprob_gap(b) == pytest.approx(0.05)
    assert a.first_logprob_gap(b) == pytest.approx([0.0, 0.5])


def test_nixl_totals_sum_the_histograms():
    m = [
        {"name": "vllm:nixl_xfer_time_seconds", "count": 2, "sum": 0.5},
        {"name": "vllm:nixl_bytes_transferred", "count": 2, "sum": 4e6},
        {"name": "vllm:prefix_cache_hits", "value": 3},
    ]
    assert pd_split.nixl_totals(m) == {
        "transfers": 2.0,
        "failed": 0.0,
        "xfer_s": 0.5,
        "bytes": 4e6,
        "local_tokens": 0.0,  # vllm:prompt_tokens_by_source, none in this list
        "external_tokens": 0.0,
        "prefill_s": 0.0,
    }
    m.append({"name": "vllm:nixl_num_failed_transfers", "value": 1.0})
    assert pd_split.nixl_totals(m)["failed"] == 1.0


def test_kv_jobs_use_the_formula_and_cap():
    jobs, skipped = nixl_sweep.kv_jobs(LLAMA_70B, [1024, 2048, 4096], cap_bytes=1e9)
    per_token = calc.model_kv_bytes_per_token(LLAMA_70B)
    assert [j.n_bytes for j in jobs] == [1024 * per_token, 2048 * per_token]
    assert [j.tokens for j in skipped] == [4096]
    blocks, _ = nixl_sweep.kv_jobs(LLAMA_70B, [1024], descriptor_tokens=32)
    assert blocks[0].descriptor_bytes == 32 * per_token // (2 * 80)
    with pytest.raises(ValueError, match="cap_bytes"):
        nixl_sweep.kv_jobs(LLAMA_70B, [1024], cap_bytes=0)


@pytest.mark.parametrize(
    "address, loopback",
    [
        ("127.0.0.1", True),
        ("127.5.0.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("::ffff:192.168.1.2", False),
    ],
)
def test_socket_loopback_rule(address, loopback):
    s = pd_procs.Socket(1, "tcp", address, 80)
    assert s.loopback is loopback
    assert pd_procs.non_loopback([s]) == ([] if loopback else [s])


def test_proc_addresses_decode():
    assert pd_procs._decode_address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert pd_procs._decode_address("00000000:0050") == ("0.0.0.0", 80)
    assert pd_procs._decode_address("00000000000000000000000001000000:0016") == ("::1", 22)


def test_listening_sockets_sees_a_real_listener():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        import os

        mine = pd_procs.listening_sockets([os.getpid()], descendants=False)
    assert any(s.port == port and s.address == "127.0.0.1" for s in mine)
    assert not pd_procs.non_loopback(s for s in mine if s.port == port)


def test_children_are_stopped_on_failure_grandchildren_included():
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    with pytest.raises(RuntimeError) as info, pd_procs.Children(grace_s=2) as kids:
        kids.start(
            [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60  # ends as soon as both run; 60 s for a busy machine
        while len(kids.snapshot()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(kids.seen) == 2
        raise RuntimeError("a step failed")
    assert len(info.value.pids) == 2 and info.value.all_gone
    assert pd_procs.gone(info.value.pids)
