"""Write the set-up cell into every notebook, with the repository URL from _config.yml.

In Colab the cell clones the repository and installs ``lib/``. Elsewhere it does nothing where
``kvlab`` imports; where it does not (a notebook from the site's workbook zip, opened in a Python
without kvlab), it installs kvlab from the ``lib/`` folder the zip holds, or says where to get it.

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
MARKER = "# Set-up: in Colab, clone the workbook; elsewhere, install kvlab if it is missing"
#: How every version of the cell starts (older cells are replaced, not doubled).
PREFIXES = (MARKER, "# Colab set-up")


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
    os.chdir("/content/workbook/" + {{NB_DIR!r}})
else:
    try:
        import kvlab  # noqa: F401
    except ImportError:
        # a notebook from the site's workbook zip: kvlab's source is the lib/ folder above it
        import importlib
        import subprocess
        from pathlib import Path

        here = Path.cwd().resolve()
        lib = next((p / "lib" for p in [here, *here.parents] if (p / "lib" / "pyproject.toml").is_file()), None)
        if lib is None:
            raise ImportError(
                "kvlab is not installed: download the workbook (.zip) or kvlab's wheel (.whl) from "
                "the download menu of any notebook page of the site, and pip install it"
            ) from None
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", str(lib)], check=True)
        importlib.invalidate_caches()'''


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
        if first is not None and first.cell_type == "code" and first.source.startswith(PREFIXES):
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
