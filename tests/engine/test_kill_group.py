"""``engine.kill_group``: it returns as soon as no process of the group runs, also when the group's
leader is the caller's own child that nobody has waited for yet (a zombie, which the kernel still
counts in the group); a process that ignores SIGTERM still gets SIGKILL after the grace time.
No engine starts (seconds)."""

from __future__ import annotations

import subprocess
import sys
import time

from kvlab.measure.serving import procs
from kvlab.measure.serving.engine import kill_group, kill_groups

SLEEPER = "import time; time.sleep(120)"
#: A leader that starts a child in its group and ignores SIGTERM, as does the child.
STUBBORN = (
    "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)']); time.sleep(120)"
)


def _start(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_an_unreaped_leader_does_not_hold_the_stop():
    proc = _start(SLEEPER)
    time.sleep(0.5)
    t0 = time.monotonic()
    kill_group(proc.pid, grace_s=10.0)
    took = time.monotonic() - t0
    assert took < 5.0, f"kill_group waited {took:.1f} s for a group whose only process had exited"
    assert proc.wait(timeout=5) == -15  # the caller still reads how it ended


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace_time():
    proc = _start(STUBBORN)
    deadline = time.monotonic() + 30
    members: list[int] = []
    while time.monotonic() < deadline and len(members) < 2:  # the leader and its child
        time.sleep(0.2)
        out = subprocess.run(
            ["ps", "-o", "pid=", "-g", str(proc.pid)], capture_output=True, text=True
        )
        members = [int(x) for x in out.stdout.split()]
    assert len(members) == 2, members
    t0 = time.monotonic()
    kill_group(proc.pid, grace_s=1.0)
    took = time.monotonic() - t0
    assert 1.0 <= took < 6.0, took
    assert proc.wait(timeout=5) == -9
    assert procs.gone(members)


def test_several_groups_end_within_one_grace_time():
    """Three groups that ignore SIGTERM end after one grace time, not three (a serving job stopped
    from outside must stop all its servers within the grace its caller gives it)."""
    started = [_start(STUBBORN) for _ in range(3)]
    time.sleep(1.0)
    t0 = time.monotonic()
    kill_groups([p.pid for p in started], grace_s=2.0)
    took = time.monotonic() - t0
    assert 2.0 <= took < 5.0, took
    assert [p.wait(timeout=5) for p in started] == [-9, -9, -9]
