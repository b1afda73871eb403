"""``tools/cpu_load.py`` and the make recipe that runs it beside ``make test-under-load``: the load
stops by itself at its cap and when whoever started it is gone, and the recipe stops it by its pid
when the run fails as well as when it passes. Short caps and one busy core: seconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
LOAD = ROOT / "tools" / "cpu_load.py"


def _pids(pidfile: Path, timeout_s: float = 60.0) -> list[int]:
    """The helper's pid and its workers', once it has written them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text().count("\n") >= 2:
            return [int(x) for x in pidfile.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{pidfile} was never written")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_within(pids: list[int], timeout_s: float) -> list[int]:
    """The pids still running after ``timeout_s`` (an empty list: all ended)."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if _running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if _running(p)]
    return left


def test_load_stops_by_itself_at_its_cap(tmp_path):
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(LOAD),
            "--cores",
            "1",
            "--max-seconds",
            "1",
            "--pidfile",
            str(pidfile),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = _pids(pidfile)
        assert pids[0] == proc.pid and len(pids) == 2
        assert _running(pids[1]), "the worker should spin until the cap"
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "1 s cap" in err, err
    assert time.monotonic() - t0 >= 1.0
    assert _gone_within(pids, 10) == []


def test_load_stops_when_its_parent_is_killed(tmp_path):
    """A recipe killed outright (SIGKILL: no trap runs) leaves no spinning process behind."""
    pidfile = tmp_path / "pid"
    shell = subprocess.Popen(
        [
            "sh",
            "-c",
            f"'{sys.executable}' '{LOAD}' --cores 1 --max-seconds 120 --pidfile '{pidfile}' & wait",
        ],
        start_new_session=True,
    )
    try:
        pids = _pids(pidfile)
        os.kill(shell.pid, signal.SIGKILL)
        shell.wait(timeout=10)
        assert _gone_within(pids, 30) == [], "the load outlived the shell that started it"
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("outcome", ["true", "false"])
def test_recipe_stops_the_load_whether_the_run_passes_or_fails(tmp_path, outcome):
    """``make under-load-run`` (the body of ``make test-under-load``) with a stand-in run that waits
    until the load is up and then passes or fails: make exits with the run's status, long before
    the load's 120 s cap, and neither the helper nor its worker is left."""
    pidfile = tmp_path / "pid"
    run = f"while [ ! -s '{pidfile}' ]; do sleep 0.1; done; {outcome}"
    t0 = time.monotonic()
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "under-load-run",
            f"UNDER_LOAD_RUN={run}",
            "LOAD_CORES=1",
            "LOAD_MAX_S=120",
            f"LOAD_PIDFILE={pidfile}",
            f"PYTHON={sys.executable}",
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    took = time.monotonic() - t0
    pids = _pids(pidfile, timeout_s=1)
    assert (out.returncode == 0) == (outcome == "true"), out.stdout + out.stderr
    assert "== test-under-load:" in out.stdout, out.stdout
    assert took < 60, f"make took {took:.0f} s: the load ran to its cap instead of being stopped"
    assert _gone_within(pids, 5) == [], "the recipe returned with the load still running"
    # stopped by the recipe, by its pid: not by its cap, nor because the recipe's shell was gone
    assert "(SIGTERM)" in out.stderr, out.stderr
