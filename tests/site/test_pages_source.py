"""The small things a reader noticed (issue 24, item 6), checked on the pages' sources.

The glossary is grouped and alphabetical within each group; the labs index names three labs with
a row for Lab 3 in its table; the home page promises nothing that does not exist (no GPU
recordings, no 5 % quiz); the sidebar's captions do not repeat their chapters' titles.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def glossary_groups(text: str) -> dict[str, list[str]]:
    """{group heading: [terms in source order]}; terms before any heading go under ''."""
    groups: dict[str, list[str]] = {}
    heading = ""
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("```{glossary}"):
            inside = True
            groups.setdefault(heading, [])
        elif line.startswith("```"):
            inside = False
        elif inside and line and not line[0].isspace() and not line.startswith(":"):
            groups[heading].append(line.strip())
    return groups


def order_problems(groups: dict[str, list[str]]) -> list[str]:
    problems = []
    if "" in groups:
        problems.append(f"{len(groups[''])} terms outside any group: {groups[''][:5]}")
    for name, terms in groups.items():
        if terms != sorted(terms, key=str.lower):
            problems.append(f"{name}: not alphabetical: {terms}")
    return problems


def test_glossary_is_grouped_and_ordered():
    groups = glossary_groups((ROOT / "book" / "glossary.md").read_text(encoding="utf-8"))
    assert sum(len(t) for t in groups.values()) >= 50
    assert not order_problems(groups)


def test_glossary_check_can_fail():
    bad = (
        "```{glossary}\nZebra\n  z\n\nApple\n  a\n```\n## G\n```{glossary}\nB\n  b\n\nA\n  a\n```\n"
    )
    assert len(order_problems(glossary_groups(bad))) == 3  # ungrouped, and two unordered groups


def test_labs_index_names_three_labs():
    text = (ROOT / "book" / "labs.md").read_text(encoding="utf-8")
    assert "two labs" not in text.lower() and "three labs" in text.lower()
    table = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert table and all("Lab 3" in row for row in table[:3]), table


def test_home_page_promises_only_what_exists():
    text = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    results = ROOT / "results"
    gpu_recordings = [p for p in results.glob("*.json") if "gpu" in p.name.lower()]
    if not gpu_recordings:
        assert not re.search(r"labs? on a real GPU", text), "no GPU recording exists"
    assert "within 5 %" not in text
    assert "Problem 8" in text and "published" in text  # where the problems and figures come from


def test_sidebar_captions_do_not_repeat_titles():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            if "file" not in chapter:
                continue
            src = next(ROOT.glob(chapter["file"] + ".*"))
            if src.suffix != ".md":
                continue
            # the sidebar shows the toc's title when it gives one, else the page's heading
            title = chapter.get("title") or (
                src.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
            )
            assert not title.lower().startswith(part["caption"].lower() + ":"), (
                part["caption"],
                title,
            )
            assert title.lower() != part["caption"].lower(), title
