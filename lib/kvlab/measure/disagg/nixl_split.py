"""The live split: :func:`run_nixl_split`, vLLM's ``NixlConnector`` between a prefill engine and a
decode engine running at the same time.

The decode engine pulls each request's KV blocks from the prefill engine's memory with NIXL (UCX
on the loopback device), and the engine's own metrics give the bytes and the time of every
transfer (:func:`nixl_totals`). With ``device="cuda"`` the same split runs on one GPU: both engines
share it (each with its fraction of GPU memory, ``gpu_memory_utilization``) and NIXL reads the
prefill engine's KV blocks straight out of GPU memory (``kv_buffer_device="cuda"``); see
:func:`kvlab.measure.disagg.engine_config.engine_configs`. :func:`pulled_tokens` is how many token
slots a request pulls; :func:`split_summary` turns a run into the plain values the lab page prints
and a GPU recording keeps.

Rules: both engines run under the machine-wide engine lock and are stopped and checked gone when
the run ends, also when it fails; a request whose KV NIXL did not deliver fails the run rather
than being measured; every row carries the decode engine's metric deltas around that request
alone.
"""

from __future__ import annotations

import statistics
import sys
import time

from ..._validate import check_choice, check_int
from ..serving import engine
from ..serving import procs as pd_procs
from .engine_config import (
    BLOCK_SIZE,
    DEVICES,
    _prompts_ok,
    block_size_for,
    engine_configs,
)
from .engine_process import Engine, _WorkDir
from .split_results import Checks, NixlRequest, NixlSplit, Run


def pulled_tokens(prompt_tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """Token slots whose KV ``NixlConnector`` pulls for a prompt: every block the prompt touches,
    the partly filled last one included, so ``ceil(n / block_size) * block_size``."""
    check_int("prompt_tokens", prompt_tokens, lo=1)
    check_int("block_size", block_size, lo=1)
    return -(-prompt_tokens // block_size) * block_size


_NIXL_METRICS = {
    "vllm:nixl_xfer_time_seconds": "xfer_s",
    "vllm:nixl_post_time_seconds": "post_s",
    "vllm:nixl_bytes_transferred": "bytes",
    "vllm:nixl_num_descriptors": "descriptors",
}


#: ``vllm:prompt_tokens_by_source`` labels: tokens the engine computed, and tokens whose KV a
#: connector brought in (here: NIXL's pull).
_TOKEN_SOURCES = {"local_compute": "local_tokens", "external_kv_transfer": "external_tokens"}


def nixl_totals(metrics: list[dict]) -> dict[str, float]:
    """Running totals (sums) and the transfer count from the engine's NIXL histograms, the count
    of failed transfers (handshakes and notifications included) from its counter, the prompt
    tokens it computed (``local_tokens``) and received (``external_tokens``) from
    ``vllm:prompt_tokens_by_source``, and its prefill time (``prefill_s``: first token minus
    scheduled, ``vllm:request_prefill_time_seconds``)."""
    out = {"transfers": 0.0, "failed": 0.0, "local_tokens": 0.0, "external_tokens": 0.0}
    out["prefill_s"] = 0.0
    for m in metrics:
        name = m["name"]
        if name == "vllm:nixl_num_failed_transfers":
            out["failed"] += float(m.get("value") or 0.0)
            continue
        if name == "vllm:prompt_tokens_by_source":
            key = _TOKEN_SOURCES.get((m.get("labels") or {}).get("source", ""))
            if key:
                out[key] += float(m.get("value") or 0.0)
            continue
        if name == "vllm:request_prefill_time_seconds":
            out["prefill_s"] += float(m.get("sum") or 0.0)
            continue
        key = _NIXL_METRICS.get(name)
        if key:
            out[key] = out.get(key, 0.0) + float(m.get("sum") or 0.0)
            if key == "xfer_s":
                out["transfers"] += float(m.get("count") or 0)
    return out


def run_nixl_split(
    model: str,
    prompts: list[list[int]],
    max_tokens: int = 16,
    python: str | None = None,
    timeout_s: float = 400.0,
    cores: tuple[int, int] | None = None,
    ports: tuple[int, int] | None = None,
    device: str = "cpu",
) -> NixlSplit:
    """A prefill and a decode engine at once, each pinned to its own core, ``NixlConnector`` with
    host (``cpu``) KV buffers. For each prompt: the prefill engine runs it with ``max_tokens=1``
    and ``do_remote_decode``; the decode engine receives the returned ``kv_transfer_params`` and
    pulls the blocks over NIXL, then decodes ``max_tokens`` tokens. The prefill engine also decodes
    every prompt by itself first: the colocated reference. Then the control: every prompt prefilled
    again, and prompt i decoded with prompt i+1's ``kv_transfer_params`` (its output must change if
    the decode engine uses what it pulls); and the decode engine prefilling each prompt itself
    (``max_tokens=1``, no transfer). Each request's row carries the decode engine's metric deltas:
    NIXL bytes and times, prompt tokens computed and received (``vllm:prompt_tokens_by_source``)
    and prefill time. ``cores``: the CPUs the two engines are pinned to (default: the first two
    this process may use, or its only one twice). ``device="cuda"``: both engines on this
    machine's first GPU with the configuration of :func:`engine_configs` (each its share of GPU
    memory, KV pulled from GPU memory), started one after the other so that the second measures
    the memory the first left free; ``python`` defaults to this Python where vLLM imports."""
    check_choice("device", device, DEVICES)
    prompts = _prompts_ok(prompts)
    if cores is None:
        allowed = engine.allowed_cores()
        cores = (allowed[0], allowed[1 % len(allowed)])
    check_int("max_tokens", max_tokens, lo=1)
    if python is None:
        in_here = device == "cuda" and engine.vllm_here()
        python = sys.executable if in_here else str(engine.engine_python())
    if ports is None:
        ports = (pd_procs.free_port(), pd_procs.free_port())
    deadline = time.monotonic() + timeout_s
    t0 = time.perf_counter()
    checks = Checks()
    configs = engine_configs(model, device, cores, ports)
    with _WorkDir(None) as tmp, engine.engine_lock(), pd_procs.Children() as kids:
        try:
            engines = {}
            for name, (kwargs, env) in configs.items():
                engines[name] = Engine(
                    kids, name, kwargs, env, tmp / f"{name}.log", python, deadline
                )
                checks.start_s[name] = engines[name].ready["start_s"]
            pre, dec = engines["prefill"], engines["decode"]
            reference = Run.of("reference", pre.generate(prompts, max_tokens))
            p_out, d_out, reqs = [], [], []
            before = nixl_totals(dec.metrics())
            for ids in prompts:
                p = pre.generate([ids], 1, [{"do_remote_decode": True}])[0]
                d = dec.generate([ids], max_tokens, [p["kv_transfer_params"]])[0]
                after = nixl_totals(dec.metrics())
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                before = after
                blocks = sum(len(g) for g in p["kv_transfer_params"]["remote_block_ids"])
                reqs.append(NixlRequest.of(ids, blocks, delta, d))
                p_out.append(p)
                d_out.append(d)
            # The control: every prompt prefilled first, then prompt i decoded with the blocks
            # of prompt i+1 (all prompts have the same length, so the block counts agree).
            offered = [pre.generate([ids], 1, [{"do_remote_decode": True}])[0] for ids in prompts]
            c_out, c_reqs = [], []
            for i, ids in enumerate(prompts):
                other = offered[(i + 1) % len(prompts)]["kv_transfer_params"]
                c = dec.generate([ids], max_tokens, [other])[0]
                after = nixl_totals(dec.metrics())
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                before = after
                blocks = sum(len(g) for g in other["remote_block_ids"])
                c_reqs.append(NixlRequest.of(ids, blocks, delta, c))
                c_out.append(c)
            # The decode engine prefilling each prompt itself: no transfer, every token computed.
            cold_reqs = []
            for ids in prompts:
                o = dec.generate([ids], 1)[0]
                after = nixl_totals(dec.metrics())
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                before = after
                cold_reqs.append(NixlRequest.of(ids, 0, delta, o))
            undelivered = [i for i, r in enumerate(reqs + c_reqs) if r.failed or not r.bytes]
            if undelivered:
                # vLLM's default kv_load_failure_policy is "fail": such a request has no usable
                # output, and the run measures no transfer. Seen rarely, with UCX limited to TCP.
                raise RuntimeError(
                    f"NIXL did not deliver the KV of request(s) {undelivered} on this machine: "
                    f"bytes per request {[r.bytes for r in reqs]}, failed transfers "
                    f"{[r.failed for r in reqs]}; decode engine {dec.lines.tail(800)}"
                )
            checks.see(kids)
            for name, eng in engines.items():
                checks.peak_rss_bytes[name] = eng.quit()
        finally:
            kids.stop_all()
            checks.pids = sorted(kids.seen)
            checks.all_gone = pd_procs.gone(kids.seen)
    return NixlSplit(
        "NixlConnector",
        block_size_for(device),
        reference,
        Run.of("prefill", p_out),
        Run.of("decode", d_out),
        reqs,
        checks,
        dict(zip(("prefill", "decode"), cores, strict=True)),
        time.perf_counter() - t0,
        Run.of("control", c_out),
        c_reqs,
        cold_reqs,
        device,
    )


def split_summary(live: NixlSplit, kv_bytes_per_token: float) -> dict:
    """The live split's checks as plain values (what the lab page prints and a GPU recording
    keeps): bytes pulled per request against the formula (``kv_bytes_per_token`` times
    :func:`pulled_tokens` at the split's block size), outputs equal to the colocated run and
    accepted by the comparison within the device's log-probability tolerance
    (:meth:`NixlSplit.decode_match`, each verdict with its reason), the control's outputs that
    the same comparison rejects, the decode engine's prompt-token counters (pulled,
    control, cold), NIXL's times, and :meth:`NixlSplit.used_pulled_kv`'s verdict."""
    from ... import calc

    if kv_bytes_per_token <= 0:
        raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")
    tokens = [r.prompt_tokens for r in live.requests]
    formula = [
        int(calc.kv_bytes(pulled_tokens(t, live.block_size), kv_bytes_per_token)) for t in tokens
    ]
    control = live.control
    matched = live.decode_match()
    return {
        "device": live.device,
        "block_size": live.block_size,
        "prompt_tokens": tokens,
        "kv_bytes_per_token": kv_bytes_per_token,
        "formula_bytes": formula,
        "bytes": [r.bytes for r in live.requests],
        "bytes_equal_formula": [r.bytes == f for r, f in zip(live.requests, formula, strict=True)],
        "equal_to_colocated": live.decode.same_tokens(live.reference),
        "max_logprob_gap": live.decode.max_logprob_gap(live.reference),
        "logprob_tolerance": live.tolerance,
        "matches_colocated": [v.ok for v in matched],
        "match": [v.as_dict() for v in matched],
        "control_differs": [not v.ok for v in live.control_match()] if control else [],
        "local_tokens": [r.local_tokens for r in live.requests],
        "external_tokens": [r.external_tokens for r in live.requests],
        "control_local_tokens": [r.local_tokens for r in live.control_requests],
        "cold_local_tokens": [r.local_tokens for r in live.decode_cold],
        "xfer_s": [r.xfer_s for r in live.requests],
        "decode_wall_s": [r.decode_wall_s for r in live.requests],
        "start_s": dict(live.checks.start_s),
        "non_loopback": list(live.checks.non_loopback),
        "all_gone": live.checks.all_gone,
        "problems": live.used_pulled_kv(),
        "wall_s": live.wall_s,
    }


def summary_ms(values: list[float]) -> float:
    """Median in milliseconds."""
    return statistics.median(values) * 1e3
