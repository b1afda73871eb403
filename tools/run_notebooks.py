"""Execute notebooks in place (fresh kernel, top to bottom), keeping outputs for nbval.

Usage: python tools/run_notebooks.py [--check] [--show REGEX] [PATH ...]
       (default: every notebook in notebooks/, solutions/)

``--check`` executes without writing the outputs back; a notebook with a failing cell (such as a
hidden assert) is reported and the next one still runs, and the exit status is 1: ``make
test-under-load`` runs the engine labs this way. ``--show REGEX``
prints every line of the executed notebooks' text output that the expression finds.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def execute(path: Path, nb: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """Run the notebook at ``path`` (or ``nb``, read from it) in a fresh kernel, in its own folder;
    return it with outputs (the file is not touched). A failing cell raises, and ``nb`` keeps the
    outputs of every cell run until then."""
    if nb is None:
        nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return nb


def run(path: Path, write: bool = True, show: re.Pattern | None = None) -> float:
    start = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    try:
        execute(path, nb)
    finally:  # what the notebook printed, also when a cell failed
        if show is not None:
            for line in output_lines(nb):
                if show.search(line):
                    print(f"  {path.name}: {line}", flush=True)
    if write:
        nbformat.write(nb, path)
    return time.perf_counter() - start


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def output_lines(nb: nbformat.NotebookNode) -> list[str]:
    """Every line the notebook's code cells printed (stream outputs and plain-text results)."""
    lines: list[str] = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = out.get("text", "")
            else:
                text = out.get("data", {}).get("text/plain", "")
            lines += "".join(text).splitlines()
    return lines


def main(argv: list[str]) -> int:
    argv = list(argv)
    write = "--check" not in argv
    argv = [a for a in argv if a != "--check"]
    show = None
    if "--show" in argv:
        k = argv.index("--show")
        if k + 1 >= len(argv):
            print("--show needs a regular expression", file=sys.stderr)
            return 2
        show = re.compile(argv[k + 1])
        del argv[k : k + 2]
    paths = [Path(p).resolve() for p in argv] or sorted(
        p
        for folder in ("notebooks", "solutions")
        for p in (ROOT / folder).rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )
    failed = []
    for path in paths:
        start = time.perf_counter()
        try:
            seconds = run(path, write=write, show=show)
        except Exception as exc:  # --check: say which cell failed, then run the next notebook
            if write:
                raise
            failed.append(path)
            print(f"FAILED after {time.perf_counter() - start:.1f} s  {_shown(path)}:")
            print(str(exc)[-4000:], flush=True)
            continue
        print(f"{seconds:6.1f} s  {_shown(path)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
