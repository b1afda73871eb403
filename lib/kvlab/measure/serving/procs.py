"""Child processes for the disaggregation labs: started, watched, checked and always stopped.

Every engine and NIXL agent of Lab 3 runs in a child process that this module starts in its own
session (so its process group id is its own pid). :class:`Children` keeps their pids, and on leaving
its ``with`` block, normally or through an exception, it ends each group by that id (SIGTERM, then
SIGKILL after a grace period) and waits for it. :func:`gone` tells whether pids still exist.

:func:`listening_sockets` reads ``/proc`` (Linux only) to list the TCP sockets in LISTEN state and
the bound UDP sockets that a set of processes and their descendants own, with the address each is
bound to; :func:`non_loopback` keeps the ones that accept connections from anywhere but the loopback
address. Only the standard library is used.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .deadline import sigterm_deferred, sigterm_unwinds

_TCP_LISTEN = "0A"
_PROTOCOLS = ("tcp", "tcp6", "udp", "udp6")


@dataclass(frozen=True)
class Socket:
    """One listening (TCP) or bound (UDP) socket of a process."""

    pid: int
    proto: str  # tcp, tcp6, udp, udp6
    address: str  # the local address it is bound to, e.g. '127.0.0.1' or '::'
    port: int

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach it (127.0.0.0/8, ::1, ::ffff:127.x.y.z)."""
        ip = ipaddress.ip_address(self.address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return ip.is_loopback

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"pid {self.pid} {self.proto} {host}:{self.port}"


def _decode_address(hex_addr: str) -> tuple[str, int]:
    """``/proc/net/tcp`` style 'ADDR:PORT' (hex, host byte order per 32-bit word) to text."""
    addr, port = hex_addr.split(":")
    raw = bytes.fromhex(addr)
    # Each 32-bit word is stored in the kernel's (little-endian here) byte order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(words) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words), int(port, 16)


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(FileNotFoundError, PermissionError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _proc_table(pid: int, proto: str) -> Iterator[tuple[str, str, int]]:
    """(local 'ADDR:PORT' hex, state hex, inode) rows of /proc/PID/net/PROTO."""
    try:
        lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return
    for line in lines:
        f = line.split()
        if len(f) >= 10:
            yield f[1], f[3], int(f[9])


def children_of(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, grandchildren, ...), from /proc."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            # the command name may hold spaces and ')': the fields after the last ')' are fixed
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parent[int(entry)] = ppid
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        frontier.extend(kids)
    return out


def listening_sockets(pids: Iterable[int], descendants: bool = True) -> list[Socket]:
    """TCP sockets in LISTEN state and bound UDP sockets owned by ``pids`` (and, with
    ``descendants``, by every process below them), each with the address it is bound to."""
    every = []
    for pid in pids:
        every.append(pid)
        if descendants:
            every.extend(children_of(pid))
    found: list[Socket] = []
    for pid in dict.fromkeys(every):
        inodes = _socket_inodes(pid)
        if not inodes:
            continue
        for proto in _PROTOCOLS:
            for local, state, inode in _proc_table(pid, proto):
                if inode not in inodes:
                    continue
                address, port = _decode_address(local)
                listening = state == _TCP_LISTEN if proto.startswith("tcp") else port != 0
                if listening:
                    found.append(Socket(pid, proto, address, port))
    return sorted(set(found), key=lambda s: (s.pid, s.proto, s.port))


def non_loopback(sockets: Iterable[Socket]) -> list[Socket]:
    """The sockets that listen on an address other than the loopback one (0.0.0.0 included)."""
    return [s for s in sockets if not s.loopback]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def gone(pids: Iterable[int]) -> bool:
    """True when none of ``pids`` is alive any more."""
    return not any(alive(p) for p in pids)


def peak_rss_bytes(pid: int) -> int | None:
    """The peak resident set size (VmHWM) of a live process, in bytes; None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class Children:
    """Start child processes in their own sessions; stop all of them, always, on exit.

    ``with Children() as kids: p = kids.start([...])``. Every pid ever seen (the children and
    their descendants, recorded by :meth:`snapshot`) is in :attr:`seen`, so a test can check
    afterwards that all of them are gone.
    """

    def __init__(self, grace_s: float = 5.0):
        self.grace_s = grace_s
        self.procs: list[subprocess.Popen] = []
        self.seen: set[int] = set()

    def __enter__(self) -> Children:
        # a SIGTERM to this process unwinds through __exit__, which stops the children (each in
        # its own session, so nothing else would)
        self._term = sigterm_unwinds()
        self._term.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.stop_all()
        finally:
            term = getattr(self, "_term", None)
            if term is not None:
                self._term = None  # type: ignore[assignment]
                term.__exit__(None, None, None)
        if exc is not None:
            # Let the caller (and a test) see which processes ran and that they are gone.
            with contextlib.suppress(AttributeError):
                exc.pids = sorted(self.seen)
                exc.all_gone = gone(self.seen)

    def start(self, argv: Sequence[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        """Popen ``argv`` in a new session (its own process group), pipes for stdin and stdout."""
        kwargs.setdefault("stdin", subprocess.PIPE)
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("text", True)
        with sigterm_deferred():  # recorded before a SIGTERM can unwind past it
            p = subprocess.Popen(list(argv), env=env, start_new_session=True, **kwargs)
            self.procs.append(p)
            self.seen.add(p.pid)
        return p

    def snapshot(self) -> list[int]:
        """Record and return the pids of every child and its live descendants now."""
        pids = []
        for p in self.procs:
            if p.poll() is None:
                pids.append(p.pid)
                pids.extend(children_of(p.pid))
        self.seen.update(pids)
        return pids

    def stop(self, p: subprocess.Popen) -> None:
        """End ``p``'s process group (by its id, which is ``p.pid``): SIGTERM, then SIGKILL."""
        self.snapshot()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)
            try:
                p.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                continue
            members = [q for q in self.seen if alive(q) and _pgid(q) == p.pid]
            if not members:
                break
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def stop_all(self) -> None:
        for p in self.procs:
            self.stop(p)
        deadline = time.monotonic() + self.grace_s
        while not gone(self.seen) and time.monotonic() < deadline:
            time.sleep(0.05)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


class JsonLines:
    """The protocol lines of a child's stdout (those that start with '@@'), parsed into a queue
    by a reader thread, so that waiting for an answer can time out."""

    def __init__(self, proc: subprocess.Popen, what: str, log: Path | None = None):
        self.what, self.log = what, log
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream) -> None:
        try:
            for line in stream:
                if line.startswith("@@"):
                    self.q.put(json.loads(line[2:]))
        except (ValueError, OSError):
            pass
        self.q.put(None)

    def get(self, deadline: float) -> dict:
        """The next message, waiting until ``deadline`` (``time.monotonic()``); raises on a
        time-out, an early exit or a message that reports an error."""
        try:
            msg = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"no answer from the {self.what} in time; {self.tail()}") from None
        if msg is None:
            raise RuntimeError(f"the {self.what} exited early; {self.tail()}")
        if "error" in msg:
            raise RuntimeError(f"the {self.what} failed: {msg['error']}")
        return msg

    def tail(self, chars: int = 1500) -> str:
        """The end of the child's log file (its stderr), for error messages."""
        if self.log is None:
            return ""
        try:
            return "log ends: " + self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def send_json(proc: subprocess.Popen, msg: dict) -> None:
    """Write one request line to a child's stdin."""
    if proc.stdin is None:
        raise ValueError("the child was not started with stdin=subprocess.PIPE")
    proc.stdin.write(json.dumps(msg) + "\n")
    proc.stdin.flush()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
