"""Write the Colab set-up cell into every notebook, with the repository URL from _config.yml.

The URL lives only in _config.yml; this tool copies it into the first cell of each notebook under
notebooks/ and solutions/ (inserting the cell if missing). `python tools/colab_cell.py --check`
exits non-zero when a notebook's cell is missing or out of date (the tests run it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
MARKER = "# Colab set-up (does nothing outside Google Colab)"


def repository_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return config["repository"]["url"]


def cell_source(url: str | None = None) -> str:
    url = url or repository_url()
    return f'''{MARKER}
import sys

if "google.colab" in sys.modules:
    import os
    import subprocess

    REPO = "{url}"
    if not os.path.isdir("/content/workbook"):
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", REPO, "/content/workbook"], check=True)
    # kvlab declares loose lower bounds only, so Colab's numpy, pandas and matplotlib stay as they are.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", "/content/workbook/lib"], check=True)
    sys.path.insert(0, "/content/workbook/lib")
    os.chdir("/content/workbook/" + {{NB_DIR!r}})'''


def notebooks():
    for folder in ("notebooks", "solutions"):
        yield from sorted((ROOT / folder).rglob("*.ipynb"))


def expected_for(path: Path, url: str) -> str:
    nb_dir = path.parent.relative_to(ROOT).as_posix()
    return cell_source(url).replace("{NB_DIR!r}", repr(nb_dir))


def apply(check: bool = False) -> int:
    url = repository_url()
    stale = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        want = expected_for(path, url)
        first = nb.cells[0] if nb.cells else None
        if first is not None and first.cell_type == "code" and first.source.startswith(MARKER):
            if first.source == want:
                continue
            if check:
                stale.append(path)
                continue
            first.source = want
        else:
            if check:
                stale.append(path)
                continue
            cell = nbformat.v4.new_code_cell(want, metadata={"tags": ["remove-cell"]})
            nb.cells.insert(0, cell)
        nbformat.write(nb, path)
    for path in stale:
        print(f"stale or missing Colab set-up cell: {path.relative_to(ROOT)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(apply(check="--check" in sys.argv))
