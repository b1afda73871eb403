"""A fleet's kernel speed, fitted on its light-load stages only (:func:`fit_kernel_scale`).

The engine model prices a step from aiconfigurator's database of vLLM 0.12.0 kernels (plus the
host term :mod:`kvlab.validate.silicon` fits on single-replica runs). A published fleet may run
another serving release, other flags, other drivers: its pods' steps can take longer or shorter
than that database says, by a factor no fleet-level mechanism (routing, queueing, caching)
explains. This module measures that factor on the stages where only the step time matters, and
leaves every other stage to score the simulator:

* the **light stages** (``qps``, by default :data:`LIGHT_QPS`, 3 and 10 requests/s on 73-capacity's
  eight pods): nothing queues, every scheduler serves the same requests at nearly the same time
  per token, and the measured ITL mean (inference-perf's, about half the time per output token,
  :mod:`kvlab.fleetbench.fleet`) is the pods' decode step time;
* **one number**, :attr:`kvlab.fleetbench.fleet.ScaledStepCosts.kernel_scale` (every kernel time multiplied
  by it, the host's share left as fitted), chosen so that the simulated ITL mean over those
  stages, every scheduler of the spec and ``seeds`` seeds equals the measured mean over the same
  rows. The simulated ITL grows almost linearly with the scale (the host's share is fixed), so a
  secant search from two scales finds it in two or three evaluations (:data:`TOLERANCE`).

The fit is stated before any comparison and never looks at a stage it is scored on; the stages
above the light ones are the test (:func:`kvlab.fleetbench.compare.compare` with ``held_out``).

``python -m kvlab.fleetbench.calibrate SPEC.yaml MEASURED.csv [--seeds N] [--host silicon]
[--jobs J]`` prints the fit (the host term as ``python -m kvlab.fleetbench --host`` sets it;
``silicon`` by default).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from .compare import _num, _qps_key, read_csv
from .fleet import run_scheduler
from .spec import Spec, load_spec

#: the light-load stages of 73-capacity the fit uses (requests/s)
LIGHT_QPS = (3.0, 10.0)
#: the secant search stops when the simulated ITL mean is this close to the measured one (relative)
TOLERANCE = 0.005


@dataclass(frozen=True)
class ScaleFit:
    """The fitted kernel scale and what it rests on (ITL means in seconds)."""

    kernel_scale: float
    qps: tuple[float, ...]
    measured_itl_s: float
    simulated_itl_s: float
    evaluations: tuple[tuple[float, float], ...]  # (scale, simulated ITL mean) in search order
    seeds: int

    def __str__(self) -> str:
        tried = ", ".join(f"{s:.3f} -> {i * 1e3:.2f} ms" for s, i in self.evaluations)
        return (f"kernel_scale = {self.kernel_scale:.3f}: simulated ITL mean "
                f"{self.simulated_itl_s * 1e3:.2f} ms against {self.measured_itl_s * 1e3:.2f} ms "
                f"measured at {', '.join(f'{q:g}' for q in self.qps)} requests/s "
                f"({self.seeds} seeds; tried {tried})")  # fmt: skip


def measured_light_itl(measured: Sequence[dict], qps: Sequence[float], schedulers) -> float:
    """Mean measured ``itl_mean_s`` over the rows at ``qps`` of ``schedulers``; a clear error
    when one is missing."""
    want = {_qps_key(q) for q in qps}
    vals = {}
    for r in measured:
        q = _qps_key(r["stage_qps"])
        if q in want and r["scheduler"] in schedulers:
            vals[(q, r["scheduler"])] = _num(r["itl_mean_s"])
    missing = [(q, s) for q in sorted(want) for s in schedulers if (q, s) not in vals]
    if missing:
        raise ValueError(f"measured: no itl_mean_s for (stage_qps, scheduler) {missing}")
    return float(np.mean(list(vals.values())))


def _light_stages(spec: Spec, qps: Sequence[float]) -> tuple[int, list[int]]:
    """How many stages to run, and the indices of the light ones (each rate's last stage up to
    the last light rate)."""
    rates = [float(s.rate) for s in spec.workload.stages]
    idx = []
    for q in qps:
        hits = [i for i, r in enumerate(rates) if math.isclose(r, float(q))]
        if not hits:
            raise ValueError(f"qps: no stage of the workload runs at {q:g} requests/s "
                             f"(rates: {sorted(set(rates))})")  # fmt: skip
        idx.append(hits[0])
    return max(idx) + 1, idx


def _light_run(args) -> list[float]:
    spec, name, seed, n, idx, frontend_s, host, scale = args
    rows = run_scheduler(spec.cluster, spec.workload, spec.schedulers[name], name=name, seed=seed,
                         stages=n, frontend_s=frontend_s, step_overhead_s=host[0],
                         host_s_per_seq=host[1], kernel_scale=scale)  # fmt: skip
    return [rows[i]["itl_mean_s"] for i in idx]


def simulated_light_itl(spec: Spec, scale: float, *, qps: Sequence[float] = LIGHT_QPS,
                        seeds: int = 2, frontend_s: float = 0.0,
                        host: tuple[float, float] = (0.0, 0.0), jobs: int = 1) -> float:  # fmt: skip
    """Mean simulated ITL (seconds) over the light stages, every scheduler of ``spec`` and seeds
    0 .. ``seeds`` - 1, with the pods' kernels scaled by ``scale`` (``jobs`` processes)."""
    n, idx = _light_stages(spec, qps)
    runs = [(spec, name, seed, n, idx, frontend_s, host, scale)
            for name in spec.schedulers for seed in range(seeds)]  # fmt: skip
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            parts = list(ex.map(_light_run, runs))
    else:
        parts = [_light_run(r) for r in runs]
    return float(np.mean([v for p in parts for v in p]))


def fit_kernel_scale(spec: Spec, measured: Sequence[dict], *, qps: Sequence[float] = LIGHT_QPS,
                     seeds: int = 2, frontend_s: float = 0.0,
                     host: tuple[float, float] = (0.0, 0.0), bracket=(1.0, 1.5),
                     max_evaluations: int = 6, jobs: int = 1) -> ScaleFit:  # fmt: skip
    """The kernel scale at which the simulated ITL mean over the light stages ``qps`` equals the
    measured one (secant search from ``bracket``; every evaluation runs each scheduler of
    ``spec`` for ``seeds`` seeds up to the last light stage)."""
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    _light_stages(spec, qps)  # a rate the workload does not run is named first
    target = measured_light_itl(measured, qps, list(spec.schedulers))

    def f(s: float) -> float:
        return simulated_light_itl(spec, s, qps=qps, seeds=seeds, frontend_s=frontend_s,
                                   host=host, jobs=jobs)  # fmt: skip

    pts = [(float(bracket[0]), f(bracket[0])), (float(bracket[1]), f(bracket[1]))]
    while len(pts) < max_evaluations:
        (s0, y0), (s1, y1) = pts[-2], pts[-1]
        if abs(y1 / target - 1) <= TOLERANCE:
            break
        if y1 == y0:
            raise ValueError(
                "the simulated ITL does not change with the kernel scale: nothing to fit"
            )
        s2 = min(max(s1 + (target - y1) * (s1 - s0) / (y1 - y0), 0.1), 10.0)
        pts.append((s2, f(s2)))
    best = min(pts, key=lambda p: abs(p[1] / target - 1))
    return ScaleFit(best[0], tuple(float(q) for q in qps), target, best[1], tuple(pts), seeds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvlab.fleetbench.calibrate",
                                 description=__doc__.split("\n\n")[0])  # fmt: skip
    ap.add_argument("spec")
    ap.add_argument(
        "measured", help="the measured table (CSV with stage_qps, scheduler, itl_mean_s)"
    )
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--host", choices=("none", "silicon"), default="silicon")
    ap.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    a = ap.parse_args(argv)
    from ..validate import silicon
    from . import __main__ as cli

    spec = load_spec(a.spec)
    host = cli.host_term(spec.cluster) if a.host == "silicon" else (0.0, 0.0)
    fit = fit_kernel_scale(spec, read_csv(a.measured), seeds=a.seeds,
                           frontend_s=silicon.knobs().frontend_s, host=host,
                           jobs=a.jobs)  # fmt: skip
    print(fit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
