"""``pd_split.split_summary`` and Lab 3's GPU-recording lines, on a made-up split (no engine): the
bytes against the formula at the split's block size, the colocated and control comparisons, and
each check shown to fail on a wrong input."""

from __future__ import annotations

import copy

import pytest

from kvlab.measure.disagg import pd_split
from kvlab.measure.recording import results

BETA = 24 * 2 * 64 * 2 * 4  # Qwen2.5-0.5B in fp32: 24,576 B per token


def _run(label, tokens):
    n = len(tokens)
    return pd_split.Run(label, tokens, [[-0.5] * len(t) for t in tokens], [0] * n, [0.1] * n)


def _req(p, external, local=0):
    return pd_split.NixlRequest(
        p,
        125,
        1,
        2000 * BETA,
        48,
        0.01,
        0.001,
        0.2,
        local_tokens=local,
        external_tokens=external,
    )


def make_split() -> pd_split.NixlSplit:
    ref = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    checks = pd_split.Checks(all_gone=True, start_s={"prefill": 30.0, "decode": 31.0})
    return pd_split.NixlSplit(
        "NixlConnector",
        16,
        _run("reference", ref),
        _run("prefill", [[1], [4], [7]]),
        _run("decode", ref),
        [_req(2000, 2000) for _ in ref],
        checks,
        {"prefill": 0, "decode": 0},
        control=_run("control", [[1, 9, 9], [4, 9, 9], [7, 9, 9]]),  # wrong KV: output moves
        control_requests=[_req(2000, 2000) for _ in ref],
        decode_cold=[_req(2000, 0, 2000) for _ in ref],
        device="cuda",
    )


def test_summary_of_a_good_split():
    s = pd_split.split_summary(make_split(), BETA)
    assert s["formula_bytes"] == [2000 * BETA] * 3 and all(s["bytes_equal_formula"])
    assert s["equal_to_colocated"] == [True] * 3 and s["control_differs"] == [True] * 3
    assert s["problems"] == [] and s["device"] == "cuda" and s["block_size"] == 16
    assert s["local_tokens"] == [0] * 3 and s["cold_local_tokens"] == [2000] * 3


def test_checks_fail_on_wrong_inputs():
    live = make_split()
    bad = copy.deepcopy(live)
    bad.requests[1].bytes -= 16 * BETA  # one block short
    assert pd_split.split_summary(bad, BETA)["bytes_equal_formula"] == [True, False, True]
    bad = copy.deepcopy(live)
    bad.control = bad.reference  # a decode engine that ignored the pulled KV
    assert any("ignored" in p for p in pd_split.split_summary(bad, BETA)["problems"])
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        pd_split.split_summary(live, 0)


def test_page_lines_of_a_gpu_recording():
    s = pd_split.split_summary(make_split(), BETA)
    s.update(dtype="float32", memory_shares=dict(pd_split.GPU_MEMORY_SHARE))
    rec = {
        "_file": "lab3-nvidia-h200-2027-01-01.json",
        "nixl_split": s,
        "machine": {"gpu": "NVIDIA H200", "model": "Qwen/Qwen2.5-0.5B-Instruct"},
    }
    out = results.describe("lab3", [rec])
    assert "NIXL split on cuda, float32, 16-token blocks" in out
    assert "49,152,000 B on all 3; formula 49,152,000 B; equal on 3 of 3" in out
    flat = " ".join(out.split())
    assert (
        "decode output matches colocated on 3 of 3 (log-probabilities within 0.01; token for "
        "token on 3)" in flat
    )
    # a recording made before the comparison kept its verdicts reads as before
    old = {
        **rec,
        "nixl_split": {k: v for k, v in s.items() if k not in ("match", "matches_colocated")},
    }
    assert "decode output equals colocated on 3 of 3" in results.describe("lab3", [old])
    # a rejected prompt shows its reason
    bad = copy.deepcopy(rec)
    bad["nixl_split"]["matches_colocated"][1] = False
    bad["nixl_split"]["match"][1].update(ok=False, reason="position 0: no near tie")
    assert "matches colocated on 2 of 3" in results.describe("lab3", [bad])
    assert "prompt 1: position 0: no near tie" in results.describe("lab3", [bad])
    assert "output differs from colocated on 3 of 3" in out and "CHECK FAILED" not in out
    assert max(len(line) for line in out.splitlines()) <= results.WIDTH
