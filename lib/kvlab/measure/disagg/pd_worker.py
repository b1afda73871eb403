"""One vLLM engine in its own process, the child of :mod:`kvlab.measure.disagg.engine_process`.

Run by path with the engine environment's Python (``python pd_worker.py``); it imports nothing
from kvlab. The parent sets the environment (core binding, KV cache size, NIXL side channel on
127.0.0.1, in-process engine core) before this starts, then talks JSON lines: one request per line
on stdin, answers on stdout prefixed with ``@@``. vLLM's own logging goes to stderr, which the
parent keeps in a file and reads (the KV connectors log there).

Requests:

- first line: ``{"engine": {...}}``, keyword arguments of ``vllm.LLM``; a ``kv_transfer_config``
  entry (a dict) becomes a ``KVTransferConfig``. Answer: ``{"ready": true, "pid", "start_s"}``.
- ``{"cmd": "generate", "prompts": [[ids], ...], "max_tokens", "kv_transfer_params": [...]}``:
  greedy decoding, one ``generate`` call per prompt, each timed. Answer: ``{"outputs": [...]}``
  with the token ids, the log-probability of each chosen token, the two most likely candidates
  per position (``top``: [token, log-probability] pairs, most likely first), ``num_cached_tokens``, the
  returned ``kv_transfer_params`` and the seconds.
- ``{"cmd": "metrics"}``: ``LLM.get_metrics()`` as plain dicts.
- ``{"cmd": "quit"}``: answers ``{"done": true, "peak_rss_bytes"}`` and exits.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def _say(**msg) -> None:
    sys.stdout.write("@@" + json.dumps(msg) + "\n")
    sys.stdout.flush()


def _metric(m) -> dict:
    d = {"name": m.name, "type": type(m).__name__, "labels": dict(getattr(m, "labels", {}) or {})}
    for key in ("value", "count", "sum", "buckets", "values"):
        if hasattr(m, key):
            v = getattr(m, key)
            d[key] = v if isinstance(v, int | float | list) or v is None else repr(v)
    return d


def _generate(llm, req: dict) -> list[dict]:
    from vllm import SamplingParams

    outs = []
    params_list = req.get("kv_transfer_params") or [None] * len(req["prompts"])
    for ids, kvp in zip(req["prompts"], params_list, strict=True):
        sp = SamplingParams(
            max_tokens=int(req.get("max_tokens", 16)),
            temperature=0.0,
            logprobs=2,  # the two most likely candidates (and the chosen one) per position
            extra_args={"kv_transfer_params": kvp} if kvp is not None else None,
        )
        t0 = time.perf_counter()
        res = llm.generate({"prompt_token_ids": list(ids)}, sp, use_tqdm=False)[0]
        dt = time.perf_counter() - t0
        o = res.outputs[0]
        lps, top = [], []
        for tok, step in zip(o.token_ids, o.logprobs or [], strict=False):
            lps.append(float(step[tok].logprob))
            ranked = sorted(step.items(), key=lambda kv: (-kv[1].logprob, kv[0]))[:2]
            top.append([[int(t), float(lp.logprob)] for t, lp in ranked])
        outs.append(
            {
                "token_ids": list(o.token_ids),
                "logprobs": lps,
                "top": top,
                "num_cached_tokens": res.num_cached_tokens,
                "kv_transfer_params": res.kv_transfer_params,
                "seconds": dt,
            }
        )
    return outs


def main() -> int:
    first = json.loads(sys.stdin.readline())
    t0 = time.perf_counter()
    try:
        from vllm import LLM
        from vllm.config import KVTransferConfig

        kwargs = dict(first["engine"])
        if kwargs.get("kv_transfer_config"):
            kwargs["kv_transfer_config"] = KVTransferConfig(**kwargs["kv_transfer_config"])
        llm = LLM(**kwargs)
    except Exception as e:
        _say(error=f"engine start failed: {type(e).__name__}: {e}")
        return 1
    _say(ready=True, pid=os.getpid(), start_s=time.perf_counter() - t0)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            if req["cmd"] == "generate":
                _say(outputs=_generate(llm, req))
            elif req["cmd"] == "metrics":
                _say(metrics=[_metric(m) for m in llm.get_metrics()])
            elif req["cmd"] == "quit":
                break
            else:
                _say(error=f"unknown cmd {req['cmd']!r}")
        except Exception as e:
            _say(error=f"{req.get('cmd')} failed: {type(e).__name__}: {e}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    _say(done=True, peak_rss_bytes=rss)
    sys.stdout.flush()
    # Engine threads (side channel, NIXL progress) must not keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
