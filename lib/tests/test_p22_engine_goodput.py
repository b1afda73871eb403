"""The recorded Problem 22 goodput on the engine model (data/engine/p22-goodput.json) is current:
its key is that of today's code, data and settings (tools/p22_engine_goodput.py remakes it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "p22_engine_goodput.py"


def _load(path: Path):
    """The tool at ``path`` as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tool():
    return _load(TOOL)


def test_recorded_goodput_is_current():
    tool = _tool()
    data = json.loads(tool.OUT.read_text())
    assert data["key"] == tool.cache_key(), (
        "data/engine/p22-goodput.json is stale: run python tools/p22_engine_goodput.py"
    )
    assert data["rtol"] == tool.RTOL and data["seeds"] == list(tool.SEEDS)
    cases = {(r["case"], r["model"]) for r in data["rows"]}
    assert cases == {(c, m) for c in tool.CASES for m in ("engine", "engine + host", "measured")}
    for r in data["rows"]:
        assert len(r["per_seed_rps"]) == len(tool.SEEDS)
        assert all(g > 0 for g in r["per_seed_rps"])


def test_key_changes_with_the_settings(monkeypatch):
    tool = _tool()
    k = tool.cache_key()
    assert tool.cache_key() == k
    assert tool.cache_key(seeds=(0,)) != k
    monkeypatch.setattr(tool, "RTOL", 0.5)
    assert tool.cache_key() != k


SMALL = ROOT / "tools" / "p22_engine_small.py"


def _small():
    return _load(SMALL)


def test_recorded_small_fleet_is_current():
    """data/engine/p22-small.json (tools/p22_engine_small.py) is current and complete."""
    tool = _small()
    data = json.loads(tool.OUT.read_text())
    assert data["key"] == tool.cache_key(), (
        "data/engine/p22-small.json is stale: run python tools/p22_engine_small.py"
    )
    cases = {(r["case"], r["model"]) for r in data["rows"]}
    assert cases == {(c, m) for c in tool.CASES for m in tool.MODELS}
    for case, (ptp, dtp) in tool.CASES.items():
        names = {r["system"] for r in data["rows"] if r["case"] == case}
        assert len(names) == len(tool.systems(ptp, dtp))
    for r in data["rows"]:
        assert len(r["per_seed_rps"]) == len(data["seeds"]) and all(
            g > 0 for g in r["per_seed_rps"]
        )


def test_small_key_changes_with_the_seeds():
    tool = _small()
    assert tool.cache_key(seeds=(0,)) != tool.cache_key()
