"""Run an experiment over several random streams and summarise it: the one place the book turns
seeded runs into "mean +- spread".

Every figure that depends on the random stream (hit rates, imbalances, TTFT percentiles, goodput,
the best P : D split) is reported as the mean over ``seeds`` with its sample standard deviation
(``ddof=1``) and its range. A single seed is shown only where one run is the point.

    >>> from kvlab import seeds
    >>> s = seeds.over_seeds(lambda seed: float(seed), seeds=range(8))
    >>> s.mean, s.n
    (3.5, 8)

``over_seeds`` also accepts a function returning a dict of named figures (or a dataclass or any
object with attributes named in ``fields``); it then returns one :class:`Spread` per name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validate import check_int

__all__ = ["DEFAULT_SEEDS", "Spread", "over_seeds", "summarise"]

#: The seeds every multi-seed figure of the book uses unless it says otherwise.
DEFAULT_SEEDS: tuple[int, ...] = tuple(range(8))


@dataclass(frozen=True)
class Spread:
    """A figure over seeds: ``mean``, sample standard deviation ``std`` (ddof=1; 0 for one seed),
    ``lo`` and ``hi`` (the range), and every seed's ``values`` in seed order."""

    mean: float
    std: float
    lo: float
    hi: float
    values: tuple[float, ...]
    seeds: tuple[int, ...]

    @property
    def n(self) -> int:
        """How many seeds."""
        return len(self.values)

    @property
    def sem(self) -> float:
        """Standard error of the mean, ``std / sqrt(n)``."""
        return self.std / math.sqrt(self.n) if self.n else float("nan")

    def fmt(self, spec: str = ".2f", suffix: str = "") -> str:
        """``"mean ± std"`` with a format spec applied to both, e.g. ``fmt(".1%")``."""
        return f"{format(self.mean, spec)}{suffix} ± {format(self.std, spec)}{suffix}"

    def fmt_range(self, spec: str = ".2f", suffix: str = "") -> str:
        """``"lo-hi"`` with a format spec applied to both ends."""
        return f"{format(self.lo, spec)}{suffix}-{format(self.hi, spec)}{suffix}"

    def differs_from(self, other: Spread, k: float = 2.0) -> bool:
        """True when the means differ by more than ``k`` combined standard errors: the smallest
        gap the book draws a conclusion from."""
        se = math.hypot(self.sem, other.sem)
        return abs(self.mean - other.mean) > k * se if se > 0 else self.mean != other.mean

    def __str__(self) -> str:
        return f"{self.mean:.4g} ± {self.std:.2g} (n={self.n}, range {self.lo:.4g}-{self.hi:.4g})"


def summarise(values: Iterable[float], seeds: Iterable[int] | None = None) -> Spread:
    """A :class:`Spread` of already computed per-seed values."""
    vals = tuple(float(v) for v in values)
    if not vals:
        raise ValueError("values must hold at least one figure, got none")
    sds = tuple(range(len(vals))) if seeds is None else tuple(int(s) for s in seeds)
    if len(sds) != len(vals):
        raise ValueError(f"seeds must have one entry per value ({len(vals)}), got {len(sds)}")
    arr = np.asarray(vals, dtype=float)
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return Spread(float(arr.mean()), std, float(arr.min()), float(arr.max()), vals, sds)


def over_seeds(
    run: Callable[[int], Any],
    seeds: Iterable[int] = DEFAULT_SEEDS,
    fields: Iterable[str] | None = None,
    progress: bool = False,
) -> Any:
    """Call ``run(seed)`` for every seed and summarise.

    ``run`` returns a number (-> one :class:`Spread`), a mapping of names to numbers (-> a dict of
    Spreads), or an object whose attributes ``fields`` names (-> a dict of Spreads). ``progress``
    shows a tqdm bar where tqdm is installed.
    """
    sds = [check_int("seed", s, lo=0) for s in seeds]
    if not sds:
        raise ValueError("seeds must name at least one seed, got none")
    it: Iterable[int] = sds
    if progress:
        try:
            from tqdm.auto import tqdm

            it = tqdm(sds, desc="seeds", leave=False)
        except ImportError:  # pragma: no cover - tqdm is in the book's stack
            pass
    results = [run(s) for s in it]
    first = results[0]
    if fields is not None:
        names = list(fields)
        return {n: summarise([getattr(r, n) for r in results], sds) for n in names}
    if isinstance(first, Mapping):
        return {k: summarise([r[k] for r in results], sds) for k in first}
    return summarise(results, sds)
