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
4. Executes every notebook under ``notebooks/`` and ``solutions/`` except ``notebooks/labs/``
   top to bottom with nbclient in that environment (cwd = the notebook's folder); outputs are not
   written back.
5. Labs (on by default; ``--no-labs`` skips them): builds a second environment,
   ``.venv-colab-labs``, with the same pins plus torch and its dependencies at Colab's versions
   (``LAB_PINS``), then kvlab, verified the same way, and runs ``notebooks/labs/*.ipynb`` and
   ``solutions/labs-*.ipynb`` in it on the CPU path (``CUDA_VISIBLE_DEVICES`` is emptied, as on a
   Colab runtime without GPU). The labs' own set-up cell (after the Colab cell) runs as written:
   it installs packages only inside Colab, and only those Colab lacks; to prove that nothing was
   installed, the environment's full package list is compared before and after the run.
6. Prints a summary with versions and timings; exits 1 on any error.

Why the labs environment uses Python 3.11, not Colab's 3.12: the labs need torch. Colab ships
torch 2.10.0+cu128 preinstalled; a CPU build is what the CPU path needs, and the only CPU torch
this project keeps on disk is ``torch-2.13.0+cpu`` for CPython 3.11 (``requirements-labs.txt``
pins torch 2.13.0). On 3.12, ``pip install torch==2.13.0`` would instead download a multi-GB CUDA
build from PyPI. So the labs environment trades the Python minor version (3.11 instead of 3.12)
for a CPU torch without that download; every other pin is Colab's. Before installing, a
``pip --dry-run`` checks that the torch pip would take is a local file or a ``+cpu`` build, and
stops otherwise (on a machine without the local wheel, set
``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``). Override the interpreter with
``--labs-python PATH`` or ``COLAB_LABS_PYTHON``.

Versions. Colab publishes its runtime's ``pip freeze`` at https://github.com/googlecolab/backend-info
(``pip-freeze.gpu.txt``; wheels there are ``cp312``, so Python 3.12). The pins below are the
Python-level packages the notebooks touch, copied from the February 2026 version of that file
(commit 4647a1d): numpy 2.0.2, pandas 2.2.2, matplotlib 3.10.0, ipywidgets 7.7.1, ipython 7.34.0,
ipykernel 6.17.1, jupyter_client 7.4.9, traitlets 5.7.1, sympy 1.14.0, tqdm 4.67.3,
nbclient 0.10.4, nbformat 5.10.4, prometheus_client 0.24.1 (and, for the labs, torch's own
dependencies). Update ``PINS`` and ``LAB_PINS`` when Colab moves (the file says what it is).

Usage: python3 tools/colab_check.py [--no-labs] [--python PATH] [--labs-python PATH] [--venv DIR]
       [--labs-venv DIR] [--recreate] [NOTEBOOK ...]
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
LABS_PYTHONS = ("3.11",)  # the local CPU torch wheel is cp311; see the docstring

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
    "prometheus_client": "0.24.1",  # kvlab.measure.prom uses its parser when present
}
# The labs environment: PINS, plus torch (not Colab's 2.10.0+cu128: the local CPU build, see the
# docstring) and torch's dependencies at Colab's versions.
LAB_PINS = {
    **PINS,
    "torch": "2.13.0",
    "filelock": "3.24.3",
    "fsspec": "2025.3.0",
    "Jinja2": "3.1.6",
    "MarkupSafe": "3.0.3",
    "mpmath": "1.3.0",
    "networkx": "3.6.1",
    "typing_extensions": "4.15.0",
}
ABSENT = ("myst_nb", "nbval")  # Colab has neither; their absence is asserted in the environment.


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
    cmd = [str(vpy), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    log("  $ " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)


def check_torch_source(vpy: Path, specs: list[str]) -> None:
    """Stop unless the torch pip would install is a local file or a CPU (``+cpu``) build."""
    report = vpy.parent.parent / ".torch-dry-run.json"
    pip(vpy, "--dry-run", "--ignore-installed", "--report", str(report), *specs)
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


def ensure_venv(venv: Path, python: str, pins: dict[str, str], recreate: bool) -> Path:
    vpy = venv / "bin" / "python"
    stamp = venv / ".colab-stamp.json"
    want = {"python": py_version(python), "pins": pins}
    names = sorted(pins)
    shown = venv.relative_to(ROOT) if venv.is_relative_to(ROOT) else venv
    if not recreate and stamp.exists() and vpy.exists():
        try:
            if json.loads(stamp.read_text()) == want and installed_versions(vpy, names) == pins:
                log(f"reusing {shown}")
                pip(vpy, "--no-deps", "-e", str(ROOT / "lib"))
                return vpy
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    if venv.exists():
        shutil.rmtree(venv)
    log(f"creating {shown} with {python}")
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


# Runs inside the venv: executes each notebook, prints one JSON line per notebook, with the
# stdout of the labs' own set-up cell (the code cell that starts "# Lab set-up"), if any.
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
    setup = None
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("# Lab set-up"):
            setup = "".join(o.get("text", "") for o in cell.get("outputs", [])
                            if o.get("output_type") == "stream")
    print(json.dumps({"path": p, "seconds": time.perf_counter() - t0, "error": err,
                      "setup": setup}), flush=True)
"""

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


def run_env(name: str, vpy: Path, venv: Path, paths: list[Path], env: dict[str, str]) -> dict:
    """Probe the environment and run ``paths`` in it; return a summary dict (``ok`` and more)."""
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
    t0 = time.perf_counter()
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
        if r["setup"] is not None and not r["error"] and "CPU path" not in r["setup"]:
            r["error"] = f"the lab set-up cell did not choose the CPU path: {r['setup']!r}"
        results.append(r)
        rel = Path(r["path"]).relative_to(ROOT)
        log(f"[{name}] {r['seconds']:6.1f} s  {'FAIL' if r['error'] else 'ok  '}  {rel}")
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
    ap.add_argument("--python", default=os.environ.get("COLAB_PYTHON"))
    ap.add_argument("--labs-python", default=os.environ.get("COLAB_LABS_PYTHON"))
    ap.add_argument("--venv", default=str(ROOT / ".venv-colab"))
    ap.add_argument("--labs-venv", default=str(ROOT / ".venv-colab-labs"))
    ap.add_argument("--recreate", action="store_true", help="rebuild the environments")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    paths = [Path(p).resolve() for p in args.paths] or notebooks()
    # solutions/labs-* need no torch: they run in both environments.
    main_paths = [p for p in paths if not (is_lab(p) and p.parent.name == "labs")]
    lab_paths = [p for p in paths if is_lab(p)] if args.labs else []

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["MPLBACKEND"] = "agg"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # silence the debugger's frozen-modules note

    ok, summaries, t_envs = True, [], 0.0
    plan = [("colab", args.python, COLAB_PYTHONS, args.venv, PINS, main_paths)]
    if lab_paths:
        plan.append(("labs", args.labs_python, LABS_PYTHONS, args.labs_venv, LAB_PINS, lab_paths))
    for name, explicit, versions, venv_dir, pins, paths in plan:
        if not paths:
            continue
        t0 = time.perf_counter()
        python, note = find_python(explicit, versions)
        log(f"[{name}] python: {python} ({note})")
        venv = Path(venv_dir).resolve()
        vpy = ensure_venv(venv, python, pins, args.recreate)
        t_env = time.perf_counter() - t0
        t_envs += t_env
        if name == "colab":
            cell_ok = colab_cell_check(vpy)
            log(f"colab set-up cell (static check): {'ok' if cell_ok else 'FAILED'}")
            ok &= cell_ok
        run_as = dict(env, CUDA_VISIBLE_DEVICES="") if name == "labs" else env
        summary = run_env(name, vpy, venv, paths, run_as)
        summary.update(name=name, env_seconds=t_env)
        summaries.append(summary)
        ok &= summary["ok"]

    log("")
    for s in summaries:
        n_ok = len(s["results"]) - len(s.get("failed", []))
        log(
            f"[{s['name']}] {n_ok}/{s['n']} notebooks ran (Python {s['probe']['python']}"
            + (f", torch {s['probe']['torch']}" if "torch" in s["probe"] else "")
            + f"); environment {s['env_seconds']:.0f} s, notebooks {s.get('seconds', 0):.0f} s"
        )
    if not args.labs:
        log("labs skipped (--no-labs)")
    log(f"total {time.perf_counter() - t_start:.0f} s: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
