"""Shared set-up of the engine tests, so that the slow work runs once and overlaps where it can.

- ``gpu_dry_run``: one ``tools/record_gpu.py --dry-run`` for Labs 1, 2 and 3 (one recorder process,
  its engines one after the other under the engine lock), read by ``test_record_gpu_dry_run.py``
  and ``test_record_gpu_lab3.py``.
- pip's resolution of ``requirements-gpu.txt`` (``test_gpu_requirements.py``) waits on PyPI for
  most of its minute: it starts in the background as soon as the session has collected that test,
  and the test waits for its result, so the wait overlaps the tests that run before it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_REQS = ROOT / "requirements-gpu.txt"
#: The labs the dry run records (all three: the recorder's every job).
DRY_RUN_LABS = "lab1,lab2,lab3"
#: The platform a Colab GPU runtime reports (Ubuntu 22.04: glibc 2.35) and every older manylinux
#: tag a wheel may carry; pip takes only the tags it is given.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(17, 36)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
]
RESOLVE_TEST = "test_gpu_requirements.py::test_gpu_requirements_resolve"
_RESOLVE = pytest.StashKey[dict]()


#: The Pythons the GPU set is resolved for: Colab's (3.13 since August 2026), and a rented box's
#: 3.12 and 3.11 (vLLM 0.32.0's floor; the README's recipe).
RESOLVE_PYTHONS = ("3.13", "3.12", "3.11")


def resolve_command(report: Path, python_version: str = "3.13") -> list[str]:
    """pip's resolver, in dry-run mode, for the whole GPU set on a Colab GPU runtime's platform
    (Linux x86-64, Python ``python_version``), writing its report to ``report``.

    It reads each wheel's metadata with HTTP range requests (``fast-deps``) and keeps no cache:
    where the registry serves no separate metadata file (PEP 658), plain pip downloads every wheel
    of the set to read it (vLLM 327 MB, torch 527 MB and the CUDA libraries, several GB), which
    filled a CI machine's disk."""
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--no-cache-dir",
        "--use-feature=fast-deps",
        "--quiet",
        "--report",
        str(report),
        "--only-binary=:all:",
        "--python-version",
        python_version,
        *(arg for p in PLATFORMS for arg in ("--platform", p)),
        "-r",
        str(GPU_REQS),
    ]


class Resolve:
    """One run of :func:`resolve_command`, started now, in a temporary folder of its own."""

    def __init__(self, python_version: str = "3.13") -> None:
        self.python_version = python_version
        self.folder = Path(tempfile.mkdtemp(prefix="kvlab-gpu-resolve-"))
        self.report = self.folder / "report.json"
        self.stderr = self.folder / "stderr.txt"
        with open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(
                resolve_command(self.report, python_version),
                # whatever pip still downloads lands in this folder, removed by close()
                env={**os.environ, "TMPDIR": str(self.folder)},
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    def wait(self, timeout_s: float) -> tuple[int, str]:
        """pip's exit code and its stderr, once it has finished (killed after ``timeout_s``)."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        return rc, self.stderr.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def pypi_reachable() -> bool:
    import socket

    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start pip's resolution when the session will run the test that checks it."""
    if any(RESOLVE_TEST in item.nodeid for item in session.items) and pypi_reachable():
        session.config.stash[_RESOLVE] = {v: Resolve(v) for v in RESOLVE_PYTHONS}


def pytest_sessionfinish(session: pytest.Session) -> None:
    for started in session.config.stash.get(_RESOLVE, {}).values():
        started.close()


@pytest.fixture
def gpu_resolves(request: pytest.FixtureRequest) -> dict[str, Resolve] | None:
    """The background resolutions started for this session, one per Python of
    :data:`RESOLVE_PYTHONS`, or started now (a test run by itself: collection started none);
    None when PyPI cannot be reached."""
    started = request.config.stash.get(_RESOLVE, None)
    if started is not None:
        return started
    if not pypi_reachable():
        return None
    started = request.config.stash[_RESOLVE] = {v: Resolve(v) for v in RESOLVE_PYTHONS}
    return started


@pytest.fixture(scope="session")
def gpu_dry_run(tmp_path_factory) -> tuple[Path, str]:
    """The folder ``tools/record_gpu.py --dry-run`` wrote Labs 1, 2 and 3's dry runs to, and what
    it printed (one recorder run for the whole session, not one per test module)."""
    out = tmp_path_factory.mktemp("dry")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/record_gpu.py"),
            "--dry-run",
            "--labs",
            DRY_RUN_LABS,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout
