"""The M/G/1 queue's mean wait, the check the simulator's single-replica runs are held to."""

from __future__ import annotations

from .. import calc
from .._validate import check_number, positive

_INF = float("inf")


def mg1_wait_s(rate_rps: float, mean_service_s: float, second_moment_s2: float) -> float:
    """Pollaczek-Khinchine mean wait in an M/G/1 FIFO queue: Wq = lambda E[S^2] / (2 (1 - rho)),
    rho = lambda E[S] (inf when rho >= 1)."""
    lam = positive("rate_rps", rate_rps)
    es = positive("mean_service_s", mean_service_s)
    es2 = check_number("second_moment_s2", second_moment_s2, lo=es * es * (1 - 1e-12))
    if lam * es >= 1:
        return _INF
    return calc.evaluate("mg1_wait", **{"lambda": lam}, E_S=es, E_S2=es2)
