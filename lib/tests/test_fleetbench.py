"""kvlab.fleetbench: each scorer against hand-computed scores, the workload against inference-perf's
counts, the spec's errors, and a small fleet end to end."""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvlab.fleetbench import (
    ApproxPrefixIndexer,
    ApproxPrefixScorer,
    KVEventIndex,
    PodView,
    PrecisePrefixScorer,
    PromptInfo,
    block_keys,
    kv_cache_scores,
    load_spec,
    longest_prefix_scores,
    normalise_indexed,
    parse_picker_config,
    parse_spec,
    parse_workload,
    queue_scores,
    run_scheduler,
)
from kvlab.fleetbench.__main__ import main
from kvlab.fleetbench.compare import compare, markdown, read_csv

SPEC_73 = Path(__file__).resolve().parents[2] / "data" / "fleetbench" / "73-capacity.yaml"


@pytest.fixture(scope="module")
def doc73():
    return yaml.safe_load(SPEC_73.read_text())


# --- scorers -----------------------------------------------------------------------------------


def test_queue_scorer_min_max():
    views = [PodView(waiting=q) for q in (0, 2, 4, 1)]
    assert queue_scores(views) == [1.0, 0.5, 0.0, 0.75]


def test_queue_scorer_all_equal_scores_one():
    assert queue_scores([PodView(waiting=3)] * 3) == [1.0, 1.0, 1.0]


def test_kv_cache_scorer_is_one_minus_usage():
    views = [PodView(kv_usage=u) for u in (0.0, 0.25, 1.0)]
    assert kv_cache_scores(views) == [1.0, 0.75, 0.0]


def test_approx_indexer_lru_evicts_oldest_per_server():
    ix = ApproxPrefixIndexer(capacity=3)
    ix.add(["a", "b"], 0)
    ix.add(["c", "d"], 0)  # "a" leaves pod 0's record
    assert ix.match(["a", "b"]) == {}
    assert ix.match(["b", "c", "d"]) == {0: 3}
    ix.add(["b"], 1)
    assert ix.match(["b", "c"]) == {0: 2, 1: 1}


def test_approx_match_counts_the_run_found_on_any_server():
    ix = ApproxPrefixIndexer(capacity=100)
    ix.add(["h0", "h1", "h2"], 0)
    ix.add(["h0", "h1", "h2", "h3", "h4"], 1)
    assert ix.match(["h0", "h1", "h2", "h3", "h4", "h5"]) == {0: 3, 1: 5}


def test_approx_prefix_scorer_by_hand():
    # 100 system tokens = 400 characters: 6 whole blocks of 64; 150 tokens = 600 characters: 9
    sc = ApproxPrefixScorer(block_chars=64, max_blocks=256, lru_capacity=1000, chars_per_token=4)
    mate = PromptInfo(group=7, prompt=0, prompt_len=150, system_len=100)
    req = PromptInfo(group=7, prompt=1, prompt_len=150, system_len=100)
    assert len(sc.hashes(req)) == 9
    assert sc.score(mate, 3) == [0.0, 0.0, 0.0]
    sc.picked(mate, 1)
    assert sc.score(req, 3) == pytest.approx([0.0, 6 / 9, 0.0])
    sc.picked(req, 1)
    assert sc.score(req, 3) == pytest.approx([0.0, 1.0, 0.0])


def test_approx_prefix_scorer_truncates_at_max_blocks():
    sc = ApproxPrefixScorer(block_chars=64, max_blocks=4, lru_capacity=1000, chars_per_token=4)
    req = PromptInfo(group=0, prompt=0, prompt_len=1000, system_len=10)
    assert len(sc.hashes(req)) == 4


def test_precise_longest_prefix_and_normalisation_by_hand():
    pods_of = {"k0": {0, 1, 3}, "k1": {0, 1}, "k2": {1}}
    raw = longest_prefix_scores(["k0", "k1", "k2"], pods_of)
    assert raw == {0: 2, 1: 3, 3: 1}
    assert normalise_indexed(raw, 4) == [0.5, 1.0, 0.0, 0.0]
    assert normalise_indexed({2: 5}, 3) == [0.0, 0.0, 1.0]
    assert normalise_indexed({}, 2) == [0.0, 0.0]
    assert longest_prefix_scores(["k9", "k0"], pods_of) == {}


def test_precise_scorer_reads_the_event_index_and_the_tokenizer_cache():
    keys = {(0, 0): ["s0", "s1", "q0"], (0, 1): ["s0", "s1", "q1"]}
    sc = PrecisePrefixScorer(block_tokens=16, engine_block_size=16)
    sc.keys_of = lambda info, size: keys[(info.group, info.prompt)]
    ev = sc.index
    ev.stored(2, ["s0", "s1", "q0"])
    ev.stored(0, ["s0"])
    a = PromptInfo(0, 0, prompt_len=48, system_len=32)
    b = PromptInfo(0, 1, prompt_len=48, system_len=32)
    assert sc.score(a, 3) == [0.0, 0.0, 0.0]  # first sight: nothing tokenized yet
    assert sc.score(b, 3) == [0.0, 0.0, 1.0]  # the group's system prompt: s0, s1
    assert sc.score(a, 3) == [0.0, 0.0, 1.0]  # the whole prompt now: pod 2 holds 3, pod 0 1
    ev.removed(2, ["s1", "q0"])
    assert sc.score(a, 3) == [1.0, 0.0, 1.0]  # both hold one key


def test_precise_scorer_with_other_block_size_than_the_engines_finds_nothing():
    sc = PrecisePrefixScorer(block_tokens=64, engine_block_size=16)
    sc.keys_of = lambda info, size: ["s0"]
    sc.index.stored(0, ["s0"])
    info = PromptInfo(0, 0, prompt_len=200, system_len=100)
    sc.score(info, 2)
    assert sc.score(info, 2) == [0.0, 0.0]


def test_kv_event_index_forgets_removed_blocks():
    ix = KVEventIndex()
    ix.stored(1, ["a", "b"])
    ix.stored(2, ["a"])
    ix.removed(1, ["a"])
    assert ix.pods == {"a": {2}, "b": {1}}


def test_weighted_sum_and_max_score_picker(doc73):
    epp = parse_picker_config("load", doc73["schedulers"]["load-scheduling"], engine_block_size=64)
    assert [(w, s) for _, w, s in epp.scorers] == [(1.0, "queue"), (1.0, "kv")]
    views = [PodView(4, 0.1), PodView(0, 0.9), PodView(2, 0.2)]
    # queue: 0, 1, 0.5; kv: 0.9, 0.1, 0.8 -> 0.9, 1.1, 1.3
    info = PromptInfo(0, 0, 100, 50)
    assert epp.pick(info, views, np.random.default_rng(0)) == 2


def test_max_score_picker_breaks_ties_at_random(doc73):
    epp = parse_picker_config("load", doc73["schedulers"]["load-scheduling"], engine_block_size=64)
    views = [PodView(0, 0.5)] * 4
    info = PromptInfo(0, 0, 100, 50)
    rng = np.random.default_rng(1)
    assert {epp.pick(info, views, rng) for _ in range(200)} == {0, 1, 2, 3}


def test_precise_config_weights_and_block_size(doc73):
    epp = parse_picker_config(
        "precise", doc73["schedulers"]["precise-scheduling"], engine_block_size=64
    )
    assert [w for _, w, _ in epp.scorers] == [3.0, 2.0, 2.0]
    assert epp.precise is not None and epp.precise.block_tokens == 64
    est = parse_picker_config(
        "est", doc73["schedulers"]["estimated-scheduling"], engine_block_size=64
    )
    approx = est.scorers[2][2]
    assert isinstance(approx, ApproxPrefixScorer)
    assert (approx.lru_capacity, approx.max_blocks, approx.block_chars) == (31250, 256, 64)
    rnd = parse_picker_config("r", doc73["schedulers"]["random-scheduling"], engine_block_size=64)
    assert rnd.picker == "random-picker" and rnd.scorers == []


def test_unknown_plugin_type_is_named(doc73):
    cfg = copy.deepcopy(doc73["schedulers"]["load-scheduling"])
    cfg["plugins"][0]["type"] = "lora-affinity-scorer"
    with pytest.raises(ValueError, match=r"plugins\[0\]\.type.*lora-affinity-scorer"):
        parse_picker_config("load", cfg, engine_block_size=16)


# --- workload ----------------------------------------------------------------------------------


def _tiny_workload():
    return {
        "load": {
            "type": "poisson",
            "stages": [{"rate": 4, "duration": 3}, {"rate": 8, "duration": 2}],
        },  # fmt: skip
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {
                "num_groups": 4,
                "num_prompts_per_group": 2,
                "system_prompt_len": 256,
                "question_len": 64,
                "output_len": 8,
            },  # fmt: skip
        },
    }


def test_workload_counts_match_inference_perf(doc73):
    w = parse_workload(doc73["workload"])
    assert (w.data.num_groups, w.data.num_prompts_per_group) == (150, 5)
    order = w.prompt_order(np.random.default_rng(0))
    assert len(order) == 750
    assert len({(int(g), int(p)) for g, p in order}) == 750
    assert np.bincount(order[:, 0]).tolist() == [5] * 150
    assert [s.num_requests for s in w.stages][:5] == [750, 60, 200, 300, 760]
    assert sum(s.num_requests for s in w.stages) == 17084
    assert w.load_type == "poisson" and w.interval_s == 1.0


def test_poisson_times_are_a_stage_of_sorted_times_after_the_head_start(doc73):
    w = parse_workload(doc73["workload"])
    t = w.stage_times(w.stages[0], np.random.default_rng(3))
    assert len(t) == 750 and t[0] > 1.0 and np.all(np.diff(t) >= 0)
    assert 40 < t[-1] < 62  # 750 requests at 15 a second


def test_constant_times_span_exactly_the_duration():
    cfg = _tiny_workload()
    cfg["load"]["type"] = "constant"
    w = parse_workload(cfg)
    t = w.stage_times(w.stages[0], np.random.default_rng(0))
    assert len(t) == 12 and t[-1] == pytest.approx(4.0)


def test_block_keys_share_the_system_prompt_blocks():
    w = parse_workload(
        {
            "load": {"stages": [{"rate": 1, "duration": 1}]},
            "data": {
                "type": "shared_prefix",
                "shared_prefix": {
                    "num_groups": 150,
                    "num_prompts_per_group": 5,
                    "system_prompt_len": 6000,
                    "question_len": 1200,
                    "output_len": 1000,
                },
            },
        }  # fmt: skip
    )
    k64 = block_keys(w.data, 3, 1, 64)
    assert len(k64) == 7200 // 64 and sum(k[0] == "s" for k in k64) == 6000 // 64
    assert block_keys(w.data, 3, 2, 64)[:93] == k64[:93]
    assert block_keys(w.data, 3, 2, 64)[93] != k64[93]
    assert sum(k[0] == "s" for k in block_keys(w.data, 3, 1, 16)) == 375


def test_workload_errors_name_the_key():
    cfg = _tiny_workload()
    del cfg["data"]["shared_prefix"]["question_len"]
    with pytest.raises(ValueError, match=r"workload\.data\.shared_prefix\.question_len"):
        parse_workload(cfg)
    cfg = _tiny_workload()
    cfg["load"]["type"] = "burst"
    with pytest.raises(ValueError, match=r"workload\.load\.type"):
        parse_workload(cfg)
    cfg = _tiny_workload()
    del cfg["load"]["stages"][1]["rate"]
    with pytest.raises(ValueError, match=r"stages\[1\]\.rate"):
        parse_workload(cfg)


# --- the spec ----------------------------------------------------------------------------------


def test_73_capacity_spec_loads():
    spec = load_spec(SPEC_73)
    assert spec.cluster.pods == 8 and spec.cluster.num_blocks == 307328 // 64
    assert sorted(spec.schedulers) == [
        "estimated-scheduling", "load-scheduling", "precise-scheduling", "random-scheduling"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "named"),
    [
        (("cluster", "pods"), "cluster.pods"),
        (("workload",), "'workload'"),
        (("cluster", "kv_tokens_per_pod"), "cluster.kv_tokens_per_pod"),
        (("schedulers",), "'schedulers'"),
    ],  # fmt: skip
)
def test_missing_key_is_named(doc73, path, named):
    doc = copy.deepcopy(doc73)
    d = doc
    for k in path[:-1]:
        d = d[k]
    del d[path[-1]]
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        parse_spec(doc)


def test_unknown_cluster_key_is_named(doc73):
    doc = copy.deepcopy(doc73)
    doc["cluster"]["gpus_per_pod"] = 2
    with pytest.raises(ValueError, match=r"cluster\.gpus_per_pod"):
        parse_spec(doc)


# --- end to end --------------------------------------------------------------------------------


def _tiny_spec(doc73):
    return {
        "cluster": {
            "model": "Qwen/Qwen3-32B",
            "gpu": "H100-SXM",
            "tp": 2,
            "pods": 2,
            "kv_tokens_per_pod": 4096,
            "block_size": 64,
        },  # fmt: skip
        "workload": _tiny_workload(),
        "schedulers": copy.deepcopy(doc73["schedulers"]),
    }


def test_small_fleet_end_to_end(doc73):
    spec = parse_spec(_tiny_spec(doc73))
    out = {}
    for name, cfg in spec.schedulers.items():
        rows = run_scheduler(spec.cluster, spec.workload, cfg, name=name, seed=0)
        assert [r["stage"] for r in rows] == [0, 1]
        for r in rows:
            assert r["output_tok_s"] > 0 and r["ttft_p90_s"] >= r["ttft_mean_s"] * 0.5
            assert 0 <= r["kv_usage_mean"] <= 1 and 0 <= r["hit_rate"] < 1
        out[name] = rows
    # 4 groups on 2 pods: a router that follows the cache finds the system prompts again
    hit = {n: np.mean([r["hit_rate"] for r in rows]) for n, rows in out.items()}
    assert hit["precise-scheduling"] > hit["random-scheduling"]
    again = run_scheduler(spec.cluster, spec.workload, spec.schedulers["precise-scheduling"],
                          seed=0)  # fmt: skip
    assert again == out["precise-scheduling"]


def test_cli_writes_rows_and_names_a_bad_key(doc73, tmp_path, capsys):
    spec = _tiny_spec(doc73)
    spec["schedulers"] = {"random-scheduling": spec["schedulers"]["random-scheduling"]}
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(spec))
    out = tmp_path / "rows.csv"
    assert main([str(p), "--seeds", "2", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and {r["seed"] for r in rows} == {"0", "1"}
    assert {"stage_qps", "scheduler", "output_tok_s", "requests_s", "ttft_p90_s", "ttft_mean_s",
            "itl_mean_s", "kv_usage_mean", "wait_queue_mean", "hit_rate"} <= set(rows[0])  # fmt: skip
    del spec["cluster"]["model"]
    p.write_text(yaml.safe_dump(spec))
    assert main([str(p)]) == 2
    assert "cluster.model" in capsys.readouterr().err


# --- the comparison and the recorded runs -------------------------------------------------------


def _meas(q, s, ttft, tok, kv=""):
    return {"stage_qps": q, "scheduler": s, "ttft_p90_s": ttft, "output_tok_s": tok,
            "ttft_mean_s": ttft, "itl_mean_s": 0.02, "kv_usage_mean": kv, "wait_queue_mean": ""}  # fmt: skip


def _sim(stage, q, s, ttft, tok, kv=0.5, seed=0):
    return {"seed": seed, "stage": stage, "stage_qps": q, "scheduler": s, "ttft_p90_s": ttft,
            "output_tok_s": tok, "ttft_mean_s": ttft, "itl_mean_s": 0.02, "requests_s": q,
            "kv_usage_mean": kv, "wait_queue_mean": 1.0, "hit_rate": 0.5, "duration_s": 10}  # fmt: skip


def test_compare_criteria_by_hand():
    measured = [
        _meas(3, "a", 0.5, 1000), _meas(3, "b", 5.0, 1000),
        _meas(10, "a", 0.6, 2000), _meas(10, "b", 50.0, 1500),
        _meas(20, "a", 20.0, 3000), _meas(20, "b", 90.0, 1500),
        _meas("all", "a", 7, 2000, 0.60), _meas("all", "b", 48, 1333, 0.70),
    ]  # fmt: skip
    sim = [
        _sim(0, 3, "a", 9.0, 500),  # a warm-up at 3 QPS: only the last stage of a rate counts
        _sim(1, 3, "a", 0.4, 1100), _sim(1, 3, "b", 4.0, 1200),
        _sim(2, 10, "a", 12.0, 2000), _sim(2, 10, "b", 8.0, 1500),  # order wrong, b early
        _sim(3, 20, "a", 30.0, 3300), _sim(3, 20, "b", 95.0, 1500),
    ]  # fmt: skip
    res = compare(measured, sim)
    assert (res["order_pairs"], res["order_agree"]) == (3, 2)
    assert res["order_disagreements"] == [("10", "a", "b")]
    assert res["first_past_10s"]["a"] == {"measured": "20", "sim": "10", "within_one": True}
    assert res["first_past_10s"]["b"] == {"measured": "10", "sim": "20", "within_one": True}
    # |errors|: a 10 %, 0 %, 10 %; b 20 %, 0 %, 0 % -> median 5 %
    assert res["output_tok_s_median_abs_err"] == pytest.approx(0.05)
    assert res["kv_usage_points"] == pytest.approx({"a": -10.0, "b": -20.0})
    assert "| 3 | a | 0.50 | 0.40 |" in markdown(res)


RECORDED = SPEC_73.parent / "73-capacity-sim.csv"
RECORDED_HOST = SPEC_73.parent / "73-capacity-sim-host.csv"
RECORDED_SCALED = SPEC_73.parent / "73-capacity-sim-scaled.csv"


@pytest.mark.parametrize(
    ("path", "name", "stages"),
    [(RECORDED, "precise-scheduling", 3), (RECORDED, "load-scheduling", 2),
     (RECORDED_HOST, "estimated-scheduling", 2), (RECORDED_SCALED, "random-scheduling", 2)],
)  # fmt: skip
def test_recorded_simulation_is_what_the_code_gives(path, name, stages):
    rec = [r for r in read_csv(path) if r["scheduler"] == name and r["seed"] == "0"]
    spec = load_spec(SPEC_73)
    host = {"step_overhead_s": float(rec[0].get("host_step_ms") or 0) / 1e3,
            "host_s_per_seq": float(rec[0].get("host_seq_us") or 0) / 1e6,
            "kernel_scale": float(rec[0].get("kernel_scale") or 1)}  # fmt: skip
    rows = run_scheduler(spec.cluster, spec.workload, spec.schedulers[name], seed=0,
                         stages=stages, frontend_s=float(rec[0]["frontend_s"]), **host)  # fmt: skip
    for got, want in zip(rows, rec[:stages], strict=False):
        for m in ("output_tok_s", "ttft_p90_s", "ttft_mean_s", "kv_usage_mean", "hit_rate"):
            assert got[m] == pytest.approx(float(want[m]), rel=1e-4), (name, got["stage"], m)


def test_published_waiting_leaves_out_requests_that_came_during_the_step():
    from collections import deque
    from types import SimpleNamespace

    from kvlab.fleetbench.fleet import published_waiting

    e = SimpleNamespace(waiting=deque(SimpleNamespace(arrival_s=t) for t in (1.0, 2.0, 2.5, 3.2)))
    assert published_waiting(e, last_start=2.6) == 3  # 3.2 came after the step was scheduled
    assert published_waiting(e, last_start=0.5) == 0


# --- the kernel scale and its fit on the light stages ----------------------------------------------


def test_kernel_scale_multiplies_kernels_not_the_host():
    from kvlab.engine_model import step_costs
    from kvlab.fleetbench.fleet import ScaledStepCosts

    one = step_costs("Qwen/Qwen3-32B", "H100-SXM", 2, step_overhead_s=0.002, host_s_per_seq=1e-4)
    two = ScaledStepCosts.of(one, 2.0)
    host = 0.002 + 1e-4 * (1 + 16)
    a = one.step_s([(512, 1024)], decode_batch=16, decode_context_tokens=16 * 3000)
    b = two.step_s([(512, 1024)], decode_batch=16, decode_context_tokens=16 * 3000)
    assert b - host == pytest.approx(2 * (a - host))
    assert two.step_s() == 0.0
    ra, rb = one.decode_run_s(8, 8 * 2000, 5), two.decode_run_s(8, 8 * 2000, 5)
    host_run = (0.002 + 1e-4 * 8) * np.arange(1, 6)
    assert rb - host_run == pytest.approx(2 * (ra - host_run))
    assert ScaledStepCosts.of(one, 1.0).step_s([(512, 0)]) == one.step_s([(512, 0)])
    spec = parse_spec(_tiny_spec(yaml.safe_load(SPEC_73.read_text())))
    with pytest.raises(ValueError, match="kernel_scale"):
        run_scheduler(spec.cluster, spec.workload, spec.schedulers["random-scheduling"],
                      kernel_scale=0)  # fmt: skip


def _light_spec(doc73):
    spec = _tiny_spec(doc73)
    spec["schedulers"] = {k: spec["schedulers"][k] for k in ("random-scheduling",
                                                             "precise-scheduling")}  # fmt: skip
    return parse_spec(spec)


def test_fit_kernel_scale_recovers_a_known_scale(doc73):
    from kvlab.fleetbench.calibrate import fit_kernel_scale, simulated_light_itl

    spec = _light_spec(doc73)
    truth = 1.3
    rows = []
    for name, cfg in spec.schedulers.items():
        for seed in range(2):
            for r in run_scheduler(spec.cluster, spec.workload, cfg, name=name, seed=seed,
                                   kernel_scale=truth):  # fmt: skip
                rows.append({**r, "scheduler": name, "seed": seed})
    # the "measured" table: per rate and scheduler, the mean over the two seeds
    measured = []
    for q in (4, 8):
        for name in spec.schedulers:
            v = [r["itl_mean_s"] for r in rows if r["stage_qps"] == q and r["scheduler"] == name]
            measured.append({"stage_qps": q, "scheduler": name, "itl_mean_s": np.mean(v)})
    fit = fit_kernel_scale(spec, measured, qps=(4, 8), seeds=2)
    assert fit.kernel_scale == pytest.approx(truth, rel=0.02)
    assert fit.simulated_itl_s == pytest.approx(fit.measured_itl_s, rel=0.01)
    assert simulated_light_itl(spec, 1.0, qps=(4, 8), seeds=2) < fit.measured_itl_s
    with pytest.raises(ValueError, match="no stage of the workload runs at 5"):
        fit_kernel_scale(spec, measured, qps=(5,), seeds=1)
    with pytest.raises(ValueError, match="no itl_mean_s"):
        fit_kernel_scale(spec, measured[:1], qps=(4, 8), seeds=1)


def test_compare_gives_the_error_without_the_fitted_rates():
    measured = [_meas(3, "a", 0.5, 1000), _meas(10, "a", 0.6, 2000), _meas(20, "a", 0.6, 3000)]
    sim = [_sim(1, 3, "a", 0.4, 1000), _sim(2, 10, "a", 0.4, 2000), _sim(3, 20, "a", 0.4, 3600)]
    res = compare(measured, sim, fit_qps=(3, 10))
    assert res["output_tok_s_median_abs_err"] == pytest.approx(0.0)
    assert res["output_tok_s_held_out_median_abs_err"] == pytest.approx(0.2)
