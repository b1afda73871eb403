"""The notebook checks can fail: change one model constant in a copy of kvlab and nbval must object.

The book's 70B shape has 8 KV heads. A copy of ``lib/kvlab`` with 16 instead is put first on the
path of an nbval run over two notebooks whose figures rest on the KV size (the transfer page and
the assumptions table; the worked-answer notebooks carry the same figures but take minutes to run,
and this test must stay well inside its time-out on a busy 2-core machine); every KV-dependent
printed line and hidden assertion must then fail, and the untouched copy must pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ["notebooks/p22-03-transfer-and-overlap.ipynb", "notebooks/reference-assumptions.ipynb"]


def _nbval(lib_copy: Path) -> tuple[int, int, str]:
    env = dict(os.environ, PYTHONPATH=str(lib_copy))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "--nbval-lax",
        "--nbval-current-env",
        "-p",
        "no:cacheprovider",
        *NOTEBOOKS,
    ]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", tail)) else 0
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", tail)) else 0
    return failed, passed, tail


@pytest.fixture()
def lib_copy(tmp_path):
    """A copy of kvlab laid out as in the repository (``<root>/lib/kvlab``), with the repository's
    ``data/`` beside it: kvlab finds its committed data (the measured cost fit) from its own place."""
    shutil.copytree(ROOT / "lib" / "kvlab", tmp_path / "lib" / "kvlab")
    (tmp_path / "data").symlink_to(ROOT / "data", target_is_directory=True)
    return tmp_path / "lib"


def test_worked_numbers_fail_when_kv_heads_change(lib_copy):
    models = lib_copy / "kvlab" / "models.py"
    text = models.read_text()
    mutated = text.replace(
        "    kv_heads=8,\n    head_dim=128,\n    d_model=8192,",
        "    kv_heads=16,\n    head_dim=128,\n    d_model=8192,",
        1,
    )
    assert mutated != text, "the 70B shape's definition moved: update this test"
    models.write_text(mutated)
    failed, passed, tail = _nbval(lib_copy)
    assert failed >= 10, f"nbval should reject the changed KV size, got: {tail}"


def test_unchanged_copy_passes(lib_copy):
    failed, passed, tail = _nbval(lib_copy)
    assert failed == 0 and passed > 20, tail
