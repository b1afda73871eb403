"""Run every notebook in an environment with Google Colab's package versions (``make colab-check``).

What it does, from a fresh clone (it needs only ``python3`` and access to PyPI):

1. Finds a Python like Colab's (3.12; then 3.13; else the interpreter running this script, with a
   warning). Looked for on PATH (``python3.12``) and under ``~/.pyenv/versions/3.12*``; override
   with ``--python PATH`` or the environment variable ``COLAB_PYTHON``.
2. Creates ``.venv-colab`` (reused on later runs when the Python and the pins are unchanged) and
   installs the pins below FIRST, then ``pip install -e lib`` (kvlab declares loose lower bounds
   only), and verifies that installing kvlab changed none of the pinned versions. There is no
   myst-nb and no nbval in this environment, as on Colab: notebooks glue through ``kvlab.glue``.
3. Checks statically that every notebook's first cell is the current Colab set-up cell
   (``tools/colab_cell.py --check``). Running that cell for real would ``git clone`` the
   repository, so it is not simulated with a fake ``google.colab`` module; outside Colab the cell
   does nothing, and it is executed like the rest (which also checks it parses under this Python).
4. Executes every notebook under ``notebooks/`` and ``solutions/`` top to bottom with nbclient in
   that environment (cwd = the notebook's folder), skipping ``notebooks/labs/`` unless ``--labs``;
   outputs are not written back. Prints a summary with timings; exits 1 on any error.

Versions. Colab publishes its runtime's ``pip freeze`` at https://github.com/googlecolab/backend-info
(``pip-freeze.gpu.txt``; wheels there are ``cp312``, so Python 3.12). The pins below are the
Python-level packages the notebooks touch, copied from the February 2026 version of that file
(commit 4647a1d): numpy 2.0.2, pandas 2.2.2, matplotlib 3.10.0, ipywidgets 7.7.1, ipython 7.34.0,
ipykernel 6.17.1, jupyter_client 7.4.9, traitlets 5.7.1, sympy 1.14.0, tqdm 4.67.3,
nbclient 0.10.4, nbformat 5.10.4. Update ``PINS`` when Colab moves (the file says what it is).

Usage: python3 tools/colab_check.py [--labs] [--python PATH] [--venv DIR] [--recreate] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLAB_PYTHONS = ("3.12", "3.13")

# From googlecolab/backend-info pip-freeze.gpu.txt (February 2026, Python 3.12).
PINS = {
    "numpy": "2.0.2",
    "pandas": "2.2.2",
    "matplotlib": "3.10.0",
    "ipywidgets": "7.7.1",
    "notebook": "6.5.7",  # widgetsnbextension 3 needs notebook; unpinned, pip takes 7 + jupyterlab
    "nbclassic": "1.3.3",
    "jupyter_server": "2.14.0",
    "widgetsnbextension": "3.6.10",
    "jupyterlab_widgets": "3.0.16",
    "ipython": "7.34.0",
    "ipykernel": "6.17.1",
    "jupyter_client": "7.4.9",
    "jupyter_core": "5.9.1",
    "traitlets": "5.7.1",
    "matplotlib-inline": "0.2.1",
    "tornado": "6.5.1",
    "pyzmq": "26.2.1",
    "sympy": "1.14.0",
    "tqdm": "4.67.3",
    "nbclient": "0.10.4",
    "nbformat": "5.10.4",
    "PyYAML": "6.0.3",
    "xxhash": "3.6.0",
    "python-dateutil": "2.9.0.post0",
    "pytz": "2025.2",
    "tzdata": "2025.3",
}
ABSENT = ("myst_nb", "nbval")  # Colab has neither; their absence is asserted in the environment.


def log(msg: str) -> None:
    print(msg, flush=True)


def find_python(explicit: str | None) -> tuple[str, str]:
    """Return (path, note): a Python like Colab's, or this interpreter with a warning."""
    if explicit:
        return explicit, "given"
    for ver in COLAB_PYTHONS:
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
            return cand, f"Python {ver} (as Colab)"
    return sys.executable, (
        "WARNING: no Python 3.12/3.13 found; using this interpreter "
        f"({sys.version.split()[0]}), which is not Colab's"
    )


def py_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def installed_versions(vpy: Path) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m\n"
        f"names = {sorted(PINS)!r}\n"
        "out = {}\n"
        "for n in names:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([str(vpy), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def pip(vpy: Path, *args: str) -> None:
    cmd = [str(vpy), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    log("  $ " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)


def ensure_venv(venv: Path, python: str, recreate: bool) -> Path:
    vpy = venv / "bin" / "python"
    stamp = venv / ".colab-stamp.json"
    want = {"python": py_version(python), "pins": PINS}
    if not recreate and stamp.exists() and vpy.exists():
        try:
            if json.loads(stamp.read_text()) == want and installed_versions(vpy) == PINS:
                log(f"reusing {venv.relative_to(ROOT) if venv.is_relative_to(ROOT) else venv}")
                pip(vpy, "--no-deps", "-e", str(ROOT / "lib"))
                return vpy
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    if venv.exists():
        shutil.rmtree(venv)
    log(f"creating {venv} with {python}")
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip(vpy, "--upgrade", "pip")
    pip(vpy, *[f"{k}=={v}" for k, v in PINS.items()])
    before = installed_versions(vpy)
    pip(vpy, "-e", str(ROOT / "lib"))
    after = installed_versions(vpy)
    changed = {k: (before[k], after[k]) for k in PINS if before[k] != after[k]}
    wrong = {k: (PINS[k], after[k]) for k in PINS if after[k] != PINS[k]}
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


# Runs inside the venv: executes each notebook, prints one JSON line per notebook.
RUNNER = r"""
import json, sys, time, traceback
import nbformat
from nbclient import NotebookClient
paths = sys.argv[1:]
for p in paths:
    t0 = time.perf_counter()
    nb = nbformat.read(p, as_version=4)
    err = None
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": p.rsplit("/", 1)[0]}}).execute()
    except Exception as e:  # CellExecutionError carries the traceback text
        err = str(e)[-3000:] or traceback.format_exc()[-3000:]
    print(json.dumps({"path": p, "seconds": time.perf_counter() - t0, "error": err}), flush=True)
"""

PROBE = r"""
import importlib.util, json, sys
import numpy, pandas, matplotlib, ipywidgets, IPython, sympy
print(json.dumps({"python": sys.version.split()[0], "executable": sys.executable,
    "numpy": numpy.__version__, "pandas": pandas.__version__, "matplotlib": matplotlib.__version__,
    "ipywidgets": ipywidgets.__version__, "ipython": IPython.__version__, "sympy": sympy.__version__,
    "absent": {m: importlib.util.find_spec(m) is None for m in ABSENT}}))
""".replace("ABSENT", repr(ABSENT))


def notebooks(labs: bool) -> list[Path]:
    out = []
    for folder in ("notebooks", "solutions"):
        for p in sorted((ROOT / folder).rglob("*.ipynb")):
            rel = p.relative_to(ROOT)
            if ".ipynb_checkpoints" in rel.parts:
                continue
            if not labs and rel.parts[:2] == ("notebooks", "labs"):
                continue
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="notebooks to run (default: all non-lab ones)")
    ap.add_argument("--labs", action="store_true", help="also run notebooks/labs/*")
    ap.add_argument("--python", default=os.environ.get("COLAB_PYTHON"))
    ap.add_argument("--venv", default=str(ROOT / ".venv-colab"))
    ap.add_argument("--recreate", action="store_true", help="rebuild the environment")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    python, note = find_python(args.python)
    log(f"python: {python} ({note})")
    vpy = ensure_venv(Path(args.venv).resolve(), python, args.recreate)
    t_env = time.perf_counter() - t_start

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["JUPYTER_DATA_DIR"] = str(Path(args.venv).resolve() / "share" / "jupyter-user")
    env["MPLBACKEND"] = "agg"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # silence the debugger's frozen-modules note
    probe = json.loads(
        subprocess.run(
            [str(vpy), "-c", PROBE], check=True, capture_output=True, text=True, env=env
        ).stdout
    )
    log(
        "environment: "
        + ", ".join(f"{k} {v}" for k, v in probe.items() if k not in ("executable", "absent"))
    )
    present = [m for m, gone in probe["absent"].items() if not gone]
    if present:
        log(f"FAIL: {present} installed in the Colab environment (Colab has none of them)")
        return 1

    ok = colab_cell_check(vpy)
    log(f"colab set-up cell (static check): {'ok' if ok else 'FAILED'}")

    paths = [Path(p).resolve() for p in args.paths] or notebooks(args.labs)
    proc = subprocess.Popen(
        [str(vpy), "-c", RUNNER, *map(str, paths)],
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
        results.append(r)
        rel = Path(r["path"]).relative_to(ROOT)
        log(f"{r['seconds']:6.1f} s  {'FAIL' if r['error'] else 'ok  '}  {rel}")
    proc.wait()
    failed = [r for r in results if r["error"]]
    for r in failed:
        log(f"\n--- {Path(r['path']).relative_to(ROOT)} ---\n{r['error']}")
    total = time.perf_counter() - t_start
    log(
        f"\n{len(results) - len(failed)}/{len(paths)} notebooks ran in Colab's versions "
        f"(Python {probe['python']}); environment {t_env:.0f} s, total {total:.0f} s"
    )
    if proc.returncode != 0 or len(results) != len(paths):
        log("FAIL: the runner stopped early")
        return 1
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
