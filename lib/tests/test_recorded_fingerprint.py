"""The recordings' code fingerprint follows what the measuring code does, not where it lives.

A recording (``results/<lab>-cpu-recorded.json``) is used only with the code that made it
(:func:`kvlab.measure.recording.recorded.code_fingerprint`). Moving that code into another package,
or a function into another fingerprinted module, must not throw the recordings away; changing what
a function does must.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kvlab.measure.recording import recorded

SOURCE_A = '''"""Module a."""
from . import b
from .b import helper


def run(n):
    """Run it."""
    return helper(n) + b.CONST


def main():
    print("usage: python -m kvlab.measure.a N")
'''
SOURCE_B = """from __future__ import annotations

CONST = 3


def helper(n):
    return 2 * n
"""


def _fingerprint(tmp: Path, files: dict[str, str], monkeypatch) -> str:
    shutil.rmtree(tmp, ignore_errors=True)
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    monkeypatch.setitem(recorded.MEASURING_CODE, "labX", tuple(files))
    return recorded.code_fingerprint("labX", tmp)


def test_moves_keep_the_fingerprint_and_changes_do_not(tmp_path, monkeypatch):
    base = _fingerprint(tmp_path / "old", {"a.py": SOURCE_A, "b.py": SOURCE_B}, monkeypatch)
    # a.py moved into a subpackage, its imports rewritten, its module path in a string updated
    moved_a = SOURCE_A.replace("from . import b", "from ..util import b").replace(
        "from .b import", "from ..util.b import"
    )
    moved_a = moved_a.replace("kvlab.measure.a", "kvlab.measure.pkg.a")
    moved = {"pkg/a.py": moved_a, "util/b.py": SOURCE_B}
    assert _fingerprint(tmp_path / "new", moved, monkeypatch) == base
    # helper() moved from b.py to a.py
    helper = "\n\ndef helper(n):\n    return 2 * n\n"
    both = {"a.py": SOURCE_A + helper, "b.py": SOURCE_B.replace(helper.lstrip("\n"), "")}
    assert "def helper" not in both["b.py"]
    assert _fingerprint(tmp_path / "mv", both, monkeypatch) == base
    # what the code does changed: another fingerprint
    changed = {"a.py": SOURCE_A, "b.py": SOURCE_B.replace("2 * n", "3 * n")}
    assert _fingerprint(tmp_path / "chg", changed, monkeypatch) != base
    renamed_module = {"a.py": SOURCE_A.replace("python -m", "python3 -m"), "b.py": SOURCE_B}
    assert _fingerprint(tmp_path / "cmd", renamed_module, monkeypatch) != base


def test_the_committed_recordings_match_this_code():
    import json

    for lab in recorded.MEASURING_CODE:
        path = recorded.RESULTS_DIR / f"{lab}-cpu-recorded.json"
        runs = json.loads(path.read_text())["runs"]
        assert {r["code"] for r in runs.values()} == {recorded.code_fingerprint(lab)}, lab
