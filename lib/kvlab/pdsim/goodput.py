"""Goodput after DistServe: the highest rate whose steady-state attainment meets a target, over
seeds (:func:`max_rate`, :func:`goodput_table`), single trials for grids (:func:`point`), and the
simulator's speed (:func:`bench`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validate import check_int, check_number, positive
from ..assumptions import CostModel
from ..costs import BOOK
from .capacity import capacity_bound
from .runs import (
    WARMUP_LIFETIMES,
    WINDOW_LIFETIMES,
    Window,
    lifetime_s,
    simulate,
    steady_run,
    window_for,
)
from .systems import Colocated, Disaggregated, system_for
from .traffic import Traffic


def _with_rate(traffic: Traffic, rate: float, seed: int | None = None) -> Traffic:
    fields_ = {**traffic.__dict__, "rate_rps": rate}
    if seed is not None:
        fields_["seed"] = seed
    return Traffic(**fields_)


def max_rate(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    target: float = 0.9,
    guess_rps: float | None = None,
    rtol: float = 0.02,
    window: Window | None = None,
    cost: CostModel | str = BOOK,
) -> float:
    """DistServe's goodput for one seed (``traffic.seed``): the highest arrival rate whose
    steady-state SLO attainment stays >= ``target``, to a relative tolerance ``rtol``.

    The search starts at ``guess_rps`` (default: 80 % of the capacity bound), steps up or down
    until the target is crossed, then bisects. It never goes above the capacity bound over
    ``target``, which no rate can beat with fixed lengths (:class:`CapacityBound`; twice that
    with lognormal lengths); returns 0 when even a hundredth of the bound misses.
    """
    check_number("target", target, lo=0, hi=1, lo_open=True)
    check_number("rtol", rtol, lo=1e-4, hi=0.5)
    cap = capacity_bound(system, traffic, tpot_slo_s, cost).rps / target
    if traffic.prompt_dist != "fixed" or traffic.output_dist != "fixed":
        cap *= 2  # the bound uses mean lengths: only a guide for varied lengths
    window = window or window_for(traffic, ttft_slo_s, tpot_slo_s)
    if guess_rps is not None:
        positive("guess_rps", guess_rps)
    guess = min(guess_rps or 0.8 * cap, cap)

    def ok(rate: float) -> bool:
        t = _with_rate(traffic, rate)
        return steady_run(system, t, window, cost).attainment(ttft_slo_s, tpot_slo_s) >= target

    step = 1.0 + 2 * rtol if guess_rps is not None else 1.25
    lo: float | None  # the highest rate known to pass, once found
    hi: float | None  # the lowest rate known to fail, once found
    if ok(guess):
        lo, hi = guess, None
        while hi is None:
            nxt = min(lo * step, cap)
            if nxt <= lo * (1 + rtol / 2):
                return lo  # at the bound
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        lo, hi = None, guess
        while lo is None:
            nxt = hi / step
            if nxt < cap / 100:
                return 0.0
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def attainment_by_window(
    system: Colocated | Disaggregated,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    lifetimes=(1, 2, 5, 10, 20),
    warmup_lifetimes: float = WARMUP_LIFETIMES,
    cost: CostModel | str = BOOK,
) -> dict[float, float]:
    """Attainment over counted windows of each length in ``lifetimes`` (request lifetimes), all
    starting after the same warm-up, from one run as long as the longest: how long a window has
    to be for the figure to settle."""
    lifetimes = sorted(float(positive("lifetimes", x)) for x in lifetimes)
    life = lifetime_s(traffic, ttft_slo_s, tpot_slo_s)
    window = Window(warmup_lifetimes * life, lifetimes[-1] * life, life)
    r = steady_run(system, traffic, window, cost)
    ok = (r.ttft_s <= ttft_slo_s) & (r.tpot_s <= tpot_slo_s)
    out = {}
    for n in lifetimes:
        w = (r.arrival_s >= window.warmup_s) & (r.arrival_s < window.warmup_s + n * life)
        out[n] = float(ok[w].mean()) if w.any() else math.nan
    return out


def _seed_rate(args) -> float:
    system, traffic, ttft, tpot, target, guess, rtol, window, cost = args
    return max_rate(system, traffic, ttft, tpot, target, guess, rtol, window, cost)


def _map(fn, items: list, processes: int) -> list:
    if processes <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(min(processes, len(items))) as pool:
        return pool.map(fn, items, chunksize=1)


def goodput_table(
    systems,
    traffic: Traffic,
    ttft_slo_s: float,
    tpot_slo_s: float,
    target: float = 0.9,
    seeds=None,
    rtol: float = 0.02,
    window: Window | None = None,
    processes: int = 1,
    cost: CostModel | str = BOOK,
):
    """Steady-state goodput of each system over ``seeds`` (default
    :data:`kvlab.seeds.DEFAULT_SEEDS`), one row per system.

    Columns: ``system``, ``prefill`` and ``decode`` (0 for colocated), ``replicas``,
    ``prefill_gpus``, ``decode_gpus`` (P : D in GPUs; 0 for colocated) and ``gpus``,
    ``goodput`` (a :class:`kvlab.seeds.Spread` of the per-seed rates, requests/s), its
    ``goodput_rps`` mean, ``std``, ``lo`` and ``hi``, and ``capacity_rps`` (the capacity bound).
    The first seed's search starts from the capacity bound; the other seeds start from its
    result, which saves most of their trials. ``processes`` > 1 spreads the trials over that
    many worker processes.
    """
    import pandas as pd

    from .. import seeds as seeds_mod

    systems = list(systems)
    seed_list = list(seeds_mod.DEFAULT_SEEDS if seeds is None else seeds)
    if not seed_list:
        raise ValueError("seeds must hold at least one seed, got none")
    processes = check_int("processes", processes, lo=1)
    windows = [window or window_for(traffic, ttft_slo_s, tpot_slo_s) for _ in systems]
    first = _map(
        _seed_rate,
        [
            (
                s,
                _with_rate(traffic, traffic.rate_rps, seed_list[0]),
                ttft_slo_s,
                tpot_slo_s,
                target,
                None,
                rtol,
                w,
                cost,
            )
            for s, w in zip(systems, windows, strict=True)
        ],
        processes,
    )
    rest_args = [
        (
            s,
            _with_rate(traffic, traffic.rate_rps, seed),
            ttft_slo_s,
            tpot_slo_s,
            target,
            g if g > 0 else None,
            rtol,
            w,
            cost,
        )
        for s, w, g in zip(systems, windows, first, strict=True)
        for seed in seed_list[1:]
    ]
    rest = _map(_seed_rate, rest_args, processes)
    per = len(seed_list) - 1
    rows = []
    for i, system in enumerate(systems):
        values = [first[i], *rest[i * per : (i + 1) * per]]
        spread = seeds_mod.summarise(values, seed_list)
        p, d = (system.prefill, system.decode) if isinstance(system, Disaggregated) else (0, 0)
        gp, gd = system.gpu_split if isinstance(system, Disaggregated) else (0, 0)
        rows.append(
            {
                "system": system.label,
                "prefill": p,
                "decode": d,
                "replicas": system.total,
                "prefill_gpus": gp,
                "decode_gpus": gd,
                "gpus": system.gpus,
                "goodput": spread,
                "goodput_rps": spread.mean,
                "std": spread.std,
                "lo": spread.lo,
                "hi": spread.hi,
                "capacity_rps": capacity_bound(system, traffic, tpot_slo_s, cost).rps,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Point:
    """One steady-state trial: attainment (share) and goodput (requests/s meeting both targets)."""

    attainment: float
    goodput_rps: float
    capacity_rps: float


def point(
    rate_rps: float,
    prompt_tokens: float,
    output_tokens: float,
    hit_rate: float,
    split: int | tuple[int, int],
    seed: int = 0,
    ttft_slo_s: float = 1.0,
    tpot_slo_s: float = 0.040,
    window_lifetimes: float = WINDOW_LIFETIMES,
    cost: CostModel | str = BOOK,
) -> Point:
    """One steady-state trial of the book's systems, for grids of runs: ``split`` is ``n``
    colocated replicas (chunked prefill) or a ``(prefill, decode)`` pair. Fixed lengths."""
    traffic = Traffic(
        rate_rps=rate_rps,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        hit_rate=hit_rate,
        seed=seed,
    )
    system = system_for(split)
    window = window_for(traffic, ttft_slo_s, tpot_slo_s, window_lifetimes=window_lifetimes)
    r = steady_run(system, traffic, window, cost)
    return Point(
        r.attainment(ttft_slo_s, tpot_slo_s),
        r.goodput_rps(ttft_slo_s, tpot_slo_s),
        capacity_bound(system, traffic, tpot_slo_s, cost).rps,
    )


def bench(requests: int = 100_000, seed: int = 0) -> dict[str, float]:
    """Wall-clock seconds to simulate ``requests`` requests on 8 replicas, colocated (chunked, 14
    requests/s) and disaggregated 5 : 3 (15 requests/s), lognormal lengths. For ``make bench``."""
    import time

    requests = check_int("requests", requests, lo=1)
    out: dict[str, float] = {"requests": float(requests)}
    for name, system, rate in (
        ("colocated", Colocated(8), 14.0),
        ("disaggregated", Disaggregated(5, 3), 15.0),
    ):
        traffic = Traffic(
            rate_rps=rate,
            requests=requests,
            prompt_dist="lognormal",
            output_dist="lognormal",
            seed=seed,
        )
        start = time.perf_counter()
        simulate(system, traffic)
        seconds = time.perf_counter() - start
        out[f"{name}_s"] = seconds
        out[f"{name}_requests_per_s"] = requests / seconds
    return out
