"""Run every notebook in an environment with Google Colab's package versions (``make colab-check``).

What it does, from a fresh clone (it needs only ``python3`` and access to PyPI):

1. Finds a Python like Colab's (3.13; then 3.12; else the interpreter running this script, with a
   warning). Looked for on PATH (``python3.13``) and under ``~/.pyenv/versions/3.13*``; override
   with ``--python PATH`` or the environment variable ``COLAB_PYTHON``.
2. Creates ``build/.venv-colab-KEY`` (KEY: a hash of the Python version, the pins and kvlab's
   declared dependencies, so a changed pin or dependency gets a new environment and an unchanged
   one is reused; older keys are removed) and installs the pins below FIRST, then
   ``pip install -e lib`` (kvlab declares loose lower bounds only), and verifies that installing
   kvlab changed none of the pinned versions. There is no myst-nb and no nbval in this
   environment, as on Colab: notebooks glue through ``kvlab.glue``.
3. Checks statically that every notebook's first cell is the current Colab set-up cell
   (``tools/colab_cell.py --check``). Running that cell for real would ``git clone`` the
   repository, so it is not simulated with a fake ``google.colab`` module; outside Colab the cell
   does nothing, and it is executed like the rest (which also checks it parses under this Python).
4. Executes every notebook under ``notebooks/`` and ``solutions/`` except ``notebooks/labs/``
   top to bottom with nbclient in that environment (cwd = the notebook's folder); outputs are not
   written back.
5. Labs (on by default; ``--no-labs`` skips them): builds a second environment,
   ``build/.venv-colab-labs-KEY``, with the same pins plus torch and its dependencies at Colab's
   versions (``LAB_PINS``), then kvlab, verified the same way, and runs ``notebooks/labs/*.ipynb``
   and ``solutions/labs-*.ipynb`` in it as on a Colab runtime without GPU: ``CUDA_VISIBLE_DEVICES``
   is emptied and, in place of the Colab cell (which would ``git clone``; step 3 checks it), the
   kernel gets an empty ``google.colab`` module, so ``"google.colab" in sys.modules`` is true and
   the labs take their Colab branches. The labs' own set-up cell runs as written: it installs
   packages only inside Colab, and only those Colab lacks; to prove that nothing was installed,
   the environment's full package list is compared before and after the run.
6. Which path a lab's set-up chose is read from the variables it defines, not from its wording
   (see ``judge_setup``): ``ENGINE_HERE`` (vLLM imports in the notebook's Python) and
   ``ENGINE_OK`` (an engine will run, in-process or in ``.venv-engine``) or ``NO_ENGINE`` (None
   when an engine runs, else why not), or ``HAS_GPU``. Where
   ``.venv-engine`` exists the lab must choose the engine environment; where it does not, the CPU
   path (no engine: what a Colab runtime without GPU does). Neither may find vLLM in-process or a
   GPU here. The summary says which path each lab took.
7. Prints a summary with versions and timings; exits 1 on any error.

``--fast`` (``make colab-check-fast``, part of ``make test``) runs only the notebooks whose imports
differ from the book's environment (``FAST``), in the same cached environments as the full check:
the two explorers, which need Altair, in the Colab environment (p22-05 whole, p08-05 up to the cell
that draws its explorer: the rest of that chapter is minutes of simulation that imports nothing
the book's other pages do not), and Lab 1 up to and including its set-up cell in the labs
environment. It also fails when a notebook rewrites a file under ``data/`` (an explorer grid whose
cache key differs on Colab's Python would be recomputed for minutes).

Why the labs environment uses Python 3.11, not Colab's 3.13: the labs need torch. Colab ships
torch 2.11.0+cu128 preinstalled; a CPU build is what the CPU path needs, and the only CPU torch
this project keeps on disk is ``torch-2.13.0+cpu`` for CPython 3.11 (``requirements-labs.txt``
pins torch 2.13.0). On 3.13, ``pip install torch==2.13.0`` would instead download a multi-GB CUDA
build from PyPI. So the labs environment trades the Python minor version (3.11 instead of 3.13)
for a CPU torch without that download; every other pin is Colab's. Before installing, a
``pip --dry-run`` checks that the torch pip would take is a local file or a ``+cpu`` build, and
stops otherwise (on a machine without the local wheel, set
``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``). Override the interpreter with
``--labs-python PATH`` or ``COLAB_LABS_PYTHON``.

Versions. Colab publishes its runtime's ``pip freeze`` at https://github.com/googlecolab/backend-info
(``pip-freeze.gpu.txt``; ``os-info-gpu.txt`` says Python 3.13.15). The pins below are the
Python-level packages the notebooks touch, copied from that file as of commit a724079
(2026-08-19, "Upgrade to Python 3.13"; until then, February 2026's commit 4647a1d had Python 3.12,
numpy 2.0.2 and pandas 2.2.2): numpy 2.1.3, pandas 2.2.3, matplotlib 3.10.0, ipywidgets 7.7.1,
ipython 7.34.0, ipykernel 6.17.1, jupyter_client 7.4.9, traitlets 5.7.1, sympy 1.14.0,
tqdm 4.67.3, nbclient 0.10.4, nbformat 5.11.1, prometheus_client 0.26.0, altair 5.5.0 (which the
explorers' ``kvlab.explorer`` imports) with its dependencies (and, for the labs, torch's own
dependencies). ``COLAB_GPU_PREINSTALLED`` lists the torch builds the GPU runtime has (torch,
torchaudio and torchvision ``+cu128``, triton), which ``pip install -r requirements-gpu.txt``
keeps wherever they satisfy it. Every package a notebook or kvlab imports is either declared by
kvlab (``lib/pyproject.toml``) or pinned here: ``tests/test_declared_imports.py`` fails
otherwise. Update ``PINS``, ``LAB_PINS`` and ``COLAB_GPU_PREINSTALLED`` when Colab moves (the
file says what it is).

Usage: python3 tools/colab_check.py [--fast] [--setup-only] [--no-labs] [--python PATH]
       [--labs-python PATH] [--venv DIR] [--labs-venv DIR] [--recreate] [--envs-only]
       [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _colab_cell_marker() -> str:
    """The first line of every notebook's set-up cell, ``MARKER`` in tools/colab_cell.py (read, not
    imported: that module needs nbformat, which the Python running this check may lack)."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parent / "colab_cell.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MARKER" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise RuntimeError("tools/colab_cell.py defines no MARKER")


COLAB_CELL_MARKER = _colab_cell_marker()

ROOT = Path(__file__).resolve().parents[1]
COLAB_PYTHONS = ("3.13", "3.12")
LABS_PYTHONS = ("3.11",)  # the local CPU torch wheel is cp311; see the docstring

# From googlecolab/backend-info pip-freeze.gpu.txt (commit a724079, 2026-08-19, Python 3.13).
PINS = {
    "numpy": "2.1.3",
    "pandas": "2.2.3",
    "matplotlib": "3.10.0",
    "ipywidgets": "7.7.1",
    "notebook": "6.5.7",  # widgetsnbextension 3 needs notebook; unpinned, pip takes 7 + jupyterlab
    "nbclassic": "1.3.3",
    "jupyter_server": "2.20.0",
    "widgetsnbextension": "3.6.10",
    "jupyterlab_widgets": "3.0.16",
    "ipython": "7.34.0",
    "ipykernel": "6.17.1",
    "jupyter_client": "7.4.9",
    "jupyter_core": "5.9.1",
    "traitlets": "5.7.1",
    "matplotlib-inline": "0.2.2",
    "tornado": "6.5.7",
    "pyzmq": "26.2.1",
    "sympy": "1.14.0",
    "tqdm": "4.67.3",
    "nbclient": "0.10.4",
    "nbformat": "5.11.1",
    "PyYAML": "6.0.3",
    "xxhash": "4.0.1",
    "python-dateutil": "2.9.0.post0",
    "pytz": "2025.2",
    "tzdata": "2026.3",
    "prometheus_client": "0.26.0",  # kvlab.measure.serving.prom uses its parser when present
    # kvlab.explorer and kvlab.explorer_p22 build the explorers' Vega-Lite specs with Altair
    "altair": "5.5.0",
    "narwhals": "2.24.0",
    "jsonschema": "4.26.0",
    "jsonschema-specifications": "2025.9.1",
    "referencing": "0.37.0",
    "rpds-py": "2026.6.3",
    "attrs": "26.1.0",
    "Jinja2": "3.1.6",
    "MarkupSafe": "3.0.3",
    "packaging": "26.3",
    "typing_extensions": "4.16.0",
}
# What a Colab GPU runtime has installed of the GPU set's packages (the same file): pip keeps any
# of them that satisfies requirements-gpu.txt, so the GPU set's resolution check
# (tests/engine/test_gpu_requirements.py) takes them as installed, not as absent.
COLAB_GPU_PREINSTALLED = {
    "torch": "2.11.0+cu128",
    "torchaudio": "2.11.0+cu128",
    "torchvision": "0.26.0+cu128",
    "triton": "3.6.0",
}
# The labs environment: PINS, plus torch (not Colab's 2.11.0+cu128: the local CPU build, see the
# docstring) and torch's dependencies at Colab's versions.
LAB_PINS = {
    **PINS,
    "torch": "2.13.0",
    "filelock": "3.32.3",
    "fsspec": "2025.3.0",
    "mpmath": "1.3.0",
    "networkx": "3.6.1",
}
ABSENT = ("myst_nb", "nbval")  # Colab has neither; their absence is asserted in the environment.
# `--fast`: the notebooks whose imports differ from the book's environment. The explorers import
# Altair (through kvlab.explorer*); Lab 1's set-up decides between vLLM in-process, the engine
# environment and the CPU path. Labs in this list run up to and including their set-up cell.
FAST = {
    # up to the cell that draws the explorer (the rest of the chapter, minutes of simulation with
    # the same imports as the book's pages, runs in the full check)
    "notebooks/p08-05-routing-demo.ipynb": r"^from kvlab import .*\bexplorer\b",
    "notebooks/p22-05-explorer.ipynb": None,  # the whole page: it is the explorer
    "notebooks/labs/lab1-vllm-prefix-caching.ipynb": "setup",  # up to its set-up cell
}
# The variables a lab's set-up cell defines that say which path it chose (see judge_setup).
SETUP_VARS = ("ENGINE_HERE", "ENGINE_OK", "NO_ENGINE", "HAS_GPU")
ENGINE_VENV = ROOT / ".venv-engine"  # as kvlab.measure.serving.engine.ENGINE_VENV
FORCE_NO_ENGINE = "KVLAB_FORCE_NO_ENGINE"  # set (not 0): no engine even where .venv-engine exists


def engine_expected() -> tuple[bool, str]:
    """(whether a lab's set-up should choose an engine here, why)."""
    if os.environ.get(FORCE_NO_ENGINE, "") not in ("", "0"):
        return False, f"{FORCE_NO_ENGINE} is set"
    if ENGINE_VENV.exists():
        return True, ".venv-engine exists"
    return False, "no .venv-engine"


def log(msg: str) -> None:
    print(msg, flush=True)


def find_python(explicit: str | None, versions: tuple[str, ...]) -> tuple[str, str]:
    """Return (path, note): a Python of one of ``versions``, or this interpreter with a warning."""
    if explicit:
        return explicit, "given"
    for ver in versions:
        exe = shutil.which(f"python{ver}")
        cands = [exe] if exe else []
        cands += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{ver}*/bin/python{ver}")))
        for cand in cands:
            try:
                subprocess.run(
                    [cand, "-c", "import venv, ensurepip"],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            return cand, f"Python {ver}"
    return sys.executable, (
        f"WARNING: no Python {'/'.join(versions)} found; using this interpreter "
        f"({sys.version.split()[0]})"
    )


def py_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def installed_versions(vpy: Path, names: list[str] | None = None) -> dict[str, str]:
    """Versions of ``names`` (None if absent) in the venv; every distribution if names is None.

    Local version labels (``2.13.0+cpu``) are kept in the full list and dropped for ``names``, so
    that the pin ``torch==2.13.0`` compares equal to the CPU build.
    """
    code = (
        "import json, importlib.metadata as m\n"
        f"names = {names!r}\n"
        "out = {}\n"
        "if names is None:\n"
        "    for d in m.distributions(): out[d.metadata['Name']] = d.version\n"
        "for n in names or []:\n"
        "    try: out[n] = m.version(n).split('+')[0]\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out, sort_keys=True))\n"
    )
    res = subprocess.run([str(vpy), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def pip(vpy: Path, *args: str) -> None:
    """``pip install ARGS`` into the venv of ``vpy``, by uv where ``make`` installed it
    (``tools/install.py``: the same pins, in seconds), else by pip."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import install  # tools/install.py

    cmd = ["--quiet", "--disable-pip-version-check", *args]
    log("  $ install " + " ".join(cmd))
    install.install(str(vpy), cmd)


def check_torch_source(vpy: Path, specs: list[str]) -> None:
    """Stop unless the torch pip would install is a local file or a CPU (``+cpu``) build."""
    report = vpy.parent.parent / ".torch-dry-run.json"
    cmd = [str(vpy), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    cmd += ["--dry-run", "--ignore-installed", "--report", str(report), *specs]
    log("  $ " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    items = json.loads(report.read_text())["install"]
    report.unlink()
    for item in items:
        if item["metadata"]["name"].lower() != "torch":
            continue
        url, version = item["download_info"]["url"], item["metadata"]["version"]
        if url.startswith("file:") or version.endswith("+cpu"):
            log(f"  torch {version} from {url}")
            return
        raise SystemExit(
            f"refusing to install torch {version} from {url}: not a local file nor a CPU build "
            "(a CUDA build is gigabytes). Set PIP_EXTRA_INDEX_URL="
            "https://download.pytorch.org/whl/cpu or put a CPU wheel in pip's find-links."
        )


def kvlab_dependencies() -> list[str]:
    """kvlab's declared dependencies (``[project] dependencies`` of lib/pyproject.toml)."""
    text = (ROOT / "lib" / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the whole file stands in for its dependencies
        return [text]
    return list(tomllib.loads(text)["project"]["dependencies"])


def env_key(python_version: str, pins: dict[str, str]) -> str:
    """What an environment is made from, hashed: its Python, its pins and kvlab's dependencies."""
    blob = json.dumps([python_version, pins, kvlab_dependencies()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_venv(prefix: str, python_version: str, pins: dict[str, str]) -> Path:
    """``build/<prefix>-KEY``; other keys of the same prefix (older pins) are removed."""
    venv = ROOT / "build" / f"{prefix}-{env_key(python_version, pins)}"
    for old in (ROOT / "build").glob(f"{prefix}-*"):
        if old != venv and re.fullmatch(re.escape(prefix) + "-[0-9a-f]{12}", old.name):
            log(f"removing {old.relative_to(ROOT)} (made from other pins)")
            shutil.rmtree(old)
    return venv


def kvlab_installed_from(vpy: Path, lib: Path) -> bool:
    """True when the venv has kvlab installed editable from ``lib`` (then nothing to reinstall:
    its dependencies are part of the environment's key)."""
    code = (
        "import importlib.metadata as m, json\n"
        "try: print(json.dumps(json.loads(m.distribution('kvlab').read_text('direct_url.json'))))\n"
        "except Exception: print('null')\n"
    )
    res = subprocess.run([str(vpy), "-c", code], capture_output=True, text=True, check=False)
    try:
        info = json.loads(res.stdout) or {}
    except ValueError:
        return False
    return bool(info.get("dir_info", {}).get("editable")) and info.get("url") == lib.as_uri()


def ensure_venv(venv: Path, python: str, pins: dict[str, str], recreate: bool) -> Path:
    vpy = venv / "bin" / "python"
    stamp = venv / ".colab-stamp.json"
    want = {"python": py_version(python), "pins": pins, "kvlab": kvlab_dependencies()}
    names = sorted(pins)
    shown = venv.relative_to(ROOT) if venv.is_relative_to(ROOT) else venv
    if not recreate and stamp.exists() and vpy.exists():
        try:
            if json.loads(stamp.read_text()) == want and installed_versions(vpy, names) == pins:
                log(f"reusing {shown}")
                if not kvlab_installed_from(vpy, ROOT / "lib"):
                    pip(vpy, "--no-deps", "-e", str(ROOT / "lib"))
                return vpy
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    if venv.exists():
        shutil.rmtree(venv)
    log(f"creating {shown} with {python}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip(vpy, "--upgrade", "pip")
    specs = [f"{k}=={v}" for k, v in pins.items()]
    if "torch" in pins:
        check_torch_source(vpy, specs)
    pip(vpy, *specs)
    before = installed_versions(vpy, names)
    pip(vpy, "-e", str(ROOT / "lib"))
    after = installed_versions(vpy, names)
    changed = {k: (before[k], after[k]) for k in pins if before[k] != after[k]}
    wrong = {k: (pins[k], after[k]) for k in pins if after[k] != pins[k]}
    if changed or wrong:
        raise SystemExit(f"installing lib/ changed Colab's pins: {changed or wrong}")
    # A kernelspec inside the venv, so nbclient's "python3" kernel is this venv's Python.
    subprocess.run(
        [str(vpy), "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"],
        check=True,
        capture_output=True,
    )
    stamp.write_text(json.dumps(want))
    return vpy


def colab_cell_check(vpy: Path) -> bool:
    res = subprocess.run(
        [str(vpy), str(ROOT / "tools" / "colab_cell.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if res.returncode != 0:
        log(res.stdout + res.stderr)
    return res.returncode == 0


# Runs inside the venv: argv[1] is a JSON list of jobs {"path", "colab", "until"}. For each
# notebook it finds the lab set-up cell (the first code cell that assigns one of SETUP_VARS),
# inserts after it a cell that prints those variables as one JSON line, executes the notebook
# (with "colab": an empty google.colab module in place of the Colab cell; with "until": "setup",
# up to the set-up cell, with a regular expression, up to the first code cell it matches), and
# prints one JSON line per notebook with the set-up cell's stdout and the variables.
#: A cell that runs longer than this fails the check (a hang guard, not a speed test: p22-06's
#: longest cell took over 600 s on a 2-core machine loaded about 20 deep).
CELL_TIMEOUT_S = 1800

RUNNER = (
    r"""
import ast, json, re, sys, time, traceback
import nbformat
from nbclient import NotebookClient
SETUP_VARS = SETUP_VARS_HERE
CELL_MARKER = CELL_MARKER_HERE
MARK = "COLAB_CHECK_SETUP_VARS "
FAKE_COLAB = ("# colab_check: an empty google.colab module, so the notebook takes its Colab branches\n"
              "import sys, types\n"
              "sys.modules['google.colab'] = types.ModuleType('google.colab')")
PROBE_CELL = ("import json as _cc_json\n"
              f"print({MARK!r} + _cc_json.dumps({{k: globals()[k] for k in {SETUP_VARS!r} "
              "if k in globals() and isinstance(globals()[k], (bool, int, float, str, type(None)))}))")


def assigns(source):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in SETUP_VARS:
            return True
    return False


for job in json.loads(sys.argv[1]):
    p = job["path"]
    t0 = time.perf_counter()
    nb = nbformat.read(p, as_version=4)
    err = None
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    setup_i = next((i for i in code[1:] if assigns(nb.cells[i].source)), None)
    if job["colab"]:
        first = nb.cells[code[0]]
        if not first.source.startswith(CELL_MARKER):
            err = "the first code cell is not the Colab set-up cell"
        first.source = FAKE_COLAB
    until = job["until"]
    if until == "setup":
        last = setup_i
    elif until:
        last = next((i for i in code if re.search(until, nb.cells[i].source, re.M)), None)
    if until and last is None:
        err = err or f"no cell to stop at ({until!r}) in this notebook"
    elif until:
        nb.cells = nb.cells[: last + 1]
    if setup_i is not None and setup_i < len(nb.cells):
        nb.cells.insert(setup_i + 1, nbformat.v4.new_code_cell(PROBE_CELL))
    if err is None:
        try:
            NotebookClient(nb, timeout=CELL_TIMEOUT_HERE, kernel_name="python3",
                           resources={"metadata": {"path": p.rsplit("/", 1)[0]}}).execute()
        except Exception as e:  # CellExecutionError carries the traceback text
            err = str(e)[-3000:] or traceback.format_exc()[-3000:]
    setup, setup_vars = None, None
    if setup_i is not None and setup_i + 1 < len(nb.cells):
        setup = "".join(o.get("text", "") for o in nb.cells[setup_i].get("outputs", [])
                        if o.get("output_type") == "stream")
        for o in nb.cells[setup_i + 1].get("outputs", []):
            for line in o.get("text", "").splitlines():
                if line.startswith(MARK):
                    setup_vars = json.loads(line[len(MARK):])
    print(json.dumps({"path": p, "seconds": time.perf_counter() - t0, "error": err,
                      "setup": setup, "setup_vars": setup_vars,
                      "cells": len(nb.cells), "cut": bool(until)}), flush=True)
""".replace("SETUP_VARS_HERE", repr(SETUP_VARS))
    .replace("CELL_TIMEOUT_HERE", str(CELL_TIMEOUT_S))
    .replace("CELL_MARKER_HERE", repr(COLAB_CELL_MARKER))
)


def judge_setup(
    setup_vars: dict | None, engine_venv: bool, why: str | None = None
) -> tuple[str | None, str]:
    """(error or None, the path the set-up chose) from the variables the set-up cell defined.

    In the Colab-pinned labs environment vLLM never imports (``ENGINE_HERE`` false) and there is no
    GPU (``HAS_GPU`` false). Whether the set-up chose an engine is ``ENGINE_OK`` (true: an engine
    runs) or, where the cell defines ``NO_ENGINE`` instead, ``NO_ENGINE is None`` (otherwise it is
    the reason there is none). An engine must be chosen exactly where ``engine_venv`` (where
    ``.venv-engine`` exists: the engine environment) and not elsewhere (the CPU path, as on a Colab
    runtime); ``why`` says why an engine is or is not expected (see :func:`engine_expected`).
    """
    why = why or (".venv-engine exists" if engine_venv else "no .venv-engine")
    v = setup_vars or {}
    if v.get("ENGINE_HERE"):
        return "vLLM imports in the Colab-pinned environment (ENGINE_HERE is true)", "in-process"
    if "ENGINE_OK" in v:
        engine = bool(v["ENGINE_OK"])
    elif "NO_ENGINE" in v:
        engine = v["NO_ENGINE"] is None
    elif "HAS_GPU" in v:
        if v["HAS_GPU"]:
            return "the set-up found a GPU (HAS_GPU is true) with CUDA hidden", "GPU path"
        return None, "CPU path (no GPU)"
    else:
        return (
            f"the set-up cell defines none of {', '.join(SETUP_VARS)}: which path it chose is "
            "unknown",
            "unknown",
        )
    if engine and engine_venv:
        return None, f"engine environment ({why})"
    if not engine and not engine_venv:
        return None, f"CPU path ({why}: no engine, as on a Colab runtime)"
    chose = "the engine" if engine else "no engine"
    want = "the engine environment" if engine_venv else "the CPU path"
    return f"the set-up chose {chose} ({v}) but {why}: want {want}", chose


PROBE = r"""
import importlib.util, json, sys
import numpy, pandas, matplotlib, ipywidgets, IPython, sympy
out = {"python": sys.version.split()[0], "executable": sys.executable,
    "numpy": numpy.__version__, "pandas": pandas.__version__, "matplotlib": matplotlib.__version__,
    "ipywidgets": ipywidgets.__version__, "ipython": IPython.__version__, "sympy": sympy.__version__,
    "absent": {m: importlib.util.find_spec(m) is None for m in ABSENT}}
if importlib.util.find_spec("torch"):
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.is_available()
print(json.dumps(out))
""".replace("ABSENT", repr(ABSENT))


def data_files() -> dict[str, str]:
    """sha256 of every file under data/ (the explorers' cached grids among them)."""
    return {
        str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((ROOT / "data").rglob("*"))
        if p.is_file()
    }


def is_lab(path: Path) -> bool:
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return rel.parts[:2] == ("notebooks", "labs") or (
        rel.parts[:1] == ("solutions",) and rel.name.startswith("labs-")
    )


def notebooks(folders: tuple[str, ...] = ("notebooks", "solutions")) -> list[Path]:
    out = []
    for folder in folders:
        for p in sorted((ROOT / folder).rglob("*.ipynb")):
            if ".ipynb_checkpoints" not in p.relative_to(ROOT).parts:
                out.append(p)
    return out


def run_env(
    name: str,
    vpy: Path,
    venv: Path,
    paths: list[Path],
    env: dict[str, str],
    colab: bool = False,
    until: dict[Path, str | None] | None = None,
) -> dict:
    """Probe the environment and run ``paths`` in it; return a summary dict (``ok`` and more).

    ``colab``: the notebooks get an empty ``google.colab`` module in place of their Colab cell;
    ``until``: where a notebook stops ("setup": after its set-up cell; a regular expression: after
    the first code cell it matches; None: the whole notebook)."""
    env = dict(env, JUPYTER_DATA_DIR=str(venv / "share" / "jupyter-user"))
    probe = json.loads(
        subprocess.run(
            [str(vpy), "-c", PROBE], check=True, capture_output=True, text=True, env=env
        ).stdout
    )
    log(
        f"[{name}] environment: "
        + ", ".join(f"{k} {v}" for k, v in probe.items() if k not in ("executable", "absent"))
    )
    present = [m for m, gone in probe["absent"].items() if not gone]
    if present:
        log(f"[{name}] FAIL: {present} installed in the Colab environment (Colab has none)")
        return {"ok": False, "probe": probe, "results": [], "n": len(paths)}
    packages_before = installed_versions(vpy)
    data_before = data_files()
    t0 = time.perf_counter()
    jobs = [{"path": str(p), "colab": colab, "until": (until or {}).get(p)} for p in paths]
    proc = subprocess.Popen(
        [str(vpy), "-c", RUNNER, json.dumps(jobs)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    results = []
    for line in proc.stdout:
        try:
            r = json.loads(line)
        except ValueError:
            log(line.rstrip())
            continue
        chose = None
        if r["setup"] is not None and is_lab(Path(r["path"])):
            problem, chose = judge_setup(r["setup_vars"], *engine_expected())
            if problem and not r["error"]:
                r["error"] = f"lab set-up: {problem}; its output: {r['setup']!r}"
        results.append(r)
        rel = Path(r["path"]).relative_to(ROOT)
        stop = (until or {}).get(Path(r["path"]))
        cut = ""
        if stop:
            cut = " (up to its set-up cell)" if stop == "setup" else f" (up to the cell /{stop}/)"
        log(f"[{name}] {r['seconds']:6.1f} s  {'FAIL' if r['error'] else 'ok  '}  {rel}{cut}")
        if chose:
            r["chose"] = chose
            log(f"{'':{len(name) + 18}}set-up chose: {chose}; variables {r['setup_vars']}")
        if r["setup"]:
            log(f"{'':{len(name) + 18}}set-up cell: {r['setup'].strip()}")
    proc.wait()
    seconds = time.perf_counter() - t0
    ok = proc.returncode == 0 and len(results) == len(paths)
    if not ok:
        log(f"[{name}] FAIL: the runner stopped early")
    packages_after = installed_versions(vpy)
    if packages_after != packages_before:
        diff = sorted(set(packages_after.items()) ^ set(packages_before.items()))
        log(f"[{name}] FAIL: running the notebooks changed the installed packages: {diff}")
        ok = False
    # A cache whose key differs in this environment (another Python, other versions) is recomputed
    # and written back: slow for a reader in Colab, and a change to committed files here.
    data_after = data_files()
    rewritten = sorted(
        k for k in set(data_before) | set(data_after) if data_before.get(k) != data_after.get(k)
    )
    if rewritten:
        log(
            f"[{name}] FAIL: running the notebooks rewrote {rewritten} (a cache key that differs "
            "in this environment; restore them with `git checkout -- data`)"
        )
        ok = False
    failed = [r for r in results if r["error"]]
    for r in failed:
        log(f"\n--- {Path(r['path']).relative_to(ROOT)} ---\n{r['error']}")
    return {
        "ok": ok and not failed,
        "probe": probe,
        "results": results,
        "failed": failed,
        "n": len(paths),
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="notebooks to run (default: all)")
    ap.add_argument(
        "--labs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the labs (notebooks/labs/*, solutions/labs-*) on the CPU path, in a "
        "second environment with torch (default: on)",
    )
    ap.add_argument(
        "--fast",
        action="store_true",
        help="only the notebooks whose imports differ from the book's environment (FAST), labs "
        "up to their set-up cell (make colab-check-fast)",
    )
    ap.add_argument(
        "--setup-only", action="store_true", help="run labs only up to their set-up cell"
    )
    ap.add_argument("--python", default=os.environ.get("COLAB_PYTHON"))
    ap.add_argument("--labs-python", default=os.environ.get("COLAB_LABS_PYTHON"))
    ap.add_argument("--venv", help="the Colab environment (default: build/.venv-colab-KEY)")
    ap.add_argument(
        "--labs-venv", help="the labs environment (default: build/.venv-colab-labs-KEY)"
    )
    ap.add_argument("--recreate", action="store_true", help="rebuild the environments")
    ap.add_argument(
        "--envs-only",
        action="store_true",
        help="create (or reuse) the environments and run nothing (make test makes them while it "
        "installs the book's)",
    )
    args = ap.parse_args(argv)
    if args.fast and args.paths:
        ap.error("--fast runs its own list of notebooks (FAST); give no notebooks with it")

    t_start = time.perf_counter()
    if args.fast:
        paths = [ROOT / p for p in FAST]
        until = {ROOT / p: stop for p, stop in FAST.items()}
    else:
        paths = [Path(p).resolve() for p in args.paths] or notebooks()
        until = {p: "setup" for p in paths if args.setup_only and is_lab(p)}
    # solutions/labs-* need no torch: they run in both environments.
    main_paths = [p for p in paths if not (is_lab(p) and p.parent.name == "labs")]
    lab_paths = [p for p in paths if is_lab(p)] if args.labs else []

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["MPLBACKEND"] = "agg"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # silence the debugger's frozen-modules note

    ok, summaries, t_envs = True, [], 0.0
    plan = [("colab", args.python, COLAB_PYTHONS, args.venv, ".venv-colab", PINS, main_paths)]
    if lab_paths:
        plan.append(
            (
                "labs",
                args.labs_python,
                LABS_PYTHONS,
                args.labs_venv,
                ".venv-colab-labs",
                LAB_PINS,
                lab_paths,
            )
        )
    for name, explicit, versions, venv_dir, prefix, pins, paths in plan:
        if not paths:
            continue
        t0 = time.perf_counter()
        python, note = find_python(explicit, versions)
        log(f"[{name}] python: {python} ({note})")
        if venv_dir:
            venv = Path(venv_dir).resolve()
        else:
            venv = default_venv(prefix, py_version(python), pins)
        vpy = ensure_venv(venv, python, pins, args.recreate)
        t_env = time.perf_counter() - t0
        t_envs += t_env
        if args.envs_only:
            log(f"[{name}] environment ready in {t_env:.0f} s: {venv}")
            continue
        if name == "colab":
            cell_ok = colab_cell_check(vpy)
            log(f"colab set-up cell (static check): {'ok' if cell_ok else 'FAILED'}")
            ok &= cell_ok
        labs = name == "labs"
        run_as = dict(env, CUDA_VISIBLE_DEVICES="") if labs else env
        summary = run_env(name, vpy, venv, paths, run_as, colab=labs, until=until)
        summary.update(name=name, env_seconds=t_env)
        summaries.append(summary)
        ok &= summary["ok"]

    if args.envs_only:
        return 0
    log("")
    for s in summaries:
        n_ok = len(s["results"]) - len(s.get("failed", []))
        log(
            f"[{s['name']}] {n_ok}/{s['n']} notebooks ran (Python {s['probe']['python']}"
            + (f", torch {s['probe']['torch']}" if "torch" in s["probe"] else "")
            + f"); environment {s['env_seconds']:.0f} s, notebooks {s.get('seconds', 0):.0f} s"
        )
        for r in s["results"]:
            if r.get("chose"):
                rel = Path(r["path"]).relative_to(ROOT)
                log(f"[{s['name']}] {rel}: set-up chose the {r['chose']}")
    if not args.labs:
        log("labs skipped (--no-labs)")
    if args.fast:
        log(f"fast subset: the {len(FAST)} notebooks of FAST, some up to a cell (see FAST)")
    log(f"total {time.perf_counter() - t_start:.0f} s: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
