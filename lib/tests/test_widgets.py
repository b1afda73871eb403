"""The routing demo widget, driven headlessly."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

pytest.importorskip("ipywidgets")

from kvlab import widgets  # noqa: E402


@pytest.fixture(scope="module")
def demo():
    return widgets.routing_demo(requests=3_000, warmup=500)


def test_initial_state(demo):
    assert set(demo.results) == {"random", "round_robin", "sticky", "cache_aware"}
    assert demo.fig is not None and len(demo.fig.axes) == 2
    c = demo.controls
    assert (c["replicas"].min, c["replicas"].max) == (1, 32)
    assert (c["cache_tokens"].min, c["cache_tokens"].max) == (10_000, 1_000_000)
    assert (c["conversations"].min, c["conversations"].max) == (10, 5_000)
    assert (c["skew"].min, c["skew"].max) == (0.0, 2.0)


def test_slider_change_recomputes(demo):
    before = demo.results["cache_aware"].hit_rate
    n = demo.updates
    demo.controls["cache_tokens"].value = 20_000
    assert demo.updates == n + 1
    assert demo.results["cache_aware"].hit_rate < before
    demo.controls["replicas"].value = 4
    assert len(demo.results["sticky"].prefill_tokens) == 4
    assert len(demo.fig.axes[1].patches) == 4


def test_policy_change_redraws_right_panel(demo):
    demo.controls["policy"].value = "sticky"
    text = " ".join(t.get_text() for t in demo.fig.axes[1].texts)
    assert f"{demo.results['sticky'].imbalance:.2f}x" in text
    assert "Sticky" in demo.fig.axes[1].get_title()


def test_workload_controls(demo):
    demo.controls["skew"].value = 0.0
    demo.controls["conversations"].value = 50
    w = next(iter(demo._workloads.values()))
    assert w.skew == 0.0 and w.conversations == 50
