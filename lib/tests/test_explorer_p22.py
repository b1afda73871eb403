"""The Problem 22 explorer's table: kvlab.pdsim's own trials, cached under a key of its source."""

import json

import pytest

from kvlab import pdsim

if not hasattr(pdsim, "point"):  # pragma: no cover - until pdsim.point lands
    pytest.skip("kvlab.pdsim.point is not available", allow_module_level=True)

from kvlab import explorer_p22 as ex  # noqa: E402


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(ex, "BUDGET", 3)
    monkeypatch.setattr(
        ex,
        "GRID",
        {"rate_rps": (2.0,), "prompt_tokens": (1_000,), "output_tokens": (20,), "hit_rate": (0.0,)},
    )


def test_table_is_pdsim_and_cached(tiny, tmp_path):
    path = tmp_path / "p22.json"
    data = ex.p22_grid(path, processes=1)
    assert data["rebuilt"]
    rows = data["rows"]
    assert [r["sys"] for r in rows] == ["colocated x3", "1 : 2", "2 : 1"]
    assert all(r["pf"] or not r["best"] for r in rows)
    assert sum(r["mid"] for r in rows) == 1
    want = [pdsim.point(2.0, 1_000, 20, 0.0, (1, 2), seed=s).attainment for s in ex.SEEDS]
    assert len(ex.SEEDS) == 8
    assert rows[1]["a"] == pytest.approx(sum(want) / len(want), abs=1e-4)
    assert rows[1]["a_lo"] == pytest.approx(min(want), abs=1e-4)
    assert rows[1]["a_hi"] == pytest.approx(max(want), abs=1e-4)
    assert all(r["a_lo"] <= r["a"] <= r["a_hi"] and r["a_sd"] >= 0 for r in rows)
    assert not ex.p22_grid(path)["rebuilt"]


def test_best_split_marking():
    def rows(*a):
        out = [{"sys": "colocated x4", "pf": 0, "a": 1.0}]
        return out + [{"sys": f"{i} : {4 - i}", "pf": i, "a": x} for i, x in enumerate(a, 1)]

    one = ex.mark_best(rows(0.2, 0.95, 0.5))
    assert [r["best"] for r in one] == [0, 0, 1, 0] and one[2]["bl"] == "best split 2 : 2"
    tie = ex.mark_best(rows(1.0, 1.0, 1.0))
    assert [r["mid"] for r in tie] == [0, 0, 1, 0]
    assert tie[2]["bl"] == "best split 2 : 2 (tied: 1 : 3 to 3 : 1)"
    none = ex.mark_best(rows(0.0, 0.0, 0.0))
    assert sum(r["best"] for r in none) == 0 and none[1]["bl"].startswith("no split")


def test_key_changes_with_the_grid(tiny, monkeypatch):
    k = ex.cache_key()
    monkeypatch.setitem(ex.GRID, "hit_rate", (0.0, 0.5))
    assert ex.cache_key() != k


def test_spec_has_labelled_controls():
    pytest.importorskip("altair")
    spec = ex.p22_explorer_spec("x.json")
    names = {p["name"] for p in spec["params"]}
    assert names == {"rate", "prompt", "output", "hit"}
    assert all(p["bind"]["name"].strip() for p in spec["params"])
    text = json.dumps(spec)
    # the spread of every bar: a rule from the lowest to the highest seed, the figures on hover
    assert '"a_lo"' in text and '"a_hi"' in text and '"a_sd"' in text
    assert "mean of 8 seeds" in text
    assert "https://" not in ex.p22_explorer_html().replace("https://vega.github.io/schema", "")


def test_committed_grid_is_current():
    """A stale committed grid is recomputed during the build (about a minute on two cores). Fix:
    ``python -c 'from kvlab import explorer_p22; explorer_p22.p22_grid(rebuild=True)'``."""
    data = json.loads(ex.CACHE.read_text(encoding="utf-8"))
    assert data["key"] == ex.cache_key(), "data/explorer/p22-grid.json is stale"
