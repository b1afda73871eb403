"""The recorded Problem 8 router comparison on the engine model (data/engine/p08-routers.json) is
current (its key is that of today's code and settings; tools/p08_engine_routers.py remakes it) and
complete, and a small run of the same job agrees with the engine backend run directly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "p08_engine_routers.py"


def _tool():
    spec = importlib.util.spec_from_file_location(TOOL.stem, TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recorded_routers_are_current_and_complete():
    tool = _tool()
    data = json.loads(tool.OUT.read_text())
    assert data["key"] == tool.cache_key(), (
        "data/engine/p08-routers.json is stale: run python tools/p08_engine_routers.py"
    )
    assert data["seeds"] == list(tool.SEEDS) and data["requests"] == tool.REQUESTS
    want = tool.cases()
    assert set(data["cases"]) == set(want)
    for case, (rate, util, rules, n) in want.items():
        got = data["cases"][case]
        assert got["rate_rps"] == rate and got["gpu_memory_utilization"] == util
        assert got["requests"] == n
        assert set(got["rules"]) == set(rules)
        for vals in got["rules"].values():
            assert all(len(v) == len(tool.SEEDS) for v in vals.values())
            assert all(0 <= h <= 1 for h in vals["hit_rate"])
            assert all(t > 0 for t in vals["ttft_p95_s"])
    tight = data["cases"]["tight"]["pool_tokens"]
    assert tool.TIGHT_POOL_TOKENS <= tight < tool.TIGHT_POOL_TOKENS * 1.01


def test_key_changes_with_the_settings(monkeypatch):
    tool = _tool()
    k = tool.cache_key()
    assert tool.cache_key() == k
    monkeypatch.setattr(tool, "SEEDS", (0,))
    assert tool.cache_key() != k


def test_one_job_is_the_engine_backend_itself():
    from kvlab import queueing
    from kvlab.engine_model import EngineCalibration

    tool = _tool()
    monkey = {"WARMUP_S": 5.0}
    for k, v in monkey.items():
        setattr(tool, k, v)
    kw = dict(policy="sticky")
    case, rule, seed, vals, _ = tool._one(("roomy", "sticky", kw, 20.0, 0.9, 300, 1))
    w = queueing.ChatSessions(requests=300, seed=1)
    r = queueing.simulate(w, rate_rps=20.0, seed=1, warmup_s=5.0, cost=EngineCalibration(),
                          cache_tokens=None, **kw)  # fmt: skip
    assert vals["hit_rate"] == pytest.approx(r.hit_rate)
    assert vals["ttft_p95_s"] == pytest.approx(r.percentile("ttft", 95))
