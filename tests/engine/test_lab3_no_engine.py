"""Lab 3's set-up where the CPU engine cannot run (a Colab runtime: no ``.venv-engine``, no tiny
model; or ``KVLAB_FORCE_NO_ENGINE=1``): the set-up cells run without raising, every engine run
comes from ``results/lab3-cpu-recorded.json`` and the page's box says so, and section 4's GPU cell
prints the GPU recordings (no GPU here). Only the set-up cells run: no engine starts (seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvlab.measure.recording import recorded
from kvlab.measure.serving import engine

ROOT = Path(__file__).resolve().parents[2]
LAB3 = ROOT / "notebooks" / "labs" / "lab3-disaggregated-prefill.ipynb"


def _code_cells() -> list[str]:
    nb = json.loads(LAB3.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _setup_cells() -> list[str]:
    """From the set-up cell to the one that shows the provenance box (Colab's cell excluded)."""
    cells = _code_cells()
    first = next(i for i, s in enumerate(cells) if "recorded.setup(" in s)
    last = next(i for i, s in enumerate(cells) if "recorded.page_banner(" in s)
    return cells[first : last + 1]


def _run(cells: list[str], capsys) -> tuple[dict, str]:
    import matplotlib

    matplotlib.use("Agg")
    ns: dict = {}
    for src in cells:
        exec(compile(src, LAB3.name, "exec"), ns)
    return ns, capsys.readouterr().out


@pytest.fixture
def quiet_log(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "FALLBACK_LOG", tmp_path / "fallbacks.log")
    monkeypatch.delenv("KVLAB_RECORD_LABS", raising=False)
    return tmp_path / "fallbacks.log"


def _check_recorded(ns: dict, out: str, reason: str) -> None:
    runs = ns["RUNS"]
    assert [r.here for r in runs] == [False, False, False]
    assert all(reason in " ".join(r.errors) for r in runs)
    assert "WARNING: Engine figures on this page come from a recording" in out
    assert "engines cannot run here" in out and reason in out
    machine = json.loads(recorded.recording_path("lab3").read_text())["machine"]
    assert machine["commit"] in out  # the box names the recording's commit
    assert ns["live"].used_pulled_kv() == []  # the recorded split passes the page's checks


def test_setup_on_colab_without_the_cpu_engine(tmp_path, monkeypatch, capsys, quiet_log):
    """A Colab runtime: no engine environment, no tiny model, no vLLM in the kernel."""
    monkeypatch.delenv(recorded.FORCE_NO_ENGINE_ENV, raising=False)
    monkeypatch.setattr(engine, "ENGINE_VENV", tmp_path / "no-venv-engine")
    monkeypatch.setattr(engine, "TINY_MODEL_DIR", tmp_path / "no-tiny-llama")
    monkeypatch.setattr(engine, "vllm_here", lambda: False)
    ns, out = _run(_setup_cells(), capsys)
    assert not ns["SETUP"].here
    _check_recorded(ns, out, "engine environment not available here")
    assert quiet_log.is_file()


def test_setup_forced_onto_the_recording(monkeypatch, capsys, quiet_log):
    monkeypatch.setenv(recorded.FORCE_NO_ENGINE_ENV, "1")
    ns, out = _run(_setup_cells(), capsys)
    _check_recorded(ns, out, "KVLAB_FORCE_NO_ENGINE")


def test_gpu_section_without_a_gpu_says_what_is_missing_and_prints_the_gpu_recordings(
    tmp_path, monkeypatch, capsys
):
    from kvlab.measure.recording import results

    (cell,) = [s for s in _code_cells() if "pd_split.gpu_missing()" in s]
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path))  # an empty folder of GPU recordings
    from kvlab.measure.disagg import pd_split

    missing = ["vLLM is not installed in this Python", "NIXL is not installed in this Python"]
    monkeypatch.setattr(pd_split, "gpu_missing", lambda: list(missing))
    head = (
        "from kvlab.measure.disagg import pd_split\nfrom kvlab.measure.recording import recorded\n"
    )
    _, out = _run([head + cell], capsys)
    flat = " ".join(out.split())
    assert flat.startswith(
        "The GPU split does not run here: vLLM is not installed in this Python; NIXL is not "
        "installed in this Python. To run it: on Colab, choose a GPU runtime"
    )
    # what it costs and how to get it
    assert "installs requirements-gpu.txt" in flat and "about 1 GB of wheels" in flat
    assert "a few minutes" in flat and "40 % of the GPU's memory each" in flat
    assert "No GPU recording exists yet for this lab" in out
    assert max(len(line) for line in out.splitlines()) <= 96


def test_gpu_missing_names_each_missing_piece(monkeypatch):
    import importlib.util

    from kvlab.measure.disagg import engine_config, pd_split

    monkeypatch.setattr(engine_config.engine, "vllm_here", lambda: False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "nixl" else real(n, *a)
    )
    missing = pd_split.gpu_missing()
    assert missing[:2] == [
        "vLLM is not installed in this Python",
        "NIXL is not installed in this Python",
    ]
    assert "sees no CUDA GPU" in missing[2]  # this machine's torch is the CPU build
    assert not pd_split.gpu_here()
    assert pd_split.gpu_path_note([]) == ""
