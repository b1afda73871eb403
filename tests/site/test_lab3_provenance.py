"""Where Lab 3's engine figures come from is visible wherever they appear.

- With the engines forced onto the recording (``KVLAB_FORCE_NO_ENGINE=1``), the lab notebook opens
  with a warning admonition naming the recording, and every figure it lends to other pages says
  "recorded on ..." (:func:`test_lab3_forced_onto_the_recording_says_so`, which executes the
  notebook itself: no site needed).
- In a built site (``make book``, or ``KVLAB_FORCE_NO_ENGINE=1 make book`` to see the recorded
  case), the lab page shows the admonition near its top, and on the card and on p22-03 every
  reused ``lab3_*`` figure is rendered with its provenance marker, consistent with the lab page.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB3 = ROOT / "notebooks" / "labs" / "lab3-disaggregated-prefill.ipynb"
REUSING = {
    "book/p22-deeper.html": ROOT / "book" / "p22-deeper.md",
    "notebooks/p22-03-transfer-and-overlap.html": ROOT
    / "notebooks"
    / "p22-03-transfer-and-overlap.ipynb",
}
MARKER = re.compile(
    r"\((measured when the book was built|recorded on [^()]+, not measured in this build)\)"
)
#: Figures that come from a formula, not from an engine run: they need no provenance.
FORMULA_KEYS = {"lab3_beta", "lab3_file_formula", "lab3_nixl_formula", "lab3_stored_tokens"}


def _text(value) -> str:
    """A notebook JSON string field (a list of lines or one string) as one string."""
    return "".join(value) if isinstance(value, list) else str(value)


def reused_keys(source: Path) -> set[str]:
    text = source.read_text(encoding="utf-8")
    return set(re.findall(r"\{num\}`(lab3_\w+)", text)) | set(re.findall(r"::(lab3_\w+):", text))


def glued(nb: dict) -> dict[str, str]:
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []) or []:
            meta = (o.get("metadata") or {}).get("scrapbook") or {}
            if meta.get("name"):
                data = o.get("data", {})
                value = data.get("text/plain") or data.get(
                    "application/papermill.record/text/plain"
                )
                out[meta["name"]] = _text(value).strip("'\"")
    return out


def test_every_reused_lab3_figure_is_measured_with_provenance_or_a_formula():
    """Source check: the card and p22-03 reuse only figures the lab glues with a marker (or
    formula figures), and the committed lab notebook glues them so."""
    values = glued(json.loads(LAB3.read_text()))
    for page, source in REUSING.items():
        keys = reused_keys(source)
        assert keys, f"{source.name} reuses no lab3 figure: is the test still pointed right?"
        for key in sorted(keys - FORMULA_KEYS):
            assert key in values, f"{page} reuses {key}, which the lab does not glue"
            assert MARKER.search(values[key]) or key == "lab3_provenance", (key, values[key])
    assert "lab3_provenance" in reused_keys(REUSING["book/p22-deeper.html"])


@pytest.fixture(scope="module")
def forced(tmp_path_factory) -> dict:
    """Lab 3 executed with KVLAB_FORCE_NO_ENGINE=1 (a copy of the repository's notebook, run in
    the notebook's own folder so that its relative paths hold)."""
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    nb = nbformat.read(LAB3, as_version=4)
    old = os.environ.get("KVLAB_FORCE_NO_ENGINE")
    os.environ["KVLAB_FORCE_NO_ENGINE"] = "1"
    # the fallbacks this test forces stay out of build/lab-fallbacks.log (the build's record)
    os.environ["KVLAB_FALLBACK_LOG"] = str(tmp_path_factory.mktemp("log") / "fallbacks.log")
    try:
        nbclient.NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(LAB3.parent)}},
        ).execute()
    finally:
        os.environ.pop("KVLAB_FALLBACK_LOG")
        if old is None:
            os.environ.pop("KVLAB_FORCE_NO_ENGINE")
        else:
            os.environ["KVLAB_FORCE_NO_ENGINE"] = old
    return json.loads(nbformat.writes(nb))


def test_lab3_forced_onto_the_recording_says_so(forced):
    cells = forced["cells"]

    def has_box(c):
        return any(
            "kvlab-provenance" in _text(o.get("data", {}).get("text/html", ""))
            for o in c.get("outputs", [])
        )

    box = next(i for i, c in enumerate(cells) if has_box(c))
    first_section = next(
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and "\n## " in "\n" + "".join(c["source"])
    )
    assert box < first_section, "the provenance box must come before the lab's first section"
    html = next(
        _text(o["data"]["text/html"])
        for o in cells[box]["outputs"]
        if "text/html" in o.get("data", {})
    )
    assert 'class="admonition warning' in html
    for part in ("recording", "vLLM 0.32.0", "NIXL", "torch", "commit", "KVLAB_FORCE_NO_ENGINE"):
        assert part in html, part
    values = glued(forced)
    for key in ("lab3_file_bytes", "lab3_nixl_bytes", "lab3_xfer_ms", "lab3_pred_ms"):
        assert "not measured in this build" in values[key], (key, values[key])
    assert values["lab3_provenance"].startswith("recorded on ")


def _page_text(path: Path) -> str:
    from bs4 import BeautifulSoup

    return " ".join(
        BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser").get_text(" ").split()
    )


def test_built_site_shows_the_box_and_a_marker_beside_every_reused_figure(site):
    from bs4 import BeautifulSoup

    lab_page = site / "notebooks" / "labs" / "lab3-disaggregated-prefill.html"
    soup = BeautifulSoup(lab_page.read_text(encoding="utf-8"), "html.parser")
    boxes = soup.select("div.admonition.kvlab-provenance")
    assert len(boxes) == 1, f"{len(boxes)} provenance boxes on the lab page"
    sections = soup.select(
        "section h2"
    )  # the page's own sections (the theme's sidebar has h2s too)
    assert sections, "no sections on the lab page"
    assert boxes[0].sourceline < sections[0].sourceline, (
        "the box must come before the first section"
    )
    recorded = "warning" in boxes[0]["class"]
    # what the build glued: myst-nb keeps it beside the executed notebook (<name>.glue.json)
    glue_json = site.parent / "jupyter_execute" / "notebooks" / "labs" / (LAB3.stem + ".glue.json")
    if glue_json.is_file():
        values = {
            k: str(v["data"]["text/plain"]).strip("'\"")
            for k, v in json.loads(glue_json.read_text()).items()
        }
    else:
        values = glued(json.loads(LAB3.read_text()))
    for page, source in REUSING.items():
        text = _page_text(site / page)
        for key in sorted(reused_keys(source) - FORMULA_KEYS):
            value = " ".join(values[key].split())
            assert value in text, f"{page}: {key} = {value!r} not on the page"
            if key != "lab3_provenance":
                m = MARKER.search(value)
                assert m, (page, key, value)
                assert m.group(1).startswith("recorded on") == recorded, (page, key, value)
