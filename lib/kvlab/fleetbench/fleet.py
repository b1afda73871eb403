"""The fleet: ``pods`` engines (:class:`kvlab.engine_model.Engine`) behind one endpoint picker,
driven by inference-perf's stages, measured as inference-perf and the EPP's metrics measure it.

The EPP scrapes the pods' metrics every ``refresh_s``: before a request is routed, every engine
runs the steps that start before the last scrape, the EPP's view of each pod (waiting queue, KV
usage) is what that scrape shows, and the requests sent before the next scrape are routed on it,
in order, each joining its pod's waiting queue at its sending time (a scrape that no request
reads changes nothing and is skipped). The pods' gauges are sampled every ``sample_s`` for the
stage means. KV events update the cache_tracking index as the
engines store and evict blocks. A stage ends when its last request has finished and the
generator's one-second poll has seen it; the next starts ``interval`` seconds later.

Per stage, as inference-perf's report computes them (``reportgen/base.py`` L122-181 at 5b1da4d):

* ``output_tok_s``: output tokens of the stage / (last finish - first send);
* ``requests_s``: requests / (last send - first send) (the report's ``achieved_rate``, which the
  published table shows as requests/s);
* ``ttft_p90_s``, ``ttft_mean_s``: first token - send;
* ``itl_mean_s``: the mean gap between the lines the client reads. The streaming client stamps
  every line of the response, the blank line after each ``data:`` event included
  (``apis/completion.py`` L51-54), so half of the gaps are about zero: the mean is about half the
  time per output token. Here, with one event per token: (finish - first token) / (2 n + 1) per
  request, pooled;
* ``kv_usage_mean``, ``wait_queue_mean``: the pods' KV usage (0..1) and waiting queue as they
  publish them (:func:`published_waiting`), averaged over pods and samples of the stage (from its
  start to its end);
* ``hit_rate``: prompt tokens served from the prefix cache / prompt tokens, at admission.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from .._validate import check_int, check_number
from ..engine_model import Engine, EngineConfig, Request, StepCosts, step_costs
from .epp import EndpointPicker, KVEventIndex, PodView, PromptInfo, parse_picker_config
from .workload import Workload, block_keys

METRICS = ("output_tok_s", "requests_s", "ttft_p90_s", "ttft_mean_s", "itl_mean_s",
           "kv_usage_mean", "wait_queue_mean", "hit_rate")  # fmt: skip


@dataclass(frozen=True)
class Cluster:
    """The pods: ``model`` on ``tp`` GPUs of type ``gpu`` each, ``kv_tokens_per_pod`` of KV.
    ``block_size``: vLLM's ``--block-size``; ``max_num_batched_tokens``, ``max_num_seqs``: vLLM's
    defaults on an H100."""

    model: str
    gpu: str
    tp: int
    pods: int
    kv_tokens_per_pod: int
    precision: str = "bf16"
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024

    def __post_init__(self):
        check_int("cluster.pods", self.pods, lo=1)
        check_int("cluster.kv_tokens_per_pod", self.kv_tokens_per_pod, lo=1)
        check_int("cluster.block_size", self.block_size, lo=1)
        if self.kv_tokens_per_pod < self.block_size:
            raise ValueError(
                f"cluster.kv_tokens_per_pod must be at least block_size ({self.block_size}), "
                f"got {self.kv_tokens_per_pod}"
            )

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens_per_pod // self.block_size


@dataclass
class _Sent:
    stage: int
    send_s: float
    req: Request


@dataclasses.dataclass(frozen=True)
class ScaledStepCosts(StepCosts):
    """:class:`kvlab.engine_model.StepCosts` whose kernel times are multiplied by
    ``kernel_scale`` (the host's share, ``step_overhead_s`` + ``host_s_per_seq`` per request,
    kept as it is): pods whose kernels run slower (> 1) or faster than the database's
    (:func:`kvlab.fleetbench.calibrate.fit_kernel_scale`)."""

    kernel_scale: float = 1.0

    @classmethod
    def of(cls, costs: StepCosts, kernel_scale: float) -> ScaledStepCosts:
        fields = {f.name: getattr(costs, f.name) for f in dataclasses.fields(StepCosts)}
        return cls(**fields, kernel_scale=float(kernel_scale))

    def _host_s(self, requests: float) -> float:
        return self.step_overhead_s + self.host_s_per_seq * requests

    def step_s(self, chunks=(), decode_batch: int = 0, decode_context_tokens: float = 0.0) -> float:
        t = super().step_s(chunks, decode_batch, decode_context_tokens)
        if t == 0.0:
            return 0.0
        host = self._host_s(len(chunks) + decode_batch)
        return self.kernel_scale * (t - host) + host

    def decode_run_s(self, batch: int, context_tokens: float, steps: int) -> np.ndarray:
        ends = super().decode_run_s(batch, context_tokens, steps)
        host = self._host_s(batch) * np.arange(1, steps + 1)
        return self.kernel_scale * (ends - host) + host


def run_scheduler(cluster: Cluster, workload: Workload, scheduler: dict, *, name: str = "",
                  seed: int = 0, refresh_s: float = 0.05, chars_per_token: float = 4.0,
                  stages: int | None = None, frontend_s: float = 0.0,
                  sample_s: float = 0.5, step_overhead_s: float = 0.0,
                  host_s_per_seq: float = 0.0, kernel_scale: float = 1.0) -> list[dict]:  # fmt: skip
    """Run the whole workload through ``cluster`` under the EPP configured by ``scheduler`` (an
    ``EndpointPickerConfig``); one dict per stage (``stage``, ``stage_qps`` and :data:`METRICS`).
    ``frontend_s``: the time a request spends outside the engine (HTTP, tokenisation, the first
    token's way back), added to its TTFT and its end; ``sample_s``: how often the pods' KV usage
    and waiting queue are sampled for the stage means; ``stages``: run only the first that many
    (tests); ``step_overhead_s`` and ``host_s_per_seq``: the engine's host time per step and per
    request in a step (:class:`kvlab.validate.silicon.HostTerm`), zero unless given;
    ``kernel_scale``: the pods' kernel times over the database's (1 unless given;
    :class:`ScaledStepCosts`, :func:`kvlab.fleetbench.calibrate.fit_kernel_scale`)."""
    check_number("refresh_s", refresh_s, lo=0, lo_open=True)
    check_number("frontend_s", frontend_s, lo=0)
    check_number("sample_s", sample_s, lo=0, lo_open=True)
    check_number("kernel_scale", kernel_scale, lo=0.1, hi=10)
    base = step_costs(cluster.model, cluster.gpu, cluster.tp, cluster.precision,
                      step_overhead_s=step_overhead_s, host_s_per_seq=host_s_per_seq)  # fmt: skip
    costs = base if kernel_scale == 1.0 else ScaledStepCosts.of(base, kernel_scale)
    epp: EndpointPicker = parse_picker_config(
        name or "scheduler", scheduler, engine_block_size=cluster.block_size,
        chars_per_token=chars_per_token,
    )  # fmt: skip
    data = workload.data
    bs = cluster.block_size
    key_cache: dict[tuple[int, int, int], list] = {}

    def keys_of(info: PromptInfo, size: int) -> list:
        k = (info.group, info.prompt, size)
        if k not in key_cache:
            key_cache[k] = block_keys(data, info.group, info.prompt, size)
        return key_cache[k]

    cfg = EngineConfig(num_blocks=cluster.num_blocks, block_size=bs,
                       max_num_batched_tokens=cluster.max_num_batched_tokens,
                       max_num_seqs=cluster.max_num_seqs)  # fmt: skip
    engines = []
    index = epp.precise.index if epp.precise is not None else None
    if epp.precise is not None:
        epp.precise.keys_of = keys_of
    for i in range(cluster.pods):
        if index is None:
            engines.append(Engine(costs, cfg))
        else:
            stored, removed = (
                functools.partial(_stored, index, i),
                functools.partial(_removed, index, i),
            )
            engines.append(Engine(costs, cfg, on_stored=stored, on_removed=removed))
    rng = np.random.default_rng(seed)
    order = workload.prompt_order(rng)
    pick_rng = np.random.default_rng([seed, 1])
    time_rng = np.random.default_rng([seed, 2])
    views = [PodView() for _ in engines]
    rows = []
    started: dict[int, float] = {}  # id(engine) -> start of its last step
    t0 = 0.0
    todo = workload.stages if stages is None else workload.stages[:stages]
    for si, stage in enumerate(todo):
        send = t0 + workload.stage_times(stage, time_rng)
        sent: list[_Sent] = []
        usage_sum = 0.0
        wait_sum = 0.0
        samples = 0
        nxt = 0  # next request of the stage to send
        n = len(send)
        left = [n]  # requests of the stage not finished yet
        last = [t0]  # the last finish so far
        t_sample = t0
        while nxt < n or left[0]:
            # the next event: a sample of the pods' gauges, or the EPP's last scrape before the
            # next request (a scrape no request reads changes nothing, so it is skipped)
            k = math.floor(send[nxt] / refresh_s) if nxt < n else math.inf
            t_scrape = k * refresh_s if nxt < n else math.inf
            t = min(t_sample, t_scrape)
            for e in engines:
                _run_to(e, t, left, last, started)
            if t == t_sample:
                for e in engines:
                    usage_sum += e.kv_usage
                    wait_sum += published_waiting(e, started.get(id(e), -math.inf))
                samples += len(engines)
                t_sample += sample_s
            if t == t_scrape:
                for v, e in zip(views, engines, strict=True):
                    v.waiting = published_waiting(e, started.get(id(e), -math.inf))
                    v.kv_usage = e.kv_usage
                t_next = (k + 1) * refresh_s
                while nxt < n and send[nxt] < t_next:
                    g, p = (int(x) for x in order[nxt % len(order)])
                    info = PromptInfo(g, p, data.prompt_len, data.system_prompt_len)
                    pod = epp.pick(info, views, pick_rng)
                    ts = float(send[nxt])
                    r = Request((si, nxt), data.prompt_len, data.output_len, arrival_s=ts,
                                keys=keys_of(info, bs))  # fmt: skip
                    e = engines[pod]
                    _run_to(e, ts, left, last, started)  # the pod runs up to the arrival
                    if not e.has_work():
                        e.now = max(e.now, ts)
                    e.add(r)
                    sent.append(_Sent(si, ts, r))
                    nxt += 1
        # inference-perf polls its finished counter once a second from the stage's start
        end = t0 + math.ceil(max(last[0] - t0, 0.0))
        row = _stage_row(si, stage.rate, sent, data.output_len, usage_sum, wait_sum, samples,
                         frontend_s)  # fmt: skip
        row["duration_s"] = end - t0
        rows.append(row)
        t0 = end + workload.interval_s
        for e in engines:
            if not e.has_work():
                e.now = max(e.now, t0)
    return rows


def _run_to(e: Engine, t: float, left: list, last: list, started: dict) -> None:
    """Run ``e``'s steps that start before ``t``, counting finishes into ``left`` and ``last``
    and keeping the start of its last step in ``started``."""
    while e.has_work() and e.now < t:
        rec = e.advance(t)
        if rec is None:
            break
        started[id(e)] = rec.start_s
        if rec.finished:
            left[0] -= len(rec.finished)
            last[0] = max(last[0], rec.end_s)


def published_waiting(e: Engine, last_start: float) -> int:
    """``vllm:num_requests_waiting`` as the pod publishes it: the scheduler's waiting queue as its
    last step left it (``Scheduler.make_stats``, called from ``update_from_output`` at the end of
    a step, ``vllm/v1/core/sched/scheduler.py``); a request that arrived since that step's
    scheduling sits in the engine core's input queue and is not counted (the core takes its input
    queue between steps, ``vllm/v1/engine/core.py``, ``run_busy_loop``)."""
    return sum(1 for r in e.waiting if r.arrival_s < last_start)


def _stored(index: KVEventIndex, pod: int, keys: list) -> None:
    index.stored(pod, keys)


def _removed(index: KVEventIndex, pod: int, keys: list) -> None:
    index.removed(pod, keys)


def _stage_row(si, rate, sent, output_len, usage_sum, wait_sum, samples, frontend_s) -> dict:
    send = np.array([s.send_s for s in sent])
    first = np.array([s.req.first_token_s for s in sent]) + frontend_s
    fin = np.array([s.req.finish_s for s in sent]) + frontend_s
    ttft = first - send
    n = len(sent)
    span = fin.max() - send.min()
    send_span = send.max() - send.min()
    gaps = (fin - first).sum() / (n * (2 * output_len + 1))
    hits = sum(s.req.cached_tokens for s in sent)
    prompt = sum(s.req.prompt_len for s in sent)
    return {
        "stage": si,
        "stage_qps": rate,
        "output_tok_s": n * output_len / span,
        "requests_s": n / send_span if send_span > 0 else math.nan,
        "ttft_p90_s": float(np.percentile(ttft, 90)),
        "ttft_mean_s": float(ttft.mean()),
        "itl_mean_s": float(gaps),
        "kv_usage_mean": usage_sum / samples if samples else math.nan,
        "wait_queue_mean": wait_sum / samples if samples else math.nan,
        "hit_rate": hits / prompt,
        "tpot_mean_s": float(((fin - first) / max(output_len - 1, 1)).mean()),
        "preempted": int(sum(s.req.preemptions > 0 for s in sent)),
    }
