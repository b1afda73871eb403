"""One replica of the timed simulator (:class:`_Replica`: its queues, batch, cache and steps), the
state a run's replicas share (:class:`_Sim`), and what every loop's replicas share: the arrivals in
time order (:func:`arrivals`) and a closed loop's next turn."""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque

import numpy as np

from ..costs import as_costs
from ..fleet import _touch

_INF = math.inf


class _Replica:
    """One replica's queues, batch and cache. The simulator calls :meth:`step` at the end of each
    run of steps (in global time order) and :meth:`add` at each arrival routed here."""

    __slots__ = (
        "sim",
        "idx",
        "q",
        "left",
        "started",
        "out_tokens",
        "assigned",
        "active",
        "inflight",
        "running",
        "waiting",
        "steps",
        "end",
        "seg_start",
        "seg_d",
        "seg_g",
        "ctx",
        "seg_steps",
        "seg_decode",
        "seg_done",
        "cache",
        "used",
        "busy_s",
        "prefill_busy_s",
        "n_sys",
        "area",
        "last",
        "online_s",
    )

    def __init__(self, sim, idx: int, now: float):
        self.sim = sim
        self.idx = idx
        self.q: deque = deque()  # request ids waiting for (the rest of) their prefill
        self.left = 0  # prefill tokens still to compute for the head of q (when started)
        self.started = False  # has the head of q started (hit looked up)?
        self.out_tokens = 0  # outstanding prefill tokens (queued estimates + rest in progress)
        self.assigned = 0  # every prefill token ever assigned (estimates corrected at start)
        self.active = 0  # distinct blocks (prompt + answer) held by the requests in this replica
        self.inflight: dict = {}  # entry key -> [requests holding it, blocks]
        self.running: list = []  # heap of (decode step at which it finishes, request id)
        self.waiting: deque = deque()  # (request id, decode tokens) waiting for a batch slot
        self.steps = 0  # decode steps done
        self.end = _INF  # end time of the current run of steps; inf when idle
        self.seg_start = now
        self.seg_d = 0.0  # duration of one step of a decode-only run (its first, with c_kv)
        self.seg_g = 0.0  # how much each step of that run is longer than the one before (c_kv)
        self.ctx = 0  # total context of the running batch (prompt + generated, tokens)
        self.seg_steps = 0  # decode steps in the current run
        self.seg_decode = False
        self.seg_done: list = []  # requests whose prefill ends with the current run
        self.cache: OrderedDict = OrderedDict()
        self.used = 0
        self.busy_s = 0.0
        self.prefill_busy_s = 0.0
        self.n_sys = 0
        self.area = 0.0
        self.last = now
        self.online_s = now

    def _set_end(self, t: float) -> None:
        self.end = t
        self.sim.ends[self.idx] = t

    def _count(self, t: float, delta: int) -> None:
        self.area += self.n_sys * (t - self.last)
        self.last = t
        self.n_sys += delta

    def add(self, rid: int, est_tokens: int, t: float) -> None:
        """Request ``rid`` arrives at ``t`` (every run of steps ending before ``t`` is done)."""
        self._count(t, +1)
        self.q.append(rid)
        self.out_tokens += est_tokens
        self.assigned += est_tokens
        sim = self.sim
        fl = self.inflight
        for key, nb in zip(sim.ks[rid], sim.ns[rid], strict=True):
            e = fl.get(key)
            if e is None:
                fl[key] = [1, nb]
                self.active += nb
            else:
                e[0] += 1
                if nb > e[1]:
                    self.active += nb - e[1]
                    e[1] = nb
        if self.end == _INF:
            self._start(t)
        elif self.seg_steps > 1:  # a decode-only run: stop at the first step boundary >= t
            if self.seg_g:
                self._cut_growing_run(t)
                return
            k = max(1, math.ceil((t - self.seg_start) / self.seg_d))
            if k < self.seg_steps:
                self.busy_s -= (self.seg_steps - k) * self.seg_d
                self.seg_steps = k
                self._set_end(self.seg_start + k * self.seg_d)

    def active_blocks(self, ks, ns) -> int:
        """Distinct blocks held by the requests in this replica and the path (ks, ns) together."""
        return self.active + _new_blocks(self.inflight, ks, ns)

    def _run_s(self, steps: int) -> float:
        """Duration of the first ``steps`` steps of the current decode-only run (steps lengthen by
        ``seg_g`` each: d, d + g, d + 2 g, ...)."""
        return steps * self.seg_d + self.seg_g * steps * (steps - 1) / 2

    def _cut_growing_run(self, t: float) -> None:
        """Cut a decode-only run whose steps lengthen at the first step boundary >= ``t``."""
        x = t - self.seg_start
        d, g = self.seg_d, self.seg_g
        # smallest k >= 1 with k d + g k (k - 1) / 2 >= x: the positive root, then corrected
        b = d - g / 2
        k = max(1, math.ceil((-b + math.sqrt(b * b + 2 * g * max(x, 0.0))) / g))
        while k > 1 and self._run_s(k - 1) >= x:
            k -= 1
        while self._run_s(k) < x:
            k += 1
        if k < self.seg_steps:
            self.busy_s -= self._run_s(self.seg_steps) - self._run_s(k)
            self.seg_steps = k
            self._set_end(self.seg_start + self._run_s(k))

    def step(self) -> None:
        """End the current run of steps at ``self.end`` and start the next one."""
        now = self.end
        self._finish_segment(now)
        self._start(now)

    def fail(self, t: float) -> list[int]:
        """The replica dies at ``t``: return the requests in it (to be sent again), empty it."""
        lost = list(self.q) + [rid for _, rid in self.running]
        lost += [rid for rid, _ in self.waiting] + [r for r in self.seg_done if r not in self.q]
        lost = list(dict.fromkeys(lost))
        if self.end != _INF and self.end > t:  # the rest of the run of steps never happens
            self.busy_s -= self.end - t
        self._count(t, -self.n_sys)
        self.q.clear()
        self.running.clear()
        self.waiting.clear()
        self.seg_done = []
        self.inflight.clear()
        self.cache.clear()
        self.used = self.active = self.out_tokens = self.left = self.ctx = 0
        self.started = False
        self.seg_steps = 0
        self._set_end(_INF)
        return lost

    # -- steps -------------------------------------------------------------------------------------
    def _start(self, now: float) -> None:
        sim = self.sim
        running, waiting = self.running, self.waiting
        while waiting and len(running) < sim.max_batch:
            rid, tokens = waiting.popleft()
            heapq.heappush(running, (self.steps + tokens, rid))
            self.ctx += sim.prompt[rid] + 1  # its prompt and the first token (from prefill)
        q = self.q
        self.seg_start = now
        if sim.kv:
            self._start_kv(now)
            return
        if q:
            pre = 0
            done = []
            budget = sim.chunk if sim.chunk else 0
            while q:
                rid = q[0]
                if not self.started:
                    self._begin_prefill(rid, now)
                if budget:
                    take = min(budget, self.left)
                    budget -= take
                else:
                    take = self.left
                pre += take
                self.left -= take
                if self.left:
                    break
                q.popleft()
                self.started = False
                done.append(rid)
                if not sim.chunk or not budget:
                    break
            self.out_tokens -= pre
            pre_s = pre * sim.tau
            decoding = bool(running) and sim.chunk is not None
            dur = pre_s + (sim.a + sim.k * len(running) if decoding else 0.0)
            self.prefill_busy_s += pre_s
            self.busy_s += dur
            self.seg_steps = 1 if decoding else 0
            self.seg_decode = decoding
            self.seg_done = done
            self._set_end(now + dur)
            return
        if running:  # decode only until the next finish (cut short by :meth:`add`)
            d = sim.a + sim.k * len(running)
            n = running[0][0] - self.steps
            self.busy_s += n * d
            self.seg_d = d
            self.seg_steps = n
            self.seg_decode = True
            self.seg_done = []
            self._set_end(now + n * d)
            return
        self.seg_steps = 0
        self._set_end(_INF)

    def _start_kv(self, now: float) -> None:
        """:meth:`_start` under a calibration with context terms (module docstring)."""
        sim = self.sim
        running, q = self.running, self.q
        B = len(running)
        if q:
            pre = 0
            pre_s = 0.0
            done = []
            budget = sim.chunk if sim.chunk else 0
            while q:
                rid = q[0]
                if not self.started:
                    self._begin_prefill(rid, now)
                if budget:
                    take = min(budget, self.left)
                    budget -= take
                else:
                    take = self.left
                c = sim.prompt[rid] - self.left  # context before this piece: hit + chunks done
                pre += take
                pre_s += sim.tau * take + sim.t_pair * (take * c + take * take / 2)
                self.left -= take
                if self.left:
                    break
                q.popleft()
                self.started = False
                done.append(rid)
                if not sim.chunk or not budget:
                    break
            self.out_tokens -= pre
            decoding = bool(running) and sim.chunk is not None
            if decoding:  # one forward pass: the decode step, the pieces' marginal cost
                dur = pre_s + sim.a + sim.k * B + sim.c_kv * self.ctx
            else:
                pre_s += sim.t_p0
                dur = pre_s
            self.prefill_busy_s += pre_s
            self.busy_s += dur
            self.seg_steps = 1 if decoding else 0
            self.seg_decode = decoding
            self.seg_done = done
            self._set_end(now + dur)
            return
        if running:  # decode only until the next finish; each step reads B more context tokens
            self.seg_d = sim.a + sim.k * B + sim.c_kv * self.ctx
            self.seg_g = sim.c_kv * B
            self.seg_steps = running[0][0] - self.steps
            self.seg_decode = True
            self.seg_done = []
            run = self._run_s(self.seg_steps)
            self.busy_s += run
            self._set_end(now + run)
            return
        self.seg_steps = 0
        self._set_end(_INF)

    def _begin_prefill(self, rid: int, now: float) -> None:
        sim = self.sim
        hit = _match(self.cache, sim.ks[rid], sim.ns[rid], sim.mh[rid]) * sim.bs
        left = sim.prompt[rid] - hit
        sim.hit[rid] = hit
        sim.start[rid] = now
        est = sim.est[rid]
        self.out_tokens += left - est
        self.assigned += left - est
        self.left = left
        self.started = True

    def _done(self, rid: int, t: float) -> None:
        sim = self.sim
        sim.finish[rid] = t
        self._count(t, -1)
        fl = self.inflight
        for key in sim.ks[rid]:
            e = fl[key]
            e[0] -= 1
            if not e[0]:
                self.active -= e[1]
                del fl[key]
        _next_turn(sim.pending, sim.nxt, sim.think, rid, t)

    def _finish_segment(self, t: float) -> None:
        sim = self.sim
        if self.seg_decode:
            self.steps += self.seg_steps
            running = self.running
            self.ctx += len(running) * self.seg_steps
            while running and running[0][0] <= self.steps:
                _, rid = heapq.heappop(running)
                self.ctx -= sim.prompt[rid] + 1 + sim.dec[rid]
                self._done(rid, t)
        for rid in self.seg_done:
            sim.first[rid] = t
            self._insert(rid)
            d = sim.dec[rid]
            if d > 0:
                self.waiting.append((rid, d))
            else:
                self._done(rid, t)
        self.seg_steps = 0
        self._set_end(_INF)

    def _insert(self, rid: int) -> None:
        sim = self.sim
        self.used = _touch(self.cache, sim.ks[rid], sim.ns[rid], self.used, sim.cap)


def arrivals(fixed_t, fixed_r, pending: list, ends: list, reps: list):
    """Every arrival of a run in time order, as (time s, request id): the fixed arrivals
    (``fixed_t`` with their requests ``fixed_r``, in order) merged with the heap ``pending`` of
    (time, id) that finishing requests (closed loop) or the loop itself push onto. Before each
    arrival, every run of steps that ends before it is taken: ``reps[j].step()`` for the replica
    whose ``ends[j]`` (the end of its current run, inf when idle) is the earliest. The lists are
    read afresh at each arrival (replicas may join, requests may be pushed meanwhile)."""
    ptr, nf = 0, len(fixed_t)
    while True:
        tf = fixed_t[ptr] if ptr < nf else _INF
        tp = pending[0][0] if pending else _INF
        ta = tf if tf <= tp else tp
        while True:  # every run of steps that ends before the next arrival
            e = min(ends)
            if e >= ta:
                break
            reps[ends.index(e)].step()
            if pending and pending[0][0] < ta:
                tp = ta = pending[0][0]
        if ta == _INF:
            return
        if tf <= tp:
            i = fixed_r[ptr]
            ptr += 1
        else:
            i = heapq.heappop(pending)[1]
        yield ta, i


def _next_turn(pending: list, nxt, think, rid: int, t: float) -> None:
    """Closed loop: request ``rid`` finished at ``t`` (s); the user reads the answer, thinks and
    sends the next turn, pushed onto the heap ``pending`` as (arrival s, id). ``nxt``: each
    request's next turn (-1: none; None: open loop); ``think``: each request's think time (s)."""
    if nxt is not None:
        j = nxt[rid]
        if j >= 0:
            heapq.heappush(pending, (t + think[j], j))


def _match(od, ks, ns, mh) -> int:
    """Blocks of the path (ks, ns) found in the cache ``od``, capped at ``mh``."""
    x = 0
    for key, nb in zip(ks, ns, strict=True):
        c = od.get(key, 0)
        if c >= nb:
            x += nb
        else:
            x += c
            break
    return x if x < mh else mh


def _new_blocks(inflight: dict, ks, ns) -> int:
    """Blocks of the path (ks, ns) not already held by a request in flight on that replica."""
    x = 0
    for key, nb in zip(ks, ns, strict=True):
        e = inflight.get(key)
        x += nb - e[1] if e is not None and e[1] < nb else (0 if e is not None else nb)
    return x


def _deepest(od, ks, ns) -> object:
    """The key of the deepest entry of the path (ks, ns) found in ``od`` (None if none)."""
    node = None
    for key, nb in zip(ks, ns, strict=True):
        c = od.get(key, 0)
        if c:
            node = key
        if c < nb:
            break
    return node


def split_paths(paths, n: int) -> tuple[list[tuple], list[tuple]]:
    """Each of the ``n`` requests' cache path: (its entry keys, the full blocks of each entry)."""
    off = paths.offsets.tolist()
    keys = paths.keys.tolist()
    blks = paths.blocks.tolist()
    ks = [tuple(keys[off[i] : off[i + 1]]) for i in range(n)]
    ns = [tuple(blks[off[i] : off[i + 1]]) for i in range(n)]
    return ks, ns


class _Sim:
    """State shared by the replicas of one run (request arrays as lists, costs, event lists)."""

    def __init__(self, w, paths, cost, cap, max_batch, chunk, prefill_only):
        n = len(w)
        self.ks, self.ns = split_paths(paths, n)
        self.mh = paths.max_hit_blocks.tolist()
        self.bs = paths.block_size
        self.prompt = np.asarray(w.prompt_tokens, dtype=np.int64).tolist()
        out = np.asarray(w.output_tokens, dtype=np.int64)
        self.dec = (
            np.zeros(n, dtype=np.int64) if prefill_only else np.maximum(out - 1, 0)
        ).tolist()
        c = as_costs(cost)
        self.tau = c.prefill_s_per_token
        self.a = c.decode_base_s
        self.k = c.decode_per_request_s
        self.t_p0 = c.prefill_fixed_s
        self.t_pair = c.prefill_s_per_pair
        self.c_kv = c.decode_per_context_token_s
        # context terms: steps are costed by _Replica._start_kv (a linear model keeps the old path)
        self.kv = bool(self.t_p0 or self.t_pair or self.c_kv)
        self.cap = cap
        self.max_batch = max_batch
        self.chunk = chunk
        self.hit = [0] * n
        self.est = [0] * n
        self.start = [math.nan] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        self.ends: list[float] = []  # per replica: end of its current run of steps
        self.pending: list = []  # closed loop: heap of (arrival time, request id)
        self.nxt = None  # closed loop: each request's next turn (-1: none)
        self.think: list[float] = []
