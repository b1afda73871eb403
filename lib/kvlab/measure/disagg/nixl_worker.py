"""One NIXL agent in its own process: the child side of :mod:`kvlab.measure.disagg.nixl_sweep`.

Run as a script by path with a Python that has ``nixl`` and ``numpy`` (the engine environment):
``python nixl_worker.py target`` or ``... initiator``. It imports nothing from kvlab, so it needs
nothing else. It talks to its parent in JSON lines: it reads one request per line on stdin and
answers on stdout with lines that start with ``@@``; anything else it prints (NIXL's and UCX's own
logging) is not part of the protocol.

- The **target** allocates one host buffer of ``max_bytes``, fills it with seeded random bytes,
  registers it with NIXL's UCX backend and answers with its agent metadata (base64), the buffer's
  address and the blake2b digest of each requested prefix. It then waits until its stdin closes.
- The **initiator** allocates and registers a buffer of the same size, loads the target's metadata
  (no listener thread: the parent carries the metadata over the pipes), and for each size READs the
  target's first ``n_bytes`` into its own buffer, split into descriptors of ``descriptor_bytes``
  (the whole size when 0). Each repeat zeroes the destination first, times from posting the
  transfer to seeing it DONE, and checks the digest of what arrived.

No socket is opened here by hand; UCX opens its own, restricted to the loopback device by the
``UCX_NET_DEVICES=lo`` the parent sets.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import sys
import time


def _say(**msg) -> None:
    sys.stdout.write("@@" + json.dumps(msg) + "\n")
    sys.stdout.flush()


def _read() -> dict | None:
    line = sys.stdin.readline()
    return json.loads(line) if line.strip() else None


def _digest(view) -> str:
    return hashlib.blake2b(view, digest_size=16).hexdigest()


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _agent(name: str):
    from nixl._api import nixl_agent, nixl_agent_config

    return nixl_agent(name, nixl_agent_config(enable_prog_thread=True, backends=["UCX"]))


def _descs(addr: int, n_bytes: int, descriptor_bytes: int):
    import numpy as np

    step = descriptor_bytes or n_bytes
    starts = np.arange(0, n_bytes, step, dtype=np.uint64)
    lens = np.minimum(step, n_bytes - starts).astype(np.uint64)
    rows = np.zeros((len(starts), 3), dtype=np.uint64)
    rows[:, 0] = addr + starts
    rows[:, 1] = lens
    return rows


def target(req: dict) -> None:
    import numpy as np

    max_bytes = int(req["max_bytes"])
    buf = np.random.default_rng(int(req.get("seed", 0))).integers(
        0, 256, size=max_bytes, dtype=np.uint8
    )
    agent = _agent("target")
    addr = buf.ctypes.data
    reg = agent.register_memory([(addr, max_bytes, 0, "")], "DRAM")
    digests = {str(n): _digest(buf.data[: int(n)]) for n in req["sizes"]}
    _say(
        role="target",
        pid=os.getpid(),
        metadata=base64.b64encode(agent.get_agent_metadata()).decode(),
        addr=addr,
        digests=digests,
    )
    while _read() is not None:  # keep serving until the parent closes stdin
        pass
    agent.deregister_memory(reg)
    _say(role="target", done=True, peak_rss_bytes=_peak_rss())


def initiator(req: dict) -> None:
    import numpy as np

    max_bytes = int(req["max_bytes"])
    buf = np.zeros(max_bytes, dtype=np.uint8)
    agent = _agent("initiator")
    addr = buf.ctypes.data
    reg = agent.register_memory([(addr, max_bytes, 0, "")], "DRAM")
    remote = agent.add_remote_agent(base64.b64decode(req["metadata"]))
    if req.get("fail_after_connect"):
        _say(role="initiator", pid=os.getpid(), ready=True)
        raise RuntimeError("failure injected after connecting (fail_after_connect)")
    results = []
    for job in req["jobs"]:
        n, dbytes = int(job["n_bytes"]), int(job.get("descriptor_bytes", 0))
        local = agent.get_xfer_descs(_descs(addr, n, dbytes), "DRAM")
        far = agent.get_xfer_descs(_descs(int(req["remote_addr"]), n, dbytes), "DRAM")
        times, ok, descs = [], True, len(_descs(0, n, dbytes))
        for r in range(int(req["warmup"]) + int(req["repeats"])):
            buf[:n] = 0
            handle = agent.initialize_xfer("READ", local, far, remote)
            t0 = time.perf_counter()
            state = agent.transfer(handle)
            deadline = time.monotonic() + float(req.get("xfer_timeout_s", 60))
            while state == "PROC":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"NIXL READ of {n} bytes still in progress")
                state = agent.check_xfer_state(handle)
            dt = time.perf_counter() - t0
            agent.release_xfer_handle(handle)
            if state != "DONE":
                raise RuntimeError(f"NIXL READ of {n} bytes ended in state {state}")
            if r >= int(req["warmup"]):
                times.append(dt)
                ok = ok and _digest(buf.data[:n]) == req["digests"][str(n)]
        results.append(
            {"n_bytes": n, "descriptor_bytes": dbytes, "descriptors": descs}
            | {"times_s": times, "data_ok": ok}
        )
    _say(role="initiator", pid=os.getpid(), results=results, ready=True)
    _read()  # hold the connection until the parent has looked at the sockets
    agent.remove_remote_agent(remote)
    agent.deregister_memory(reg)
    _say(role="initiator", done=True, peak_rss_bytes=_peak_rss())


def main(argv: list[str]) -> int:
    role = argv[1] if len(argv) > 1 else ""
    if role not in ("target", "initiator"):
        sys.stderr.write("usage: nixl_worker.py target|initiator\n")
        return 2
    req = _read()
    if req is None:
        return 2
    try:
        (target if role == "target" else initiator)(req)
    except Exception as e:  # report, then fail: the parent stops the other side
        _say(role=role, error=f"{type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
