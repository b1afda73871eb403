"""Decisions the Makefile takes before it installs the engine environment or the labs' torch.

    python tools/engine_setup.py supported        exit 0 where vLLM's CPU build can run here
    python tools/engine_setup.py torch-args FILE  pip arguments that find FILE's torch pin

``supported``: the engine environment's pins (``requirements-engine.txt``) are wheels for Linux on
x86-64 with CPython 3.11. Elsewhere (macOS, ARM, another Python) ``make book`` still builds the
whole site, with the engine labs showing their committed recordings, and ``make test`` stops with
a clear message. ``KVLAB_FORCE_NO_ENGINE=1`` makes this machine behave like such a platform (it is
also read by ``kvlab.measure.recording.recorded``, which then takes every engine run from its recording).

``torch-args``: torch's CPU build (``torch==2.13.0+cpu``) is not on PyPI, and a plain
``torch==2.13.0`` from PyPI is the multi-gigabyte CUDA build. If pip finds the pinned file without
an index (the machines this book is tested on carry it in pip's find-links folder), nothing is
added; otherwise pip is pointed at PyTorch's CPU wheel index. ``TORCH_INDEX=URL`` chooses the index
explicitly; ``KVLAB_FORCE_NO_LOCAL_TORCH=1`` ignores a local file (to test that path without a
network: the decision and the command are printed, nothing is downloaded by this script).
The reason is printed on standard error; the arguments on standard output.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
FORCE_NO_ENGINE = "KVLAB_FORCE_NO_ENGINE"
FORCE_NO_LOCAL_TORCH = "KVLAB_FORCE_NO_LOCAL_TORCH"


def engine_supported() -> tuple[bool, str]:
    """(True, '') where the engine environment's pinned wheels install, else (False, why)."""
    if os.environ.get(FORCE_NO_ENGINE, "") not in ("", "0"):
        return False, f"{FORCE_NO_ENGINE} is set"
    system, machine = platform.system(), platform.machine().lower()
    if system != "Linux" or machine not in ("x86_64", "amd64"):
        return False, f"vLLM's CPU build is pinned for Linux x86-64, this is {system} {machine}"
    if sys.version_info[:2] != (3, 11):
        version = ".".join(map(str, sys.version_info[:2]))
        return False, f"the engine pins are for Python 3.11, this is Python {version}"
    return True, ""


def torch_pin(requirements: Path) -> str:
    """The ``torch==...`` line of a requirements file."""
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if re.match(r"^torch\s*==", line):
            return line.replace(" ", "")
    raise ValueError(f"requirements must pin torch (torch==VERSION), {requirements} does not")


def local_torch_available(pin: str) -> bool:
    """True when pip resolves ``pin`` without any index (from its find-links folders)."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps"]
    cmd += ["--ignore-installed", "--no-index", pin]
    return subprocess.run(cmd, capture_output=True, timeout=120).returncode == 0


def torch_args(requirements: Path) -> tuple[list[str], str]:
    """pip arguments for the file's torch pin, and the reason, for the Makefile to print."""
    pin = torch_pin(requirements)
    explicit = os.environ.get("TORCH_INDEX", "")
    if explicit:
        return ["--extra-index-url", explicit], f"{pin}: from TORCH_INDEX={explicit}"
    forced = os.environ.get(FORCE_NO_LOCAL_TORCH, "") not in ("", "0")
    if not forced and local_torch_available(pin):
        return [], f"{pin}: the wheel found locally by pip (no extra index)"
    why = f"{FORCE_NO_LOCAL_TORCH} is set" if forced else "pip finds no local wheel"
    return [
        "--extra-index-url",
        CPU_INDEX,
    ], f"{pin}: {why}, so from PyTorch's CPU index {CPU_INDEX}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["supported"]:
        ok, why = engine_supported()
        if not ok:
            print(why, file=sys.stderr)
        return 0 if ok else 1
    if argv[:1] == ["torch-args"] and len(argv) == 2:
        args, why = torch_args(Path(argv[1]))
        print(f"torch: {why}", file=sys.stderr)
        print(" ".join(args))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
