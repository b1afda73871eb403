"""NIXL transfer sweep: one request's KV moved between two agents in two processes, timed.

NIXL (NVIDIA's Inference Xfer Library) is the transfer layer under vLLM's ``NixlConnector`` and
Dynamo's disaggregation {cite}`nixl`. Here two agents, each in its own process
(:mod:`kvlab.measure.disagg.nixl_worker`), register host buffers with NIXL's UCX backend; the initiator
READs the target's bytes into its own buffer, as a decode worker pulls a prefill worker's KV. On a
CPU machine that is DRAM to DRAM between two processes over UCX on the loopback device; on GPU
machines the same calls move GPU memory over NVLink or RDMA.

- :func:`kv_jobs` sizes the buffers with the book's formula (``calc.model_kv_bytes_per_token`` x
  tokens) and drops those above a cap, saying so;
- :func:`run_sweep` starts both agents (engine environment, ``UCX_NET_DEVICES=lo``), carries the
  agent metadata between them over pipes (NIXL's own listener thread stays off), runs the jobs,
  checks while both still run that none of their sockets listens beyond the loopback address, then
  stops both and checks that every process is gone, also when a step fails.

Timings are medians of ``repeats`` after ``warmup`` transfers; each repeat zeroes the destination
first and compares a blake2b digest of what arrived with the target's.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ... import calc
from ..._validate import check_int, non_negative, positive
from ..serving import engine
from ..serving import procs as pd_procs

WORKER = Path(__file__).with_name("nixl_worker.py")

#: UCX settings for every agent: the loopback device only. ``UCX_TLS=self,sm`` alone fails here.
UCX_ENV = {"UCX_NET_DEVICES": "lo", "UCX_LOG_LEVEL": "error"}


@dataclass(frozen=True)
class Job:
    """One transfer size: ``n_bytes`` split into descriptors of ``descriptor_bytes`` (0: one)."""

    label: str
    tokens: int
    n_bytes: int
    descriptor_bytes: int = 0


@dataclass
class NixlTransfer:
    """A job's measurement: ``seconds`` is the median of ``times_s``."""

    label: str
    tokens: int
    n_bytes: int
    descriptor_bytes: int
    descriptors: int
    times_s: list[float]
    data_ok: bool

    @property
    def seconds(self) -> float:
        return statistics.median(self.times_s)

    @property
    def bytes_per_s(self) -> float:
        return self.n_bytes / self.seconds

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9


@dataclass
class NixlSweep:
    """Everything one run measured and checked."""

    transfers: list[NixlTransfer]
    skipped: list[Job] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)  # listening sockets seen while running
    non_loopback: list[str] = field(default_factory=list)  # of those, the ones beyond loopback
    pids: list[int] = field(default_factory=list)  # every process seen
    all_gone: bool = False  # no process left after the run
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)  # per agent
    wall_s: float = 0.0

    @property
    def data_ok(self) -> bool:
        return bool(self.transfers) and all(t.data_ok for t in self.transfers)

    def as_dict(self) -> dict:
        d = asdict(self)
        for t, row in zip(self.transfers, d["transfers"], strict=True):
            row["seconds"], row["gb_per_s"] = t.seconds, t.gb_per_s
        return d


def kv_jobs(
    shape,
    tokens: list[int],
    bytes_per_value: float = 2,
    cap_bytes: float = 1e9,
    descriptor_tokens: int = 0,
) -> tuple[list[Job], list[Job]]:
    """One job per prompt length: the KV bytes of ``tokens`` tokens of ``shape`` (a
    :class:`kvlab.models.ModelShape`), from ``calc``. With ``descriptor_tokens`` the bytes are split
    into descriptors of that many tokens' KV of one layer and one of K or V (a KV block, as a
    connector moves it). Jobs above ``cap_bytes`` are returned second, as skipped."""
    positive("cap_bytes", cap_bytes)
    check_int("descriptor_tokens", descriptor_tokens, lo=0)
    per_token = calc.model_kv_bytes_per_token(shape, bytes_per_value)
    per_block = 0
    if descriptor_tokens:
        per_block = int(per_token * descriptor_tokens / (2 * shape.layers))
    keep: list[Job] = []
    skipped: list[Job] = []
    for t in tokens:
        check_int("tokens", t, lo=1)
        job = Job(shape.name, int(t), int(calc.kv_bytes(t, per_token)), per_block)
        (keep if job.n_bytes <= cap_bytes else skipped).append(job)
    return keep, skipped


def run_sweep(
    jobs: list[Job],
    repeats: int = 3,
    warmup: int = 1,
    seed: int = 0,
    timeout_s: float = 120.0,
    python: str | None = None,
    fail_after_connect: bool = False,
) -> NixlSweep:
    """Run ``jobs`` between a target and an initiator agent in two processes; see the module
    docstring. ``fail_after_connect`` makes the initiator raise once connected (to test that both
    processes are stopped anyway): the error propagates, and the returned-nothing run still leaves
    no process behind. ``timeout_s`` bounds the whole run."""
    if not jobs:
        raise ValueError("jobs must hold at least one Job, got none")
    repeats = check_int("repeats", repeats, lo=1)
    warmup = check_int("warmup", warmup, lo=0)
    non_negative("timeout_s", timeout_s)
    python = python or str(engine.engine_python())
    max_bytes = max(j.n_bytes for j in jobs)
    env = engine.engine_env(UCX_ENV)
    deadline = time.monotonic() + timeout_s
    out = NixlSweep(transfers=[])
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvlab-nixl-") as tmp:
        logs = {r: Path(tmp) / f"{r}.log" for r in ("target", "initiator")}
        with engine.engine_lock(), pd_procs.Children() as kids:
            try:
                _drive(
                    kids,
                    python,
                    env,
                    logs,
                    jobs,
                    repeats,
                    warmup,
                    seed,
                    deadline,
                    max_bytes,
                    fail_after_connect,
                    out,
                )
            finally:
                kids.stop_all()
                out.pids = sorted(kids.seen)
                out.all_gone = pd_procs.gone(kids.seen)
    out.wall_s = time.perf_counter() - t_start
    return out


def _drive(
    kids,
    python,
    env,
    logs,
    jobs,
    repeats,
    warmup,
    seed,
    deadline,
    max_bytes,
    fail_after_connect,
    out,
) -> None:
    procs, readers = {}, {}
    for role in ("target", "initiator"):
        with open(logs[role], "w") as err:
            procs[role] = kids.start([python, str(WORKER), role], env=env, stderr=err)
        readers[role] = pd_procs.JsonLines(procs[role], f"{role} agent", logs[role])
    sizes = sorted({j.n_bytes for j in jobs})
    pd_procs.send_json(procs["target"], {"max_bytes": max_bytes, "sizes": sizes, "seed": seed})
    tgt = readers["target"].get(deadline)
    pd_procs.send_json(
        procs["initiator"],
        {
            "max_bytes": max_bytes,
            "metadata": tgt["metadata"],
            "remote_addr": tgt["addr"],
            "digests": tgt["digests"],
            "jobs": [{"n_bytes": j.n_bytes, "descriptor_bytes": j.descriptor_bytes} for j in jobs],
            "repeats": repeats,
            "warmup": warmup,
            "fail_after_connect": fail_after_connect,
        },
    )
    ini = readers["initiator"].get(deadline)
    # Both agents are alive and connected: look at every socket they (and their threads) hold.
    socks = pd_procs.listening_sockets(kids.snapshot())
    out.sockets = [str(s) for s in socks]
    out.non_loopback = [str(s) for s in pd_procs.non_loopback(socks)]
    if fail_after_connect:
        # the initiator raised right after announcing itself: wait for its error report
        readers["initiator"].get(deadline)
    for job, row in zip(jobs, ini["results"], strict=True):
        out.transfers.append(
            NixlTransfer(
                job.label,
                job.tokens,
                row["n_bytes"],
                row["descriptor_bytes"],
                row["descriptors"],
                row["times_s"],
                row["data_ok"],
            )
        )
    pd_procs.send_json(procs["initiator"], {"quit": True})
    done = readers["initiator"].get(deadline)
    out.peak_rss_bytes["initiator"] = done["peak_rss_bytes"]
    procs["target"].stdin.close()
    done = readers["target"].get(deadline)
    out.peak_rss_bytes["target"] = done["peak_rss_bytes"]
    for p in procs.values():
        p.wait(timeout=max(1.0, deadline - time.monotonic()))


def main(argv: list[str] | None = None) -> int:
    """``python -m kvlab.measure.disagg.nixl_sweep``: a small sweep of the tiny lab shape, as JSON."""
    from ... import models

    jobs, _ = kv_jobs(models.TINY_LAB, [1024, 4096, 16384])
    sweep = run_sweep(jobs)
    json.dump(sweep.as_dict(), sys.stdout, indent=1)
    return 0 if sweep.data_ok and sweep.all_gone and not sweep.non_loopback else 1


if __name__ == "__main__":
    sys.exit(main())
