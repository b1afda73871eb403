"""The live routing demo (ipywidgets 7.7 as on Colab, and 8.x).

``routing_demo()`` shows controls (policy, replicas, cache per replica, conversations, skew) and
two charts: the token hit rate of all four policies with the chosen one highlighted, and the
prefill tokens per replica under the chosen policy with the mean dashed and the imbalance written
on it. Each change re-runs all four policies (about a quarter of a second at the defaults).
The returned :class:`RoutingDemo` keeps ``results`` and ``fig`` so tests can drive it headlessly.
"""

from __future__ import annotations

from . import fleet, workload

__all__ = ["RoutingDemo", "routing_demo"]

DEFAULTS = dict(policy="cache_aware", replicas=8, cache_tokens=400_000, conversations=500, skew=1.0)


class RoutingDemo:
    """Controls + output; ``update()`` recomputes (called by every control change)."""

    def __init__(self, requests: int = 20_000, warmup: int = 5_000, seed: int = 0, **values):
        import ipywidgets as W

        from .plots import POLICY_LABELS, use_style

        use_style()
        v = {**DEFAULTS, **values}
        self.requests, self.warmup, self.seed = requests, warmup, seed
        style = {"description_width": "150px"}
        layout = W.Layout(width="420px")
        self.controls = {
            "policy": W.Dropdown(
                options=[(POLICY_LABELS[p], p) for p in POLICY_LABELS],
                value=v["policy"],
                description="Routing policy",
                style=style,
                layout=layout,
            ),
            "replicas": W.IntSlider(
                value=v["replicas"],
                min=1,
                max=32,
                step=1,
                description="Replicas",
                style=style,
                layout=layout,
                continuous_update=False,
            ),
            "cache_tokens": W.IntSlider(
                value=v["cache_tokens"],
                min=10_000,
                max=1_000_000,
                step=10_000,
                description="Cache / replica (tokens)",
                style=style,
                layout=layout,
                continuous_update=False,
            ),
            "conversations": W.IntSlider(
                value=v["conversations"],
                min=10,
                max=5_000,
                step=10,
                description="Conversations",
                style=style,
                layout=layout,
                continuous_update=False,
            ),
            "skew": W.FloatSlider(
                value=v["skew"],
                min=0.0,
                max=2.0,
                step=0.1,
                description="Popularity skew",
                style=style,
                layout=layout,
                continuous_update=False,
            ),
        }
        self.status = W.HTML()
        self.out = W.Output()
        self.ui = W.VBox([W.VBox(list(self.controls.values())), self.status, self.out])
        self.results = None
        self.fig = None
        self._workloads: dict = {}
        self.updates = 0
        for c in self.controls.values():
            c.observe(self._on_change, names="value")
        self.update()

    def values(self) -> dict:
        return {k: c.value for k, c in self.controls.items()}

    def _workload(self, conversations, skew):
        key = (conversations, round(skew, 6))
        if key not in self._workloads:
            self._workloads = {
                key: workload.ChatWorkload(
                    conversations=conversations, skew=skew, requests=self.requests, seed=self.seed
                )
            }
        return self._workloads[key]

    def _on_change(self, change):
        self.update()

    def update(self):
        """Recompute all four policies for the current control values and redraw."""
        import time

        import matplotlib.pyplot as plt

        from .plots.routing import demo_panels

        v = self.values()
        t0 = time.perf_counter()
        w = self._workload(v["conversations"], v["skew"])
        self.results = fleet.simulate_all(
            w,
            replicas=v["replicas"],
            cache_tokens=v["cache_tokens"],
            warmup=self.warmup,
            seed=self.seed,
        )
        elapsed = time.perf_counter() - t0
        if self.fig is not None:
            plt.close(self.fig)
        with plt.ioff() if hasattr(plt, "ioff") else _null():
            self.fig = demo_panels(self.results, v["policy"])
        self.out.clear_output(wait=True)
        with self.out:
            from IPython.display import display

            display(self.fig)
        self.status.value = (
            f"<small>{len(w):,} requests ({self.warmup:,} warm-up) x 4 "
            f"policies in {elapsed:.2f} s</small>"
        )
        self.updates += 1

    def _ipython_display_(self):
        from IPython.display import display

        display(self.ui)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def routing_demo(**values) -> RoutingDemo:
    """Build and return the demo; display it by leaving it as a cell's last expression."""
    return RoutingDemo(**values)
