"""The GPU recorder's limits and what it says it cannot do, without a GPU or an engine: each part's
time limit comes from the CPU dry run with a stated margin; a part past its limit, or a recorder
stopped from outside, leaves its row with the reason; ``KVLAB_COMMIT`` names the commit where
there is no ``.git``; without network, vLLM or NIXL the recorder says at its start which parts it
can record and why not the others; the prefill is warmed up at each length; a Python older than
3.11 is refused with what to do (simulated with ``KVLAB_PYTHON_VERSION``, and a real 3.10 where
one is installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _record_gpu():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import record_gpu
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return record_gpu


rg = _record_gpu()


# --- time limits ----------------------------------------------------------------------------------


def test_limits_come_from_the_dry_run_with_the_stated_margin():
    assert set(rg.DRY_RUN_PART_S) == set(rg.PARTS)
    for part, dry in rg.DRY_RUN_PART_S.items():
        extra = rg.ENGINE_ALLOWANCE_S if part in rg.ENGINE_PARTS else 0
        want = max(rg.MIN_LIMIT_S, -(-(rg.LIMIT_MARGIN * dry + extra) // 1))
        assert rg.part_limit_s(part) == want, part
        assert rg.part_limit_s(part) >= rg.LIMIT_MARGIN * dry  # never below the margin
    assert "3 x the CPU dry run's" in rg.limit_text(
        "lab3.nixl_split", rg.part_limit_s("lab3.nixl_split")
    )
    with pytest.raises(ValueError, match="part must be one of"):
        rg.part_limit_s("lab4.x")
    total = subprocess.run(
        [sys.executable, str(ROOT / "tools/record_gpu.py"), "--labs", "lab3", "--total-limit"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    assert int(total) == rg.part_limit_s("lab3.nixl_split") + rg.START_AND_SAVE_S


def test_a_part_killed_by_its_time_limit_leaves_a_row_with_a_reason(tmp_path):
    saved: list[dict] = []

    def save(rec):
        saved.append(json.loads(json.dumps(rec, default=str)))

    def run_job(job, params, **kw):
        if job == "lab1":
            time.sleep(30)  # an in-process engine that hangs: only the alarm stops it
        return {"runs": {}, "engine_kwargs": {"model": "m"}}

    t0 = time.monotonic()
    out = rg.record_lab1(
        {"gpu": "G"},
        {"lab1": {}, "serving": {}},
        in_process=True,
        run_job=run_job,
        on_part=save,
        limits={"lab1.vllm": 0.5, "lab1.vllm_serving": 5},
    )
    assert time.monotonic() - t0 < 10
    row = out["vllm"]
    assert row["recorded"] is False and row["timed_out"] is True
    assert "part lab1.vllm ran past its time limit of 0.5 s" in row["reason"]
    assert row["limit_s"] == 0.5 and out["part_s"]["lab1.vllm"] < 5
    assert out["vllm_serving"]["recorded"] is True  # the next part still ran
    # written before the part began (in case the recorder itself is stopped), then with the reason
    assert saved[0]["vllm"]["killed"] is True and "not finished" in saved[0]["vllm"]["reason"]
    assert saved[1]["vllm"]["timed_out"] is True


def test_lab2_parts_past_their_limits_keep_their_shapes(monkeypatch):
    d = types.SimpleNamespace(device="cpu", gpu_count=0)
    p = rg.plan(gpu=False, quick=True, dry_run=True)
    monkeypatch.setattr(rg.copies, "kv_copy_sweep", lambda *a, **k: time.sleep(30))
    model = types.SimpleNamespace(params=1, kv_bytes_per_token=1, shape={"vocab": 10})
    rec = rg.record_lab2(d, p, {}, model, "tiny", "float32", limits={"lab2.copies": 0.2})
    assert (
        rec["copies"][0]["kind"] == "all" and "ran past its time limit" in rec["copies"][0]["error"]
    )
    from kvlab.measure.recording import results

    rec["machine"] = {"gpu": "G"}
    assert "all: failed (part lab2.copies ran past" in " ".join(
        results.describe("lab2", [rec]).split()
    )


def test_a_recorder_stopped_from_outside_leaves_the_part_it_was_in(tmp_path):
    """SIGKILL in the middle of Lab 3's part (as `timeout --kill-after` would): the file holds
    the row written before the part, with its reason."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT / "tools")!r})
        import record_gpu as rg
        from kvlab.measure.recording import results

        def run_split(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)

        p = rg.plan(gpu=True, quick=True, dry_run=False)
        save = lambda rec: results.save_results("lab3", rec, "G", "2026-12-05", {str(tmp_path)!r})
        rg.record_lab3({{"gpu": "G"}}, p, run_split=run_split,
                       config=lambda m: {{"num_attention_heads": 2, "hidden_size": 8,
                                         "num_hidden_layers": 1, "vocab_size": 50}},
                       limits={{"lab3.nixl_split": 300}}, save=save)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    (path,) = tmp_path.glob("lab3-*.json")
    row = json.loads(path.read_text())["nixl_split"]
    assert row["recorded"] is False and row["killed"] is True
    assert (
        "not finished: the recorder was stopped while this part ran (limit 300 s" in row["reason"]
    )


# --- the commit without .git ----------------------------------------------------------------------


def test_kvlab_commit_names_the_commit_where_there_is_no_git(tmp_path, monkeypatch):
    monkeypatch.setattr(rg, "ROOT", tmp_path)  # a copy of the repository without .git
    monkeypatch.delenv(rg.COMMIT_ENV, raising=False)
    assert rg.git_commit() is None and rg.commit_source() is None
    monkeypatch.setenv(rg.COMMIT_ENV, "80e1923")
    assert rg.git_commit() == "80e1923" and rg.commit_source() == "$KVLAB_COMMIT"
    monkeypatch.setattr(rg, "ROOT", ROOT)  # with .git, git's answer wins
    assert rg.git_commit() != "80e1923" and rg.commit_source() == "git"


# --- what the recorder can do here -----------------------------------------------------------------


def test_without_network_vllm_or_nixl_it_says_which_parts_it_can_record(monkeypatch):
    d = types.SimpleNamespace(device="cuda")
    p = rg.plan(gpu=False, quick=True, dry_run=True)
    p["lab1"]["model"] = p["lab3"]["model"] = "Qwen/Qwen2.5-0.5B-Instruct"
    labs = ["lab1", "lab2", "lab3"]
    # the lent device: a GPU, no network, torch, no vLLM, no NIXL
    can = rg.capabilities(
        d,
        p,
        labs,
        dry_run=False,
        vllm_here=lambda: False,
        nixl_here=lambda: False,
        reachable=lambda: False,
    )
    assert [k for k, v in can.items() if v is None] == [
        "lab2.copies",
        "lab2.send_recv",
        "lab2.prefill",
        "lab1.torch_prefix_reuse",
    ]
    assert (
        "vLLM is not installed" in can["lab1.vllm"]
        and "vLLM is not installed" in can["lab3.nixl_split"]
    )
    text = "\n".join(rg.capability_lines(can))
    assert (
        "lab1.vllm: no: vLLM is not installed" in text
        and "Lab 2 and Lab 1's PyTorch part only" in text
    )
    # vLLM and NIXL there, but no network and the model not cached: the model is the reason
    hub = types.ModuleType("huggingface_hub")
    hub.try_to_load_from_cache = lambda repo, name: None
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    can = rg.capabilities(
        d,
        p,
        labs,
        dry_run=False,
        vllm_here=lambda: True,
        nixl_here=lambda: True,
        reachable=lambda: False,
    )
    assert "huggingface.co cannot be reached (no network)" in can["lab1.vllm"]
    assert can["lab3.nixl_split"] == can["lab1.vllm"]
    # ... and with the model in the cache, everything
    hub.try_to_load_from_cache = lambda repo, name: f"/cache/{repo}/{name}"
    can = rg.capabilities(
        d,
        p,
        labs,
        dry_run=False,
        vllm_here=lambda: True,
        nixl_here=lambda: True,
        reachable=lambda: False,
    )
    assert set(can.values()) == {None}
    only_nixl = rg.capabilities(
        d,
        p,
        ["lab3"],
        dry_run=False,
        vllm_here=lambda: True,
        nixl_here=lambda: False,
        reachable=lambda: True,
    )
    assert (
        list(only_nixl) == ["lab3.nixl_split"]
        and "NIXL is not installed" in only_nixl["lab3.nixl_split"]
    )


def test_hf_hub_offline_counts_as_no_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert rg.hub_reachable() is False


# --- the prefill's warm-up ---------------------------------------------------------------------


def test_the_prefill_is_warmed_up_at_each_length():
    import torch

    calls: list[int] = []

    class Model:
        shape = {"vocab": 100}

        def __call__(self, ids):
            calls.append(len(ids))
            return torch.zeros(1)

    rows = rg.prefill_sweep(Model(), [8, 16, 32], repeats=2)
    assert calls == [8, 8, 8, 16, 16, 16, 32, 32, 32]  # one warm-up, then the timed repeats
    assert [len(r["times_s"]) for r in rows] == [2, 2, 2]


# --- the Python check ------------------------------------------------------------------------------


def test_the_recorder_refuses_python_3_10_with_what_to_do():
    env = dict(os.environ, KVLAB_PYTHON_VERSION="3.10.12")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/record_gpu.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 1
    assert "Python 3.10.12 is too old for the GPU recipe" in proc.stderr
    assert "3.11 or later" in proc.stderr and "uv venv -p 3.12" in proc.stderr
    assert proc.stdout == ""  # refused before anything else ran


def test_gpu_day_refuses_python_3_10_before_recording(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *name*) echo "NVIDIA H100 80GB HBM3, 580.82.07, 81559 MiB";;'
        " *) echo 580.82.07;; esac\n"
    )
    smi.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        OUT=str(tmp_path),
        PYTHON=sys.executable,
        KVLAB_PYTHON_VERSION="3.10.12",
    )
    out = subprocess.run(
        ["bash", str(ROOT / "tools/gpu_day.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 1
    assert "Python 3.10.12 is too old" in out.stderr and "== Labs 1 and 2" not in out.stdout
    assert not list(tmp_path.glob("*.json"))


def test_a_real_python_3_10_is_refused():
    py310 = Path.home() / ".pyenv/versions/3.10.13/bin/python"
    if not py310.exists():
        pytest.skip("no Python 3.10 interpreter here (the simulated version is tested above)")
    proc = subprocess.run(
        [str(py310), str(ROOT / "tools/python_check.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "Python 3.10.13 is too old" in proc.stderr
    rec = subprocess.run(
        [str(py310), str(ROOT / "tools/record_gpu.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rec.returncode == 1 and "Python 3.10.13 is too old" in rec.stderr and not rec.stdout
    ok = subprocess.run(
        [sys.executable, str(ROOT / "tools/python_check.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "new enough" in ok.stdout
