"""Lab 3's measuring code after the split of ``pd_split``: every module of ``kvlab.measure.disagg``
that runs engines is fingerprinted for Lab 3's recording, ``pd_split`` holds no code of its own
and still names everything it named, and the committed recording matches the code (the same check
for every lab is in ``test_recorded_fingerprint.py``; this one says which lab broke).
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

from kvlab.measure.disagg import pd_split
from kvlab.measure.recording import recorded

DISAGG = Path(pd_split.__file__).parent
#: The modules ``pd_split`` re-exports, each holding one part of what it once held itself.
PARTS = (
    "engine_config",
    "connector_files",
    "engine_process",
    "split_results",
    "file_split",
    "nixl_split",
    "token_match",
)


def test_every_disagg_module_is_fingerprinted_for_lab3():
    listed = set(recorded.MEASURING_CODE["lab3"])
    here = {f"disagg/{p.name}" for p in DISAGG.glob("*.py")}
    missing = here - listed - {"disagg/__init__.py", "disagg/pd_split.py"}
    assert not missing, f"add {sorted(missing)} to MEASURING_CODE['lab3']"


def test_pd_split_holds_no_code():
    """Its code would not be fingerprinted (it is not in MEASURING_CODE): only imports of its
    sibling modules and ``__all__``."""
    tree = ast.parse(Path(pd_split.__file__).read_text())
    for stmt in tree.body[1:]:  # after the docstring
        if isinstance(stmt, ast.ImportFrom):
            assert stmt.module == "__future__" or stmt.level == 1, ast.unparse(stmt)
        else:
            assert isinstance(stmt, ast.Assign), ast.unparse(stmt)
            assert [t.id for t in stmt.targets if isinstance(t, ast.Name)] == ["__all__"]


def test_pd_split_names_every_public_name_of_its_parts():
    names = set()
    for part in PARTS:
        module = importlib.import_module(f"kvlab.measure.disagg.{part}")
        tree = ast.parse(Path(module.__file__).read_text())
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.ClassDef):
                found = [stmt.name]
            elif isinstance(stmt, ast.Assign):
                found = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                found = [stmt.target.id]
            else:
                continue
            for name in found:
                if not name.startswith("_"):
                    names.add(name)
                    assert getattr(pd_split, name) is getattr(module, name), name
    assert sorted(pd_split.__all__) == sorted(names)
    # the names the lab notebook, tools/record_gpu.py and the tests use, among others
    for used in ("run_file_split", "run_nixl_split", "FileSplit", "NixlSplit", "gpu_here"):
        assert used in names


def test_the_committed_lab3_recording_matches_this_code():
    runs = json.loads((recorded.RESULTS_DIR / "lab3-cpu-recorded.json").read_text())["runs"]
    assert runs, "no Lab 3 runs recorded"
    assert {r["code"] for r in runs.values()} == {recorded.code_fingerprint("lab3")}
