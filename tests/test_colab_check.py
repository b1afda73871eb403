"""tools/colab_check.py's own logic, without building its pinned environments (issue 28).

How the labs check reads which path a lab's set-up chose (``judge_setup``), and its notebook
runner: the simulated ``google.colab``, the probe of the set-up variables, the cut after a cell.
The runner is executed here in the book's environment on small temporary notebooks.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


@cache
def colab_check():
    spec = importlib.util.spec_from_file_location("colab_check", ROOT / "tools" / "colab_check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "variables, engine_venv, error, chose",
    [
        ({"ENGINE_HERE": False, "ENGINE_OK": True}, True, None, "engine environment"),
        ({"ENGINE_HERE": False, "ENGINE_OK": False}, False, None, "CPU path"),
        ({"ENGINE_HERE": False, "ENGINE_OK": False}, True, "want the engine environment", None),
        ({"ENGINE_HERE": False, "ENGINE_OK": True}, False, "want the CPU path", None),
        ({"ENGINE_HERE": True, "ENGINE_OK": True}, True, "vLLM imports", None),
        ({"ENGINE_HERE": False, "NO_ENGINE": None}, True, None, "engine environment"),
        ({"ENGINE_HERE": False, "NO_ENGINE": "no .venv-engine"}, False, None, "CPU path"),
        (
            {"ENGINE_HERE": False, "NO_ENGINE": "no model"},
            True,
            "want the engine environment",
            None,
        ),
        ({"ENGINE_HERE": False, "NO_ENGINE": None}, False, "want the CPU path", None),
        ({"HAS_GPU": False}, True, None, "CPU path"),
        ({"HAS_GPU": True}, False, "found a GPU", None),
        ({}, True, "defines none of", None),
        (None, False, "defines none of", None),
    ],
)
def test_judge_setup(variables, engine_venv, error, chose) -> None:
    problem, path = colab_check().judge_setup(variables, engine_venv)
    if error is None:
        assert problem is None and chose in path
    else:
        assert problem is not None and error in problem


def test_forcing_no_engine_expects_the_cpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    cc = colab_check()
    monkeypatch.setenv(cc.FORCE_NO_ENGINE, "1")
    assert cc.engine_expected() == (False, "KVLAB_FORCE_NO_ENGINE is set")
    problem, path = cc.judge_setup({"NO_ENGINE": "forced"}, *cc.engine_expected())
    assert problem is None and "KVLAB_FORCE_NO_ENGINE is set" in path
    monkeypatch.setenv(cc.FORCE_NO_ENGINE, "0")
    assert cc.engine_expected()[0] == cc.ENGINE_VENV.exists()


def test_fast_subset_names_existing_notebooks() -> None:
    fast = colab_check().FAST
    assert {"notebooks/p08-05-routing-demo.ipynb", "notebooks/p22-05-explorer.ipynb"} <= set(fast)
    assert fast["notebooks/labs/lab1-vllm-prefix-caching.ipynb"] == "setup"
    for path in fast:
        assert (ROOT / path).is_file(), path


def _lab(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(colab_check().COLAB_CELL_MARKER + "\nraise SystemExit('cloned')"),
        nbformat.v4.new_markdown_cell("# A lab"),
        nbformat.v4.new_code_cell(
            "# Lab set-up: wording that the check does not read\n"
            "import sys\n"
            "IN_COLAB = 'google.colab' in sys.modules\n"
            "ENGINE_HERE = False\n"
            "ENGINE_OK = not IN_COLAB\n"
            "print('whatever the cell says')"
        ),
        nbformat.v4.new_code_cell("raise RuntimeError('past the set-up cell')"),
    ]
    nbformat.write(nb, path)
    return path


def _run(jobs: list[dict]) -> list[dict]:
    res = subprocess.run(
        [sys.executable, "-c", colab_check().RUNNER, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def test_runner_simulates_colab_reads_the_setup_and_stops_there(tmp_path: Path) -> None:
    lab = str(_lab(tmp_path / "lab.ipynb"))
    cut, whole = _run(
        [
            {"path": lab, "colab": True, "until": "setup"},
            {"path": lab, "colab": True, "until": None},
        ]
    )
    # the Colab cell was replaced (it would have raised), the set-up saw google.colab, and the
    # variables came back whatever the cell printed
    assert cut["error"] is None, cut["error"]
    assert cut["setup"] == "whatever the cell says\n"
    assert cut["setup_vars"] == {"ENGINE_HERE": False, "ENGINE_OK": False}
    assert colab_check().judge_setup(cut["setup_vars"], False)[0] is None
    # without the cut the next cell runs (and fails): the cut is what stopped it
    assert "past the set-up cell" in whole["error"]


def test_runner_without_colab_runs_the_colab_cell_and_reports_a_missing_stop(
    tmp_path: Path,
) -> None:
    lab = str(_lab(tmp_path / "lab.ipynb"))
    plain, missing = _run(
        [
            {"path": lab, "colab": False, "until": "setup"},
            {"path": lab, "colab": False, "until": "no such cell"},
        ]
    )
    assert "cloned" in plain["error"]  # the first cell ran as written
    assert "no cell to stop at" in missing["error"]


def test_the_runner_checks_the_current_set_up_cell() -> None:
    """The labs' runner knows a notebook's set-up cell by the first line tools/colab_cell.py
    writes (it once kept an older first line, and every lab failed the check)."""
    spec = importlib.util.spec_from_file_location("colab_cell", ROOT / "tools" / "colab_cell.py")
    assert spec and spec.loader
    cell = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cell)
    mod = colab_check()
    assert mod.COLAB_CELL_MARKER == cell.MARKER
    assert repr(cell.MARKER) in mod.RUNNER and "CELL_MARKER_HERE" not in mod.RUNNER
    lab1 = nbformat.read(ROOT / "notebooks/labs/lab1-vllm-prefix-caching.ipynb", as_version=4)
    first = next(c for c in lab1.cells if c.cell_type == "code")
    assert first.source.startswith(mod.COLAB_CELL_MARKER)
