"""The notebooks' first cell outside Colab (issue 36, item 4): where kvlab imports it does nothing;
where it does not (a notebook from the site's workbook zip), it installs kvlab from the zip's lib/
folder, and with no lib/ above it, it says where to get kvlab. Run in a child Python in which
``import kvlab`` fails and ``subprocess.run`` only records what it was asked to run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab_cell  # noqa: E402

CHILD = r"""
import json, os, subprocess, sys
class NoKvlab:
    def find_spec(self, name, path=None, target=None):
        if name == "kvlab" or name.startswith("kvlab."):
            raise ImportError("no kvlab here")
        return None
sys.meta_path.insert(0, NoKvlab())
calls = []
subprocess.run = lambda args, **kw: calls.append([str(a) for a in args])
os.chdir(sys.argv[1])
try:
    exec(open(sys.argv[2]).read(), {"__name__": "__main__"})
    print(json.dumps({"calls": calls}))
except ImportError as e:
    print(json.dumps({"calls": calls, "error": str(e)}))
"""


def run_cell(tmp_path: Path, with_lib: bool, kvlab_missing: bool = True) -> dict:
    root = tmp_path / "kvlab-workbook"
    nb_dir = root / "notebooks" / "labs"
    nb_dir.mkdir(parents=True)
    if with_lib:
        (root / "lib").mkdir()
        (root / "lib" / "pyproject.toml").write_text("[project]\nname = 'kvlab'\n")
    cell = tmp_path / "cell.py"
    cell.write_text(colab_cell.expected_for(ROOT / "notebooks" / "labs" / "x.ipynb", "https://x"))
    child = CHILD if kvlab_missing else CHILD.replace("sys.meta_path.insert(0, NoKvlab())", "")
    out = subprocess.run(
        [sys.executable, "-c", child, str(nb_dir), str(cell)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_installs_kvlab_from_the_workbook_lib(tmp_path):
    got = run_cell(tmp_path, with_lib=True)
    assert "error" not in got, got
    assert len(got["calls"]) == 1, got
    call = got["calls"][0]
    assert call[1:4] == ["-m", "pip", "install"]
    assert Path(call[-1]) == (tmp_path / "kvlab-workbook" / "lib").resolve()


def test_says_where_to_get_kvlab_without_a_lib_folder(tmp_path):
    got = run_cell(tmp_path, with_lib=False)
    assert got["calls"] == []
    assert "download the workbook" in got["error"] and "wheel" in got["error"]


def test_does_nothing_where_kvlab_imports(tmp_path):
    got = run_cell(tmp_path, with_lib=True, kvlab_missing=False)
    assert got == {"calls": []}


def test_every_notebook_has_this_cell():
    res = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "colab_cell.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
