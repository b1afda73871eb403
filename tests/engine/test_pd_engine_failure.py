"""An engine that fails mid-run leaves no process behind (Lab 3's engines run in the notebook,
which the strict book build executes; this test covers the failure path cheaply)."""

from __future__ import annotations

import shutil

import pytest

from kvlab.measure.disagg import pd_split
from kvlab.measure.serving import engine
from kvlab.measure.serving import procs as pd_procs


def test_an_engine_that_fails_to_start_leaves_no_process(tmp_path):
    model = tmp_path / "broken-model"
    model.mkdir()
    shutil.copy(engine.TINY_MODEL_DIR / "config.json", model / "config.json")  # no weights
    with pytest.raises(RuntimeError, match="producer engine") as info:
        pd_split.run_file_split(
            str(model), [[11] * 100], max_tokens=2, timeout_s=240, workdir=tmp_path / "work"
        )
    assert info.value.pids and info.value.all_gone
    assert pd_procs.gone(info.value.pids)
