"""A server launched through kvlab.measure.serving.vllm_cli never outlives its parent for long: once
the parent is gone, the watcher kills the server's process group even when the server ignores
SIGTERM (as a vLLM server hung in its shutdown does)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kvlab.measure.serving.procs import alive

LIB = str(Path(__file__).resolve().parents[1])


def test_orphaned_server_group_is_killed_after_the_grace(tmp_path):
    pids = tmp_path / "pids"
    # the "server": its own session, ignores SIGTERM, starts an "engine" child, watches its parent
    server = textwrap.dedent(f"""
        import signal, subprocess, sys, time
        from kvlab.measure.serving import vllm_cli
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        vllm_cli.watch_parent(grace_s=1.0, poll_s=0.1)
        open({str(pids)!r}, "w").write(f"{{__import__('os').getpid()}} {{engine.pid}}")
        time.sleep(300)
    """)
    # the "job" that starts it and then dies outright
    job = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {server!r}], start_new_session=True)
        time.sleep(300)
    """)
    env = {**os.environ, "PYTHONPATH": LIB}
    parent = subprocess.Popen([sys.executable, "-c", job], env=env)
    try:
        end = time.monotonic() + 60
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < end:
            time.sleep(0.05)
        srv, eng = (int(x) for x in pids.read_text().split())
        assert alive(srv) and alive(eng)
        parent.kill()
        parent.wait()
        time.sleep(0.5)
        assert alive(srv)  # within the grace it is left to stop by itself
        end = time.monotonic() + 30
        while (alive(srv) or alive(eng)) and time.monotonic() < end:
            time.sleep(0.1)
        assert not alive(srv) and not alive(eng)
    finally:
        if parent.poll() is None:
            parent.kill()
        if pids.exists() and pids.read_text().strip():
            for p in pids.read_text().split():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except ProcessLookupError:
                    pass
