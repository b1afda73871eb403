"""Timing copies of one request's KV cache between memories.

Kinds of copy (``kind``):

- ``host``: host memory to host memory (the CPU path; pageable buffers).
- ``h2d_pinned``, ``h2d_pageable``: host to GPU 0 from page-locked or ordinary host memory.
- ``d2h_pinned``, ``d2h_pageable``: GPU 0 back to host.
- ``d2d``: GPU 0 to another buffer on GPU 0 (a real ``copy_`` into a second buffer, which reads
  and writes HBM; ``tensor.to(same_device)`` would be a no-op).
- ``p2p``: GPU 0 to GPU 1 (compared with NVLink when NVML reports it, with PCIe when NVML reports
  none, with nothing when NVML cannot be asked; peer access alone does not say which).

GPU copies are timed with CUDA events after warm-up (``p2p`` with synchronised wall clock, as its
two devices have separate streams); host copies with ``time.perf_counter``. Each result is the
median over ``repeats``. Bandwidth is decimal GB/s (1e9 bytes per second) of bytes copied.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field

from ... import calc
from ..._validate import check_choice, check_int
from .device import discover, torch_or_none

KINDS = ("host", "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d", "p2p")
GPU_KINDS = KINDS[1:]

KIND_LABELS = {
    "host": "host to host (CPU memcpy)",
    "h2d_pinned": "host to GPU, pinned",
    "h2d_pageable": "host to GPU, pageable",
    "d2h_pinned": "GPU to host, pinned",
    "d2h_pageable": "GPU to host, pageable",
    "d2d": "GPU to GPU memory (same GPU)",
    "p2p": "GPU 0 to GPU 1",
}


@dataclass
class CopyResult:
    """One timed copy size. ``seconds`` is the median of ``times_s``."""

    kind: str
    n_bytes: int
    seconds: float
    times_s: list[float] = field(default_factory=list)
    tokens: int | None = None
    reference_bytes_per_s: float | None = None
    reference: str | None = None

    @property
    def bytes_per_s(self) -> float:
        return self.n_bytes / self.seconds if self.seconds > 0 else float("inf")

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9

    @property
    def share_of_reference(self) -> float | None:
        """Achieved bandwidth as a fraction of the vendor figure (None when there is none)."""
        if not self.reference_bytes_per_s:
            return None
        return self.bytes_per_s / self.reference_bytes_per_s

    def as_dict(self) -> dict:
        d = asdict(self)
        d["gb_per_s"] = self.gb_per_s
        return d


def reference_bandwidth(
    kind: str, gpu=None, nvlink: bool | None = None
) -> tuple[float | None, str | None]:
    """(bytes/s, description) of the vendor figure a copy of ``kind`` should be compared with.

    Host<->GPU: one direction of the PCIe headline figure (of NVLink-C2C on a GH200). Same-GPU copy: half the HBM bandwidth
    (each byte copied is read once and written once). GPU to GPU: one direction of NVLink when
    NVML says the GPUs have it (``nvlink`` True), of PCIe when it says they do not (False), and
    no figure when nobody knows (None): comparing an NVLink copy with PCIe would print shares of
    several hundred percent. Host to host: no vendor figure (None).
    """
    check_choice("kind", kind, KINDS)
    if kind == "host" or gpu is None:
        return None, None
    if kind.startswith(("h2d", "d2h")):  # PCIe, or a superchip's own host link (GH200)
        return gpu.host_one_way_bytes_per_s, f"{gpu.name} {gpu.host_link}, one way"
    if kind == "d2d":
        return gpu.hbm_bytes_per_s / 2, f"{gpu.name} HBM / 2 (read + write)"
    if nvlink is None:
        return None, None
    if nvlink and gpu.nvlink_one_way_bytes_per_s:
        return gpu.nvlink_one_way_bytes_per_s, f"{gpu.name} NVLink, one way"
    if nvlink:  # NVLink, but kvlab has no NVLink figure for this GPU
        return None, None
    return gpu.pcie_one_way_bytes_per_s, f"{gpu.name} PCIe, one way"


def nvml_module():
    """NVIDIA's NVML bindings: ``pynvml`` from the ``nvidia-ml-py`` package (in
    ``requirements-gpu.txt``), else the copy vLLM bundles (``vllm.third_party.pynvml``); None
    when neither imports."""
    import importlib

    for name in ("pynvml", "vllm.third_party.pynvml"):
        try:
            mod = importlib.import_module(name)
        except Exception:  # absent, or a broken install: try the next
            continue
        if hasattr(mod, "nvmlDeviceGetNvLinkState"):  # not the unofficial package of that name
            return mod
    return None


def nvlink_active(device: int = 0) -> bool | None:
    """Whether NVML reports an active NVLink on GPU ``device``: True, False, or None when nobody
    can tell (no NVML bindings, no driver). Peer access (``torch.cuda.can_device_access_peer``)
    does not tell: two GPUs on one PCIe switch report it too. NVML is shut down again after the
    question (``nvmlShutdown``)."""
    nv = nvml_module()
    if nv is None:
        return None
    try:
        nv.nvmlInit()
    except Exception:  # no driver: no answer
        return None
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(device)
        links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
        for link in range(links):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link):
                    return True
            except nv.NVMLError as exc:
                # "not supported": this GPU has no NVLink; "invalid argument": no more links
                if getattr(exc, "value", None) in (
                    2,
                    3,
                ):  # NVML_ERROR_INVALID_ARGUMENT, _NOT_SUPPORTED
                    return False
                return None
        return False
    except Exception:  # no such device: no answer
        return None
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # already shut down
            pass


def copy_kinds(discovery=None) -> dict[str, str | None]:
    """For every kind, None when it can run here, else the reason it is skipped."""
    d = discovery or discover()
    out: dict[str, str | None] = {}
    for kind in KINDS:
        if d.torch is None:
            out[kind] = "torch not installed"
        elif kind == "host":
            out[kind] = None
        elif d.device != "cuda":
            out[kind] = "no CUDA GPU"
        elif kind == "p2p" and d.gpu_count < 2:
            out[kind] = "needs two GPUs"
        else:
            out[kind] = None
    return out


def host_available_bytes() -> int:
    """Available host memory (MemAvailable on Linux; a cautious 2 GB elsewhere)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2 * 10**9


def _require_torch():
    torch = torch_or_none()
    if torch is None:
        raise RuntimeError("torch not installed: copy timing needs it (pip install torch)")
    return torch


def _buffers(torch, kind: str, n: int):
    """(src, dst) uint8 buffers of ``n`` bytes for a copy of ``kind``."""
    u8 = torch.uint8
    if kind == "host":
        return torch.ones(n, dtype=u8), torch.empty(n, dtype=u8)
    pinned = kind.endswith("pinned")
    if kind.startswith("h2d"):
        src = torch.ones(n, dtype=u8, pin_memory=pinned)
        return src, torch.empty(n, dtype=u8, device="cuda:0")
    if kind.startswith("d2h"):
        src = torch.ones(n, dtype=u8, device="cuda:0")
        return src, torch.empty(n, dtype=u8, pin_memory=pinned)
    if kind == "d2d":
        return torch.ones(n, dtype=u8, device="cuda:0"), torch.empty(n, dtype=u8, device="cuda:0")
    return torch.ones(n, dtype=u8, device="cuda:0"), torch.empty(n, dtype=u8, device="cuda:1")


def time_copy(
    n_bytes: int,
    kind: str = "host",
    repeats: int = 5,
    warmup: int = 2,
    tokens: int | None = None,
    gpu=None,
) -> CopyResult:
    """Time copying ``n_bytes`` bytes of ``kind`` (see module doc); median of ``repeats``.

    ``gpu`` is the :class:`kvlab.hardware.GPU` for the reference figure (found from the device
    name when omitted and a GPU is present).
    """
    n = check_int("n_bytes", n_bytes, lo=1)
    check_choice("kind", kind, KINDS)
    repeats = check_int("repeats", repeats, lo=1, hi=1000)
    warmup = check_int("warmup", warmup, lo=0, hi=100)
    torch = _require_torch()
    if kind != "host" and not torch.cuda.is_available():
        raise RuntimeError(f"kind={kind!r} needs a CUDA GPU; none is available here")
    if kind == "p2p" and torch.cuda.device_count() < 2:
        raise RuntimeError("kind='p2p' needs two GPUs")
    src, dst = _buffers(torch, kind, n)
    times: list[float] = []
    on_gpu = kind != "host"
    if on_gpu and gpu is None:
        from ... import hardware

        gpu = hardware.find_gpu(torch.cuda.get_device_name(0))
    for i in range(warmup + repeats):
        if kind == "host":
            t0 = time.perf_counter()
            dst.copy_(src)
            dt = time.perf_counter() - t0
        elif kind == "p2p":
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            dt = time.perf_counter() - t0
        else:
            with torch.cuda.device(0):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                dst.copy_(src, non_blocking=kind.endswith("pinned"))
                end.record()
                end.synchronize()
                dt = start.elapsed_time(end) / 1e3
        if i >= warmup:
            times.append(dt)
    nvlink = nvlink_active(0) if kind == "p2p" else None
    ref, ref_name = reference_bandwidth(kind, gpu if on_gpu else None, nvlink=nvlink)
    del src, dst
    if on_gpu:
        torch.cuda.empty_cache()
    return CopyResult(
        kind=kind,
        n_bytes=n,
        seconds=statistics.median(times),
        times_s=times,
        tokens=tokens,
        reference_bytes_per_s=ref,
        reference=ref_name,
    )


def kv_copy_sweep(
    model,
    tokens_list,
    kinds=None,
    bytes_per_value: float = 2,
    repeats: int = 5,
    warmup: int = 2,
    memory_fraction: float = 0.4,
):
    """Time copies of one request's KV for each prompt length in ``tokens_list``.

    The size of each copy is ``calc.kv_bytes(tokens, calc.model_kv_bytes_per_token(model))``.
    ``kinds`` defaults to every kind this machine supports. A size that would need more than
    ``memory_fraction`` of the free memory (two buffers) is skipped. Returns
    ``(results, skipped)``: a list of :class:`CopyResult` and a list of ``(kind, tokens, reason)``.
    """
    per_token = calc.model_kv_bytes_per_token(model, bytes_per_value)
    available = copy_kinds()
    if kinds is None:
        kinds = [k for k, why in available.items() if why is None]
    results: list[CopyResult] = []
    skipped: list[tuple[str, int | None, str]] = []
    for kind in kinds:
        check_choice("kinds", kind, KINDS)
        why_not = available[kind]
        if why_not is not None:
            skipped.append((kind, None, why_not))
            continue
        for tokens in tokens_list:
            tokens = check_int("tokens", tokens, lo=1)
            n = int(calc.kv_bytes(tokens, per_token))
            free = _free_bytes(kind)
            if 2 * n > memory_fraction * free:
                skipped.append(
                    (kind, tokens, f"needs {2 * n / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
                )
                continue
            results.append(time_copy(n, kind, repeats=repeats, warmup=warmup, tokens=tokens))
    return results, skipped


def _free_bytes(kind: str) -> int:
    if kind == "host":
        return host_available_bytes()
    torch = _require_torch()
    free_gpu = torch.cuda.mem_get_info(0)[0]
    if kind.startswith(("h2d", "d2h")):
        return min(free_gpu * 2, host_available_bytes())
    return free_gpu


def results_frame(results):
    """A pandas DataFrame of :class:`CopyResult` (one row each)."""
    import pandas as pd

    rows = []
    for r in results:
        rows.append(
            {
                "kind": r.kind,
                "tokens": r.tokens,
                "n_bytes": r.n_bytes,
                "seconds": r.seconds,
                "gb_per_s": r.gb_per_s,
                "reference_gb_per_s": (r.reference_bytes_per_s or float("nan")) / 1e9,
                "share_of_reference": r.share_of_reference,
            }
        )
    return pd.DataFrame(rows)
