"""`tools/record_gpu.py --dry-run`: every job the GPU recorder runs, run on the CPU (copies, gloo,
the prefill and prefix-reuse model, vLLM's CPU build in the engine environment for the offline
engine and two servers), written with the fields the lab pages read, marked as a dry run, and
rendered by the lab pages' own recorded-results cells, failed parts included. The recorder runs
once per session for Labs 1, 2 and 3 (``conftest.py``: ``gpu_dry_run``); Lab 3's part is checked in
``test_record_gpu_lab3.py`` (a few minutes on two cores in all)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvlab.measure.recording import results

ROOT = Path(__file__).resolve().parents[2]
LAB1_NB = ROOT / "notebooks/labs/lab1-vllm-prefix-caching.ipynb"
LAB2_NB = ROOT / "notebooks/labs/lab2-kv-transfer.ipynb"


@pytest.fixture(scope="module")
def dry_run(gpu_dry_run):
    """The session's one dry run of the recorder (``conftest.py``), Lab 3's included."""
    return gpu_dry_run


def _one(folder: Path, lab: str) -> dict:
    files = sorted(folder.glob(f"{lab}-dry-run-*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_dry_run_writes_what_the_pages_read(dry_run):
    folder, _ = dry_run
    lab1, lab2 = _one(folder, "lab1"), _one(folder, "lab2")
    for rec in (lab1, lab2):
        m = rec["machine"]
        assert m["dry_run"] is True and "dry run" in m["gpu"]
        assert m["commit"] and m["command"].startswith("python tools/record_gpu.py")
    assert lab1["machine"]["model"].endswith("tiny-llama")
    assert lab1["machine"]["model_revision"].startswith("folder ")
    v = lab1["vllm"]
    assert v["recorded"] is True and v["shutdown"]["stopped"] is True
    for run in v["runs"].values():
        assert {"engine_ttft_s", "counters_before", "counters_after"} <= set(run)
    s = lab1["vllm_serving"]
    assert s["recorded"] is True and s["alive_after_stop"] == [False] * s["replicas"]
    assert {"start_s", "demo", "fleet"} <= set(s)
    t = lab1["torch_prefix_reuse"]
    assert t["first_tokens_match"] is True
    assert {"shape", "cold_s", "warm_s", "predicted_saving_linear_s"} <= set(t)
    kinds = {r["kind"] for r in lab2["copies"]}
    assert kinds == {"host"}, kinds
    assert all({"tokens", "seconds", "gb_per_s", "n_bytes"} <= set(r) for r in lab2["copies"])
    assert [r["backend"] for r in lab2["send_recv"]] == ["gloo"]
    assert all(r["checksum_ok"] for r in lab2["send_recv"])
    assert lab2["prefill"]["rows"] and all("seconds" in r for r in lab2["prefill"]["rows"])


def test_dry_run_is_never_a_gpu_recording(dry_run):
    folder, _ = dry_run
    assert results.load_results("lab1", folder, include_dry_run=False) == []
    assert results.load_results("lab2", folder, include_dry_run=False) == []


def _cell(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    (src,) = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and "results.describe(" in "".join(c["source"])
    ]
    return src


def _render(nb_path: Path, folder: Path, monkeypatch, capsys) -> str:
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setenv(results.RESULTS_ENV, str(folder))
    exec(compile(_cell(nb_path), nb_path.name, "exec"), {})
    return capsys.readouterr().out


def test_lab_pages_render_the_dry_run(dry_run, monkeypatch, capsys):
    folder, _ = dry_run
    out1 = _render(LAB1_NB, folder, monkeypatch, capsys)
    assert out1.startswith("DRY RUN on the CPU")
    assert "vLLM shared system prompt: engine TTFT request 1" in out1
    serving = _one(folder, "lab1")["vllm_serving"]
    if serving.get("recorded", True):
        assert "vLLM serving: 2 servers up in" in out1
    else:  # the dry run's serving part failed: the page names why (its own test covers this)
        assert f"vLLM serving: not recorded ({serving['reason']}" in out1
    fleet = out1[out1.index("fleet hit rates:") :]  # the line and its wrapped continuation
    assert re.search(r"random [0-9.]+ %", fleet) and "cache" in fleet, out1
    out2 = _render(LAB2_NB, folder, monkeypatch, capsys)
    assert out2.startswith("DRY RUN on the CPU") and "gloo send/recv" in out2
    for out in (out1, out2):
        assert max(len(line) for line in out.splitlines()) <= results.WIDTH
        assert str(ROOT) not in out


def test_lab_pages_render_failed_parts_of_the_dry_run(dry_run, tmp_path, monkeypatch, capsys):
    """The same recording with a failed serving run and a failed NCCL transfer, as a partial GPU
    recording has them: the pages show the reasons and keep the rest."""
    folder, _ = dry_run
    lab1, lab2 = _one(folder, "lab1"), _one(folder, "lab2")
    lab1["vllm_serving"] = {"recorded": False, "reason": "EngineError: vllm serve exited with 1"}
    lab2["send_recv"].insert(0, {"backend": "nccl", "error": "RuntimeError: NCCL unhandled error"})
    for lab, rec in (("lab1", lab1), ("lab2", lab2)):
        results.save_results(lab, rec, "cpu", rec["machine"]["date"], tmp_path)
    out1 = _render(LAB1_NB, tmp_path, monkeypatch, capsys)
    assert "vLLM serving: not recorded (EngineError: vllm serve exited with 1)" in out1
    assert "vLLM shared system prompt" in out1  # the engine's figures stay
    out2 = _render(LAB2_NB, tmp_path, monkeypatch, capsys)
    assert "nccl send/recv: failed (RuntimeError: NCCL unhandled error)" in out2
    assert "gloo send/recv" in out2
