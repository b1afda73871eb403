"""How much a colocated replica's prefill chunks slow its decode steps, token by token.

:mod:`kvlab.pdsim` reports TPOT as each request's *mean* time per output token. A mean hides
stalls: a request whose steps take 25 ms except for a few 80 ms steps that carry a prefill chunk
can meet a 40 ms TPOT target while its reader watches the text stop. Production targets are often
set on tail inter-token latency (ITL) instead. This module replays :mod:`kvlab.pdsim`'s own
simulation and logs every decode step: its duration, how many requests it advanced (each of them
waited that long for its next token) and whether it also computed prefill tokens (a mixed step).

- :func:`mixed_step_seconds` and :func:`mixed_step_slowdown`: one step, from the cost model
  (additive: a mixed step is the prefill chunk's time plus the decode step's).
- :func:`decode_steps`: the simulation's step log (the simulator's code is untouched: its replicas
  are swapped for a subclass that records each step while the run lasts).
- :class:`Gaps` / :func:`gaps`: the inter-token gaps of that log, weighted by requests, with
  percentiles, the share that crossed a target and the share of tokens that waited on a mixed step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import calc, pdsim
from ._validate import check_int, check_number, non_negative, positive
from .assumptions import COST, CostModel


def mixed_step_seconds(batch: int, chunk_tokens: int, cost: CostModel = COST) -> float:
    """One colocated step that decodes ``batch`` requests and prefills ``chunk_tokens`` prompt
    tokens: the decode step plus the chunk, the cost model's additive assumption."""
    batch = check_int("batch", batch, lo=0)
    chunk_tokens = check_int("chunk_tokens", chunk_tokens, lo=0)
    decode = calc.decode_step_seconds(batch, cost.decode_base_s, cost.decode_per_request_s)
    return decode + chunk_tokens * cost.prefill_s_per_token


def mixed_step_slowdown(batch: int, chunk_tokens: int, cost: CostModel = COST) -> float:
    """How many times longer a decode step of ``batch`` requests takes when it also carries a
    ``chunk_tokens`` prefill chunk."""
    decode = calc.decode_step_seconds(batch, cost.decode_base_s, cost.decode_per_request_s)
    return mixed_step_seconds(batch, chunk_tokens, cost) / decode


@dataclass
class StepLog:
    """Every decode step of a run: start time (s), duration (s), requests advanced, mixed or not."""

    start_s: np.ndarray
    seconds: np.ndarray
    batch: np.ndarray
    mixed: np.ndarray


class _LoggingReplica(pdsim.Replica):
    """A :class:`kvlab.pdsim.Replica` that notes each decode step (or run of identical steps)."""

    log: list[tuple[float, float, int, int, bool]]

    def _end(self, arg) -> None:
        token, steps, _done, pre_tokens = arg
        if token == self._token and steps:
            per_step = (self.loop.now - self._started) / steps
            self.log.append((self._started, per_step, len(self.running), steps, pre_tokens > 0))
        super()._end(arg)


@contextlib.contextmanager
def _logging_replicas(log: list) -> Iterator[None]:
    cls = type("_Logging", (_LoggingReplica,), {"log": log})
    saved = pdsim.reference.Replica
    pdsim.reference.Replica = cls  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        pdsim.reference.Replica = saved  # type: ignore[misc,assignment]


def decode_steps(
    system: pdsim.Colocated | pdsim.Disaggregated,
    traffic: pdsim.Traffic,
    cost: CostModel = COST,
    warmup: float = 0.2,
) -> StepLog:
    """Run :func:`kvlab.pdsim.simulate` and return its decode steps after the first ``warmup``
    share of the arrivals' time span (steps from an empty system flatter it)."""
    check_number("warmup", warmup, lo=0, hi=1, hi_open=True)
    rows: list[tuple[float, float, int, int, bool]] = []
    with _logging_replicas(rows):
        result = pdsim.Simulation(system, traffic, cost).run()
    t0 = float(result.arrival_s[0] + warmup * (result.arrival_s[-1] - result.arrival_s[0]))
    t1 = float(result.arrival_s[-1])
    start, secs, batch, steps, mixed = (np.array(c) for c in zip(*rows, strict=True))
    keep = (start >= t0) & (start < t1) & (batch > 0)
    reps = steps[keep]
    return StepLog(
        np.repeat(start[keep], reps),
        np.repeat(secs[keep], reps),
        np.repeat(batch[keep], reps),
        np.repeat(mixed[keep], reps).astype(bool),
    )


@dataclass
class Gaps:
    """Inter-token gaps: one value per decode step, weighted by the requests it advanced."""

    seconds: np.ndarray
    weight: np.ndarray
    mixed: np.ndarray

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0 to 100) of the gap a token waited, over tokens."""
        check_number("q", q, lo=0, hi=100)
        order = np.argsort(self.seconds)
        cum = np.cumsum(self.weight[order]) / self.weight.sum()
        return float(self.seconds[order][np.searchsorted(cum, q / 100, side="left")])

    def mean(self) -> float:
        return float(np.average(self.seconds, weights=self.weight))

    def share_over(self, target_s: float) -> float:
        """Share of tokens that waited longer than ``target_s`` for their step."""
        positive("target_s", target_s)
        return float(self.weight[self.seconds > target_s].sum() / self.weight.sum())

    def share_mixed(self) -> float:
        """Share of tokens produced by a step that also prefilled."""
        return float(self.weight[self.mixed].sum() / self.weight.sum())


def gaps(log: StepLog) -> Gaps:
    """The tokens' inter-token gaps of a step log (every request in a step waits its duration)."""
    non_negative("steps", len(log.seconds))
    if not len(log.seconds):
        raise ValueError("the step log holds no decode step: run more requests or less warm-up")
    return Gaps(log.seconds, log.batch.astype(float), log.mixed)
