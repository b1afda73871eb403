"""One simulation run (:func:`simulate`) and the steady-state trials built on it: warm-up, counted
window and tail in request lifetimes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validate import non_negative, positive
from ..assumptions import CostModel
from ..costs import BOOK
from ..engine_model import EngineCalibration
from . import engine_backend, kernel
from .reference import Replica, Simulation
from .result import SimResult
from .systems import Colocated, Disaggregated
from .traffic import Traffic


def simulate(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    cost: CostModel | str | EngineCalibration = BOOK,
    *,
    _reference: bool = False,
) -> SimResult:
    """Run one simulation and return per-request times: on the compiled loop
    (:mod:`kvlab.pdsim.kernel`), or, with ``_reference=True``, on the event-by-event simulator it
    is checked against (:mod:`kvlab.pdsim.reference`); the two give the same times.
    ``Replica.runs = False`` steps identical decode steps one by one in both. With an
    :class:`kvlab.engine_model.EngineCalibration` as ``cost``, every replica is an engine-model
    engine instead (:mod:`kvlab.pdsim.engine_backend`)."""
    if isinstance(cost, EngineCalibration):
        return engine_backend.run(system, traffic, cost)
    if _reference:
        return Simulation(system, traffic, cost).run()
    return kernel.run(system, traffic, cost, runs=Replica.runs)


# A trial starts from an empty system. Until the decode batches have filled, requests see shorter
# queues and smaller batches than they will later, so a short run flatters every system, and the
# more so the longer its requests live. A steady-state trial therefore warms up for a few request
# lifetimes, counts only the requests that arrive in the window after that, and keeps the arrivals
# coming for one more lifetime so that the last counted requests still share their replicas with
# later ones. The window's length, in lifetimes, was chosen in ``p22-04`` from the attainment
# against window length: by WINDOW_LIFETIMES the mean over seeds has settled.

#: Warm-up before the counted window, in request lifetimes (:func:`lifetime_s`).
WARMUP_LIFETIMES = 2.0
#: Length of the counted window, in request lifetimes.
WINDOW_LIFETIMES = 10.0


def lifetime_s(traffic: Traffic, ttft_slo_s: float, tpot_slo_s: float) -> float:
    """Seconds a long request lives when it just meets both targets: TTFT plus (output - 1) x TPOT,
    with the output length at its 99th percentile for lognormal outputs."""
    positive("ttft_slo_s", ttft_slo_s)
    positive("tpot_slo_s", tpot_slo_s)
    out = traffic.output_tokens
    if traffic.output_dist == "lognormal":
        mu = math.log(out) - traffic.sigma**2 / 2
        out = math.exp(mu + 2.326 * traffic.sigma)
    return ttft_slo_s + max(out - 1, 0) * tpot_slo_s


@dataclass(frozen=True)
class Window:
    """A steady-state trial: arrivals over ``warmup_s + measure_s + tail_s`` seconds, requests
    counted when they arrive in ``[warmup_s, warmup_s + measure_s)``."""

    warmup_s: float
    measure_s: float
    tail_s: float

    def __post_init__(self):
        non_negative("warmup_s", self.warmup_s)
        positive("measure_s", self.measure_s)
        non_negative("tail_s", self.tail_s)

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.measure_s + self.tail_s


def window_for(
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    warmup_lifetimes: float = WARMUP_LIFETIMES,
    window_lifetimes: float = WINDOW_LIFETIMES,
) -> Window:
    """The book's steady-state window for ``traffic``: warm-up and counted window in lifetimes,
    then one lifetime of arrivals that are not counted."""
    life = lifetime_s(traffic, ttft_slo_s, tpot_slo_s)
    non_negative("warmup_lifetimes", warmup_lifetimes)
    positive("window_lifetimes", window_lifetimes)
    return Window(warmup_lifetimes * life, window_lifetimes * life, life)


def steady_run(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    window: Window,
    cost: CostModel | str = BOOK,
) -> SimResult:
    """Simulate ``traffic`` at its rate for ``window.total_s`` seconds of arrivals (its
    ``requests`` is ignored) and count only the requests arriving inside the window."""
    if not isinstance(window, Window):
        raise ValueError(f"window must be a Window, got {window!r}")
    mean = traffic.rate_rps * window.total_s
    n = max(2, math.ceil(mean + 6 * math.sqrt(mean) + 10))
    t = Traffic(**{**traffic.__dict__, "requests": n})
    result = simulate(system, t, cost)
    result.window_s = (window.warmup_s, window.warmup_s + window.measure_s)
    return result


def attainment(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    window: Window | None = None,
    cost: CostModel | str = BOOK,
) -> float:
    """Steady-state share of requests meeting both targets at ``traffic.rate_rps`` (one seed)."""
    window = window or window_for(traffic, ttft_slo_s, tpot_slo_s)
    return steady_run(system, traffic, window, cost).attainment(ttft_slo_s, tpot_slo_s)
