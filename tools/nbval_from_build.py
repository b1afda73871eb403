"""pytest plugin: nbval's checks on the notebooks the strict book build has just executed.

``make test`` used to execute every notebook twice: once under nbval, once in the strict build.
With ``-p nbval_from_build --nbval-outputs-from _build/jupyter_execute`` (and ``--nbval-lax``),
nbval collects the committed notebooks as usual (its markers, tags and skips), but instead of
starting a kernel it reads each cell's fresh outputs from the copy that myst-nb executed during
the build (``_build/jupyter_execute/<path>.ipynb``, the same kernel and environment), and
compares them with nbval's own comparison (``IPyNbCell.compare_outputs``, streams coalesced as
nbval does). A cell that raised in the build fails here too, unless it is marked to raise.

The guarantee is nbval's: a changed model makes a checked cell's output differ from the committed
one, and the check fails. ``tests/test_checks_can_fail.py`` shows it for both modes.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbval import plugin as nbval

_WHITESPACE = re.compile(r"\s+")

OPTION = "--nbval-outputs-from"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        default=None,
        metavar="DIR",
        help="compare committed notebooks with the executed copies under DIR (myst-nb's "
        "jupyter_execute folder) instead of running a kernel",
    )


def _executed_copy(item: nbval.IPyNbFile, root: Path) -> Path:
    rel = Path(item.path).resolve().relative_to(Path(item.config.rootpath).resolve())
    return root / rel


def _not_glue(outputs: list) -> list:
    """The outputs without myst-nb's glue records: myst-nb moves those out of the executed copy
    into ``<name>.glue.json`` (whose values the notebooks' hidden asserts and the pages check)."""
    return [
        o
        for o in outputs
        if not (o.get("metadata") or {}).get("scrapbook")
        and not any(k.startswith("application/papermill.record/") for k in o.get("data") or {})
    ]


def _stream_words(outputs: list) -> list:
    """Stream outputs with their whitespace taken out, other outputs unchanged.

    The executed copies went through myst-nb's ``coalesce_streams`` (``nb_merge_streams``), which
    strips each chunk the kernel sent and joins the chunks with newlines. Where the chunks fall
    depends on when the kernel flushed, so the same printout can come back with a blank line more,
    a trailing space less, or a line broken where one ``print`` call wrote its pieces. Those are
    whitespace only: comparing the text without whitespace still catches every changed digit,
    word or sign, which is what nbval's check is for."""
    out = []
    for o in outputs:
        if o.get("output_type") == "stream":
            o = nbformat.from_dict(dict(o))
            o["text"] = _WHITESPACE.sub("", o.get("text", ""))
        out.append(o)
    return out


def _merged_by_mystnb(outputs: list) -> list:
    """The executed copy's outputs with each stream name's text in one output, as nbval expects.

    myst-nb's ``coalesce_streams`` appends every later chunk to the first stream output of its
    name *in place* and leaves the later outputs in the copy it writes, so the first one already
    holds the whole text and nbval's own merging would count the later chunks twice. Where that
    happened (the first output's text ends with all later ones), keep the first; elsewhere merge
    as nbval does."""
    by_name: dict[str, list] = {}
    for o in outputs:
        if o.get("output_type") == "stream":
            by_name.setdefault(o.get("name", ""), []).append(o)
    drop = set()
    for streams in by_name.values():
        rest = _WHITESPACE.sub("", "".join(o.get("text", "") for o in streams[1:]))
        if rest and _WHITESPACE.sub("", streams[0].get("text", "")).endswith(rest):
            drop.update(id(o) for o in streams[1:])
    return nbval.coalesce_streams([o for o in outputs if id(o) not in drop])


def _setup(self: nbval.IPyNbFile) -> None:
    root = Path(self.config.getoption(OPTION)).resolve()
    path = _executed_copy(self, root)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: build the book first (make book), which executes "
            f"every notebook and writes the executed copies under {root}"
        )
    executed = nbformat.read(path, as_version=4)
    self.executed_cells = {c.get("id"): c for c in executed.cells if c.cell_type == "code"}
    self.executed_list = [c for c in executed.cells if c.cell_type == "code"]
    self.kernel = None


def _teardown(self: nbval.IPyNbFile) -> None:
    return None


def _runtest(self: nbval.IPyNbCell) -> None:
    if self.options["skip"]:
        pytest.skip()
    parent = self.parent
    fresh = parent.executed_cells.get(self.cell.get("id"))
    if fresh is None:
        index = [c for c in parent.nb.cells if c.cell_type == "code"].index(self.cell)
        fresh = parent.executed_list[index]
    if fresh.source != self.cell.source:
        self.raise_cell_error(
            "The executed copy is stale", "its source differs from the committed cell's"
        )
    outs = _stream_words(
        _merged_by_mystnb([nbformat.from_dict(o) for o in _not_glue(fresh.get("outputs", []))])
    )
    errors = [o for o in outs if o.output_type == "error"]
    if errors and not self.options["check_exception"]:
        self.raise_cell_error(
            "Cell execution caused an exception in the build", "\n".join(errors[0]["traceback"])
        )
    unrun = self.cell.execution_count is None
    if unrun and self.cell.outputs:
        self.raise_cell_error("Unrun reference cell has outputs")
    if self.options["check"] and not unrun:
        ref = _stream_words(nbval.coalesce_streams(_not_glue(self.cell.outputs)))
        if not self.compare_outputs(outs, ref):
            self.raise_cell_error("Cell outputs differ", "\n".join(self.comparison_traceback))


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption(OPTION):
        return
    if not (config.option.nbval or config.option.nbval_lax):
        raise pytest.UsageError(f"{OPTION} needs --nbval or --nbval-lax")
    nbval.IPyNbFile.setup = _setup
    nbval.IPyNbFile.teardown = _teardown
    nbval.IPyNbCell.runtest = _runtest
