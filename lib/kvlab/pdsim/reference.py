"""The event-by-event simulator of colocated and disaggregated replicas (:class:`EventLoop`,
:class:`Replica`, :class:`Simulation`): a heap of timed callbacks, one replica object per replica.

The event loop and replica are generic: a replica only knows its queues and the cost model;
routing and bookkeeping live in :class:`Simulation`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

import numpy as np

from ..assumptions import CostModel
from ..costs import BOOK, as_costs
from .result import SimResult
from .systems import Colocated, Disaggregated, at_tp, prefill_seconds
from .traffic import Traffic


class EventLoop:
    """A heap of (time, sequence, callback, argument); callbacks may schedule more events."""

    __slots__ = ("now", "_heap", "_seq")

    def __init__(self):
        self.now = 0.0
        self._heap: list = []
        self._seq = 0

    def at(self, time_s: float, callback: Callable, arg=None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time_s, self._seq, callback, arg))

    def run(self) -> None:
        heap, pop = self._heap, heapq.heappop
        while heap:
            t, _, callback, arg = pop(heap)
            self.now = t
            callback(arg)


class Replica:
    """One replica's queues and steps. ``role`` is 'colocated', 'prefill' or 'decode'.

    Decoding requests sit in a heap keyed by the decode step at which they finish, so a step costs
    O(1 + finishing requests), not O(batch). Identical decode steps (same batch, no prefill, nobody
    waiting to join) run as one event until the next request finishes or new work arrives; the
    times are those of stepping one by one (``runs = False`` turns this off, for checking).
    """

    runs = True

    def __init__(
        self,
        loop: EventLoop,
        role: str,
        cost: CostModel,
        max_batch: int,
        chunk_tokens: int | None = None,
        overlap: float = 0.0,
        on_prefilled: Callable | None = None,
        on_finished: Callable | None = None,
        on_first: Callable | None = None,
    ):
        self.loop, self.role, self.max_batch = loop, role, max_batch
        self.chunk = chunk_tokens
        self.overlap = overlap
        c = as_costs(cost)
        self.tau, self.a, self.k = (
            c.prefill_s_per_token,
            c.decode_base_s,
            c.decode_per_request_s,
        )
        # the measured calibration's extra terms (all zero in the book's: then none of the context
        # bookkeeping below changes a step's time, and runs of identical steps stay on)
        self.p0, self.pair, self.ckv = (
            c.prefill_fixed_s,
            c.prefill_s_per_pair,
            c.decode_per_context_token_s,
        )
        self._inc = 0.0  # growth of each step of the current run (the KV read of one more token)
        self.cached: dict[int, int] = {}  # cached prompt tokens, per queued request (pair term)
        self.done_tokens: dict[int, int] = {}  # prompt tokens computed so far (pair term)
        self.ctx_base = 0  # sum over the running of (context at joining - step at joining)
        self.ctx_of: dict[int, int] = {}
        self.first_q: list[int] = []  # joined this step and emit their first token at its end
        self.on_prefilled, self.on_finished = on_prefilled, on_finished
        self.on_first = on_first
        self.prefill_q: deque = deque()  # request ids waiting for (the rest of) their prefill
        self.left: dict[int, int] = {}  # prefill tokens still to compute, per queued request
        self.queued_tokens = 0  # prompt tokens waiting for a step
        self.pending_tokens = 0  # prompt tokens not yet computed (queued + in the current step)
        self.waiting: deque = deque()  # (request id, tokens to decode) waiting for a batch slot
        self.running: list = []  # heap of (step at which it finishes, request id)
        self.steps = 0
        self.busy = False
        self.load = 0  # requests assigned here and not yet done with this replica (for routing)
        self.busy_s = 0.0
        self._token = 0  # identifies the scheduled end of the current step (or run of steps)
        self._run: tuple[float, float, int] | None = None  # (start, step seconds, steps)
        self._started = 0.0  # when the current busy stretch's step began

    # -- inputs -----------------------------------------------------------------------------------
    def add_prefill(self, rid: int, tokens: int, cached: int = 0) -> None:
        self.prefill_q.append(rid)
        self.left[rid] = tokens
        self.queued_tokens += tokens
        self.pending_tokens += tokens
        if self.pair:
            self.cached[rid] = cached
            self.done_tokens[rid] = 0
        self._wake()

    def add_decode(self, rid: int, tokens: int, context: int = 0, first: bool = False) -> None:
        """Decode ``tokens`` tokens for ``rid``, whose context is ``context`` tokens on joining;
        ``first``: tell ``on_first`` when its first step ends."""
        self.waiting.append((rid, tokens, context, first))
        self._wake()

    def _wake(self) -> None:
        """New work: start a step if idle; if a run of identical decode steps is under way, end it
        at the next step boundary so the newcomer joins there (as it would step by step)."""
        if not self.busy:
            self._start()
            return
        run = self._run
        if run is None:
            return
        start, step_s, steps = run
        inc = self._inc
        if inc:  # step i lasts step_s + i inc: n steps end at n step_s + inc n (n - 1) / 2
            h = step_s - inc / 2
            done = math.floor(
                (-h + math.sqrt(h * h + 2 * inc * (self.loop.now - start))) / inc + 1e-9
            )
        else:
            done = math.floor((self.loop.now - start) / step_s + 1e-9)
        if done + 1 >= steps:
            return  # the run already ends at the next boundary
        self._token += 1
        self._run = None
        n = done + 1
        end = start + n * step_s
        if inc:
            end += inc * n * (n - 1) / 2
        self.loop.at(end, self._end, (self._token, n, (), 0))

    # -- one step ---------------------------------------------------------------------------------
    def _start(self) -> None:
        running, waiting = self.running, self.waiting
        firsts = self.first_q
        while waiting and len(running) < self.max_batch:
            rid, tokens, context, first = waiting.popleft()
            heapq.heappush(running, (self.steps + tokens, rid))
            if self.ckv:
                self.ctx_of[rid] = context - self.steps
                self.ctx_base += context - self.steps
            if first:
                firsts.append(rid)
        done: list[int] = []
        pre_tokens = 0
        pairs = 0.0  # attention pairs of the prompt tokens in this step (only with a pair cost)
        q = self.prefill_q
        if q:
            if self.role == "colocated" and self.chunk is not None:
                budget = self.chunk
                while q and budget:
                    rid = q[0]
                    take = min(budget, self.left[rid])
                    budget -= take
                    pre_tokens += take
                    if self.pair:
                        before = self.cached[rid] + self.done_tokens[rid]
                        pairs += take * before + take * take / 2
                        self.done_tokens[rid] += take
                    if take == self.left[rid]:
                        q.popleft()
                        del self.left[rid]
                        done.append(rid)
                    else:
                        self.left[rid] -= take
            else:  # a whole prompt, decoding paused (prefill replicas never decode anyway)
                rid = q.popleft()
                pre_tokens = self.left.pop(rid)
                done.append(rid)
                if self.pair:
                    pairs = pre_tokens * self.cached[rid] + pre_tokens * pre_tokens / 2
            self.queued_tokens -= pre_tokens
            if self.pair:
                for rid in done:
                    del self.cached[rid], self.done_tokens[rid]
        decoding = bool(running) and (self.chunk is not None or not done)
        if not done and not pre_tokens and not decoding:
            self.busy = False
            return
        pre_s = pre_tokens * self.tau
        if self.pair:
            pre_s += self.pair * pairs
        if self.p0 and pre_tokens and not decoding:
            pre_s += self.p0  # a pass of prompt tokens alone pays the fixed part once
        dec_s = self.a + self.k * len(running) if decoding else 0.0
        if self.ckv and decoding:
            dec_s += self.ckv * (self.ctx_base + len(running) * self.steps)
        duration = pre_s + dec_s - self.overlap * min(pre_s, dec_s)
        self.busy = True
        self._started = self.loop.now
        self._token += 1
        if (
            self.runs
            and pre_tokens == 0
            and not firsts
            and (not waiting or len(running) >= self.max_batch)
        ):
            # a pure decode step with nobody able to join: the batch stays the same until the next
            # request finishes, so run those steps as one event (each step the same, or, with a
            # KV-read term, longer by the read of one more token per request than the last)
            steps = running[0][0] - self.steps
            self._run = (self.loop.now, duration, steps) if steps > 1 else None
            end = self.loop.now + steps * duration
            self._inc = inc = self.ckv * len(running)
            if inc:
                end += inc * steps * (steps - 1) / 2
            self.loop.at(end, self._end, (self._token, steps, (), 0))
            return
        self._run = None
        self.loop.at(
            self.loop.now + duration, self._end, (self._token, int(decoding), done, pre_tokens)
        )

    def _end(self, arg) -> None:
        token, steps, done, pre_tokens = arg
        if token != self._token:
            return  # a run of decode steps cut short by new work (see _wake)
        self._run = None
        self.busy_s += self.loop.now - self._started
        self.pending_tokens -= pre_tokens
        # on_finished / on_prefilled are None only on replicas that never decode / never prefill.
        # An explicit None check would change the code, which kvlab.explorer_p22.cache_key()
        # fingerprints: it waits for the next grid recompute.
        if steps:
            self.steps += steps
            if self.first_q:
                for rid in self.first_q:
                    self.on_first(self, rid)  # type: ignore[misc]
                self.first_q = []
            running = self.running
            while running and running[0][0] <= self.steps:
                _, rid = heapq.heappop(running)
                if self.ckv:
                    self.ctx_base -= self.ctx_of.pop(rid)
                self.on_finished(self, rid)  # type: ignore[misc]
        for rid in done:
            self.on_prefilled(self, rid)  # type: ignore[misc]
        self._start()


class Simulation:
    """Route requests to replicas, move them between phases, record their times."""

    def __init__(
        self, system: Colocated | Disaggregated, traffic: Traffic, cost: CostModel | str = BOOK
    ):
        if not isinstance(system, (Colocated, Disaggregated)):
            raise ValueError(f"system must be a Colocated or Disaggregated, got {system!r}")
        if not isinstance(traffic, Traffic):
            raise ValueError(f"traffic must be a Traffic, got {traffic!r}")
        self.system, self.traffic, self.cost = system, traffic, cost
        if isinstance(system, Colocated):
            cost_p = cost_d = at_tp(cost, system.tp)
        else:
            cost_p, cost_d = at_tp(cost, system.p_tp), at_tp(cost, system.d_tp)
        self.cost_p, self.cost_d = cost_p, cost_d
        s = traffic.sample()
        self.arrival, self.prompt, self.uncached, self.output = (
            s["arrival_s"],
            s["prompt"],
            s["uncached"],
            s["output"],
        )
        n = traffic.requests
        if isinstance(system, Disaggregated):
            self.xfer = system.transfer_seconds(
                self.prompt, prefill_seconds(cost_p, self.uncached, self.prompt - self.uncached)
            )
        else:
            self.xfer = np.zeros(n)
        self.loop = EventLoop()
        self._in_system = 0
        self._area = 0.0
        self._last = 0.0
        self._window = (0.0, 0.0)
        self._out = self.output.tolist()
        self._unc = self.uncached.tolist()
        self._cached = (self.prompt - self.uncached).tolist()
        self._prompt = self.prompt.tolist()
        self._xf = self.xfer.tolist()
        self._arr = self.arrival.tolist()
        self._first = [math.nan] * n
        self._finish = [math.nan] * n
        loop = self.loop
        if isinstance(system, Colocated):
            self.front = [
                Replica(
                    loop,
                    "colocated",
                    cost_p,
                    system.max_batch,
                    system.chunk_tokens,
                    system.overlap,
                    self._prefilled_colocated,
                    self._finished,
                )
                for _ in range(system.replicas)
            ]
            self.back = self.front
        else:
            self.front = [
                Replica(loop, "prefill", cost_p, 1, None, 0.0, self._prefilled_disagg, None)
                for _ in range(system.prefill)
            ]
            self.back = [
                Replica(
                    loop,
                    "decode",
                    cost_d,
                    system.max_batch,
                    None,
                    0.0,
                    None,
                    self._finished,
                    self._first_from_decode,
                )
                for _ in range(system.decode)
            ]

    # -- bookkeeping --------------------------------------------------------------------------
    def _count(self, delta: int) -> None:
        now = self.loop.now
        self._area += self._in_system * (now - self._last)
        self._last = now
        self._in_system += delta

    def _arrive(self, rid: int) -> None:
        self._count(+1)
        if rid + 1 < len(self._arr):
            self.loop.at(self._arr[rid + 1], self._arrive, rid + 1)
        else:  # Little's law window: time zero to the last arrival
            self._window = (self._area, self.loop.now)
        if isinstance(self.system, Colocated):
            r = min(self.front, key=_load)
        else:
            r = min(self.front, key=_queued)
        r.load += 1
        r.add_prefill(rid, self._unc[rid], self._cached[rid])

    def _first_token(self, replica: Replica, rid: int) -> None:
        self._first[rid] = self.loop.now
        tokens = self._out[rid] - 1
        if tokens > 0:
            replica.add_decode(rid, tokens, self._prompt[rid] + 1)
        else:
            self._finished(replica, rid)

    def _first_from_decode(self, replica: Replica, rid: int) -> None:
        self._first[rid] = self.loop.now  # (a one-token request then finishes in the same step)

    def _prefilled_colocated(self, replica: Replica, rid: int) -> None:
        self._first_token(replica, rid)

    def _prefilled_disagg(self, replica: Replica, rid: int) -> None:
        replica.load -= 1
        target = min(self.back, key=_load)
        target.load += 1
        self.loop.at(self.loop.now + self._xf[rid], self._landed, (target, rid))

    def _landed(self, arg) -> None:
        target, rid = arg
        if self.system.first_step:  # type: ignore[union-attr]
            # the decode side recomputes the last prompt token: all O tokens come from its steps
            target.add_decode(rid, self._out[rid], self._prompt[rid], first=True)
        else:
            self._first_token(target, rid)

    def _finished(self, replica: Replica, rid: int) -> None:
        replica.load -= 1
        self._finish[rid] = self.loop.now
        self._count(-1)

    # -- run --------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        self.loop.at(self._arr[0], self._arrive, 0)
        self.loop.run()
        area, until = self._window
        first, finish = np.array(self._first), np.array(self._finish)
        end = float(np.nanmax(finish))
        replicas = self.front if self.front is self.back else self.front + self.back
        return SimResult(
            label=self.system.label,
            arrival_s=self.arrival,
            first_token_s=first,
            finish_s=finish,
            prompt_tokens=self.prompt,
            output_tokens=self.output,
            transfer_s=self.xfer,
            mean_in_system=area / until if until > 0 else 0.0,
            end_s=end,
            replica_busy_s=np.array([r.busy_s for r in replicas]),
        )


def _load(r: Replica) -> int:
    return r.load


def _queued(r: Replica) -> int:
    return r.pending_tokens
