"""Checks over the repository itself (fast: nothing is executed).

- every notebook's first cell is the current Colab set-up cell (tools/colab_cell.py --check);
- every notebook is committed executed, top to bottom (increasing execution counts);
- no worked result is hand-typed in book/*.md: results come through {num}`key` roles (or glue
  roles inside notebooks);
- every glue reference names a notebook that exists and a key that notebook glues; every glued key
  is glued by one notebook only; book/*.md names keys, never notebook paths;
- exercise labels are unique, and every solution names an existing exercise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def notebooks() -> list[Path]:
    return sorted(
        p
        for folder in ("notebooks", "solutions")
        for p in (ROOT / folder).rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def load(p: Path) -> dict:
    return json.loads(p.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


# ---------------------------------------------------------------------------------------------
# Notebooks
# ---------------------------------------------------------------------------------------------


def test_colab_cell_is_current():
    res = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "colab_cell.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, (
        "notebooks whose first cell is not the current Colab set-up cell "
        "(fix: python tools/colab_cell.py):\n" + res.stdout + res.stderr
    )


def execution_problems(nb: dict) -> list[str]:
    """Why a notebook is not committed executed top to bottom (empty list when it is)."""
    problems, last = [], 0
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or not source(cell).strip():
            continue
        n = cell.get("execution_count")
        if n is None:
            problems.append(f"cell {i} has no execution count (not executed)")
            continue
        if n <= last:
            problems.append(f"cell {i} has execution count {n} after {last} (not top to bottom)")
        last = n
    return problems


def test_notebooks_committed_executed():
    bad = {}
    for p in notebooks():
        probs = execution_problems(load(p))
        if probs:
            bad[rel(p)] = probs[:3] + ([f"... {len(probs) - 3} more"] if len(probs) > 3 else [])
    assert not bad, (
        "notebooks not committed executed top to bottom (run tools/run_notebooks.py on them):\n"
        + "\n".join(f"{k}: " + "; ".join(v) for k, v in sorted(bad.items()))
    )


def test_execution_problems_detects_bad_notebooks():
    def code(n, s="x = 1"):
        return {"cell_type": "code", "source": s, "execution_count": n}

    assert execution_problems({"cells": [code(1), code(None, ""), code(2)]}) == []
    assert "no execution count" in execution_problems({"cells": [code(1), code(None)]})[0]
    assert "top to bottom" in execution_problems({"cells": [code(2), code(1)]})[0]


HIDDEN_OUTPUT_TAGS = {"remove-cell", "remove-output", "remove_cell", "remove_output"}


def figures_without_alt(nb: dict) -> list[int]:
    """Cells whose committed outputs hold an image the page shows, without a `mystnb.image.alt`.

    The site test finds the same defect in the built page, but only after a full build; this
    finds it in a second. Cells tagged to hide their output are not on the page."""
    bad = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        md = cell.get("metadata", {})
        if HIDDEN_OUTPUT_TAGS & set(md.get("tags", [])):
            continue
        shows_image = any(
            any(k.startswith("image/") for k in out.get("data", {}))
            for out in cell.get("outputs", [])
            if out.get("output_type") in ("display_data", "execute_result")
        )
        alt = md.get("mystnb", {}).get("image", {}).get("alt", "")
        if shows_image and not str(alt).strip():
            bad.append(i)
    return bad


def test_every_shown_figure_has_alt_text():
    bad = {rel(p): cells for p in notebooks() if (cells := figures_without_alt(load(p)))}
    assert not bad, (
        "figures without alt text (add metadata mystnb.image.alt to the cell):\n"
        + "\n".join(f"{k}: cells {v}" for k, v in sorted(bad.items()))
    )


STDERR_HIDDEN_TAGS = {"remove-stderr", "remove-cell", "remove-output"}


def test_cells_that_print_to_stderr_hide_it():
    """The strict build (``stderr_output: remove-warn``, ``-W``) fails on a shown cell that writes
    to stderr (a library warning, a progress bar): such a cell must carry ``remove-stderr``."""
    bad = [
        f"{rel(p)}: cell {i}"
        for p in notebooks()
        for i, cell in enumerate(load(p).get("cells", []))
        if cell.get("cell_type") == "code"
        and any(o.get("name") == "stderr" for o in cell.get("outputs", []))
        and not STDERR_HIDDEN_TAGS & set(cell.get("metadata", {}).get("tags", []))
    ]
    assert not bad, "cells printing to stderr without the remove-stderr tag:\n" + "\n".join(bad)


def test_figures_without_alt_detects_missing_alt():
    img = [{"output_type": "display_data", "data": {"image/png": "AA=="}}]
    cell = {"cell_type": "code", "source": "plot()", "outputs": img, "metadata": {}}
    assert figures_without_alt({"cells": [cell]}) == [0]
    hidden = {**cell, "metadata": {"tags": ["remove-cell"]}}
    with_alt = {**cell, "metadata": {"mystnb": {"image": {"alt": "A line rising"}}}}
    assert figures_without_alt({"cells": [hidden, with_alt]}) == []


# ---------------------------------------------------------------------------------------------
# Glue
# ---------------------------------------------------------------------------------------------

# {glue}`key`, {glue:text}`nb.ipynb::key:fmt`, {glue:md}`...`, and ```{glue} key / {glue:figure} key
GLUE_ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`([^`]+)`")
# book/*.md pages write {num}`key` (rewritten by _ext/glue_keys.py at build time)
sys.path.insert(0, str(ROOT / "_ext"))
from glue_keys import NUM_ROLE, key_index  # noqa: E402

GLUE_DIRECTIVE = re.compile(r"^[`:]{3,}\{glue(?::[a-z]+)?\}\s+(\S+)", re.MULTILINE)


def glued_keys(nb: dict) -> set[str]:
    """The names a notebook glues: myst-nb stores them in outputs with 'scrapbook' metadata."""
    keys = set()
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            meta = (out.get("metadata") or {}).get("scrapbook")
            if meta and meta.get("name"):
                keys.add(meta["name"])
    return keys


def glue_refs(text: str) -> list[tuple[str | None, str]]:
    """(notebook path or None for this notebook, key) for each glue role or directive."""
    refs = []
    for target in GLUE_ROLE.findall(text) + GLUE_DIRECTIVE.findall(text):
        if "::" in target:
            path, key = target.split("::", 1)
            refs.append((path.strip(), key.split(":", 1)[0].strip()))
        else:
            refs.append((None, target.split(":", 1)[0].strip()))
    return refs


def broken_glue_refs() -> list[str]:
    problems, cache = [], {}

    def keys_of(nb_path: Path) -> set[str] | None:
        if nb_path not in cache:
            cache[nb_path] = glued_keys(load(nb_path)) if nb_path.is_file() else None
        return cache[nb_path]

    sources: list[tuple[Path, str]] = [
        (md, md.read_text(encoding="utf-8")) for md in BOOK.rglob("*.md")
    ]
    for nb_path in notebooks():
        text = "\n".join(
            source(c) for c in load(nb_path).get("cells", []) if c.get("cell_type") == "markdown"
        )
        sources.append((nb_path, text))
    owner, twice = key_index(ROOT)
    for key, paths in sorted(twice.items()):
        problems.append(f"key {key!r} is glued by several notebooks: {[rel(p) for p in paths]}")
    for path, text in sources:
        for key, _fmt in NUM_ROLE.findall(text):
            if key not in owner:
                problems.append(f"{rel(path)}: {{num}}`{key}` -> no notebook glues this key")
        for nb_rel, key in glue_refs(text):
            if nb_rel is None:
                if path.suffix != ".ipynb":
                    problems.append(
                        f"{rel(path)}: {{glue}} `{key}` names no notebook (use nb::key)"
                    )
                    continue
                target = path
            else:
                target = (path.parent / nb_rel).resolve()
            keys = keys_of(target)
            where = f"{rel(path)}: {nb_rel or '(this notebook)'}::{key}"
            if keys is None:
                problems.append(f"{where} -> notebook does not exist")
            elif key not in keys:
                problems.append(f"{where} -> key not glued by {rel(target)}")
    return sorted(set(problems))


def test_glue_references_resolve():
    problems = broken_glue_refs()
    assert not problems, f"{len(problems)} glue references do not resolve:\n" + "\n".join(problems)


def test_book_pages_name_keys_not_notebooks():
    # A figure in book/*.md is written {num}`key`; the notebook that glues it is found at build
    # time (_ext/glue_keys.py), so a sentence reads plainly in the source.
    problems = [
        f"{rel(md)}:{n}: write {{num}}`key` instead of a notebook path: {line.strip()[:90]}"
        for md in sorted(BOOK.rglob("*.md"))
        for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1)
        if ".ipynb::" in line
    ]
    assert not problems, "\n".join(problems)


def test_num_role_rewrite():
    from glue_keys import rewrite

    page = ROOT / "book" / "x.md"
    owner = {"p08_a": ROOT / "notebooks" / "nb.ipynb"}
    text, unknown = rewrite("a {num}`p08_a` b {num}`p08_a:.1f` c {num}`nope`", page, owner)
    assert text == (
        "a {glue:text}`../notebooks/nb.ipynb::p08_a:` b "
        "{glue:text}`../notebooks/nb.ipynb::p08_a:.1f` c {num}`nope`"
    )
    assert unknown == ["nope"]


def test_glue_parsing():
    text = (
        "{glue:text}`../notebooks/a.ipynb::p08_x:` and {glue}`k2` {glue:text}`b.ipynb::y:,d`\n"
        "```{glue:figure} fig_key\n```\n"
    )
    assert glue_refs(text) == [
        ("../notebooks/a.ipynb", "p08_x"),
        (None, "k2"),
        ("b.ipynb", "y"),
        (None, "fig_key"),
    ]
    nb = {"cells": [{"cell_type": "code", "outputs": [{"metadata": {"scrapbook": {"name": "k"}}}]}]}
    assert glued_keys(nb) == {"k"}


# ---------------------------------------------------------------------------------------------
# No hand-typed results in the prose
# ---------------------------------------------------------------------------------------------

# Results of the worked answers (spec/numbers.md, Problem 8 and 22): they must reach book/*.md
# through {glue:text}, never typed. Inputs (2,000-token system prompt, 20 requests/s) are fine.
RESULT_FIGURES = [
    "40 %", "83 %", "91 %", "25 %", "2,375", "72,500", "20,000 tokens/s", "80,000 tokens/s",
    "655 MB", "983 MB", "131 GB", "3.2 million", "1,067", "327,680", "320 KiB", "160 KiB",
    "2.62 GB", "1.31 GB", "328 MB", "0.73 ms", "6.6 ms", "52 ms", "5.24 GB", "13 ms",
    "32.8 GB", "82 ms", "60,000 tokens/s", "10,200", "6 : 3", "1 : 2", "6:3",
]  # fmt: skip

# Where a figure is an input of a question, not its answer: (file, text of the line it is in).
ALLOWED = {
    ("book/self-check.md", "## 3. The 40 % question"),
    ("book/self-check.md", "what happens with 83 % prefix hits?"),
}

FENCE = re.compile(r"^(`{3,}|~{3,})")


def hand_typed_results(path: Path, text: str) -> list[str]:
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        bare = NUM_ROLE.sub(" ", GLUE_ROLE.sub(" ", line))
        bare = re.sub(r"\{(cite|doc|ref|term|numref|eq)[^}]*\}`[^`]*`", " ", bare)
        for fig in RESULT_FIGURES:
            pat = r"(?<![\d.,])" + re.escape(fig).replace(r"\ ", r"[ \u00a0\u202f]?") + r"(?![\d])"
            if re.search(pat, bare):
                allowed = any(f == rel(path) and t in line for f, t in ALLOWED)
                if not allowed:
                    problems.append(f"{rel(path)}:{n}: {fig!r} typed by hand: {line.strip()[:100]}")
    return problems


def test_no_hand_typed_results_in_prose():
    problems = []
    for md in sorted(BOOK.rglob("*.md")):
        problems += hand_typed_results(md, md.read_text(encoding="utf-8"))
    assert not problems, (
        "worked results typed into the prose (glue them in a notebook, write {num}`key` here):\n"
        + "\n".join(problems)
    )


def test_hand_typed_detector():
    p = BOOK / "x.md"
    assert hand_typed_results(p, "the hit rate is 40 % here")
    assert hand_typed_results(p, "moves 2.62\u00a0GB")
    assert not hand_typed_results(p, "the hit rate is {glue:text}`a.ipynb::p08_hit_random:`")
    assert hand_typed_results(p, "the hit rate is {num}`p08_hit_random`, 40 % of it")
    assert not hand_typed_results(p, "a 140 % overload, 2,3750 and 113 ms")
    assert not hand_typed_results(p, "a 2,000-token system prompt at 20 requests/s")


# ---------------------------------------------------------------------------------------------
# Exercises
# ---------------------------------------------------------------------------------------------

EXERCISE = re.compile(
    r"^[`:]{3,}\{exercise(?:-start)?\}[^\n]*\n(?:\s*:[a-z-]+:[^\n]*\n)*?\s*:label:\s*(\S+)",
    re.MULTILINE,
)
SOLUTION = re.compile(r"^[`:]{3,}\{solution(?:-start)?\}\s+(\S+)", re.MULTILINE)


def exercise_sources() -> list[tuple[str, str]]:
    out = [(rel(md), md.read_text(encoding="utf-8")) for md in sorted(BOOK.rglob("*.md"))]
    for p in notebooks():
        cells = load(p).get("cells", [])
        out.append(
            (rel(p), "\n".join(source(c) for c in cells if c.get("cell_type") == "markdown"))
        )
    return out


def test_exercise_labels_unique_and_solutions_match():
    seen: dict[str, list[str]] = {}
    solutions: list[tuple[str, str]] = []
    for where, text in exercise_sources():
        for label in EXERCISE.findall(text):
            seen.setdefault(label, []).append(where)
        solutions += [(where, label) for label in SOLUTION.findall(text)]
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    assert not dups, "exercise labels used more than once:\n" + "\n".join(
        f"{k}: {', '.join(v)}" for k, v in sorted(dups.items())
    )
    orphans = [f"{w}: solution for {lab!r}" for w, lab in solutions if lab not in seen]
    assert not orphans, "solutions naming no exercise:\n" + "\n".join(orphans)


def test_exercise_parsing():
    text = "```{exercise}\n:label: ex-a\nText\n```\n```{solution} ex-a\n:class: dropdown\nA\n```\n"
    assert EXERCISE.findall(text) == ["ex-a"]
    assert SOLUTION.findall(text) == ["ex-a"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
