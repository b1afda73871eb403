"""``tools/run_notebooks.py --check`` (how ``make test-under-load`` runs the engine labs): a
failing cell fails the run, the next notebook still runs, the lines asked for are printed also
from the notebook that failed, and nothing is written back."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import run_notebooks  # noqa: E402


def _notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


def test_check_reports_a_failing_notebook_and_runs_the_next(tmp_path, capsys):
    bad = _notebook(tmp_path / "a.ipynb", "print('timing-dependent: 93 of 100')", "assert 1 == 2")
    good = _notebook(tmp_path / "b.ipynb", "print('timing-dependent: 35 of 100')")
    before = {p: p.read_text() for p in (bad, good)}
    rc = run_notebooks.main(["--check", "--show", "timing-dependent", str(bad), str(good)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "a.ipynb: timing-dependent: 93 of 100" in out  # printed although a cell failed
    assert "FAILED after" in out and str(bad) in out
    assert "b.ipynb: timing-dependent: 35 of 100" in out
    assert {p: p.read_text() for p in (bad, good)} == before  # --check writes nothing back


def test_check_passes_when_every_notebook_does(tmp_path):
    good = _notebook(tmp_path / "b.ipynb", "x = 1", "assert x == 1")
    assert run_notebooks.main(["--check", str(good)]) == 0
