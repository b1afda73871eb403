"""Sphinx extension: what a reader needs to run a notebook page outside the repository, on the site.

A downloaded ``.ipynb`` alone imports ``kvlab`` and reads files of the workbook (the Mooncake
trace, the labs' recordings), so the built site carries, in ``_downloads/kvlab/``:

- ``kvlab-<version>-py3-none-any.whl``: the library, built from ``lib/`` with the book
  (``pip install`` it into any Python 3.10+ with Jupyter);
- ``kvlab-workbook.zip``: the notebooks, the solutions, the library, the data and the recordings
  with the requirement files and the README, laid out as in the repository, so every notebook
  finds what it reads beside it.

Every notebook page's download menu (sphinx-book-theme's) offers both, under the page's own
``.ipynb`` (the page's source). Nothing is fetched from another host.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

FOLDER = "_downloads/kvlab"
ZIP_NAME = "kvlab-workbook.zip"
# what the zip holds, relative to the repository root
ZIP_PARTS = (
    "lib",
    "notebooks",
    "solutions",
    "data",
    "results",
    "README.md",
    "requirements.txt",
    "requirements-labs.txt",
)
# never packed: caches, build folders, checkpoints
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", "build", ".hypothesis"}
SKIP_SUFFIXES = (".pyc", ".nbi", ".nbc")


def wheel_name(root: Path) -> str:
    """The file name pip gives kvlab's wheel (version read from lib/pyproject.toml)."""
    import tomllib

    meta = tomllib.loads((root / "lib" / "pyproject.toml").read_text(encoding="utf-8"))
    version = meta["project"]["version"]
    return f"kvlab-{version}-py3-none-any.whl"


def zip_members(root: Path) -> list[Path]:
    """The repository files the workbook zip holds, in a stable order."""
    files: list[Path] = []
    for part in ZIP_PARTS:
        path = root / part
        if path.is_file():
            files.append(path)
            continue
        for f in sorted(path.rglob("*")):
            rel = f.relative_to(root)
            if not f.is_file() or SKIP_PARTS & set(rel.parts) or f.name.endswith(SKIP_SUFFIXES):
                continue
            if any(p.endswith(".egg-info") for p in rel.parts):
                continue
            files.append(f)
    return files


def write_zip(root: Path, target: Path) -> int:
    """Write the workbook zip (fixed timestamps: the same bytes for the same files); return how many
    files it holds."""
    members = zip_members(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for f in members:
            info = zipfile.ZipInfo(
                "kvlab-workbook/" + f.relative_to(root).as_posix(), (2026, 1, 1, 0, 0, 0)
            )
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, f.read_bytes())
    return len(members)


def build_wheel(root: Path, folder: Path) -> Path:
    """Build kvlab's wheel from lib/ into ``folder`` with the build's own Python (no download:
    setuptools from the environment, no build isolation)."""
    import shutil
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    # built from a copy, so setuptools' build/ and egg-info folders never land in lib/
    tmp = Path(tempfile.mkdtemp(prefix="kvlab-wheel-"))
    src = tmp / "lib"
    shutil.copytree(
        root / "lib",
        src,
        ignore=shutil.ignore_patterns(
            "__pycache__", "*.egg-info", "build", "tests", "*.nbi", "*.nbc"
        ),
    )
    try:
        _pip_wheel(src, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wheel = folder / wheel_name(root)
    if not wheel.is_file():
        raise RuntimeError(f"pip wheel did not write {wheel.name} into {folder}")
    return wheel


def _pip_wheel(src: Path, folder: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(folder),
            str(src),
        ],
        check=True,
        cwd=str(src),
    )


def _add_to_download_menu(app, pagename, templatename, context, doctree):
    """Under a notebook page's .ipynb, the workbook zip and the kvlab wheel (runs after
    sphinx-book-theme fills its header buttons)."""
    if context.get("page_source_suffix") != ".ipynb" and not context.get("ipynb_source"):
        return
    root = Path(app.srcdir)
    pathto = context["pathto"]
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        extra = [
            {
                "type": "link",
                "url": pathto(f"{FOLDER}/{ZIP_NAME}", 1),
                "text": "workbook .zip",
                "tooltip": "Download the notebooks with kvlab and the data they read",
                "icon": "fas fa-file-zipper",
                "label": "download-workbook-button",
            },
            {
                "type": "link",
                "url": pathto(f"{FOLDER}/{wheel_name(root)}", 1),
                "text": "kvlab .whl",
                "tooltip": "Download the kvlab library (pip install it)",
                "icon": "fas fa-box",
                "label": "download-wheel-button",
            },
        ]
        buttons = group["buttons"]
        at = next(
            (
                i + 1
                for i, b in enumerate(buttons)
                if b.get("label") in ("download-notebook-button", "download-source-button")
                and str(b.get("url", "")).endswith(".ipynb")
            ),
            0,
        )
        group["buttons"] = [*buttons[:at], *extra, *buttons[at:]]


def _finished(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    root = Path(app.srcdir)
    folder = Path(app.outdir) / FOLDER
    wheel = build_wheel(root, folder)
    n = write_zip(root, folder / ZIP_NAME)
    logger.info(f"kvlab_download: {wheel.name} and {ZIP_NAME} ({n} files) in {FOLDER}/")


def setup(app):
    app.connect("html-page-context", _add_to_download_menu, priority=502)
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
