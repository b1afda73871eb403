"""`tools/record_gpu.py --dry-run` (the session's one run, ``conftest.py``): Lab 3's GPU job run
on the CPU build (both engines of the live NIXL split, under the engine lock), written with the
fields Lab 3's page reads, marked as a dry run, and rendered by the page's GPU cell, a failed split
included (a few minutes on two cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvlab.measure.disagg import pd_split
from kvlab.measure.recording import results

ROOT = Path(__file__).resolve().parents[2]
LAB3 = ROOT / "notebooks/labs/lab3-disaggregated-prefill.ipynb"


@pytest.fixture(scope="module")
def dry_run(gpu_dry_run):
    """Lab 3's file of the session's one dry run of the recorder (``conftest.py``)."""
    out, _ = gpu_dry_run
    (path,) = sorted(out.glob("lab3-dry-run-*.json"))
    return path, json.loads(path.read_text())


def test_dry_run_writes_what_the_page_reads(dry_run):
    _, rec = dry_run
    m = rec["machine"]
    assert m["dry_run"] is True and "dry run" in m["gpu"] and m["commit"]
    assert m["command"].startswith("python tools/record_gpu.py")
    assert m["model"].endswith("tiny-llama") and m["model_revision"].startswith("folder ")
    s = rec["nixl_split"]
    assert s["recorded"] is True and s["device"] == "cpu" and s["dtype"] == "float32"
    assert s["kv_transfer_config"]["kv_buffer_device"] == "cpu" and s["memory_shares"] is None
    # bytes = formula: 2 prompts of 512 tokens, 16 whole 32-token blocks of the tiny model (fp32)
    assert s["formula_bytes"] == [512 * 1024] * 2 and s["bytes"] == s["formula_bytes"]
    assert all(s["bytes_equal_formula"]) and all(s["equal_to_colocated"])
    assert all(s["control_differs"]) and s["problems"] == []
    assert s["local_tokens"] == [0, 0] and s["cold_local_tokens"] == [512, 512]
    assert s["non_loopback"] == [] and s["all_gone"] is True
    assert results.load_results("lab3", dry_run[0].parent, include_dry_run=False) == []


def _gpu_cell() -> str:
    nb = json.loads(LAB3.read_text())
    (src,) = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and "pd_split.gpu_missing()" in "".join(c["source"])
    ]
    return src


def _render(folder: Path, monkeypatch, capsys) -> str:
    monkeypatch.setenv(results.RESULTS_ENV, str(folder))
    from kvlab.measure.recording import recorded

    monkeypatch.setattr(pd_split, "gpu_missing", lambda: ["vLLM is not installed in this Python"])
    exec(compile(_gpu_cell(), LAB3.name, "exec"), {"pd_split": pd_split, "recorded": recorded})
    out = capsys.readouterr().out
    # first what is missing here and how to get it, then the recordings
    assert out.startswith("The GPU split does not run here: vLLM is not installed")
    note, rest = out.split("the run takes a few minutes.\n", 1)
    assert "installs requirements-gpu.txt" in note
    return rest


def test_page_renders_the_dry_run(dry_run, monkeypatch, capsys):
    path, _ = dry_run
    out = _render(path.parent, monkeypatch, capsys)
    assert out.startswith("DRY RUN on the CPU")
    assert "bytes pulled per request: 524,288 B on all 2; formula 524,288 B; equal on 2 of 2" in out
    assert "decode output matches colocated on 2 of 2 (log-probabilities within 1e-05" in out
    assert "output differs from colocated on 2 of 2" in out and "CHECK FAILED" not in out
    assert max(len(line) for line in out.splitlines()) <= results.WIDTH
    assert str(ROOT) not in out


def test_page_renders_a_failed_split(dry_run, tmp_path, monkeypatch, capsys):
    _, rec = dry_run
    rec["nixl_split"] = {"recorded": False, "reason": "RuntimeError: the decode engine exited"}
    results.save_results("lab3", rec, "cpu", rec["machine"]["date"], tmp_path)
    out = _render(tmp_path, monkeypatch, capsys)
    assert "NIXL split: not recorded (RuntimeError: the decode engine exited)" in out
    bad = json.loads(dry_run[0].read_text())
    bad["nixl_split"]["problems"] = ["decode output differs from colocated on prompts [False]"]
    folder = tmp_path / "bad"
    results.save_results("lab3", bad, "cpu", bad["machine"]["date"], folder)
    assert "CHECK FAILED: decode output differs" in _render(folder, monkeypatch, capsys)
