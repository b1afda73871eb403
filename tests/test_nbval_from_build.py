"""nbval on the build's executed notebooks (tools/nbval_from_build.py) can fail, like nbval itself.

``make test`` checks notebooks once: the strict build executes them, then nbval compares the
committed outputs with the executed copies under ``_build/jupyter_execute``. These tests show that
this comparison rejects a changed model constant (the same mutation as
``test_checks_can_fail.py``), a changed printed line, a cell that raised, and a missing or stale
copy, and that it passes on an identical one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKED = "notebooks/p08-04-worked-answer.ipynb"


def _run(root: Path, executed: Path, *notebooks: str) -> tuple[int, int, str]:
    # wide lines: pytest's summary then keeps each error's whole message (the tail read below)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"), COLUMNS="1000")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "nbval_from_build",
        "--nbval-lax",
        "--nbval-outputs-from",
        str(executed),
        "--rootdir",
        str(root),
        *notebooks,
    ]
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout.strip()
    tail = out.splitlines()[-1] if out else run.stderr[-800:]
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", tail)) else 0
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", tail)) else 0
    errors = int(m.group(1)) if (m := re.search(r"(\d+) error", tail)) else 0
    return failed + errors, passed, out[-3000:] + run.stderr[-1500:]


@pytest.fixture()
def tree(tmp_path):
    """A copy of one committed notebook, and its 'executed' copy under exec/ (identical)."""
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / WORKED, tmp_path / WORKED)
    (tmp_path / "exec" / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / WORKED, tmp_path / "exec" / WORKED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


def _checked_cells(nb) -> list:
    return [
        c
        for c in nb.cells
        if c.cell_type == "code"
        and ("nbval-check-output" in c.metadata.get("tags", []) or "NBVAL_CHECK_OUTPUT" in c.source)
        and c.outputs
    ]


def test_identical_copy_passes(tree):
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed == 0 and passed > 5, out


def test_changed_printed_line_fails(tree):
    path = tree / "exec" / WORKED
    nb = nbformat.read(path, as_version=4)
    cell = _checked_cells(nb)[0]
    stream = next(o for o in cell.outputs if o.output_type == "stream")
    stream.text = stream.text.replace("0", "9", 1) if "0" in stream.text else stream.text + "x"
    nbformat.write(nb, path)
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed == 1, out
    assert "Cell outputs differ" in out


def test_whitespace_of_merged_streams_passes(tree):
    """What myst-nb's stream merging does to a printout (a line broken where a chunk ended, a
    blank line more, trailing spaces gone) is not a difference; the changed digit above is."""
    path = tree / "exec" / WORKED
    nb = nbformat.read(path, as_version=4)
    cells = _checked_cells(nb)
    for cell in cells:
        for o in cell.outputs:
            if o.output_type == "stream" and " " in o.text.strip():
                o.text = o.text.replace(" ", "\n", 1).rstrip() + "\n\n"
    nbformat.write(nb, path)
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed == 0 and passed > 5, out


def test_streams_merged_in_place_by_mystnb_pass(tree):
    """myst-nb's stream merging (nb_merge_streams) writes the whole text into the first stream
    output and leaves the later ones in the executed copy: not a difference, and not counted twice.
    """
    from myst_nb.core.utils import coalesce_streams

    path = tree / "exec" / WORKED
    nb = nbformat.read(path, as_version=4)
    merged = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and sum(o.output_type == "stream" for o in cell.outputs) > 1:
            coalesce_streams(cell.outputs)  # mutates the first stream, keeps the list as it was
            merged += 1
    assert merged, "the worked answer has no cell printing in several chunks: pick another"
    nbformat.write(nb, path)
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed == 0 and passed > 5, out


def test_cell_that_raised_in_the_build_fails(tree):
    path = tree / "exec" / WORKED
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and not c.outputs)
    cell.outputs = [
        nbformat.v4.new_output("error", ename="ValueError", evalue="boom", traceback=["boom"])
    ]
    nbformat.write(nb, path)
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed == 1, out
    assert "exception in the build" in out


def test_stale_copy_fails(tree):
    path = tree / "exec" / WORKED
    nb = nbformat.read(path, as_version=4)
    _checked_cells(nb)[0].source += "\n# edited after the build"
    nbformat.write(nb, path)
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed == 1 and "stale" in out, out


def test_missing_copy_says_build_first(tree):
    (tree / "exec" / WORKED).unlink()
    failed, passed, out = _run(tree, tree / "exec", WORKED)
    assert failed >= 1 and "make book" in out, out


def test_changed_model_constant_fails(tmp_path):
    """The build's execution with 16 KV heads instead of 8: every KV-dependent checked line of the
    worked answer must differ from the committed one."""
    lib_copy = tmp_path / "lib"
    shutil.copytree(ROOT / "lib" / "kvlab", lib_copy / "kvlab")
    models = lib_copy / "kvlab" / "models.py"
    text = models.read_text()
    mutated = text.replace(
        "    kv_heads=8,\n    head_dim=128,\n    d_model=8192,",
        "    kv_heads=16,\n    head_dim=128,\n    d_model=8192,",
        1,
    )
    assert mutated != text, "the 70B shape's definition moved: update this test"
    models.write_text(mutated)
    executed = tmp_path / "exec"
    (executed / "notebooks").mkdir(parents=True)
    # executed as the build does, but carrying on past the hidden checks that now fail
    script = (
        "import sys, nbformat; from nbclient import NotebookClient; "
        "nb = nbformat.read(sys.argv[1], as_version=4); "
        "NotebookClient(nb, timeout=300, kernel_name='python3', allow_errors=True, "
        "resources={'metadata': {'path': sys.argv[3]}}).execute(); "
        "nbformat.write(nb, sys.argv[2])"
    )
    env = dict(os.environ, PYTHONPATH=str(lib_copy))
    subprocess.run(
        [sys.executable, "-c", script, str(ROOT / WORKED), str(executed / WORKED)]
        + [str((ROOT / WORKED).parent)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    failed, passed, out = _run(ROOT, executed, WORKED)
    assert failed >= 5, out
    json.loads((executed / WORKED).read_text())  # the executed copy is a notebook
