"""Colocated vs disaggregated serving, simulated event by event on one cost model.

Costs come from :mod:`kvlab.costs` (``cost=``: a calibration's name, ``"book"`` or ``"measured"``,
or a :class:`kvlab.costs.Costs`; default :data:`kvlab.costs.BOOK`, the book's
assumed round numbers, one replica = one 8-GPU server): prefill takes ``prefill_s_per_token`` per
uncached prompt token; a decode step takes ``decode_base_s`` plus ``decode_per_request_s`` per
running request, and gives every running request one token (continuous batching, up to
``max_batch`` requests; the rest wait for a slot). A measured calibration
(``kvlab.costs.cost_model("measured", gpu=..., tp=...)``) adds a fixed prefill part, attention
over the context, and a decode term per context token in the batch (the KV read); the replica
then tracks its batch's total context step by step. A replica's TP comes from its system
(``Colocated.tp``, ``Disaggregated.prefill_tp`` / ``decode_tp``): the cost model is re-derived at
that TP from the same calibration (the book's is defined at TP 8 only).

Two ways to spend the same replicas:

* :class:`Colocated`: every replica prefills and decodes. With chunked prefill (``chunk_tokens``)
  each step carries up to that many prompt tokens along with the decode batch, so a step that
  carries a chunk is slower for every request decoding on that replica: interference. ``overlap``
  says how much of the smaller part hides under the larger (0: the costs add, the book's model;
  1: the step takes the longer of the two, ideal piggybacking). ``chunk_tokens=None`` turns
  chunking off: a waiting prompt is prefilled whole and decoding stops meanwhile.
* :class:`Disaggregated`: ``prefill`` replicas only prefill; ``decode`` replicas only decode. The
  KV moves in between (:func:`kvlab.disagg.kv_transfer`, optionally layer by layer, leaving only
  the exposed part).

TTFT is arrival to first token. The first token comes out of prefill; for a disaggregated request
it is counted when the KV has landed on the decode replica (the book's convention), or, with
``Disaggregated(first_step=True)``, at the end of the decode replica's first step with the
request in its batch: vLLM's decode side recomputes the last prompt token before it emits
anything, so the first token waits for a decode step. (vLLM ``vllm/v1/core/sched/scheduler.py``,
``Scheduler._update_waiting_for_remote_kv``, commit 00024d31: when the received KV covers the
whole request, ``num_computed_tokens`` is set to the request's length minus one, so the next step
computes that token.) TPOT is
(last token - first token) / (output tokens - 1). Goodput, after DistServe, counts requests that
meet both a TTFT and a TPOT target.

Goodput is measured in steady state (:func:`steady_run`, :func:`max_rate`): a warm-up of
:data:`WARMUP_LIFETIMES` request lifetimes, then requests counted over :data:`WINDOW_LIFETIMES`,
with arrivals continuing one lifetime beyond; :func:`goodput_table` repeats it over seeds.
:func:`capacity_bound` gives the ceiling the cost model allows (prefill tokens per second,
Little's law on the decode batches); :func:`point` is one trial for grids of runs.

The event loop (:class:`EventLoop`) and replica (:class:`Replica`) are generic: a replica only
knows its queues and the cost model; routing and bookkeeping live in :class:`Simulation`
(:mod:`kvlab.pdsim.reference`). :func:`simulate` runs the same simulation as one compiled loop
(:mod:`kvlab.pdsim.kernel`, 20 to 40 times faster, the same times: ``lib/tests/test_pdsim_fast.py``);
``simulate(..., _reference=True)`` runs the reference.

Modules: :mod:`~kvlab.pdsim.traffic`, :mod:`~kvlab.pdsim.systems` (and the costs at a replica's
TP), :mod:`~kvlab.pdsim.reference` and :mod:`~kvlab.pdsim.kernel` (the two simulators),
:mod:`~kvlab.pdsim.result`, :mod:`~kvlab.pdsim.runs` (one run, steady-state trials),
:mod:`~kvlab.pdsim.capacity`, :mod:`~kvlab.pdsim.goodput`.
"""

from ..costs import BOOK
from ..models import LLAMA_70B as LLAMA_70B  # the default model, read as pdsim.LLAMA_70B
from .capacity import CapacityBound, capacity_bound
from .goodput import Point, attainment_by_window, bench, goodput_table, max_rate, point
from .reference import EventLoop, Replica, Simulation
from .result import SimResult
from .runs import (
    WARMUP_LIFETIMES,
    WINDOW_LIFETIMES,
    Window,
    attainment,
    lifetime_s,
    simulate,
    steady_run,
    window_for,
)
from .systems import Colocated, Disaggregated, at_tp, prefill_seconds, splits, system_for
from .traffic import DISTRIBUTIONS, Traffic

#: The default costs: :data:`kvlab.costs.BOOK` under its old name here (the same object).
COST = BOOK

__all__ = [
    "COST",
    "DISTRIBUTIONS",
    "WARMUP_LIFETIMES",
    "WINDOW_LIFETIMES",
    "CapacityBound",
    "Colocated",
    "Disaggregated",
    "EventLoop",
    "Point",
    "Replica",
    "SimResult",
    "Simulation",
    "Traffic",
    "Window",
    "attainment",
    "attainment_by_window",
    "at_tp",
    "bench",
    "capacity_bound",
    "goodput_table",
    "lifetime_s",
    "max_rate",
    "point",
    "prefill_seconds",
    "simulate",
    "splits",
    "steady_run",
    "system_for",
    "window_for",
]
