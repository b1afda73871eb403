"""An engine job run in this Python stops at its time-out like one in a subprocess."""

from __future__ import annotations

import time

import pytest

from kvlab.measure.prefix import engine_jobs, runs
from kvlab.measure.serving.engine import EngineError


def test_in_process_job_stops_at_its_time_out(monkeypatch, tmp_path):
    cleaned = []

    def slow(**_):
        try:
            time.sleep(30)
        finally:
            cleaned.append(True)  # as an engine's shutdown would run
        return {}

    monkeypatch.setitem(engine_jobs.JOBS, "lab1", slow)
    monkeypatch.setattr(runs, "set_process_env", lambda model: None)  # no engine settings leak
    monkeypatch.setenv("KVLAB_ENGINE_LOCK", str(tmp_path / "engine.lock"))
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match="ran past its time limit of 1 s"):
        runs.run_job("lab1", {}, in_process=True, timeout_s=1)
    assert time.perf_counter() - t0 < 10
    assert cleaned == [True]


def test_in_process_job_within_its_time_out_returns(monkeypatch, tmp_path):
    monkeypatch.setitem(engine_jobs.JOBS, "lab1", lambda **_: {"ok": 1})
    monkeypatch.setattr(runs, "set_process_env", lambda model: None)
    monkeypatch.setenv("KVLAB_ENGINE_LOCK", str(tmp_path / "engine.lock"))
    out = runs.run_job("lab1", {}, in_process=True, timeout_s=30)
    assert out == {"ok": 1, "where": "in-process"}
