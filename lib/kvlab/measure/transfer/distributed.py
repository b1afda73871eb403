"""Moving a tensor between two processes with ``torch.distributed`` send/recv.

This is the primitive that KV connectors (vLLM's, NIXL-based ones) build on: one process holds the
KV blocks, the other receives them into its own memory. On GPUs the backend is NCCL (each rank on
its own GPU: NVLink or PCIe inside a node, RDMA across nodes); on CPU it is gloo over TCP on
127.0.0.1.

Two ways to run it:

- :func:`send_recv` spawns two processes itself (bounded by ``timeout_s``) and returns the timings;
- ``torchrun --nproc-per-node 2 -m kvlab.measure.transfer.distributed --mb 64`` runs the same worker under
  torchrun and prints one line per size from rank 0.

Each size is timed on rank 0 from just before ``send`` to the return of a one-element
acknowledgement from rank 1, so the figure includes one small round trip; medians over repeats.
Rank 1 hashes what it received and rank 0 what it sent (blake2b), so the parent can check that the
exact bytes arrived.
"""

from __future__ import annotations

import hashlib
import os
import socket
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from ..._validate import check_choice, check_int, positive


@dataclass
class SendRecvResult:
    """One size sent from rank 0 to rank 1. ``seconds`` is the median of ``times_s``."""

    backend: str
    n_bytes: int
    seconds: float
    times_s: list[float] = field(default_factory=list)
    sent_checksum: str = ""
    received_checksum: str = ""

    @property
    def checksum_ok(self) -> bool:
        return bool(self.sent_checksum) and self.sent_checksum == self.received_checksum

    @property
    def gb_per_s(self) -> float:
        return self.n_bytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["gb_per_s"] = self.gb_per_s
        d["checksum_ok"] = self.checksum_ok
        return d


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _payload(torch, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


def _digest(tensor) -> str:
    return hashlib.blake2b(tensor.cpu().numpy().tobytes(), digest_size=16).hexdigest()


def _run_rank(rank: int, backend: str, sizes, repeats: int, warmup: int, seed: int) -> list[dict]:
    """The body both ranks run once the process group exists. Rank 0 returns timings."""
    import torch
    import torch.distributed as dist

    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)

    def sync():
        if backend == "nccl":
            torch.cuda.synchronize(device)

    ack = torch.zeros(1, dtype=torch.uint8, device=device)
    out = []
    for n in sizes:
        if rank == 0:
            buf = _payload(torch, n, seed).to(device)
            checksum = _digest(buf)
        else:
            buf = torch.empty(n, dtype=torch.uint8, device=device)
            checksum = ""
        times = []
        for i in range(warmup + repeats):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, dst=1)
                dist.recv(ack, src=1)
            else:
                dist.recv(buf, src=0)
                dist.send(ack, dst=0)
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        if rank == 1:
            checksum = _digest(buf)
        out.append({"n_bytes": n, "times_s": times, "checksum": checksum})
    return out


def _spawned(rank: int, backend: str, port: int, sizes, repeats, warmup, seed, timeout_s, queue):
    try:
        if sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch.distributed as dist

        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=2,
            timeout=timedelta(seconds=timeout_s),
        )
        try:
            rows = _run_rank(rank, backend, sizes, repeats, warmup, seed)
        finally:
            dist.destroy_process_group()
        queue.put(("ok", rank, rows))
    except Exception as exc:  # report to the parent instead of dying silently
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}"))


def default_backend() -> str:
    """'nccl' when two CUDA GPUs exist, else 'gloo'."""
    from .device import torch_or_none

    torch = torch_or_none()
    if torch is not None and torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        return "nccl"
    return "gloo"


def send_recv(
    sizes_bytes,
    backend: str | None = None,
    repeats: int = 3,
    warmup: int = 1,
    timeout_s: float = 60.0,
    seed: int = 0,
) -> list[SendRecvResult]:
    """Spawn two processes and send each size in ``sizes_bytes`` from rank 0 to rank 1.

    ``backend`` is 'gloo' (CPU tensors, works everywhere) or 'nccl' (needs two GPUs); default
    :func:`default_backend`. Raises ``TimeoutError`` if the pair has not finished within
    ``timeout_s`` seconds (both processes are then terminated), ``RuntimeError`` if a rank failed.
    """
    sizes = [check_int("sizes_bytes", n, lo=1) for n in sizes_bytes]
    if not sizes:
        raise ValueError("sizes_bytes must hold at least one size, got []")
    backend = backend or default_backend()
    check_choice("backend", backend, ("gloo", "nccl"))
    repeats = check_int("repeats", repeats, lo=1, hi=1000)
    warmup = check_int("warmup", warmup, lo=0, hi=100)
    timeout_s = positive("timeout_s", timeout_s)
    import multiprocessing as mp

    from .device import torch_or_none

    if torch_or_none() is None:
        raise RuntimeError("torch not installed: send/recv needs torch.distributed")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_spawned,
            args=(r, backend, port, sizes, repeats, warmup, seed, timeout_s, queue),
            daemon=True,
        )
        for r in range(2)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    got: dict[int, list[dict]] = {}  # rank -> its _run_rank rows
    errors: list[str] = []
    try:
        while len(got) + len(errors) < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"send/recv over {backend} did not finish in {timeout_s:g} s")
            try:
                status, rank, payload = queue.get(timeout=min(left, 1.0))
            except Exception:
                if not any(p.is_alive() for p in procs) and queue.empty():
                    raise RuntimeError("both ranks exited without reporting") from None
                continue
            if status == "ok":
                got[rank] = payload
            else:
                errors.append(f"rank {rank}: {payload}")
    finally:
        for p in procs:
            p.join(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    if errors:
        raise RuntimeError("send/recv failed: " + "; ".join(errors))
    results = []
    for sent, received in zip(got[0], got[1], strict=True):
        results.append(
            SendRecvResult(
                backend=backend,
                n_bytes=sent["n_bytes"],
                seconds=statistics.median(sent["times_s"]),
                times_s=sent["times_s"],
                sent_checksum=sent["checksum"],
                received_checksum=received["checksum"],
            )
        )
    return results


def main(argv=None) -> int:
    """Entry point under torchrun: ``torchrun --nproc-per-node 2 -m kvlab.measure.transfer.distributed``."""
    import argparse

    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mb", type=float, nargs="+", default=[1, 16, 64, 256], help="sizes to send, decimal MB"
    )
    parser.add_argument("--backend", choices=["gloo", "nccl"], default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    backend = args.backend or ("nccl" if torch.cuda.device_count() >= 2 else "gloo")
    dist.init_process_group(backend)
    rank = dist.get_rank()
    sizes = [int(mb * 1e6) for mb in args.mb]
    rows = _run_rank(rank, backend, sizes, args.repeats, 1, 0)
    # rank 1's checksums travel to rank 0 as bytes so rank 0 can check them
    gathered: list[list[str] | None] = [None, None]
    dist.all_gather_object(gathered, [r["checksum"] for r in rows])
    if rank == 0:
        their_checksums = gathered[1]
        if their_checksums is None:
            raise RuntimeError("all_gather_object returned nothing from rank 1")
        for r, theirs in zip(rows, their_checksums, strict=True):
            s = statistics.median(r["times_s"])
            ok = "ok" if r["checksum"] == theirs else "MISMATCH"
            print(
                f"{backend} {r['n_bytes'] / 1e6:10.1f} MB  {s * 1e3:9.3f} ms  "
                f"{r['n_bytes'] / s / 1e9:7.2f} GB/s  checksum {ok}"
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
