"""Queues, not just hit rates: a discrete-event simulator of a fleet of replicas in time.

**Traffic.** Chats are closed-loop by default (:class:`ChatSessions`): users arrive as a Poisson
process, each runs one chat, and each turn after the first arrives a think time (exponential, mean
``think_s``, seeded) *after the previous answer has finished*, since its prompt contains that
answer. The session arrival rate is set so that the offered load is ``rate_rps`` requests/s.
Open-loop arrivals stay available for traffic whose requests are independent or whose times are
recorded: a seeded Poisson process at ``rate_rps`` for :class:`IndependentRequests` or a
:class:`kvlab.workload.ChatWorkload` (whose turns then ignore each other's finish times: use it to
reproduce the untimed demo's traffic, not as a model of chat), or a trace's own ``arrival_s``.

Each request is routed to a replica by a :mod:`kvlab.routing` policy, waits in that replica's FIFO
prefill queue, is prefilled, then decodes with continuous batching.

Per replica (costs from :mod:`kvlab.costs`, default its book calibration :data:`kvlab.costs.BOOK`;
any calibration, e.g. ``cost="measured"``: its fixed prefill part, attention and KV-read terms are
simulated step by step, see "Context-dependent costs" below):

* **Prefix cache**: the exact semantics of :mod:`kvlab.fleet` (blocks of ``block_size`` tokens, LRU,
  deepest blocks of a request evicted first), kept as fleet's per-entry ``OrderedDict`` and
  :func:`kvlab.fleet._touch` over the workload's :class:`kvlab.workload.Paths`. Timing matters: a
  request's hit is looked up when its prefill *starts*, and its blocks (prompt and answer, as
  fleet's "after serving") enter the cache when its prefill *ends*. Blocks of running requests are
  not pinned and their KV memory is not modelled (``cache_tokens`` is the cache pool).
* **Prefill**: ``prefill_s_per_token`` per uncached prompt token (at least one token is computed).
  Without chunking (``chunk_tokens=None``) a prompt is prefilled whole and decoding pauses meanwhile
  (prefill first, as vLLM's classic scheduler). With chunking a step carries up to ``chunk_tokens``
  prompt tokens (of one or more queued requests, FIFO) beside the decode batch; its time is the
  decode step's plus the chunk's prefill time.
* **Decode**: a step takes ``decode_base_s + decode_per_request_s x running`` and gives every running
  request one token; at most ``max_batch`` run, the rest wait for a slot. The first output token
  comes from prefill, so a request of ``o`` output tokens needs ``o - 1`` decode steps
  (``prefill_only=True``, or ``o <= 1``: none).

**Context-dependent costs** (a calibration with a fixed prefill part ``t_p0``, an attention term
``t_pair`` or a KV-read term ``c_kv``, such as :func:`kvlab.costs.cost_model` ``("measured")``):
a prefill step of pieces of ``U`` tokens after ``c`` already in context (the hit plus the chunks
done) takes ``t_p0`` plus each piece's marginal cost ``tau U + t_pair (U c + U^2 / 2)``
(``prefill_seconds_model``); a step that also decodes is one forward pass
(``mixed_step_seconds_model``: the decode step plus the pieces' marginal costs, ``t_p0`` not paid
again). A decode step takes ``a + k n + c_kv S`` (``decode_step_seconds_model``), where ``S`` is the
batch's total context: every running request's prompt plus the tokens it has generated. ``S`` grows
by the batch size at every step, so the steps of a decode-only run lengthen linearly and the run is
still taken in one jump (an arithmetic series). With the book's calibration those terms are zero
and the simulator does exactly what it did before.

TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1).

**Routing**: every policy of :data:`kvlab.routing.ALL_POLICIES`. The signals, all read at the
request's arrival:

* ``cache_aware`` (the book's guarded argmax): matched tokens and a load, either the replicas'
  *outstanding* prefill work (tokens queued plus the rest of those in progress; queued requests
  counted by their hit at arrival), ``load="outstanding"`` (default, a live signal), or fleet's
  cumulative count (``load="cumulative"``: all prefill tokens ever assigned, the demo's signal).
  ``guard_slack_tokens`` = s adds an absolute slack: load <= (1 + epsilon) x mean + s.
* ``sglang``: live request counts (requests in the replica: queued, prefilling or decoding), its
  tree's matches and sizes; ``dynamo``: outstanding prefill tokens, matches and the tokens (prompt
  plus answer) held by requests in flight, each shared block counted once; ``bounded_ring``: live request counts.
* ``view="stale"``: matches from the router's own record of what it sent where (it never learns of
  evictions; ``record_tokens`` caps each replica's record, forgotten LRU, like SGLang's tree);
  ``"exact"``: from the caches (KV events). ``view=None`` picks each policy's own: exact for
  ``dynamo``, stale for the others.

A replica can join at ``add_replica_at_s`` (empty cache): modulo-sticky remaps ``key mod (N+1)``,
a ring (``sticky="ring"``) adds the new replica's points; the share of keys seen so far that move
is reported as ``keys_moved``. A replica (``fail_replica``) can fail at ``fail_replica_at_s``: its
cache is lost, the routers stop choosing it at once (a health check that has already noticed;
SGLang's and the book's records forget it, a ring drops its points, modulo remaps over the
survivors), and every request in it (queued, prefilling or decoding) is sent again at that moment
from the start; such a request keeps its first arrival time, so its TTFT includes the lost work.

How it is fast: events are taken in time order (the next arrival or the next end of a replica's
run of steps), and a run of decode-only steps between two events is taken in one jump, cut short
at the first step boundary after an arrival joins that replica. A run with no replica joining or
failing (every comparison of routers in Problem 8) goes through a loop compiled with numba (:mod:`~kvlab.queueing.kernel`), which gives the same results as the reference loop
(:mod:`~kvlab.queueing.reference`, still used for the rest and reachable with
``simulate(..., _reference=True)``) many times faster (``tools/bench.py`` measures the ratio):
100,000 chat requests on 8 replicas take a fraction of a second, a few seconds on the reference
(:func:`bench`).

**On the engine model**: with an :class:`kvlab.engine_model.EngineCalibration` as ``cost``
(``cache_tokens=None``), every replica is an engine-model engine of ``tp`` GPUs (vLLM v1's
scheduling, its KV pool sized from GPU memory holding the prefix cache, step costs from
aiconfigurator's measured database) under the same traffic and routers
(:mod:`~kvlab.queueing.engine_backend`, whose docstring lists what changes and what it does not
take).

Modules: :mod:`~kvlab.queueing.traffic` (chat sessions, independent requests, arrival times),
:mod:`~kvlab.queueing.replica` (one replica's queues, batch, cache and steps; the arrivals in time
order), :mod:`~kvlab.queueing.dispatch` (one request's routing, shared by the loops),
:mod:`~kvlab.queueing.simulator` (the run: checks, then one of three loops, the result),
:mod:`~kvlab.queueing.reference` (the reference loop),
:mod:`~kvlab.queueing.engine_backend` (the loop over engine-model engines),
:mod:`~kvlab.queueing.fast` and :mod:`~kvlab.queueing.kernel` (the compiled loop: when it applies,
its inputs; the loop), :mod:`~kvlab.queueing.result`,
:mod:`~kvlab.queueing.compare` (routers over seeds, operations in time, :func:`bench`),
:mod:`~kvlab.queueing.mg1`.
"""

from .compare import (
    METRICS,
    OPS_METRICS,
    OPS_PHASES,
    ROUTER_LABELS,
    ROUTERS,
    bench,
    compare,
    operations,
)
from .mg1 import mg1_wait_s
from .result import QueueResult
from .simulator import simulate, simulate_all, sweep_rate
from .traffic import ChatSessions, IndependentRequests

__all__ = [
    "METRICS",
    "OPS_METRICS",
    "OPS_PHASES",
    "ROUTERS",
    "ROUTER_LABELS",
    "ChatSessions",
    "compare",
    "IndependentRequests",
    "QueueResult",
    "bench",
    "mg1_wait_s",
    "operations",
    "simulate",
    "simulate_all",
    "sweep_rate",
]
