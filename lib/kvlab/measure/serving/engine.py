"""Where the labs' real serving engine runs, and how a notebook reaches it.

vLLM pins its own versions of transformers, numpy and friends, so on a CPU machine it lives in its
own virtual environment, ``.venv-engine`` (``make engine``), beside the book's ``.venv``. A
notebook running in the book's environment reaches it through
:func:`kvlab.measure.prefix.runs.run_job`, which starts the engine environment's Python with
:func:`engine_env` as a subprocess; the job runs with *this same kvlab code* and hands back a
JSON-ready dict. Where ``vllm`` imports in the notebook's own Python (Colab, a GPU machine with
``requirements-gpu.txt``), the job runs in-process instead: the same functions, no subprocess.

This module holds what every engine process needs and nothing of any lab: the folders, the
environment variables, :class:`EngineError` (every failure says what went wrong and what to do), the
engine lock, log tails, and :func:`kill_group`. It imports no other part of kvlab.

Set ``KVLAB_ENGINE_LOCK`` to a file path to run one engine job at a time across processes (the
job takes an exclusive ``flock`` on it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

#: The repository root (this file is lib/kvlab/measure/serving/engine.py).
ROOT = Path(__file__).resolve().parents[4]
#: The engine environment ``make engine`` creates.
ENGINE_VENV = ROOT / ".venv-engine"
#: The tiny model ``make engine`` builds (see :mod:`kvlab.measure.prefix.tinymodel`).
TINY_MODEL_DIR = ROOT / "build" / "tiny-llama"
#: The labs' GPU model (Lab 1 and Lab 3; downloaded from the hub on a GPU machine, never in CI).
DEFAULT_GPU_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
#: vLLM's default block size on CUDA, and the smallest the CPU attention backend accepts (it takes
#: multiples of 32 only).
GPU_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 32
#: Environment for every engine process: a 1 GiB CPU KV cache unless set, no usage reports.
ENGINE_ENV_DEFAULTS = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
#: Added only for a model in a local folder (the tiny model): no hub access at all. Never for a hub
#: model id such as ``Qwen/Qwen2.5-0.5B-Instruct``: ``huggingface_hub`` reads ``HF_HUB_OFFLINE``
#: once, when it is first imported, and vLLM then loads the config, tokenizer and weights with
#: ``local_files_only`` (its ``engine/arg_utils.py``, ``transformers_utils/config.py``,
#: ``model_executor/model_loader/weight_utils.py``), so a model that was never downloaded fails.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class EngineError(RuntimeError):
    """The engine could not run: the message names the cause and the fix."""


def vllm_here() -> bool:
    """True when ``vllm`` is importable in this Python (Colab, a GPU machine)."""
    return importlib.util.find_spec("vllm") is not None


def engine_python(venv: str | Path = ENGINE_VENV) -> Path:
    """The engine environment's Python; :class:`EngineError` naming the fix when it is missing."""
    py = Path(venv) / "bin" / "python"
    if not py.exists():
        raise EngineError(
            f"no vLLM engine: vllm is not installed in this Python ({sys.executable}) and the "
            f"engine environment {py} does not exist; run `make engine` in {ROOT}"
        )
    return py


def engine_versions(venv: str | Path = ENGINE_VENV) -> dict[str, str]:
    """Versions of vLLM (``vllm`` or ``vllm-cpu``), torch and nixl in the engine environment, read
    from its installed packages' metadata (nothing is started); ``{}`` when there is none."""
    import importlib.metadata as md

    sites = [str(p) for p in sorted(Path(venv).glob("lib/python*/site-packages"))]
    out: dict[str, str] = {}
    if not sites:
        return out
    for dist in md.distributions(path=sites):
        name = str(dist.metadata["Name"] or "").lower()
        if name in ("vllm", "vllm-cpu", "torch", "nixl"):
            out[name] = dist.version
    return out


def check_model_dir(path: str | Path) -> Path:
    """A local model folder must hold ``config.json``; otherwise :class:`EngineError`."""
    p = Path(path)
    if not (p / "config.json").is_file():
        hint = " (run `make engine` to build it)" if p.resolve() == TINY_MODEL_DIR else ""
        raise EngineError(f"model folder {p} is missing or holds no config.json{hint}")
    return p


def is_local_model(model: str | Path | None) -> bool:
    """True for a model in a local folder (``None`` is the tiny model of ``make engine``), False
    for a hub model id (``org/name``). A hub id has one ``/`` too, so a path counts as local when
    it exists, is absolute, or starts with ``.`` or ``~``."""
    if model is None or isinstance(model, Path):
        return True
    text = str(model)
    if not text:
        raise ValueError("model must be a local folder or a hub model id, got ''")
    return text.startswith((os.sep, ".", "~")) or os.path.isabs(text) or Path(text).exists()


def model_env(model: str | Path | None) -> dict:
    """The variables a model needs on top of :data:`ENGINE_ENV_DEFAULTS`: :data:`OFFLINE_ENV` for a
    local folder, nothing for a hub model id (which must be downloaded)."""
    return dict(OFFLINE_ENV) if is_local_model(model) else {}


def engine_env(extra: dict | None = None, model: str | Path | None = None) -> dict:
    """The environment an engine process gets: this one, the defaults above (with
    :data:`OFFLINE_ENV` only when ``model`` is a local folder; ``None``: the tiny model), then
    ``extra``. For a hub model id, offline variables that an earlier in-process job of this kernel
    set (see :func:`set_process_env`) are left out."""
    env = dict(os.environ)
    if not is_local_model(model):
        for k in _SET_HERE & set(OFFLINE_ENV):
            env.pop(k, None)
    for k, v in {**ENGINE_ENV_DEFAULTS, **model_env(model)}.items():
        env.setdefault(k, v)
    lib = str(ROOT / "lib")
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


#: Variables :func:`set_process_env` put into this process's environment (not the user's own).
_SET_HERE: set[str] = set()


def set_process_env(model: str | Path | None) -> None:
    """Before an in-process job: put the engine variables for ``model`` into ``os.environ`` (the
    engine processes vLLM spawns inherit them), keeping any the user set. A hub model id after a
    local one in the same Python: the offline variables set here before are removed again, and if
    ``huggingface_hub`` was already imported in offline mode because of them, :class:`EngineError`
    says to restart the kernel (``huggingface_hub`` reads the variable once, at import)."""
    local = is_local_model(model)
    if not local:
        for k in _SET_HERE & set(OFFLINE_ENV):
            os.environ.pop(k, None)
            _SET_HERE.discard(k)
            hub = sys.modules.get("huggingface_hub.constants")
            if k == "HF_HUB_OFFLINE" and hub is not None and getattr(hub, "HF_HUB_OFFLINE", False):
                raise EngineError(
                    f"this Python loaded huggingface_hub in offline mode for a local model, so "
                    f"the hub model {model} cannot be downloaded now: restart the kernel (Colab: "
                    f"Runtime > Restart session) and run the notebook again"
                )
    for k, v in {**ENGINE_ENV_DEFAULTS, **model_env(model)}.items():
        if k not in os.environ:
            os.environ[k] = v
            _SET_HERE.add(k)


def allowed_cores() -> list[int]:
    """The CPU ids this process may run on, ascending (``os.sched_getaffinity``; ``0 .. n-1`` where
    the platform has no affinity). A container can be given cores that do not start at 0, so an
    engine is pinned to ``allowed_cores()[i]``, never to ``i``."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = list(range(os.cpu_count() or 1))
    return cores or [0]


@contextlib.contextmanager
def engine_lock():
    """Hold ``$KVLAB_ENGINE_LOCK`` exclusively (nothing when the variable is unset)."""
    path = os.environ.get("KVLAB_ENGINE_LOCK")
    if not path:
        yield
        return
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def log_tail(path: str | Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist); when the log holds a
    Python traceback, the last one instead (up to its exception line), since what a process prints
    while it exits (leak reports, warnings) can push the cause out of the tail."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    all_lines = text.splitlines()
    starts = [i for i, ln in enumerate(all_lines) if ln.startswith("Traceback (most recent call")]
    if not starts:
        return "\n".join(all_lines[-lines:])
    block = []
    for ln in all_lines[starts[-1] :]:
        block.append(ln)
        if len(block) > 1 and ln and not ln[0].isspace() and not ln.startswith("Traceback"):
            break  # the exception line
    if len(block) > lines:
        block = block[:1] + ["  ..."] + block[-(lines - 2) :]
    return "\n".join(block)


def _group_running(pgid: int) -> bool:
    """True while a process of group ``pgid`` runs. A zombie does not count: the group's leader is
    usually the caller's own child, which stays a zombie until the caller waits for it, so asking
    the kernel (``killpg(pgid, 0)``) would say the group lives on after every process has exited.
    Reads ``/proc``; where there is none, asks the kernel."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


def kill_group(pid: int, grace_s: float = 10.0) -> None:
    """End the process ``pid`` and every process of its group (it was started as a group
    leader): SIGTERM, then SIGKILL after ``grace_s``; it returns once no process of the group
    runs (zombies left for their parents to reap)."""
    kill_groups([pid], grace_s)


def kill_groups(pids: list[int], grace_s: float = 10.0) -> None:
    """:func:`kill_group` for several groups at once: SIGTERM to every group, SIGKILL after
    ``grace_s`` to those still running. Ending n servers takes one grace time, not n (a job
    stopped from outside has only the grace its caller gives it to stop its servers)."""
    left = list(dict.fromkeys(pids))
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in list(left):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                left.remove(pid)
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            left = [pid for pid in left if _group_running(pid)]
            if left:
                time.sleep(0.1)
        if not left:
            return


def shown(text: str) -> str:
    """``text`` with this repository's root left out of paths (the build machine's folders are
    not the reader's): ``/home/me/repo/build/tiny-llama`` -> ``build/tiny-llama``."""
    return str(text).replace(str(ROOT) + os.sep, "")
