"""The claim mechanism bites: kvlab.claims.claim glues a sentence and its verdict, and
_ext/claims.py rewrites {claim}`key` and warns (failing the strict build) on a false or missing
verdict, both on fake glue files and in a tiny Sphinx build."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import claims as ext  # noqa: E402

from kvlab import claims  # noqa: E402

PREFIX = "application/papermill.record/"


def glued(name: str, value: str) -> dict:
    """One output as myst-nb's glue() stores it in a notebook."""
    return {
        "output_type": "display_data",
        "data": {PREFIX + "text/plain": repr(value)},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": PREFIX}},
    }


def fake_notebook(entries: dict[str, str]) -> dict:
    outputs = [glued(k, v) for k, v in entries.items()]
    return {
        "cells": [
            {"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# Evidence"},
            {
                "cell_type": "code",
                "id": "decide",
                "execution_count": 1,
                "metadata": {},
                "outputs": outputs,
                "source": "pass",
            },
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


# -- kvlab.claims ---------------------------------------------------------------------------------


def test_claim_prints_one_stable_line(capsys):
    claims.claim("x_claim", True, "A holds.")
    claims.claim("y_claim", False, "B holds.")
    assert capsys.readouterr().out.splitlines() == ["claim x_claim: holds", "claim y_claim: FALSE"]


@pytest.mark.parametrize(
    "key, holds, text",
    [
        ("bad key", True, "t."),
        ("k__holds", True, "t."),
        ("k", 1, "t."),
        ("k", None, "t."),
        ("k", True, " "),
        ("k", True, "a `b` c"),
    ],
)
def test_claim_rejects_bad_input(key, holds, text):
    with pytest.raises(ValueError):
        claims.claim(key, holds, text)


def test_claim_accepts_numpy_bool(capsys):
    np = pytest.importorskip("numpy")
    claims.claim("np_claim", np.float64(1.0) < np.float64(2.0), "One is less than two.")
    assert capsys.readouterr().out == "claim np_claim: holds\n"
    assert claims.HOLDS_SUFFIX == ext.HOLDS_SUFFIX


# -- the extension on fake files ------------------------------------------------------------------


def test_rewrite_points_at_the_deciding_notebook(tmp_path):
    nb = tmp_path / "notebooks" / "a.ipynb"
    page = tmp_path / "book" / "card.md"
    text = "Intro {claim}`k_one` and {claim}`k_unknown`."
    new, used, unknown = ext.rewrite(text, page, {"k_one": nb}, tmp_path)
    assert "{glue:text}`../notebooks/a.ipynb::k_one:`{claimmark}`k_one <notebooks/a>`" in new
    assert "{claim}`k_unknown`" in new
    assert used == [("k_one", "notebooks/a")] and unknown == ["k_unknown"]


def write_glue(folder: Path, docname: str, entries: dict[str, str]) -> None:
    path = folder / f"{docname}.glue.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        k: {"output_type": "display_data", "data": {"text/plain": repr(v)}, "metadata": {}}
        for k, v in entries.items()
    }
    path.write_text(json.dumps(data), encoding="utf-8")


def test_verdict_check_on_fake_glue_files(tmp_path):
    write_glue(
        tmp_path,
        "notebooks/a",
        {
            "good": "S.",
            "good__holds": "true",
            "bad": "T.",
            "bad__holds": "false",
            "noverdict": "U.",
        },
    )
    uses = {"book/card": [("good", "notebooks/a")]}
    assert ext.verdict_problems(uses, tmp_path) == []
    uses = {
        "book/card": [
            ("good", "notebooks/a"),
            ("bad", "notebooks/a"),
            ("noverdict", "notebooks/a"),
            ("gone", "notebooks/a"),
            ("x", "notebooks/never_run"),
        ]
    }
    problems = ext.verdict_problems(uses, tmp_path)
    assert [p for p, _ in problems] == ["book/card"] * 4
    text = " | ".join(m for _, m in problems)
    for needle in ("'bad' is false", "'noverdict'", "'gone'", "never_run"):
        assert needle in text


# -- a tiny Sphinx build ----------------------------------------------------------------------------


def tiny_build(tmp_path: Path, verdict: str) -> subprocess.CompletedProcess:
    src = tmp_path / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "notebooks" / "evidence.ipynb").write_text(
        json.dumps(
            fake_notebook({"tiny_claim": "Sticky beats random.", "tiny_claim__holds": verdict})
        ),
        encoding="utf-8",
    )
    (src / "index.md").write_text(
        "# Card\n\n{claim}`tiny_claim`\n\n```{toctree}\nnotebooks/evidence\n```\n", encoding="utf-8"
    )
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['myst_nb', 'glue_keys', 'claims']\n"
        "nb_execution_mode = 'off'\n"
        "exclude_patterns = ['_build']\n",
        encoding="utf-8",
    )
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tiny_build_passes_on_a_true_claim_and_fails_on_a_false_one(tmp_path):
    pytest.importorskip("myst_nb")
    ok = tiny_build(tmp_path / "true", "true")
    assert ok.returncode == 0, ok.stderr
    html = (tmp_path / "true" / "out" / "index.html").read_text(encoding="utf-8")
    assert (
        "Sticky beats random." in html
        and "kvlab-claim" in html
        and "notebooks/evidence.html" in html
    )
    bad = tiny_build(tmp_path / "false", "false")
    assert bad.returncode != 0
    assert "'tiny_claim' is false" in bad.stderr


def test_check_link_opens_the_deciding_cell(tmp_path):
    """The "check" mark links to the cell that prints the claim's verdict (issue 35), not to the
    top of the notebook; a claim no cell prints a verdict for keeps the notebook link."""
    pytest.importorskip("myst_nb")
    nb = fake_notebook({"tiny_claim": "Sticky beats random.", "tiny_claim__holds": "true",
                        "quiet_claim": "Hashing is stable.", "quiet_claim__holds": "true"})  # fmt: skip
    nb["cells"].insert(1, {"cell_type": "markdown", "id": "gap", "metadata": {},
                           "source": "Some prose between the title and the deciding cell."})  # fmt: skip
    nb["cells"][-1]["outputs"].append(
        {"output_type": "stream", "name": "stdout", "text": "claim tiny_claim: holds\n"}
    )
    src = tmp_path / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "notebooks" / "evidence.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (src / "index.md").write_text(
        "# Card\n\n{claim}`tiny_claim` {claim}`quiet_claim`\n\n```{toctree}\nnotebooks/evidence\n```\n",
        encoding="utf-8",
    )
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['myst_nb', 'glue_keys', 'claims']\n"
        "nb_execution_mode = 'off'\n"
        "exclude_patterns = ['_build']\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    index = (out / "index.html").read_text(encoding="utf-8")
    evidence = (out / "notebooks" / "evidence.html").read_text(encoding="utf-8")
    anchor = ext.anchor_id("tiny_claim")
    assert f'href="notebooks/evidence.html#{anchor}"' in index
    assert 'href="notebooks/evidence.html"' in index  # quiet_claim: no verdict line, no anchor
    assert f'id="{anchor}"' in evidence
    assert ext.decided_here("x\nclaim a_b: holds\nclaim c: FALSE\nclaim d: maybe\n") == ["a_b", "c"]
