"""``record_gpu.record_lab3`` without an engine: the GPU plan runs the page's split (3 prompts of
2,000 tokens, Lab 1's model, on CUDA); a split that fails is recorded with its reason and the
model still named; a machine without vLLM or NIXL records the split as not run."""

from __future__ import annotations

import sys
from pathlib import Path

from kvlab.measure.disagg import pd_split

ROOT = Path(__file__).resolve().parents[2]
QWEN = {
    "num_attention_heads": 14,
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
}


def _record_gpu():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import record_gpu
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return record_gpu


def test_gpu_plan_is_the_pages_run():
    rg = _record_gpu()
    q = rg.plan(gpu=True, quick=False, dry_run=False)["lab3"]
    assert q == {
        "model": pd_split.GPU_MODEL,
        "device": "cuda",
        "prompts": 3,
        "prompt_tokens": 2000,
        "max_tokens": 16,
    }
    assert rg.plan(gpu=False, quick=False, dry_run=True)["lab3"]["device"] == "cpu"


def test_a_failed_split_is_recorded_with_its_reason():
    rg = _record_gpu()
    seen = {}

    def run_split(model, prompts, max_tokens, device):
        seen.update(model=model, n=len(prompts), tokens=len(prompts[0]), device=device)
        raise RuntimeError("the decode engine exited early")

    p = rg.plan(gpu=True, quick=True, dry_run=False)
    rec = rg.record_lab3({"gpu": "NVIDIA H200"}, p, run_split=run_split, config=lambda m: QWEN)
    assert seen == {"model": pd_split.GPU_MODEL, "n": 3, "tokens": 2000, "device": "cuda"}
    assert rec["nixl_split"]["recorded"] is False
    assert "the decode engine exited early" in rec["nixl_split"]["reason"]
    assert rec["machine"]["model"] == pd_split.GPU_MODEL


def test_no_vllm_records_the_split_as_not_run():
    rg = _record_gpu()
    p = rg.plan(gpu=True, quick=True, dry_run=False)
    rec = rg.record_lab3({}, p, skip="vllm or nixl not installed in this Python")
    assert rec["nixl_split"] == {
        "recorded": False,
        "reason": "vllm or nixl not installed in this Python",
    }
