"""Is this Python new enough for the GPU recipe? (standard library only: it runs before anything is
installed, on the rented box's bare ``python3``).

vLLM 0.32.0 (``requirements-gpu.txt``) needs Python 3.11 or later, and so does kvlab
(``lib/pyproject.toml``). Ubuntu 22.04, the image of many rented H100 boxes, ships Python 3.10 as
``python3``: there ``pip install -r requirements-gpu.txt`` fails with a resolver message that does
not say why. ``tools/gpu_day.sh`` and ``tools/record_gpu.py`` ask :func:`problem` first.

Usage: ``python tools/python_check.py`` (exit 0 when this Python will do, 1 with the reason).
``KVLAB_PYTHON_VERSION=3.10.12`` makes it judge that version instead of its own (the tests use it).
"""

from __future__ import annotations

import os
import sys

#: The oldest Python vLLM 0.32.0 installs on (its ``Requires-Python``), and kvlab with it.
MIN_PYTHON = (3, 11)
#: Environment variable naming the version to judge in place of this Python's (tests).
VERSION_ENV = "KVLAB_PYTHON_VERSION"


def version_here() -> tuple[int, ...]:
    """This Python's version, or the one ``$KVLAB_PYTHON_VERSION`` names (``3.10.12``)."""
    forced = os.environ.get(VERSION_ENV, "").strip()
    if forced:
        try:
            return tuple(int(p) for p in forced.split("."))
        except ValueError:
            raise ValueError(
                f"{VERSION_ENV} must be a version such as 3.10.12, got {forced!r}"
            ) from None
    return tuple(sys.version_info[:3])


def problem(version: tuple[int, ...] | None = None) -> str | None:
    """Why Python ``version`` (default: :func:`version_here`) cannot run the GPU recipe, with
    what to do; None when it can."""
    v = version_here() if version is None else tuple(version)
    if v[:2] >= MIN_PYTHON:
        return None
    shown = ".".join(str(p) for p in v)
    need = ".".join(str(p) for p in MIN_PYTHON)
    return (
        f"Python {shown} is too old for the GPU recipe: vLLM 0.32.0 (requirements-gpu.txt) and "
        f"kvlab need Python {need} or later (Ubuntu 22.04's python3 is 3.10).\n"
        "Make an environment with a newer Python and run again with it, for example:\n"
        "  python3 -m pip install --user uv && python3 -m uv venv -p 3.12 .venv-gpu\n"
        "  python3 -m uv pip install --python .venv-gpu/bin/python -r requirements-gpu.txt -e lib\n"
        "  (or: sudo apt install python3.11 python3.11-venv, from the deadsnakes PPA on 22.04;\n"
        "   python3.11 -m venv .venv-gpu && .venv-gpu/bin/pip install -r requirements-gpu.txt -e lib)\n"
        "then: PYTHON=.venv-gpu/bin/python bash tools/gpu_day.sh"
    )


def main() -> int:
    why = problem()
    if why:
        print(why, file=sys.stderr)
        return 1
    print(f"Python {'.'.join(str(p) for p in version_here())}: new enough for vLLM 0.32.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
