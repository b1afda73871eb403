"""kvlab's layers hold, and the check that says so can fail.

The contracts are in ``lib/pyproject.toml`` (``[tool.importlinter]``); ``make lint`` runs the same
command. The second test copies kvlab to a temporary folder, adds one import that breaks a
contract, and checks that the same command then fails and names the contract and the import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(
    config: Path, pythonpath: Path | None = None, cwd: Path = LIB
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(LINT), "--config", str(config), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def test_kvlab_keeps_its_layers():
    out = lint(LIB / "pyproject.toml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    "module, line, contract, shown",
    [
        # a calculator reaching up into a simulator
        ("calc.py", "from . import queueing", "kvlab's layers", "kvlab.calc -> kvlab.queueing"),
        # the measuring code reaching into a simulator
        (
            "measure/prefix/prompts.py",
            "from ... import fleet",
            "the measuring code uses the calculators",
            "kvlab.measure.prefix.prompts -> kvlab.fleet",
        ),
        # the serving engine importing a lab's jobs (the cycle this package once had)
        (
            "measure/serving/engine.py",
            "from ..prefix import engine_jobs",
            "measure: the labs' packages",
            "kvlab.measure.serving.engine -> kvlab.measure.prefix.engine_jobs",
        ),
        # two labs' packages importing each other
        (
            "measure/disagg/pd_split.py",
            "from ..transfer import copies",
            "measure: the labs' packages",
            "kvlab.measure.disagg.pd_split -> kvlab.measure.transfer.copies",
        ),
    ],
)
def test_a_bad_import_fails_the_check(tmp_path, module, line, contract, shown):
    shutil.copytree(LIB / "kvlab", tmp_path / "kvlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(LIB / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "kvlab" / module
    text = target.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    assert sep, f"{module} has no __future__ import to put the bad import after"
    target.write_text(head + sep + line + "  # noqa\n" + rest)
    out = lint(tmp_path / "pyproject.toml", pythonpath=tmp_path, cwd=tmp_path)
    report = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0, report
    assert f"{contract}" in report and "BROKEN" in report, report
    assert shown in report, report
