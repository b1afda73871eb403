"""A SIGTERM to a process that started engine jobs or servers in their own sessions stops them too
(issue 38: a recorder stopped from outside left its engine job running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvlab.measure.serving.deadline import Terminated, sigterm_unwinds
from kvlab.measure.serving.procs import Children, alive

LIB = str(Path(__file__).resolve().parents[1])


def test_sigterm_raises_inside_and_the_handler_is_put_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as e, sigterm_unwinds():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert e.value.code == 143
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_handler_of_the_callers_own_is_kept():
    seen = []

    def mine(signum, frame):
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, mine)
    try:
        with sigterm_unwinds():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


def _wait_for(path: Path, limit_s: float = 60.0) -> str:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _gone(pid: int, limit_s: float) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["run_job", "children"])
def test_sigterm_to_the_parent_stops_what_it_started(tmp_path, how):
    pidfile = tmp_path / "job.pid"
    # a stand-in for the engine job: whatever run_job starts, it writes its pid and sleeps
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 300\n")
    fake.chmod(0o755)
    if how == "run_job":
        body = f"""
            from kvlab.measure.prefix.runs import run_job
            run_job("probe", {{}}, in_process=False, venv={str(venv)!r}, timeout_s=600)
        """
    else:
        body = f"""
            import time
            from kvlab.measure.serving.procs import Children
            with Children() as kids:
                kids.start([{str(fake)!r}])
                time.sleep(600)
        """
    env = {**os.environ, "PYTHONPATH": LIB}
    env.pop("KVLAB_ENGINE_LOCK", None)
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        job = int(_wait_for(pidfile))
        assert alive(job)
        parent.send_signal(signal.SIGTERM)
        rc = parent.wait(timeout=90)
        assert rc == 143, parent.stdout.read().decode(errors="replace")[-2000:]
        assert _gone(job, 10), f"the job {job} outlived its parent's SIGTERM"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if pidfile.exists():
            try:
                os.killpg(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ProcessLookupError, ValueError, PermissionError):
                pass


def test_children_put_the_handler_back():
    before = signal.getsignal(signal.SIGTERM)
    with Children():
        assert callable(signal.getsignal(signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) == before
