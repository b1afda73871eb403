"""A time limit for work that runs in this process (an in-process vLLM engine job, a part of the GPU
recorder): :func:`time_limit`.

A subprocess is stopped from outside when it runs too long; work in this Python cannot be, so the
limit is an alarm (``SIGALRM``, ``signal.setitimer``) whose handler raises :class:`TimeLimit` in the
main thread. The exception unwinds the work like any other error, so its ``finally`` blocks run
(an engine is shut down, its servers stopped). It is raised when the interpreter next runs Python
code: a call into C that never returns is not interrupted, which is why the GPU recorder also
writes each part's row before the part starts (``tools/record_gpu.py``).

Rules: only the main thread may set the alarm (a limit asked for elsewhere raises ``RuntimeError``
rather than being ignored); limits nest, the inner one ends first and the outer one is put back;
nothing here starts a process.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

from ..._validate import positive


class TimeLimit(TimeoutError):
    """The work ran past its time limit (see :func:`time_limit`)."""

    def __init__(self, what: str, limit_s: float):
        super().__init__(f"{what} ran past its time limit of {limit_s:g} s and was stopped")
        self.what, self.limit_s = what, limit_s


@contextlib.contextmanager
def time_limit(limit_s: float | None, what: str = "the work") -> Iterator[None]:
    """Raise :class:`TimeLimit` in the block once ``limit_s`` seconds have passed (None: no
    limit). Main thread only; an enclosing limit is kept (it fires at its own time)."""
    if limit_s is None:
        yield
        return
    limit_s = positive("limit_s", limit_s)
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(f"time_limit({what!r}) needs the main thread (it uses SIGALRM)")
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    start = time.monotonic()

    def on_alarm(signum, frame):
        outer_first = outer_left > 0 and time.monotonic() - start < limit_s
        if outer_first and callable(outer_handler):
            outer_handler(signum, frame)  # the enclosing limit's time came first: its error
        raise TimeLimit(what, limit_s)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(limit_s, outer_left) if outer_left > 0 else limit_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left > 0:  # the enclosing limit goes on (at once when it is already past)
            left = outer_left - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))


_held = {"depth": 0, "pending": False}


class Terminated(SystemExit):
    """This process was sent SIGTERM while :func:`sigterm_unwinds` was active (exit status 143)."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Inside the block, SIGTERM raises :class:`Terminated` in the main thread instead of ending
    the process on the spot, so the block's ``finally`` and ``except BaseException`` clauses run
    and stop the processes it started in their own sessions (which a plain SIGTERM to this
    process would leave running). Outside the main thread, or where SIGTERM is already handled
    by Python code, nothing changes. The previous handler is put back on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    if callable(before):  # someone's own handler: keep it
        yield
        return

    def on_term(signum, frame):
        if _held["depth"]:  # inside sigterm_deferred: raised when that block ends
            _held["pending"] = True
            return
        raise Terminated()

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[None]:
    """Hold a SIGTERM that :func:`sigterm_unwinds` would raise until the block ends: around
    starting a process and recording its id, so that a SIGTERM arriving in between cannot leave a
    started process that nothing knows of. Blocks nest; the outermost raises on leaving."""
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if not _held["depth"] and _held["pending"]:
            _held["pending"] = False
            raise Terminated()
