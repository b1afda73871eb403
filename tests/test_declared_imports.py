"""Every package a notebook or kvlab imports is declared by kvlab or carried by Colab's pins.

A notebook runs in Colab after ``pip install -e lib``: what it imports, itself or through the
kvlab modules it imports (followed transitively, lazy imports inside functions included: the
explorers import Altair inside a function), must be either one of kvlab's required dependencies
(``[project] dependencies`` of ``lib/pyproject.toml``, which pip installs there) or a package
Colab's runtime already has at the version ``tools/colab_check.py`` pins (``PINS``). The labs may
also use ``LAB_PINS`` (torch) and kvlab's extras: their engine-side code runs only where an engine
was installed (``engine``, ``gpu``). kvlab itself declares every package it imports, in its
required dependencies or one of its extras (``labs``, ``gpu``, ``engine``, ``book``). Imports
inside ``try`` blocks that catch ``ImportError`` are optional for a notebook (it runs without
them); kvlab must still declare them somewhere.

Import names are mapped to distributions with ``importlib.metadata.packages_distributions`` (the
packages installed where the test runs); a module installed nowhere here is taken to be its own
distribution name (``vllm``, ``nixl``), except the few in ``NOT_INSTALLED``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Import names of packages not installed in the book's environment whose distribution is named
# differently (they live in .venv-engine or on GPU machines).
NOT_INSTALLED = {"pynvml": "nvidia-ml-py"}
OPTIONAL_ERRORS = {"ImportError", "ModuleNotFoundError"}


def normalize(name: str) -> str:
    """PEP 503 form of a distribution name: ``Jinja2`` -> ``jinja2``, ``rpds_py`` -> ``rpds-py``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert m, req
    return normalize(m.group(1))


@cache
def colab_check():
    spec = importlib.util.spec_from_file_location("colab_check", ROOT / "tools" / "colab_check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def declared(pyproject: Path = ROOT / "lib" / "pyproject.toml") -> tuple[set[str], set[str]]:
    """(required, required + every extra) distribution names kvlab declares."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    required = {requirement_name(r) for r in project["dependencies"]}
    extras = {
        requirement_name(r) for reqs in project["optional-dependencies"].values() for r in reqs
    }
    return required, required | extras


@cache
def _installed_map() -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in importlib.metadata.packages_distributions().items()}


def distributions(module: str) -> set[str]:
    """The distributions that may provide top-level ``module`` (normalized names)."""
    found = _installed_map().get(module)
    if found:
        return {normalize(d) for d in found}
    return {normalize(NOT_INSTALLED.get(module, module))}


@dataclass(frozen=True)
class Import:
    module: str  # top-level name
    where: str  # file, cell and line
    optional: bool  # inside a try that catches ImportError


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in OPTIONAL_ERRORS for n in names)


def imports_of(source: str, where: str) -> list[Import]:
    """Absolute imports in ``source`` (IPython magics and shell lines dropped)."""
    tree = ast.parse(_strip_magics(source))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            out.append(Import(name.split(".")[0], f"{where}:{node.lineno}", id(node) in guarded))
    return out


def notebook_imports(path: Path) -> list[Import]:
    """The notebook's own imports, then those of every kvlab module it reaches (``where`` names
    the module: ``kvlab.explorer:409``)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    out, reached = [], set()
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            out += imports_of(src, f"cell {i}")
            reached |= kvlab_imported(_strip_magics(src), "", False)
    for mod in sorted(kvlab_closure(reached)):
        out += _module_scan(mod)[1]
    return out


def is_third_party(module: str) -> bool:
    return module not in sys.stdlib_module_names and module not in ("kvlab", "__future__")


def kvlab_file(module: str, lib: Path = ROOT / "lib") -> Path | None:
    """The source file of kvlab module ``module`` (``kvlab.measure.serving.engine``), None if not one."""
    base = lib.joinpath(*module.split("."))
    for cand in (base / "__init__.py", base.with_suffix(".py")):
        if cand.is_file():
            return cand
    return None


def kvlab_imported(source: str, module: str, is_package: bool) -> set[str]:
    """kvlab modules that ``source`` (of ``module``; a notebook: ``""``) imports, relative ones
    resolved; ``from kvlab import x`` yields ``kvlab`` and ``kvlab.x``."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "kvlab"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = base + ("." + node.module if node.module else "")
            elif node.module and node.module.split(".")[0] == "kvlab":
                target = node.module
            else:
                continue
            out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names}
    return {m for m in out if kvlab_file(m)}


@cache
def _module_scan(module: str) -> tuple[frozenset[str], tuple[Import, ...]]:
    """(kvlab modules it imports, its imports) for kvlab module ``module``, parsed once."""
    path = kvlab_file(module)
    assert path, module
    src = path.read_text(encoding="utf-8")
    return frozenset(kvlab_imported(src, module, path.name == "__init__.py")), tuple(
        imports_of(src, module)
    )


def kvlab_closure(start: set[str]) -> set[str]:
    """Every kvlab module that importing ``start`` can reach (parents packages included)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        mod = todo.pop()
        if mod in seen or not kvlab_file(mod):
            continue
        seen.add(mod)
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += _module_scan(mod)[0]
    return seen


def _strip_magics(source: str) -> str:
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())


def undeclared(
    notebooks: list[Path],
    modules: list[Path],
    pyproject: Path = ROOT / "lib" / "pyproject.toml",
    root: Path = ROOT,
    pins: dict[str, str] | None = None,
    lab_pins: dict[str, str] | None = None,
) -> list[str]:
    """One line per import that is neither declared by kvlab nor carried by Colab's pins
    (``colab_check.PINS`` and ``LAB_PINS`` unless given)."""
    required, everything = declared(pyproject)
    colab = {normalize(k) for k in (colab_check().PINS if pins is None else pins)}
    colab_labs = {normalize(k) for k in (colab_check().LAB_PINS if lab_pins is None else lab_pins)}
    problems = []
    for nb in notebooks:
        rel = nb.relative_to(root) if nb.is_relative_to(root) else nb
        lab = rel.parts[:2] == ("notebooks", "labs") or rel.name.startswith("labs-")
        allowed = (everything | colab_labs) if lab else (required | colab)
        for imp in notebook_imports(nb):
            if imp.optional or not is_third_party(imp.module):
                continue
            if not distributions(imp.module) & allowed:
                problems.append(
                    f"{rel}: {imp.where}: imports {imp.module} ({', '.join(distributions(imp.module))}): "
                    + (
                        "declared by kvlab nowhere and not in Colab's LAB_PINS"
                        if lab
                        else "not a required kvlab dependency and not in Colab's PINS"
                    )
                )
    for py in modules:
        for imp in imports_of(py.read_text(encoding="utf-8"), str(py.relative_to(root))):
            if is_third_party(imp.module) and not distributions(imp.module) & everything:
                problems.append(
                    f"{imp.where}: imports {imp.module} ({', '.join(distributions(imp.module))}): "
                    "declared neither in kvlab's dependencies nor in any of its extras"
                )
    return problems


def repo_notebooks() -> list[Path]:
    return [
        p
        for folder in ("notebooks", "solutions")
        for p in sorted((ROOT / folder).rglob("*.ipynb"))
        if ".ipynb_checkpoints" not in p.parts
    ]


def kvlab_modules() -> list[Path]:
    return sorted((ROOT / "lib" / "kvlab").rglob("*.py"))


def test_repository_imports_are_declared_or_pinned() -> None:
    nbs, mods = repo_notebooks(), kvlab_modules()
    assert len(nbs) > 30 and len(mods) > 30  # the scan found the files
    assert undeclared(nbs, mods) == []


def test_altair_is_declared_and_pinned_at_colabs_version() -> None:
    required, _ = declared()
    assert "altair" in required
    assert colab_check().PINS["altair"] == "5.5.0"  # googlecolab/backend-info, see colab_check


def _notebook(path: Path, *cells: str) -> Path:
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": src,
                "outputs": [],
                "execution_count": None,
            }
            for src in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_an_undeclared_import_in_a_notebook_fails(tmp_path: Path) -> None:
    # requests is installed here (so the name maps to a distribution) but kvlab does not declare
    # it and the Colab pins do not carry it: a notebook importing it would fail after the install
    assert "requests" not in {normalize(k) for k in colab_check().PINS}
    bad = _notebook(tmp_path / "p99-bad.ipynb", "import numpy as np\nimport requests\n")
    problems = undeclared([bad], [], root=tmp_path)
    assert problems == [
        "p99-bad.ipynb: cell 0:2: imports requests (requests): not a required kvlab dependency "
        "and not in Colab's PINS"
    ]


def test_an_import_reached_through_kvlab_counts(tmp_path: Path) -> None:
    # p08-05 imports altair only through kvlab.explorer (inside a function). With altair in an
    # extra instead of the required dependencies, and Colab not carrying it (the state before
    # issue 28), the notebook's import is reported; kvlab's own declaration is then fine.
    text = (ROOT / "lib" / "pyproject.toml").read_text(encoding="utf-8")
    moved = text.replace('"altair>=5.5",', "").replace(
        'book = ["myst-nb>=1.0"]', 'book = ["myst-nb>=1.0", "altair>=5.5"]'
    )
    assert moved != text
    (tmp_path / "pyproject.toml").write_text(moved, encoding="utf-8")
    no_altair = {k: v for k, v in colab_check().PINS.items() if k != "altair"}
    nb = ROOT / "notebooks" / "p08-05-routing-demo.ipynb"
    problems = undeclared([nb], [], pyproject=tmp_path / "pyproject.toml", pins=no_altair)
    assert problems and all(": kvlab.explorer:" in p and "imports altair" in p for p in problems), (
        problems
    )
    mods = kvlab_modules()
    assert undeclared([], mods, pyproject=tmp_path / "pyproject.toml", pins=no_altair) == []
    # either declaring it or Colab carrying it is enough
    assert undeclared([nb], [], pins=no_altair) == []
    assert undeclared([nb], [], pyproject=tmp_path / "pyproject.toml") == []


def test_a_guarded_import_in_a_notebook_is_optional(tmp_path: Path) -> None:
    ok = _notebook(
        tmp_path / "p99-ok.ipynb",
        "%matplotlib inline\ntry:\n    import requests\nexcept ImportError:\n    requests = None\n",
        "from IPython.display import HTML\nimport altair\n",
    )
    assert undeclared([ok], [], root=tmp_path) == []


def test_torch_is_pinned_for_labs_only(tmp_path: Path) -> None:
    (tmp_path / "notebooks" / "labs").mkdir(parents=True)
    lab = _notebook(tmp_path / "notebooks" / "labs" / "lab9.ipynb", "import torch\n")
    page = _notebook(tmp_path / "notebooks" / "p99.ipynb", "import torch\n")
    problems = undeclared([lab, page], [], root=tmp_path)
    assert len(problems) == 1 and problems[0].startswith("notebooks/p99.ipynb"), problems


def test_an_undeclared_import_in_kvlab_fails(tmp_path: Path) -> None:
    mod = tmp_path / "kvlab" / "newthing.py"
    mod.parent.mkdir()
    mod.write_text(
        "import numpy\n\n\ndef f():\n    import requests  # lazy, still needs declaring\n"
    )
    problems = undeclared([], [mod], root=tmp_path)
    assert problems == [
        "kvlab/newthing.py:5: imports requests (requests): declared neither in kvlab's "
        "dependencies nor in any of its extras"
    ]


def test_the_declarations_come_from_pyproject(tmp_path: Path) -> None:
    # dropping altair from a copy of pyproject.toml makes the explorers' import undeclared
    text = (ROOT / "lib" / "pyproject.toml").read_text(encoding="utf-8")
    assert '"altair>=5.5",' in text
    copy = tmp_path / "pyproject.toml"
    copy.write_text(text.replace('"altair>=5.5",', ""), encoding="utf-8")
    problems = undeclared([], kvlab_modules(), pyproject=copy)
    assert problems and all("imports altair" in p for p in problems), problems


@pytest.mark.parametrize("module, dist", [("yaml", "pyyaml"), ("IPython", "ipython")])
def test_import_names_map_to_distributions(module: str, dist: str) -> None:
    assert dist in distributions(module)
