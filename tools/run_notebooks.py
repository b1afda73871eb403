"""Execute notebooks in place (fresh kernel, top to bottom), keeping outputs for nbval.

Usage: python tools/run_notebooks.py [PATH ...]   (default: every notebook in notebooks/, solutions/)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def execute(path: Path) -> nbformat.NotebookNode:
    """Run the notebook at ``path`` in a fresh kernel, in its own folder; return it with outputs
    (the file is not touched)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return nb


def run(path: Path) -> float:
    start = time.perf_counter()
    nbformat.write(execute(path), path)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    paths = [Path(p).resolve() for p in argv] or sorted(
        p
        for folder in ("notebooks", "solutions")
        for p in (ROOT / folder).rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )
    for path in paths:
        seconds = run(path)
        print(f"{seconds:6.1f} s  {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
