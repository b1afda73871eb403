"""inference-perf's ``shared_prefix`` workload and its ``load`` stages, read from its config.

What the benchmark tool does (kubernetes-sigs/inference-perf at 5b1da4d, 2025-09-18, the version
of the day the 73-capacity report was published; file and line ranges below are at that commit):

* **prompts** (``inference_perf/datagen/shared_prefix_datagen.py`` L87-103): for each of
  ``num_groups`` groups one random system prompt of ``system_prompt_len`` tokens, then for each of
  its ``num_prompts_per_group`` prompts a random question of ``question_len`` tokens appended to
  it; the ``num_groups * num_prompts_per_group`` prompts are shuffled once (``random.shuffle``);
* **which prompt a request sends** (L59-61, and ``loadgen/load_generator.py`` L212-216, L131):
  the stage numbers its requests 0, 1, 2, ... and request ``n`` sends prompt ``n % len(prompts)``;
  every stage starts again at prompt 0, so a stage of ``len(prompts)`` requests sends every prompt
  once, in the same shuffled order;
* **how many and when** (``load_generator.py`` L203-216): a stage of ``rate`` and ``duration``
  sends ``int(rate * duration)`` requests, the first times counted from one second after the stage
  starts; ``loadgen/load_timer.py``: ``poisson`` (L66-91) draws a Poisson number of requests for
  each second and spreads them over that second by exponential gaps scaled to sum to one second;
  ``constant`` (L34-63) spreads the whole stage by exponential gaps scaled to sum to ``duration``;
* **stages in turn** (``load_generator.py`` L223-252, L375-386): a stage ends when all its requests
  have finished, then the generator waits ``load.interval`` seconds (default 1.0,
  ``config.py`` L110-117) and starts the next;
* every request asks for ``output_len`` tokens (``max_tokens``) and, with ``ignore_eos``, gets them.

Tokens are random ids that the tool decodes to text and the server tokenizes again, so a real
prompt can be a few tokens longer or shorter than ``system_prompt_len + question_len``; here each
prompt has exactly that many tokens. A prompt's blocks are keyed by what they hold: a block that
lies wholly in the system prompt is shared by the group, any other block is the prompt's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .._validate import check_int, check_number

LOAD_TYPES = ("poisson", "constant")


@dataclass(frozen=True)
class SharedPrefix:
    """inference-perf's ``data.shared_prefix`` (token counts)."""

    num_groups: int
    num_prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int

    def __post_init__(self):
        check_int("num_groups", self.num_groups, lo=1)
        check_int("num_prompts_per_group", self.num_prompts_per_group, lo=1)
        check_int("system_prompt_len", self.system_prompt_len, lo=0)
        check_int("question_len", self.question_len, lo=0)
        check_int("output_len", self.output_len, lo=1)
        if self.prompt_len < 1:
            raise ValueError("system_prompt_len + question_len must be at least 1, got 0")

    @property
    def prompt_len(self) -> int:
        return self.system_prompt_len + self.question_len

    @property
    def num_prompts(self) -> int:
        return self.num_groups * self.num_prompts_per_group


@dataclass(frozen=True)
class Stage:
    """One ``load.stages`` entry: ``rate`` requests per second for ``duration`` seconds."""

    rate: float
    duration: float

    def __post_init__(self):
        check_number("rate", self.rate, lo=0, lo_open=True)
        check_number("duration", self.duration, lo=0, lo_open=True)

    @property
    def num_requests(self) -> int:
        """``int(rate * duration)``, as the load generator counts them."""
        return int(self.rate * self.duration)


@dataclass(frozen=True)
class Workload:
    """The workload part of an inference-perf config: data, load type, stages, stage interval."""

    data: SharedPrefix
    load_type: str
    stages: tuple[Stage, ...]
    interval_s: float = 1.0

    def prompt_order(self, rng: np.random.Generator) -> np.ndarray:
        """The shuffled prompts as (group, prompt within group) rows: row ``n % len`` is what a
        stage's request ``n`` sends."""
        d = self.data
        g = np.repeat(np.arange(d.num_groups), d.num_prompts_per_group)
        p = np.tile(np.arange(d.num_prompts_per_group), d.num_groups)
        order = rng.permutation(d.num_prompts)
        return np.stack([g[order], p[order]], axis=1)

    def stage_times(self, stage: Stage, rng: np.random.Generator) -> np.ndarray:
        """Sending times of a stage's requests, in seconds from the stage's start (the first
        second is the generator's head start)."""
        n = stage.num_requests
        if n == 0:
            return np.zeros(0)
        if self.load_type == "constant":
            gaps = rng.exponential(1 / stage.rate, n)
            return 1.0 + np.cumsum(gaps * (stage.duration / gaps.sum()))
        return 1.0 + np.fromiter(_poisson_times(stage.rate, rng), float, count=n)


def _poisson_times(rate: float, rng: np.random.Generator) -> Iterator[float]:
    """inference-perf's ``PoissonLoadTimer.start_timer``: per second a Poisson count, spread by
    normalised exponential gaps (an endless stream; the caller takes what it needs)."""
    t = 0.0
    while True:
        c = int(rng.poisson(rate))
        if c < 1:
            t += 1.0
            continue
        gaps = rng.exponential(1 / c, c)
        gaps *= 1.0 / gaps.sum()
        for g in gaps:
            t += float(g)
            yield t


def block_keys(data: SharedPrefix, group: int, prompt: int, block_size: int) -> list[tuple]:
    """Keys of a prompt's full blocks of ``block_size`` tokens: ``("s", group, i)`` for a block
    wholly inside the system prompt (the group shares it), ``("q", group, prompt, i)`` otherwise."""
    full = data.prompt_len // block_size
    shared = data.system_prompt_len // block_size
    keys: list[tuple] = [("s", group, i) for i in range(min(shared, full))]
    keys += [("q", group, prompt, i) for i in range(shared, full)]
    return keys


def parse_workload(cfg: dict) -> Workload:
    """A :class:`Workload` from an inference-perf config (the parsed YAML), checking the keys it
    needs: ``data.type`` must be ``shared_prefix``; ``load.type`` ``poisson`` or ``constant``."""
    if not isinstance(cfg, dict):
        raise ValueError(f"workload must be an inference-perf config (a mapping), got {cfg!r}")
    data = _need(cfg, "data", "workload")
    dtype = data.get("type")
    if dtype != "shared_prefix":
        raise ValueError(f"workload.data.type must be 'shared_prefix', got {dtype!r}")
    sp = _need(data, "shared_prefix", "workload.data")
    fields = ("num_groups", "num_prompts_per_group", "system_prompt_len", "question_len",
              "output_len")  # fmt: skip
    for f in fields:
        _need(sp, f, "workload.data.shared_prefix")
    shared = SharedPrefix(**{f: sp[f] for f in fields})
    load = _need(cfg, "load", "workload")
    ltype = load.get("type", "constant")
    if ltype not in LOAD_TYPES:
        raise ValueError(f"workload.load.type must be one of {list(LOAD_TYPES)}, got {ltype!r}")
    raw = _need(load, "stages", "workload.load")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"workload.load.stages must be a non-empty list, got {raw!r}")
    stages = []
    for i, s in enumerate(raw):
        where = f"workload.load.stages[{i}]"
        if not isinstance(s, dict):
            raise ValueError(f"{where} must be a mapping with rate and duration, got {s!r}")
        stages.append(Stage(rate=_need(s, "rate", where), duration=_need(s, "duration", where)))
    interval = load.get("interval", 1.0)
    check_number("workload.load.interval", interval, lo=0)
    return Workload(shared, ltype, tuple(stages), float(interval))


def _need(d: dict, key: str, where: str):
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"{where}.{key} is missing")
    return d[key]
