"""Keep CPU cores busy for a bounded time: the load beside ``make test-under-load``.

Usage: python tools/cpu_load.py [--cores N] [--max-seconds S] [--pidfile FILE]

Starts ``N`` worker processes (default: every core this process may run on), each spinning on
arithmetic, and waits. It stops them all and exits when

- it gets SIGTERM or SIGINT (how ``make test-under-load`` stops it, by its pid, when the run ends
  or fails),
- ``--max-seconds`` have passed (the hard cap, default 3600: a load nobody stops still ends), or
- its parent process is gone (the make recipe that started it was killed outright and could not
  stop it).

Each worker also stops by itself at the same cap and when this process is gone, so no spinning
process outlives the helper by more than a moment. ``--pidfile`` gets the helper's pid on its first
line and its workers' pids on the next, for whoever wants to check that they are gone.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

#: How often the helper and its workers look at the clock and at their parent, in seconds.
CHECK_EVERY_S = 0.1


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def spin(deadline: float, parent: int) -> None:
    """Busy arithmetic until ``deadline`` (``time.monotonic()``) or until ``parent`` is gone."""
    x = 1.0
    next_check = time.monotonic() + CHECK_EVERY_S
    while True:
        for _ in range(20_000):
            x = x * 1.000001 + 1e-9
            if x > 1e6:
                x = 1.0
        now = time.monotonic()
        if now >= next_check:
            if now >= deadline or os.getppid() != parent:
                return
            next_check = now + CHECK_EVERY_S


def start_workers(cores: int, deadline: float) -> list[int]:
    """Fork ``cores`` spinning workers; returns their pids."""
    me = os.getpid()
    pids = []
    for _ in range(cores):
        pid = os.fork()
        if pid == 0:  # the worker: default signal handling, spin, leave without cleanup
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                spin(deadline, me)
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def stop_workers(pids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM every worker, SIGKILL those still there after ``grace_s``, and reap them all."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    left = set(pids)
    deadline = time.monotonic() + grace_s
    while left:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                left.discard(pid)
        if not left:
            return
        if time.monotonic() >= deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = float("inf")  # SIGKILL cannot be refused: wait for the reap
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cores", type=int, default=usable_cores(), help="workers to run (default: all)"
    )
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="hard cap (default 3600)")
    ap.add_argument("--pidfile", type=Path, help="write the helper's and the workers' pids here")
    args = ap.parse_args(argv)
    if args.cores < 1:
        ap.error(f"--cores must be at least 1, got {args.cores}")
    if not args.max_seconds > 0:
        ap.error(f"--max-seconds must be above 0, got {args.max_seconds}")

    stop = {"why": ""}

    def on_signal(signum, _frame):
        stop["why"] = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    parent = os.getppid()
    t0 = time.monotonic()
    deadline = t0 + args.max_seconds
    workers = start_workers(args.cores, deadline)
    if args.pidfile is not None:
        args.pidfile.write_text(f"{os.getpid()}\n" + " ".join(map(str, workers)) + "\n")
    print(
        f"cpu_load: {args.cores} busy worker(s), pid {os.getpid()}, at most {args.max_seconds:g} s",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop["why"]:
            if time.monotonic() >= deadline:
                stop["why"] = f"its {args.max_seconds:g} s cap"
            elif os.getppid() != parent:
                stop["why"] = "its parent is gone"
            else:
                time.sleep(CHECK_EVERY_S)
    finally:
        stop_workers(workers)
    print(
        f"cpu_load: stopped after {time.monotonic() - t0:.0f} s ({stop['why'] or 'an error'})",
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
