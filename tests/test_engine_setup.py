"""tools/engine_setup.py: where torch's CPU build comes from, and where the engine can run.

Both decisions are tested by forcing them (environment variables), without a network: the pip
arguments are printed, nothing is downloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "engine_setup.py"
sys.path.insert(0, str(ROOT / "tools"))
import engine_setup  # noqa: E402


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("KVLAB_FORCE", "TORCH_INDEX"))
    }
    return subprocess.run(
        [sys.executable, str(TOOL), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("req", ["requirements-engine.txt", "requirements-labs.txt"])
def test_no_local_wheel_means_pytorch_cpu_index(req):
    run = _run("torch-args", str(ROOT / req), KVLAB_FORCE_NO_LOCAL_TORCH="1")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["--extra-index-url", engine_setup.CPU_INDEX]
    assert "PyTorch's CPU index" in run.stderr and "KVLAB_FORCE_NO_LOCAL_TORCH" in run.stderr


def test_explicit_index_wins():
    run = _run("torch-args", str(ROOT / "requirements-engine.txt"), TORCH_INDEX="file:///x")
    assert run.stdout.split() == ["--extra-index-url", "file:///x"], run.stderr


def test_local_wheel_needs_no_index(monkeypatch):
    monkeypatch.delenv("TORCH_INDEX", raising=False)
    monkeypatch.delenv("KVLAB_FORCE_NO_LOCAL_TORCH", raising=False)
    monkeypatch.setattr(engine_setup, "local_torch_available", lambda pin: True)
    args, why = engine_setup.torch_args(ROOT / "requirements-engine.txt")
    assert args == [] and "found locally" in why
    monkeypatch.setattr(engine_setup, "local_torch_available", lambda pin: False)
    args, why = engine_setup.torch_args(ROOT / "requirements-engine.txt")
    assert args == ["--extra-index-url", engine_setup.CPU_INDEX] and "no local wheel" in why


def test_pins_are_read_from_the_files(tmp_path):
    assert engine_setup.torch_pin(ROOT / "requirements-engine.txt").startswith("torch==2.")
    bad = tmp_path / "r.txt"
    bad.write_text("numpy==2.0\n")
    with pytest.raises(ValueError, match="must pin torch"):
        engine_setup.torch_pin(bad)


def test_forced_no_engine_platform():
    run = _run("supported", KVLAB_FORCE_NO_ENGINE="1")
    assert run.returncode == 1 and "KVLAB_FORCE_NO_ENGINE" in run.stderr


def test_unsupported_platforms(monkeypatch):
    monkeypatch.delenv("KVLAB_FORCE_NO_ENGINE", raising=False)
    monkeypatch.setattr(engine_setup.platform, "system", lambda: "Darwin")
    ok, why = engine_setup.engine_supported()
    assert not ok and "Linux x86-64" in why and "Darwin" in why
    monkeypatch.setattr(engine_setup.platform, "system", lambda: "Linux")
    monkeypatch.setattr(engine_setup.platform, "machine", lambda: "aarch64")
    assert not engine_setup.engine_supported()[0]


def test_make_test_stops_with_a_message_where_the_engine_cannot_run():
    env = {**os.environ, "KVLAB_FORCE_NO_ENGINE": "1"}
    run = subprocess.run(
        ["make", "-s", "engine-required"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert run.returncode != 0 and "Linux x86-64" in run.stderr
    dry = subprocess.run(["make", "-n", "book"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert "make engine: skipped" in dry.stdout and ".venv-engine" not in dry.stdout
