"""Runnable from what a reader has (issue 36, item 4): the site serves kvlab's wheel and the workbook.

- Every notebook page's download menu offers the page's ``.ipynb``, the workbook zip and kvlab's
  wheel, each a file on the site (``_ext/kvlab_download.py``).
- The wheel is kvlab, importable from the file itself, with the book's numbers.
- The zip holds every notebook of the site with what it reads: the library, the data folder, the
  recordings, laid out as in the repository.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "_ext"))
from kvlab_download import FOLDER, ZIP_NAME, wheel_name  # noqa: E402
from test_reader import _notebook_pages  # noqa: E402


def _menu_links(html: str) -> dict[str, str]:
    """The download menu's links on a page: button label -> href."""
    out = {}
    for m in re.finditer(r'<a href="([^"]+)"[^>]*class="[^"]*btn-(download-[a-z]+-button)', html):
        out[m.group(2)] = m.group(1)
    return out


def test_every_notebook_page_offers_the_notebook_the_workbook_and_kvlab(site):
    pages = _notebook_pages(site)
    assert len(pages) >= 10, pages
    problems = []
    for rel in pages:
        links = _menu_links((site / rel).read_text(encoding="utf-8"))
        if not links.get("download-source-button", "").endswith(".ipynb"):
            problems.append(f"{rel}: no .ipynb in the download menu")
        for label in (
            "download-source-button",
            "download-workbook-button",
            "download-wheel-button",
        ):
            href = links.get(label)
            if not href:
                problems.append(f"{rel}: no {label}")
            elif not ((site / rel).parent / href).resolve().is_file():
                problems.append(f"{rel}: {label} leads to {href}, not on the site")
    assert not problems, "\n".join(problems[:10])


def test_menu_check_can_fail():
    html = '<a href="../_sources/x.ipynb" class="btn btn-download-source-button">.ipynb</a>'
    assert _menu_links(html) == {"download-source-button": "../_sources/x.ipynb"}


def test_the_wheel_is_kvlab_and_runs_from_the_file(site):
    wheel = site / FOLDER / wheel_name(ROOT)
    assert wheel.is_file(), f"{wheel} is not on the site"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        assert "Name: kvlab" in zf.read(meta).decode()
    assert "kvlab/calc.py" in names and not any("/tests/" in n for n in names)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import kvlab; from kvlab import calc; "
        "assert kvlab.__file__.startswith(sys.argv[1]), kvlab.__file__; "
        "print(calc.kv_bytes_per_token(layers=80, kv_heads=8, head_dim=128, bytes_per_value=2))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(wheel)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "327680"


def test_the_workbook_zip_holds_every_notebook_with_what_it_reads(site):
    target = site / FOLDER / ZIP_NAME
    assert target.is_file(), f"{target} is not on the site"
    with zipfile.ZipFile(target) as zf:
        names = {n.removeprefix("kvlab-workbook/") for n in zf.namelist()}
    missing = [
        rel.removesuffix(".html") + ".ipynb"
        for rel in _notebook_pages(site)
        if rel.removesuffix(".html") + ".ipynb" not in names
    ]
    assert not missing, f"notebooks of the site missing from the zip: {missing}"
    for needed in ("lib/pyproject.toml", "lib/kvlab/__init__.py", "README.md", "requirements.txt"):
        assert needed in names, needed
    assert any(n.startswith("data/mooncake/") for n in names), "the Mooncake trace is missing"
    assert any(n.startswith("results/") and n.endswith(".json") for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # every repository file a notebook names by a relative path ("../data/...") is in the zip
    absent = set()
    for nb_name in (n for n in names if n.endswith(".ipynb")):
        nb = json.loads((ROOT / nb_name).read_text(encoding="utf-8"))
        src = "\n".join("".join(c.get("source", "")) for c in nb["cells"])
        for ref in re.findall(r"\.\./(?:\.\./)?((?:data|results)/[\w./-]+\.\w+)", src):
            if ref not in names and (ROOT / ref).is_file():
                absent.add(ref)
    assert not absent, f"files the notebooks read that the zip lacks: {sorted(absent)}"
