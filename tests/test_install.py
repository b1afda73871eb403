"""tools/install.py: uv gets pip's configuration and the Makefile's arguments in its own words, and
pip runs where uv cannot (tested without installing anything: the commands are captured)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import install  # noqa: E402


def test_pip_settings_reach_uv(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    config = {
        "index-url": ["https://mirror.example/simple"],
        "extra-index-url": [f"file://{tmp_path}/missing/simple", "https://extra.example/simple"],
        "find-links": [str(wheels), str(tmp_path / "not-there")],
        "default-timeout": ["180"],
    }
    args, env = install.uv_settings(config)
    assert args[args.index("--default-index") + 1] == "https://mirror.example/simple"
    # a location pip would ignore (it does not exist) is dropped; the others are kept
    assert [args[i + 1] for i, a in enumerate(args) if a == "--index"] == [
        "https://extra.example/simple"
    ]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--find-links"] == [str(wheels)]
    assert args[args.index("--index-strategy") + 1] == "unsafe-best-match"
    assert "--system-certs" in args and "--compile-bytecode" in args
    assert env["UV_HTTP_TIMEOUT"] == "180"
    bare, _ = install.uv_settings({})
    assert "--index" not in bare and "--index-strategy" not in bare


def test_makefile_arguments_in_uv_words():
    got = install.uv_arguments(
        [
            "--quiet",
            "--disable-pip-version-check",
            "--extra-index-url",
            "https://x/cpu",
            "-r",
            "r.txt",
        ]
    )
    assert got == [
        "--quiet",
        "--index",
        "https://x/cpu",
        "-r",
        "r.txt",
        "--index-strategy",
        "unsafe-best-match",
    ]
    assert install.uv_arguments(["--no-deps", "-e", "lib"]) == ["--no-deps", "-e", "lib"]
    with pytest.raises(ValueError, match="--dry-run"):
        install.uv_arguments(["--dry-run", "torch==2.13.0"])


def test_config_parsing_prefers_variables(monkeypatch):
    listing = (
        "global.find-links='/opt/wheels'\n"
        "global.extra-index-url='file:///a/simple file:///b/simple'\n"
        ":env:.find-links='/elsewhere'\n"
    )

    class Done:
        stdout = listing

    monkeypatch.setattr(install.subprocess, "run", lambda *a, **k: Done())
    cfg = install.pip_config()
    assert cfg["find-links"] == ["/elsewhere"]
    assert cfg["extra-index-url"] == ["file:///a/simple", "file:///b/simple"]


@pytest.mark.parametrize("case", ["no-uv", "chosen", "uv-fails", "uv-works"])
def test_pip_runs_where_uv_cannot(case, monkeypatch, tmp_path, capsys):
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        rc = 1 if (case == "uv-fails" and cmd[0].endswith("uv")) else 0
        if kwargs.get("check") and rc:
            raise subprocess.CalledProcessError(rc, cmd)
        return subprocess.CompletedProcess(cmd, rc)

    uv = tmp_path / "uv"
    if case != "no-uv":
        uv.write_text("")
    monkeypatch.setattr(install, "UV", uv)
    monkeypatch.setattr(install, "ROOT", tmp_path)
    monkeypatch.setattr(install, "pip_config", lambda: {})
    monkeypatch.setattr(install.subprocess, "run", run)
    if case == "chosen":
        monkeypatch.setenv(install.CHOICE, "pip")
    else:
        monkeypatch.delenv(install.CHOICE, raising=False)
    install.install("/venv/bin/python", ["--quiet", "-r", "requirements.txt"])
    pip = ["/venv/bin/python", "-m", "pip", "install", "--quiet", "-r", "requirements.txt"]
    err = capsys.readouterr().err
    if case == "uv-works":
        assert len(calls) == 1 and calls[0][:5] == [
            str(uv),
            "pip",
            "install",
            "--python",
            "/venv/bin/python",
        ]
        assert err == ""
    else:
        assert calls[-1] == pip and "pip installs instead" in err
        assert len(calls) == (2 if case == "uv-fails" else 1)
