"""Install packages into a virtual environment with uv where it is available, else with pip.

    python tools/install.py VENV_PYTHON [pip install arguments ...]

``make`` creates four environments (``.venv``, ``.venv-engine`` and the two Colab-pinned ones of
``colab-check-fast``, about 8 GB). pip resolves, downloads and unpacks one wheel at a time; it took
about 5 of the 6 minutes of ``make test``'s install phase on 2 cores (``requirements.txt`` alone:
222 s). uv (pinned in ``requirements-uv.txt``, kept in ``build/.venv-uv`` by ``make``) installs the
same pinned sets in seconds (``requirements.txt`` 10 s, the engine environment 20 s) and the same
versions: every requirement file here is pinned to the patch.

uv does not read pip's configuration, so this script hands it on: the index, the extra indexes
and the find-links folders that ``pip config list`` shows (the ``PIP_*`` variables included; a
``file:`` location that does not exist is dropped, as pip ignores it), the machine's certificate
store and pip's timeout. The arguments the Makefile and ``tools/colab_check.py`` pass are
translated: ``-r FILE``, ``-e DIR``, package pins, ``--no-deps``, ``--upgrade``, ``--quiet`` as
they are, ``--extra-index-url URL`` as an extra index searched for the best version, as pip does.

Where uv is missing (``make`` could not install it) or fails, pip runs the same command, and the
script says why. ``KVLAB_INSTALLER=pip`` chooses pip outright.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where ``make`` installs uv (``requirements-uv.txt``)
UV = ROOT / "build" / ".venv-uv" / "bin" / "uv"
#: uv's cache: in the checkout, on the environments' file system, so that uv links files from it
UV_CACHE = ROOT / "build" / ".uv-cache"
CHOICE = "KVLAB_INSTALLER"


def pip_config() -> dict[str, list[str]]:
    """pip's effective settings (``pip config list``: files and ``PIP_*`` variables), each a list
    of values; the variables override the files, as they do for pip."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    files: dict[str, list[str]] = {}
    env: dict[str, list[str]] = {}
    for line in out.splitlines():
        scope_key, sep, value = line.partition("=")
        if not sep or "." not in scope_key:
            continue
        scope, key = scope_key.rsplit(".", 1)
        values = shlex.split(value)
        values = values[0].split() if len(values) == 1 else values
        (env if scope == ":env:" else files)[key] = values
    return {**files, **env}


def _exists(location: str) -> bool:
    """False for a local folder or ``file:`` URL that is not there (pip skips those)."""
    if location.startswith("file://"):
        return Path(location[len("file://") :]).exists()
    if "://" in location:
        return True
    return Path(location).exists()


def uv_settings(config: dict[str, list[str]]) -> tuple[list[str], dict[str, str]]:
    """uv's arguments and environment for pip's settings ``config``."""
    # pip compiles every module it installs; uv only when asked (else the first import does it)
    args = ["--system-certs", "--compile-bytecode"]
    index = [u for u in config.get("index-url", []) if _exists(u)]
    if index:
        args += ["--default-index", index[0]]
    extra = [u for u in config.get("extra-index-url", []) if _exists(u)]
    for url in extra:
        args += ["--index", url]
    for loc in config.get("find-links", []):
        if _exists(loc):
            args += ["--find-links", loc]
    if extra:
        args += ["--index-strategy", "unsafe-best-match"]
    env = {"UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(UV_CACHE))}
    timeout = config.get("default-timeout") or config.get("timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout[0]
    return args, env


def uv_arguments(pip_args: list[str]) -> list[str]:
    """The Makefile's pip arguments in uv's words (see the module's docstring)."""
    out: list[str] = []
    it = iter(pip_args)
    extra = False
    for arg in it:
        if arg == "--extra-index-url":
            out += ["--index", next(it)]
            extra = True
        elif arg.startswith("--extra-index-url="):
            out += ["--index", arg.split("=", 1)[1]]
            extra = True
        elif arg == "--disable-pip-version-check":
            continue
        elif arg in ("--dry-run", "--report") or arg.startswith("--report="):
            raise ValueError(f"uv has no {arg}: run pip for it")
        else:
            out.append(arg)
    if extra:
        out += ["--index-strategy", "unsafe-best-match"]
    return out


def pip_command(python: str, pip_args: list[str]) -> list[str]:
    return [python, "-m", "pip", "install", *pip_args]


def install(python: str, pip_args: list[str]) -> None:
    """``pip install PIP_ARGS`` into the environment of ``python``: by uv where it is available,
    else (or if uv fails) by pip. Raises ``subprocess.CalledProcessError`` if pip fails too."""
    why = None
    if os.environ.get(CHOICE, "") == "pip":
        why = f"{CHOICE}=pip"
    elif not UV.exists():
        why = f"uv is not installed ({UV.relative_to(ROOT)})"
    if why is None:
        cfg_args, cfg_env = uv_settings(pip_config())
        cmd = [str(UV), "pip", "install", "--python", python, *cfg_args, *uv_arguments(pip_args)]
        done = subprocess.run(cmd, env={**os.environ, **cfg_env})
        if done.returncode == 0:
            return
        why = f"uv failed (exit {done.returncode})"
    print(f"install: {why}; pip installs instead", file=sys.stderr)
    subprocess.run(pip_command(python, pip_args), check=True)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        install(argv[0], argv[1:])
    except subprocess.CalledProcessError as e:
        return e.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
