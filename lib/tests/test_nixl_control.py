"""Lab 3's NIXL leg: the check that the decode engine used the KV it pulled fails when it did not
(control output equal to the colocated run, the prompt computed on the decode side, no control),
and vLLM's token counters and prefill time are read from its metrics."""

from __future__ import annotations

import dataclasses

from kvlab.measure.disagg import pd_split


def _run(label: str, tokens: list[list[int]]) -> pd_split.Run:
    return pd_split.Run(
        label, tokens, [[-0.5] * len(t) for t in tokens], [0] * len(tokens), [0.1] * len(tokens)
    )


def _req(local: int, external: int) -> pd_split.NixlRequest:
    return pd_split.NixlRequest(
        2000, 63, 1, 2_064_384, 126, 0.01, 0.001, 0.1, 0, local, external, 0.002, 0
    )


REF = [[5, 6, 7], [8, 9, 10], [11, 12, 13]]


def _split(**over) -> pd_split.NixlSplit:
    base = pd_split.NixlSplit(
        "NixlConnector",
        32,
        _run("reference", REF),
        _run("prefill", [[5], [8], [11]]),
        _run("decode", REF),
        [_req(1, 1999)] * 3,
        pd_split.Checks(),
        {"prefill": 0, "decode": 1},
        1.0,
        _run("control", [[5, 1, 2], [3, 9, 10], [4, 4, 4]]),
        [_req(1, 1999)] * 3,
        [_req(2000, 0)] * 3,
    )
    return dataclasses.replace(base, **over)


def test_a_decode_engine_that_used_the_pulled_kv_passes():
    assert _split().used_pulled_kv() == []


def test_a_decode_engine_that_ignored_the_pulled_kv_fails():
    # it recomputed the prompt: the control decodes like the colocated run ...
    ignored = _split(control=_run("control", REF))
    assert any("ignored what it pulled" in p for p in ignored.used_pulled_kv())
    # ... and its counters say it computed all 2,000 prompt tokens
    recomputed = _split(requests=[_req(2000, 0)] * 3, control_requests=[_req(2000, 0)] * 3)
    problems = recomputed.used_pulled_kv()
    assert len(problems) == 6 and "computed 2000 prompt tokens" in problems[0]


def test_no_control_or_no_counters_is_not_a_pass():
    assert "no control run" in _split(control=None).used_pulled_kv()[-1]
    assert "not recorded" in _split(requests=[_req(-1, -1)] * 3).used_pulled_kv()[0]
    wrong = _split(decode=_run("decode", [[5, 6, 0], *REF[1:]]))
    assert "differs from colocated" in wrong.used_pulled_kv()[0]


def test_nixl_totals_reads_the_token_sources_and_prefill_time():
    metrics = [
        {
            "name": "vllm:prompt_tokens_by_source",
            "labels": {"source": "local_compute"},
            "value": 3.0,
        },
        {
            "name": "vllm:prompt_tokens_by_source",
            "labels": {"source": "external_kv_transfer"},
            "value": 5997.0,
        },
        {
            "name": "vllm:prompt_tokens_by_source",
            "labels": {"source": "local_cache_hit"},
            "value": 9.0,
        },
        {"name": "vllm:request_prefill_time_seconds", "sum": 0.25, "count": 3},
        {"name": "vllm:nixl_xfer_time_seconds", "sum": 0.03, "count": 3},
        {"name": "vllm:nixl_bytes_transferred", "sum": 6e6, "count": 3},
        {"name": "vllm:nixl_num_failed_transfers", "value": 0.0},
    ]
    t = pd_split.nixl_totals(metrics)
    assert t["local_tokens"] == 3 and t["external_tokens"] == 5997 and t["prefill_s"] == 0.25
    assert t["transfers"] == 3 and t["bytes"] == 6e6 and t["failed"] == 0


def test_a_request_row_is_built_from_the_metric_deltas():
    delta = {
        "transfers": 1,
        "bytes": 2064384,
        "descriptors": 126,
        "xfer_s": 0.01,
        "post_s": 0.001,
        "failed": 0,
        "local_tokens": 1,
        "external_tokens": 1999,
        "prefill_s": 0.003,
    }
    r = pd_split.NixlRequest.of([0] * 2000, 63, delta, {"seconds": 0.2, "num_cached_tokens": 0})
    assert (r.local_tokens, r.external_tokens, r.num_cached_tokens, r.bytes) == (
        1,
        1999,
        0,
        2064384,
    )
