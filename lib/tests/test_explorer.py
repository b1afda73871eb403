"""The routing explorer's grid: kvlab's own numbers, cached under a key that notices changes."""

import json

import numpy as np
import pytest

from kvlab import explorer, fleet, workload
from kvlab.seeds import summarise


@pytest.fixture
def tiny(monkeypatch):
    """A small grid, quick to compute."""
    monkeypatch.setattr(
        explorer,
        "GRID",
        {
            "replicas": (1, 2),
            "cache_tokens": (20_000, 200_000),
            "conversations": (20,),
            "skew": (0.0, 1.0),
        },
    )
    monkeypatch.setattr(
        explorer,
        "DEFAULTS",
        {"replicas": 2, "cache_tokens": 200_000, "conversations": 20, "skew": 1.0},
    )
    monkeypatch.setattr(explorer, "REQUESTS", 600)
    monkeypatch.setattr(explorer, "WARMUP", 100)
    monkeypatch.setattr(explorer, "LINE_SEEDS", (0, 1, 2))


def test_formats_match_the_text():
    assert explorer.fmt_hit(summarise([0.52, 0.525, 0.518])) == "52 ± 0.4 %"
    assert explorer.fmt_hit(summarise([0.517])) == "52 %"
    assert explorer.fmt_imbalance(summarise([1.7, 1.9])) == "1.80 ± 0.14x"
    assert explorer.fmt_imbalance(summarise([1.234])) == "1.23x"


def test_key_depends_on_grid_and_source(tiny, monkeypatch):
    k = explorer.cache_key()
    assert k == explorer.cache_key()
    monkeypatch.setitem(explorer.GRID, "skew", (0.0, 0.5))
    k2 = explorer.cache_key()
    assert k2 != k
    # a changed simulator function changes the key
    sources = list(explorer._SIM_SOURCES) + [(workload, ("stream_ids", "ChatWorkload"))]
    monkeypatch.setattr(explorer, "_SIM_SOURCES", tuple(sources))
    assert explorer.cache_key() != k2


def test_grid_is_kvlab_and_cached(tiny, tmp_path):
    path = tmp_path / "grid.json"
    data = explorer.routing_grid(path, processes=2)
    assert data["rebuilt"] and path.is_file()
    assert len(data["rows"]) == len(explorer.grid_settings()) * 4
    # every point is the mean over the seeds of kvlab's runs, with their spread
    row = explorer.lookup(data, 1, 20_000, 20, 0.0)
    assert all(r["n"] == 3 for r in row.values())
    runs = [
        fleet.simulate_all(
            workload.ChatWorkload(conversations=20, skew=0.0, requests=600, seed=s),
            replicas=2,
            cache_tokens=20_000,
            warmup=100,
            seed=s,
        )
        for s in (0, 1, 2)
    ]
    row = explorer.lookup(data, 2, 20_000, 20, 0.0)
    for p in runs[0]:
        hits = summarise([r[p].hit_rate for r in runs])
        assert row[p]["h"] == pytest.approx(hits.mean, abs=1e-5)
        assert row[p]["hs"] == pytest.approx(hits.std, abs=1e-5)
        assert row[p]["hl"] == explorer.fmt_hit(hits)
        imb = np.mean([r[p].imbalance for r in runs])
        assert row[p]["i"] == pytest.approx(imb, abs=1e-4)
        pre = np.mean([r[p].prefill_tokens for r in runs], axis=0)
        assert row[p]["pre"] == pytest.approx(pre / 1e6, abs=1e-4)
    # the defaults are means over the line seeds
    at = explorer.lookup(data, **explorer.DEFAULTS)
    per_seed = [
        fleet.simulate(
            workload.ChatWorkload(conversations=20, skew=1.0, requests=600, seed=s),
            policy="sticky",
            replicas=2,
            cache_tokens=200_000,
            warmup=100,
            seed=s,
        ).imbalance
        for s in (0, 1, 2)
    ]
    assert at["sticky"]["n"] == 3
    assert at["sticky"]["il"] == explorer.fmt_imbalance(summarise(per_seed))
    # loaded, not recomputed, while the key matches
    again = explorer.routing_grid(path)
    assert not again["rebuilt"] and again["rows"] == data["rows"]


def test_stale_cache_is_rebuilt(tiny, tmp_path):
    path = tmp_path / "grid.json"
    explorer.routing_grid(path, processes=1)
    stored = json.loads(path.read_text())
    stored["key"] = "0" * 64
    stored["rows"] = stored["rows"][:1]
    path.write_text(json.dumps(stored))
    data = explorer.routing_grid(path, processes=1)
    assert data["rebuilt"] and len(data["rows"]) == len(explorer.grid_settings()) * 4
    path.write_text("not json")
    assert explorer.routing_grid(path, processes=1)["rebuilt"]


def test_page_table_round_trips(tiny, tmp_path):
    data = explorer.routing_grid(tmp_path / "g.json", processes=1)
    rows = explorer.read_page_csv(explorer.page_csv(data))
    assert len(rows) == len(data["rows"])
    for a, b in zip(data["rows"], rows, strict=True):
        assert (a["R"], a["C"], a["N"], a["S"], a["p"], a["hl"], a["il"], a["n"]) == (
            b["R"],
            b["C"],
            b["N"],
            b["S"],
            b["p"],
            b["hl"],
            b["il"],
            b["n"],
        )
        assert b["h"] == pytest.approx(a["h"], abs=1e-4)
        assert b["pre"] == pytest.approx(a["pre"], abs=6e-4)


def test_lookup_rejects_off_grid(tiny, tmp_path):
    data = explorer.routing_grid(tmp_path / "g.json", processes=1)
    with pytest.raises(ValueError, match="grid point"):
        explorer.lookup(data, 3, 20_000, 20, 0.0)


def test_spec_controls_and_no_cdn():
    pytest.importorskip("altair")
    spec = explorer.routing_explorer_spec("x.json")
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"policy", "replicas", "cache", "conversations", "skew"}
    for p in params.values():
        assert p["bind"]["name"].strip(), p  # every control has a visible label
    assert params["replicas"]["bind"]["options"] == [1, 2, 4, 8, 16, 32]
    assert params["skew"]["bind"]["min"] == 0 and params["skew"]["bind"]["max"] == 2
    assert params["replicas"]["value"] == explorer.DEFAULTS["replicas"]
    assert params["policy"]["bind"]["labels"] == [
        "Random",
        "Round-robin",
        "Sticky hash",
        "Cache-aware",
    ]
    html = explorer.routing_explorer_html()
    assert "http://" not in html and "https://" not in html.replace(
        "https://vega.github.io/schema", ""
    )
    assert 'type="module" src="../_static/kvlab-vega.js"' in html


def test_fingerprint_ignores_docstrings_hints_and_comments_only():
    a = "def f(x: int) -> int:\n    '''Doc.'''\n    y: int = x + 1  # note\n    return y\n"
    b = "def f(x):\n    y = x + 1\n    return y\n"
    c = "def f(x):\n    y = x + 2\n    return y\n"

    def fp(src):
        import ast

        return ast.dump(
            explorer._DropNonSemantics().visit(ast.parse(src)), include_attributes=False
        )

    assert fp(a) == fp(b)
    assert fp(b) != fp(c)  # a change in what runs changes it


def test_committed_grid_is_current():
    """The committed grid must match the simulator: a stale one is recomputed during the book
    build (about 12 minutes on two cores). Fix: ``python -c 'from kvlab import explorer;
    explorer.routing_grid(rebuild=True)'`` and commit data/explorer/routing-grid.json."""
    data = json.loads(explorer.CACHE.read_text(encoding="utf-8"))
    assert data["key"] == explorer.cache_key(), "data/explorer/routing-grid.json is stale"
